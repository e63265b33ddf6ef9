//! Reading many documents when some may be malformed: the rest are still read.

use std::fmt;

/// A stored document that could not be read as what it should be (a lease, an audit
/// record): which one, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedDocument {
    /// Its `_id` as text (a string as is, anything else as extended JSON); `None`
    /// when it has none.
    pub id: Option<String>,
    /// The field that is wrong and why: `field version: invalid type: string "seven",
    /// expected an integer`.
    pub problem: String,
}

impl fmt::Display for MalformedDocument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            Some(id) => write!(f, "{id}: {}", self.problem),
            None => write!(f, "(no _id): {}", self.problem),
        }
    }
}

/// Every document of a read that could be read, and each one that could not.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing<T> {
    pub items: Vec<T>,
    pub malformed: Vec<MalformedDocument>,
}

impl<T> Listing<T> {
    /// A listing in which everything was well-formed.
    pub fn complete(items: Vec<T>) -> Self {
        Self {
            items,
            malformed: Vec::new(),
        }
    }
}

impl<T> From<Vec<T>> for Listing<T> {
    fn from(items: Vec<T>) -> Self {
        Self::complete(items)
    }
}
