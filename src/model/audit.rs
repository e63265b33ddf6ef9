//! The record every executed operator action leaves behind.

use chrono::{DateTime, Utc};

use super::Lease;

/// One row of the audit collection: enough to explain the action and to undo it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: String,
    pub operator: String,
    pub at: DateTime<Utc>,
    pub action: String,
    pub resource: String,
    /// The full lease before the action, including its resume point.
    pub before: Option<Lease>,
    pub after: Option<Lease>,
    pub reason: Option<String>,
    pub outcome: String,
}
