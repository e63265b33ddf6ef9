//! The span of history the oplog still holds.

use std::time::Duration;

use super::ClusterTime;

/// First (oldest startable, `op != "n"`) and last entry of the oplog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OplogWindow {
    pub first: ClusterTime,
    pub last: ClusterTime,
}

impl OplogWindow {
    pub fn new(first: ClusterTime, last: ClusterTime) -> Self {
        Self { first, last }
    }

    pub fn length(&self) -> Duration {
        self.last.saturating_since(self.first)
    }
}
