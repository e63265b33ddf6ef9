//! How a resource's changes are read: a change stream or a capped collection.

use std::fmt;
use std::str::FromStr;

/// How a resource's changes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SourceKind {
    /// A change stream on the collection (the default).
    #[default]
    ChangeStream,
    /// A capped collection's entries in insertion order, by a tailable cursor.
    Capped,
}

impl SourceKind {
    /// As stored in the lease's `watch.source` and shown by the console.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ChangeStream => "stream",
            SourceKind::Capped => "capped",
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SourceKind {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "stream" => Ok(SourceKind::ChangeStream),
            "capped" => Ok(SourceKind::Capped),
            other => Err(format!(
                "unknown source {other:?}: expected \"stream\" or \"capped\""
            )),
        }
    }
}
