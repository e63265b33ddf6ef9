//! Reading back the oplog entry of a change stepped over, to keep a copy of it beside
//! the record (for people: what the lease recorded of the change is kept either way).

use bson::Document;

use super::{ChangeFeed, SkippedChange};
use crate::model::{ChangeFailure, ResumeToken};

impl SkippedChange {
    /// This record with the change's oplog entry read back, or why there is none (a
    /// failed read included: the entry is a copy kept for people, and what the lease
    /// recorded of the change is kept either way).
    pub async fn with_entry<S: ChangeFeed>(mut self, store: &S) -> Self {
        match skipped_entry(store, &self.token, self.failure.as_ref()).await {
            Ok(entry) => self.entry = Some(entry),
            Err(why) => self.entry_missing = Some(why),
        }
        self
    }
}

/// The oplog entry of the change `token` names (by its time, else the time `failure`
/// recorded), or why it cannot be had.
pub async fn skipped_entry<S: ChangeFeed>(
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
