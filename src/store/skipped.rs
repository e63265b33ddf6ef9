//! Changes an operator stepped over (`streamward skip`), kept beside the audit log with
//! the id of the action's audit record: what the lease recorded of the change, and the
//! change as the oplog held it when it was skipped.

use bson::Document;
use chrono::{DateTime, Utc};

use crate::model::{ChangeFailure, ResumeToken};

use super::OperatorStore;

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

impl SkippedChange {
    /// This record with the change's oplog entry read back, or why there is none (a
    /// failed read included: the entry is a copy kept for people, and what the lease
    /// recorded of the change is kept either way).
    pub async fn with_entry<S: OperatorStore>(mut self, store: &S) -> Self {
        match skipped_entry(store, &self.token, self.failure.as_ref()).await {
            Ok(entry) => self.entry = Some(entry),
            Err(why) => self.entry_missing = Some(why),
        }
        self
    }
}

/// The oplog entry of the change `token` names (by its time, else the time `failure`
/// recorded), or why it cannot be had.
pub async fn skipped_entry<S: OperatorStore>(
    store: &S,
    token: &ResumeToken,
    failure: Option<&ChangeFailure>,
) -> Result<Document, String> {
    let Some(at) = token.time().or(failure.and_then(|f| f.at)) else {
        return Err("the token tells no time, so its oplog entry cannot be found".into());
    };
    match store.oplog_entry(at).await {
        Ok(Some(entry)) => Ok(entry),
        Ok(None) => Err(format!("the oplog holds no entry at {at} any more")),
        Err(e) if e.oplog_unreadable() => Err(format!("the oplog cannot be read: {e}")),
        Err(e) => Err(format!("reading the oplog entry at {at} failed: {e}")),
    }
}
