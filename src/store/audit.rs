//! The audit port: every operator action leaves one record, appended after its lease
//! write as a step of its own.

use std::future::Future;

use super::StoreResult;
use crate::model::{AuditRecord, Lease};

/// Who did it and why.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditContext {
    pub operator: String,
    pub action: String,
    pub reason: Option<String>,
}

/// An audit record to append. An action made of several lease writes (a rebuild) is
/// audited once, with the lease before its first write and after its last.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub resource: String,
    pub context: AuditContext,
    pub before: Option<Lease>,
    pub after: Option<Lease>,
    /// "applied", or what went wrong ("failed: …; the lease stays bulk").
    pub outcome: String,
}

pub trait AuditLog: Send + Sync {
    /// Appends one audit record; returns its id.
    fn append_audit(&self, entry: &AuditEntry) -> impl Future<Output = StoreResult<String>> + Send;

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
