//! A checkpoint: one committed resume point of a resource, kept in a bounded history so
//! an operator can walk back to it — the only way back in time where the oplog cannot
//! be read by timestamp (Azure Cosmos DB).

use chrono::{DateTime, Utc};

use super::{ClusterTime, ResumeToken};

#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
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
    /// The token's time: decoded from it, else the time recorded beside it.
    pub fn token_time(&self) -> Option<ClusterTime> {
        self.token.time()
    }
}
