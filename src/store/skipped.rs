//! Changes an operator stepped over (`streamward skip`), kept beside the audit log with
//! the id of the action's audit record: what the lease recorded of the change, and the
//! change as the oplog held it when it was skipped.

use bson::Document;
use chrono::{DateTime, Utc};

use crate::model::{ChangeFailure, ResumeToken};

/// One change stepped over.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedChange {
    /// The audit record of the skip (the document's `_id`).
    pub audit_id: String,
    pub resource: String,
    pub operator: String,
    /// When it was kept (the server's clock when the skip was planned).
    pub at: DateTime<Utc>,
    /// The change's token: the lease resumes after it.
    pub token: ResumeToken,
    /// What the lease recorded of the change, when it recorded it failing.
    pub failure: Option<ChangeFailure>,
    /// The change as the oplog holds it (its entry; for a transaction, the entry that
    /// holds its operations), when it was still there and could be read.
    pub entry: Option<Document>,
    /// Why there is no `entry`, when there is none.
    pub entry_missing: Option<String>,
}
