//! The audit port. Intent first: an action's record is written `pending` before its
//! first lease write, gains a step per further write, and is finalized once the
//! outcome is known, so no lease change exists without a record of it.

use std::future::Future;

use super::StoreResult;
use crate::model::{AuditRecord, AuditState, Lease};

/// Who does it and why.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditContext {
    pub operator: String,
    pub action: String,
    pub reason: Option<String>,
}

/// The record written before an action's first lease write.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditIntent {
    pub resource: String,
    pub context: AuditContext,
    /// The lease as planned against.
    pub before: Option<Lease>,
    /// The lease as the first write means to leave it.
    pub intended: Option<Lease>,
}

impl AuditIntent {
    /// The pending record this intent is written as.
    pub fn pending_record(&self, id: String, at: chrono::DateTime<chrono::Utc>) -> AuditRecord {
        AuditRecord {
            id,
            operator: self.context.operator.clone(),
            at,
            action: self.context.action.clone(),
            resource: self.resource.clone(),
            state: AuditState::Pending,
            before: self.before.clone(),
            intended: self.intended.clone(),
            after: None,
            steps: Vec::new(),
            reason: self.context.reason.clone(),
            outcome: AuditState::Pending.as_str().into(),
            finished_at: None,
        }
    }
}

/// How an action ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditFinish {
    /// Not `Pending`.
    pub state: AuditState,
    /// The lease as the action left it (as read back, when the reply was lost).
    pub after: Option<Lease>,
    /// What happened, in words.
    pub outcome: String,
}

pub trait AuditLog: Send + Sync {
    /// Writes a `pending` record (majority); returns its id. An error means the lease
    /// must not be written: the action has no record to stand on.
    fn begin_audit(&self, intent: &AuditIntent)
        -> impl Future<Output = StoreResult<String>> + Send;

    /// Adds a step to a pending record, with the lease as that step left it (`after`)
    /// and, before a further write, the lease that write means to leave (`intends`
    /// replaces the record's `intended`): a record left pending is judged by both.
    fn audit_step(
        &self,
        id: &str,
        what: &str,
        after: Option<&Lease>,
        intends: Option<&Lease>,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Finalizes a pending record. Finalizing it again the same way is a no-op (a
    /// retried write); any other record, or one already finalized otherwise, is an error.
    fn finish_audit(
        &self,
        id: &str,
        finish: &AuditFinish,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// The most recent audit records, newest first, and each of those documents that
    /// is not a readable record.
    fn audit_log(
        &self,
        limit: usize,
    ) -> impl Future<Output = StoreResult<super::Listing<AuditRecord>>> + Send;

    /// One audit record by id; `None` when there is none (or the id cannot be one).
    fn audit_record(
        &self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<AuditRecord>>> + Send;
}
