//! Lease operations on the sandbox's clock: each applies the [`LeaseWrite`] the
//! MongoDB adapter renders, so both stores run the same rules.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

use super::history::{HistoryEntry, StartMark};
use super::state::State;
use super::{count, SandboxStore};
use crate::model::{
    AuditRecord, AuditState, AuditStep, ChangeFailure, ClusterTime, Invalidation, Lease,
    LeaseWrite, ResumeToken,
};
use crate::store::{
    AcquireOutcome, AcquireRequest, AuditFinish, AuditIntent, AuditLog, Capabilities, LeaseChange,
    LeaseScope, LeaseStore, LeaseWatch, Listing, OperatorChange, OperatorStore, SkippedChange,
    SkippedLog, StoreError, StoreResult, SwapOutcome, Tenure, TenureWrite,
};

impl SandboxStore {
    /// A commit of `token` by `tenure` (`write`), counted and kept in the history.
    fn committed(&self, tenure: &Tenure, token: &ResumeToken, write: &LeaseWrite) -> TenureWrite {
        count(&self.inner.calls.commit);
        self.tenure_write(
            tenure,
            write,
            Some(|| HistoryEntry::Committed {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
                token_time: token.time(),
            }),
        )
    }

    /// A holder's write (commit, renew, release, invalidation) on the sandbox's clock;
    /// `done` is what the history records when it applied (nothing for a renewal),
    /// built only when the history is kept.
    fn tenure_write(
        &self,
        tenure: &Tenure,
        write: &LeaseWrite,
        done: Option<impl FnOnce() -> HistoryEntry>,
    ) -> TenureWrite {
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let applied = state
            .leases
            .get_mut(&tenure.resource)
            .and_then(|lease| write.apply_in_place(lease, now).then_some(&*lease));
        let Some(after) = applied else {
            state.record(|| HistoryEntry::TenureRefused {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
            });
            return TenureWrite::LostLock;
        };
        self.publish_lease(after);
        // Recorded under the same lock as the write, so the history orders them as they happened.
        if let Some(done) = done {
            state.record(done);
        }
        TenureWrite::Done
    }
}

impl LeaseStore for SandboxStore {
    type Watch = SandboxLeaseWatch;

    async fn acquire(&self, request: &AcquireRequest) -> StoreResult<AcquireOutcome> {
        count(&self.inner.calls.acquire);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let existing = state.leases.get(&request.resource);
        if let (None, Some(seen_version)) = (existing, request.seen_version) {
            return Ok(AcquireOutcome::Vanished { seen_version });
        }
        let Some(lease) = LeaseWrite::apply_first(&request.writes(), existing, now) else {
            return Ok(AcquireOutcome::not_acquired(existing));
        };
        let changed_holder =
            state.leases.get(&request.resource).map(|l| l.version) != Some(lease.version);
        state.leases.insert(lease.resource.clone(), lease.clone());
        if changed_holder {
            state.record(|| HistoryEntry::Acquired {
                resource: lease.resource.clone(),
                listener: request.listener.clone(),
                version: lease.version,
                start: StartMark::of(&lease),
            });
        }
        self.publish_lease(&lease);
        Ok(AcquireOutcome::Acquired(lease))
    }

    async fn commit(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        Ok(self.committed(tenure, token, &tenure.commit(token, lease)))
    }

    async fn commit_past_failure(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        Ok(self.committed(tenure, token, &tenure.commit_past_failure(token, lease)))
    }

    async fn record_failure(
        &self,
        tenure: &Tenure,
        failure: &ChangeFailure,
    ) -> StoreResult<TenureWrite> {
        count(&self.inner.calls.record_failure);
        Ok(self.tenure_write(
            tenure,
            &tenure.record_failure(failure),
            None::<fn() -> HistoryEntry>,
        ))
    }

    async fn renew(&self, tenure: &Tenure, lease: Duration) -> StoreResult<TenureWrite> {
        count(&self.inner.calls.renew);
        Ok(self.tenure_write(tenure, &tenure.renew(lease), None::<fn() -> HistoryEntry>))
    }

    async fn record_invalidation(
        &self,
        tenure: &Tenure,
        invalidation: &Invalidation,
    ) -> StoreResult<TenureWrite> {
        count(&self.inner.calls.record_invalidation);
        Ok(self.tenure_write(
            tenure,
            &tenure.record_invalidation(invalidation),
            Some(|| HistoryEntry::Invalidated {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
            }),
        ))
    }

    async fn release(&self, tenure: &Tenure) -> StoreResult<TenureWrite> {
        count(&self.inner.calls.release);
        Ok(self.tenure_write(
            tenure,
            &tenure.release(),
            Some(|| HistoryEntry::Released {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
            }),
        ))
    }

    async fn get(&self, resource: &str) -> StoreResult<Option<Lease>> {
        count(&self.inner.calls.get);
        Ok(self.lock().leases.get(resource).cloned())
    }

    async fn list(&self) -> StoreResult<Listing<Lease>> {
        count(&self.inner.calls.list);
        Ok(Listing::complete(
            self.lock().leases.values().cloned().collect(),
        ))
    }

    async fn watch(&self, scope: LeaseScope) -> StoreResult<SandboxLeaseWatch> {
        count(&self.inner.calls.watch);
        Ok(SandboxLeaseWatch {
            receiver: self.inner.lease_changes.subscribe(),
            scope,
            store: self.clone(),
        })
    }

    async fn server_now(&self) -> StoreResult<DateTime<Utc>> {
        count(&self.inner.calls.server_now);
        Ok(self.inner.clock.now())
    }
}

impl OperatorStore for SandboxStore {
    async fn operator_swap(&self, change: &OperatorChange) -> StoreResult<SwapOutcome> {
        count(&self.inner.calls.operator_swap);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        Ok(self.swap_locked(&mut state, change, now))
    }

    async fn count_changes(
        &self,
        on: &crate::model::WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> StoreResult<u64> {
        self.count_log_changes(on, from, to, limit)
    }

    /// A high-water-mark token just before `at`: the sandbox's streams resume after a
    /// token's time (exclusive, as after its own post-batch tokens), so a stream resumed
    /// after this one starts at `at`, inclusive, as MongoDB's does after its token.
    async fn token_at(&self, at: ClusterTime) -> StoreResult<crate::model::ResumeToken> {
        Ok(crate::model::ResumeToken::encode(
            ClusterTime::from_u64(at.as_u64().saturating_sub(1)),
            crate::model::TokenKind::HighWaterMark,
            0,
        ))
    }
}

impl SkippedLog for SandboxStore {
    async fn keep_skipped(&self, skipped: &SkippedChange) -> StoreResult<()> {
        count(&self.inner.calls.audit_writes);
        let mut state = self.lock();
        // One record per change an action stepped over: its audit id and the token.
        state.skipped.retain(|s| {
            s.audit_id != skipped.audit_id || s.token.as_document() != skipped.token.as_document()
        });
        state.skipped.push(skipped.clone());
        Ok(())
    }

    async fn skipped_changes(
        &self,
        resource: &str,
        limit: usize,
    ) -> StoreResult<Vec<SkippedChange>> {
        let state = self.lock();
        Ok(state
            .skipped
            .iter()
            .rev()
            .filter(|s| s.resource == resource)
            .take(limit)
            .cloned()
            .collect())
    }
}

impl Capabilities for SandboxStore {
    type Capped = Self;
    type Checkpoints = Self;

    fn capped_feed(&self) -> Option<&Self> {
        Some(self)
    }

    fn checkpoint_store(&self) -> Option<&Self> {
        Some(self)
    }
}

impl AuditLog for SandboxStore {
    async fn begin_audit(&self, intent: &AuditIntent) -> StoreResult<String> {
        count(&self.inner.calls.audit_writes);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let id = format!("{}-{}", now.timestamp_millis(), state.audit.len() + 1);
        state.audit.push(intent.pending_record(id.clone(), now));
        Ok(id)
    }

    async fn audit_step(
        &self,
        id: &str,
        what: &str,
        after: Option<&Lease>,
        intends: Option<&Lease>,
    ) -> StoreResult<()> {
        count(&self.inner.calls.audit_writes);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let record = pending_record(&mut state, id)?;
        // A step is known by its text: sent again (a retry), it changes nothing, as
        // the MongoDB filter `steps.what ≠ what` matches nothing then.
        if record.steps.iter().any(|s| s.what == what) {
            return Ok(());
        }
        record.steps.push(AuditStep {
            at: now,
            what: what.into(),
        });
        if after.is_some() {
            record.after = after.cloned();
        }
        if intends.is_some() {
            record.intended = intends.cloned();
        }
        Ok(())
    }

    async fn finish_audit(&self, id: &str, finish: &AuditFinish) -> StoreResult<()> {
        count(&self.inner.calls.audit_writes);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        if let Some(done) = state.audit.iter().find(|r| r.id == id) {
            if done.state == finish.state && done.outcome == finish.outcome {
                return Ok(());
            }
        }
        let record = pending_record(&mut state, id)?;
        record.state = finish.state;
        record.after = finish.after.clone();
        record.outcome = finish.outcome.clone();
        record.finished_at = Some(now);
        Ok(())
    }

    async fn audit_log(&self, limit: usize) -> StoreResult<Listing<AuditRecord>> {
        Ok(Listing::complete(
            self.lock()
                .audit
                .iter()
                .rev()
                .take(limit)
                .cloned()
                .collect(),
        ))
    }

    async fn audit_record(&self, id: &str) -> StoreResult<Option<AuditRecord>> {
        Ok(self.lock().audit.iter().find(|r| r.id == id).cloned())
    }
}

/// The pending record `id`, or why it cannot be written to.
fn pending_record<'a>(state: &'a mut State, id: &str) -> StoreResult<&'a mut AuditRecord> {
    let record = state.audit.iter_mut().find(|r| r.id == id);
    match record {
        Some(record) if record.state == AuditState::Pending => Ok(record),
        other => Err(StoreError::AuditNotPending {
            id: id.into(),
            found: other.map(|r| r.state),
        }),
    }
}

impl SandboxStore {
    /// The compare-and-swap of an operator change, under the caller's lock.
    fn swap_locked(
        &self,
        state: &mut State,
        change: &OperatorChange,
        now: DateTime<Utc>,
    ) -> SwapOutcome {
        let current = state.leases.get(&change.resource).cloned();
        let (Some(before), Some(after_lease)) =
            (current.clone(), change.write().apply(current.as_ref(), now))
        else {
            let wall_secs = u32::try_from(now.timestamp()).unwrap_or(u32::MAX);
            return SwapOutcome::Changed {
                current,
                operation_time: Some(state.log.last_time().max(ClusterTime::new(wall_secs, 0))),
            };
        };
        state
            .leases
            .insert(change.resource.clone(), after_lease.clone());
        // The lease write itself is a change with its own cluster time (rebuild's T0).
        let wall_secs = u32::try_from(now.timestamp()).unwrap_or(u32::MAX);
        let operation_time = state.log.tick(wall_secs);
        state.record(|| HistoryEntry::OperatorChanged {
            resource: change.resource.clone(),
            version: after_lease.version,
            holder: after_lease.holder.clone(),
            start: StartMark::of(&after_lease),
        });
        self.publish_lease(&after_lease);
        SwapOutcome::Applied {
            before,
            after: after_lease,
            operation_time: Some(operation_time),
        }
    }
}

/// A subscription to lease changes, like a change stream on the lease collection.
pub struct SandboxLeaseWatch {
    receiver: broadcast::Receiver<LeaseChange>,
    scope: LeaseScope,
    store: SandboxStore,
}

impl LeaseWatch for SandboxLeaseWatch {
    async fn changed(&mut self) -> StoreResult<LeaseChange> {
        loop {
            match self.receiver.recv().await {
                Ok(change) => {
                    if matches!(&self.scope, LeaseScope::One(r) if *r != change.resource) {
                        continue;
                    }
                    return Ok(change);
                }
                // A slow watcher missed changes: hand it the current document instead,
                // like a change stream resumed with a fresh read.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let LeaseScope::One(resource) = &self.scope {
                        let lease = self.store.lock().leases.get(resource).cloned();
                        return Ok(LeaseChange {
                            resource: resource.clone(),
                            lease,
                            malformed: None,
                        });
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return Err(StoreError::Closed),
            }
        }
    }
}
