//! Changes an operator stepped over (`streamward skip`), kept beside the audit log with
//! the id of the action's audit record: what the lease recorded of the change, and the
//! change as the oplog held it when it was skipped.

use std::future::Future;

use bson::Document;
use chrono::{DateTime, Utc};

use super::StoreResult;
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

/// Where stepped-over changes are kept: by an operator's `skip`, and by a listener
/// that steps over a change by its own policy (`ListenerConfig::skip_after`).
pub trait SkippedLog: Send + Sync {
    /// Keeps a change an operator stepped over (`streamward skip`), majority, by its
    /// audit record's id and the change's token (`skip --whole-transaction` keeps each
    /// of its changes under one audit record): written again with the same two, it is
    /// the same record.
    fn keep_skipped(&self, skipped: &SkippedChange)
        -> impl Future<Output = StoreResult<()>> + Send;

    /// The changes stepped over on `resource`, newest first, at most `limit`.
    fn skipped_changes(
        &self,
        resource: &str,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<SkippedChange>>> + Send;
}
