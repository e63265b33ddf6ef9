//! A checkpoint: one committed resume point of a resource, kept in a bounded history so
//! an operator can walk back to it — the only way back in time where the oplog cannot
//! be read by timestamp (Azure Cosmos DB).

use chrono::{DateTime, Utc};

use super::ResumeToken;

#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Names this checkpoint for good (its `_id`), where a position in the list moves
    /// as new ones are recorded.
    pub id: String,
    pub resource: String,
    /// When it was recorded, by the server's clock.
    pub at: DateTime<Utc>,
    /// The token the holder had committed (with the time recorded beside it, if any).
    pub token: ResumeToken,
    /// The fencing version of the tenure that committed it.
    pub version: i64,
    pub holder: String,
}

impl Checkpoint {
    /// Newest first, as every store lists them: by fencing version, which only grows per
    /// lease (a late checkpoint of an ex-holder sorts below its successor's, whatever
    /// the clocks say), then by time.
    pub fn newest_first(a: &Checkpoint, b: &Checkpoint) -> std::cmp::Ordering {
        (b.version, b.at, &b.id).cmp(&(a.version, a.at, &a.id))
    }
}
