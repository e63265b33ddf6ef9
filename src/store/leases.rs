//! The lease port: one method per command of the lease protocol (docs/protocol.md §3).

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{StoreError, StoreResult, Tenure};
use crate::model::{
    ChangeFailure, ClusterTime, FieldSet, Invalidation, Lease, LeaseProtocol, LeaseWrite, LockKind,
    Moment, Requirement, ResumeToken, WatchTarget,
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
    /// The highest version of this lease the caller has seen. With one, the acquire
    /// never creates the document: a lease that was there and is gone (its collection
    /// dropped, the document deleted) would come back at version 0, and a fencing
    /// version must never go back. A missing document is then
    /// [`AcquireOutcome::Vanished`].
    pub seen_version: Option<i64>,
}

impl AcquireRequest {
    /// The acquire as lease writes: refresh if the caller holds it, else take it
    /// (creating it only when the caller has never seen it).
    pub fn writes(&self) -> [LeaseWrite; 2] {
        let mut writes = LeaseWrite::acquire(
            &self.resource,
            &self.listener,
            self.kind,
            self.lease,
            self.watch.as_ref(),
        );
        if self.seen_version.is_some() {
            for write in &mut writes {
                write.may_insert = false;
            }
        }
        writes
    }

    /// Whether the acquire may create the lease document.
    pub fn may_insert(&self) -> bool {
        self.seen_version.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum AcquireOutcome {
    /// The caller holds the lease; the document as it is after the write.
    Acquired(Lease),
    /// Someone else holds it (including a duplicate-key race on the upsert).
    HeldByOther,
    /// The caller had seen the lease at `seen_version` and it is gone; nothing was
    /// written (see [`AcquireRequest::seen_version`]).
    Vanished { seen_version: i64 },
    /// The lease is at the largest fencing version (`i64::MAX`): no listener can take
    /// it, since taking it bumps the version ([`crate::model::LeaseWrite`] never
    /// writes past it); nothing was written.
    VersionExhausted,
}

impl AcquireOutcome {
    /// What a not-acquired `lease` (as read back, or as stored) means for the caller:
    /// held by someone else, or beyond anyone's taking at the largest version.
    pub fn not_acquired(lease: Option<&Lease>) -> Self {
        match lease {
            Some(lease) if lease.version == i64::MAX => AcquireOutcome::VersionExhausted,
            _ => AcquireOutcome::HeldByOther,
        }
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
    /// The lease's protocol as planned: on a seed lease the write keeps to the seed
    /// fields (see [`Self::write`]).
    pub protocol: LeaseProtocol,
}

impl OperatorChange {
    /// The compare-and-swap as a lease write: applies only at `expected_version`.
    ///
    /// On a [`LeaseProtocol::Seed`] lease it writes only what a seed listener reads
    /// right (`listenerId`, `expiresAt`, `version` in its stored type, `resumeToken`)
    /// and `note`: no `kind`, `acquiredAt`, `renewedAt` (they would make it read as
    /// streamward's), no `resumeAt` (removed), and never a null `resumeToken`: no
    /// token removes the field, which the seed listener reads as "the oldest entry".
    pub fn write(&self) -> LeaseWrite {
        let seed = self.protocol.is_seed();
        let mut sets = vec![
            FieldSet::Holder(self.holder.clone()),
            FieldSet::ExpiresAt(Moment::NowPlus(self.expires_in)),
        ];
        if !seed {
            sets.push(FieldSet::Kind(self.kind));
        }
        sets.push(FieldSet::Note(self.note.clone()));
        // Naming a holder is an acquire for that holder.
        if self.holder.is_some() && !seed {
            sets.push(FieldSet::AcquiredAt(Moment::Now));
            sets.push(FieldSet::RenewedAt(Moment::Now));
        }
        if let ResumeChange::Set { token, at } = &self.resume {
            match (seed, token) {
                (false, _) => {
                    sets.extend(FieldSet::resume_token(token.as_ref()));
                    sets.push(FieldSet::ResumeAt(*at));
                }
                (true, Some(token)) => {
                    sets.extend(FieldSet::resume_token(Some(token)));
                    sets.push(FieldSet::ResumeAtRemoved);
                }
                (true, None) => {
                    sets.push(FieldSet::ResumeTokenRemoved);
                    sets.push(FieldSet::ResumeAtRemoved);
                }
            }
            sets.push(FieldSet::Invalidated(None));
            sets.push(FieldSet::Failure(None));
        }
        LeaseWrite {
            resource: self.resource.clone(),
            requires: vec![Requirement::VersionIs(self.expected_version)],
            may_insert: false,
            bumps_version: true,
            sets,
        }
    }

    /// `lease` as this change leaves it when the server's `$$NOW` is `now`, assuming
    /// the compare-and-swap matched (the planner's prediction).
    pub fn applied_to(&self, lease: &Lease, now: DateTime<Utc>) -> Lease {
        let unconditional = LeaseWrite {
            requires: Vec::new(),
            ..self.write()
        };
        let mut after = lease.clone();
        unconditional.apply_in_place(&mut after, now);
        after
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ResumeChange {
    Keep,
    /// Set both fields (either may be null), and clear `invalidated` and `failure`: the
    /// operator has decided where the listener goes on.
    Set {
        token: Option<ResumeToken>,
        at: Option<ClusterTime>,
    },
}

/// Result of an operator's compare-and-swap ([`OperatorStore::operator_swap`]).
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum SwapOutcome {
    Applied {
        before: Lease,
        after: Lease,
        /// Cluster time of the write (the rebuild's T0); `None` where the server sends
        /// none (Azure Cosmos DB).
        operation_time: Option<ClusterTime>,
    },
    /// The lease changed since it was planned (or does not exist): nothing written.
    /// `operation_time`: the cluster time the swap was answered at, when the reply
    /// had one (a resend that finds the lease as an earlier, lost attempt left it
    /// uses it as that write's T0: everything before it is on the server).
    Changed {
        current: Option<Lease>,
        operation_time: Option<ClusterTime>,
    },
}

/// One change seen on the lease collection.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseChange {
    pub resource: String,
    /// The document after the change; `None` if it was deleted or is malformed.
    pub lease: Option<Lease>,
    /// What is wrong with the document after the change, when it cannot be read.
    pub malformed: Option<super::MalformedDocument>,
}

impl LeaseChange {
    /// The lease after the change (`None`: deleted), or an error when its document
    /// cannot be read: a malformed lease is not a vacant one, and not an operator's
    /// decision either.
    pub fn readable_lease(self) -> StoreResult<Option<Lease>> {
        match self.malformed {
            Some(malformed) => Err(StoreError::Malformed {
                what: "lease document".into(),
                detail: malformed.to_string(),
            }),
            None => Ok(self.lease),
        }
    }
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

    /// [`Self::commit`], and remove `failure`: the batch committed got past the change
    /// the lease records as failing (it was handled, or stepped over).
    fn commit_past_failure(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> impl Future<Output = StoreResult<TenureWrite>> + Send;

    /// updateOne on `{_id, listenerId, version}`: set `failure` (the change the holder
    /// cannot get past, with every attempt so far counted), nothing else.
    fn record_failure(
        &self,
        tenure: &Tenure,
        failure: &ChangeFailure,
    ) -> impl Future<Output = StoreResult<TenureWrite>> + Send;

    /// updateOne on `{_id, listenerId, version}`: `listenerId = null`, `expiresAt = now`.
    fn release(&self, tenure: &Tenure) -> impl Future<Output = StoreResult<TenureWrite>> + Send;

    fn get(&self, resource: &str) -> impl Future<Output = StoreResult<Option<Lease>>> + Send;

    /// Every lease, sorted by resource, and each document that is not a readable
    /// lease. A missing collection is an empty list.
    fn list(&self) -> impl Future<Output = StoreResult<super::Listing<Lease>>> + Send;

    fn watch(&self, scope: LeaseScope) -> impl Future<Output = StoreResult<Self::Watch>> + Send;

    /// The server's wall clock, which lease expiry is measured against.
    fn server_now(&self) -> impl Future<Output = StoreResult<DateTime<Utc>>> + Send;
}

/// What guarded operator actions need beyond the listener's ports: the
/// compare-and-swap every action is made of, how many changes a move of the resume
/// point replays or skips, and the token that stands for a time. An action's audit
/// record is written around it, first pending and then finalized ([`super::AuditLog`]),
/// so no change exists without one.
pub trait OperatorStore: Send + Sync {
    /// Compare-and-swap on `expected_version`: the change as [`OperatorChange::write`]
    /// describes it, and nothing else.
    fn operator_swap(
        &self,
        change: &OperatorChange,
    ) -> impl Future<Output = StoreResult<SwapOutcome>> + Send;

    /// How many history entries with changes on `on` have a time in `from..=to`,
    /// counting at most `limit` (a result equal to `limit` means "at least"). What a
    /// rewind replays or a reset skips. Entries that fell off the history are not
    /// counted. `NotPermitted` without access to the oplog.
    fn count_changes(
        &self,
        on: &crate::model::WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// A resume token that stands for cluster time `at`: a stream resumed after it
    /// delivers every change at or after `at`, as a stream started at `at` would. For
    /// a lease whose listener reads only a token (a seed lease, docs/protocol.md
    /// "Leases written by other implementations"), a move to a time is written as it.
    /// On MongoDB: the post-batch resume token of a deployment-wide change stream
    /// opened at `at` with an empty first batch (a high-water-mark token, which names
    /// no collection, so any stream may resume after it).
    fn token_at(&self, at: ClusterTime) -> impl Future<Output = StoreResult<ResumeToken>> + Send;
}
