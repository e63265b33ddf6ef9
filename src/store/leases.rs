//! The lease port: one method per command of DESIGN §3.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::StoreResult;
use crate::model::{
    AuditRecord, ClusterTime, Invalidation, Lease, LockKind, ResumeToken, WatchTarget,
};

/// An acquire-or-refresh attempt (one `findAndModify`, upsert, majority).
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub resource: String,
    pub listener: String,
    /// `Update` for incremental listeners (never takes a bulk lease); `Bulk` only
    /// for a rebuild refreshing the bulk lease an operator action gave it.
    pub kind: LockKind,
    pub lease: Duration,
    pub watch: Option<WatchTarget>,
}

#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum AcquireOutcome {
    /// The caller holds the lease; the document as it is after the write.
    Acquired(Lease),
    /// Someone else holds it (including a duplicate-key race on the upsert).
    HeldByOther,
}

/// Who holds which version of which lease: the filter of commit and release.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenure {
    pub resource: String,
    pub listener: String,
    pub version: i64,
}

impl Tenure {
    pub fn of(lease: &Lease) -> Option<Self> {
        lease.holder.as_ref().map(|listener| Self {
            resource: lease.resource.clone(),
            listener: listener.clone(),
            version: lease.version,
        })
    }
}

/// Result of a write filtered on `{_id, listenerId, version}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenureWrite {
    Done,
    /// Matched nothing: the holder changed or the version moved on.
    LostLock,
}

/// How an operator action changes a lease. `version` always becomes `expected_version + 1`.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorChange {
    pub resource: String,
    /// The version captured when the action was planned (compare-and-swap).
    pub expected_version: i64,
    pub holder: Option<String>,
    /// `expiresAt = server now + expires_in`; zero means "expired now".
    pub expires_in: Duration,
    pub kind: LockKind,
    pub resume: ResumeChange,
    pub note: String,
}

impl OperatorChange {
    /// `lease` as this change leaves it when the server's `$$NOW` is `now`.
    pub fn applied_to(&self, lease: &Lease, now: DateTime<Utc>) -> Lease {
        let mut after = lease.clone();
        after.version = lease.version + 1;
        after.holder = self.holder.clone();
        after.expires_at = Some(
            chrono::TimeDelta::from_std(self.expires_in)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        );
        after.kind = self.kind;
        after.note = Some(self.note.clone());
        if self.holder.is_some() {
            after.acquired_at = Some(now);
            after.renewed_at = Some(now);
        }
        if let ResumeChange::Set { token, at } = &self.resume {
            after.resume_token = token.clone();
            after.resume_at = *at;
            after.invalidated = None;
        }
        after
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ResumeChange {
    Keep,
    /// Set both fields (either may be null), and clear `invalidated`: the operator has
    /// decided where the listener goes on.
    Set {
        token: Option<ResumeToken>,
        at: Option<ClusterTime>,
    },
}

/// Who did it and why, for the audit record the store writes with the change.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditContext {
    pub operator: String,
    pub action: String,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum OperatorOutcome {
    Applied {
        before: Lease,
        after: Lease,
        /// Cluster time of the write (the rebuild's T0).
        operation_time: ClusterTime,
        audit_id: String,
    },
    /// The lease changed since it was planned (or does not exist): nothing written.
    Changed { current: Option<Lease> },
}

/// Result of a compare-and-swap that writes no audit record ([`LeaseStore::operator_swap`]).
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum SwapOutcome {
    Applied {
        before: Lease,
        after: Lease,
        /// Cluster time of the write (the rebuild's T0).
        operation_time: ClusterTime,
    },
    /// The lease changed since it was planned (or does not exist): nothing written.
    Changed { current: Option<Lease> },
}

/// An audit record to append on its own ([`LeaseStore::append_audit`]): an action made of
/// several lease writes (a rebuild) is audited once, with the lease before its first
/// write and after its last.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub resource: String,
    pub context: AuditContext,
    pub before: Option<Lease>,
    pub after: Option<Lease>,
    /// "applied", or what went wrong ("failed: …; the lease stays bulk").
    pub outcome: String,
}

/// One change seen on the lease collection.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseChange {
    pub resource: String,
    /// The document after the change; `None` if it was deleted.
    pub lease: Option<Lease>,
}

/// A live feed of lease changes (a change stream on the lease collection).
pub trait LeaseWatch: Send {
    /// Waits for the next change.
    fn changed(&mut self) -> impl Future<Output = StoreResult<LeaseChange>> + Send;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseScope {
    One(String),
    All,
}

pub trait LeaseStore: Send + Sync {
    type Watch: LeaseWatch + 'static;

    /// findAndModify: take the lease if free or expired (never a bulk one for `Update`),
    /// or refresh it if already held by the caller.
    fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> impl Future<Output = StoreResult<AcquireOutcome>> + Send;

    /// updateOne on `{_id, listenerId, version}`: set the token, `committedAt`, and extend `expiresAt`.
    fn commit(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<TenureWrite>> + Send;

    /// updateOne on `{_id, listenerId, version}`: extend `expiresAt`, set `renewedAt`;
    /// nothing else. How a rebuild keeps its bulk lease: unlike `acquire`, it can never
    /// take a lease that an operator gave back meanwhile.
    fn renew(
        &self,
        tenure: &Tenure,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<TenureWrite>> + Send;

    /// updateOne on `{_id, listenerId, version}`: set `invalidated` (the holder met a
    /// closed change stream), nothing else. Operator actions that move the resume point
    /// clear it.
    fn record_invalidation(
        &self,
        tenure: &Tenure,
        invalidation: &Invalidation,
    ) -> impl Future<Output = StoreResult<TenureWrite>> + Send;

    /// updateOne on `{_id, listenerId, version}`: `listenerId = null`, `expiresAt = now`.
    fn release(&self, tenure: &Tenure) -> impl Future<Output = StoreResult<TenureWrite>> + Send;

    fn get(&self, resource: &str) -> impl Future<Output = StoreResult<Option<Lease>>> + Send;

    /// Every lease, sorted by resource. A missing collection is an empty list.
    fn list(&self) -> impl Future<Output = StoreResult<Vec<Lease>>> + Send;

    fn watch(&self, scope: LeaseScope) -> impl Future<Output = StoreResult<Self::Watch>> + Send;

    /// The server's wall clock, which lease expiry is measured against.
    fn server_now(&self) -> impl Future<Output = StoreResult<DateTime<Utc>>> + Send;

    /// Compare-and-swap on `expected_version`, then the audit record.
    fn operator_update(
        &self,
        change: &OperatorChange,
        audit: &AuditContext,
    ) -> impl Future<Output = StoreResult<OperatorOutcome>> + Send;

    /// Compare-and-swap on `expected_version` like `operator_update`, without an audit
    /// record: one step of an action that is audited once as a whole (a rebuild).
    fn operator_swap(
        &self,
        change: &OperatorChange,
    ) -> impl Future<Output = StoreResult<SwapOutcome>> + Send;

    /// Appends one audit record; returns its id.
    fn append_audit(&self, entry: &AuditEntry) -> impl Future<Output = StoreResult<String>> + Send;

    /// The most recent audit records, newest first.
    fn audit_log(&self, limit: usize)
        -> impl Future<Output = StoreResult<Vec<AuditRecord>>> + Send;

    /// One audit record by id; `None` when there is none (or the id cannot be one).
    fn audit_record(
        &self,
        id: &str,
    ) -> impl Future<Output = StoreResult<Option<AuditRecord>>> + Send;
}
