//! Lease operations with the filters of DESIGN §3, on the sandbox's clock.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::broadcast;

use super::history::{HistoryEntry, StartMark};
use super::state::State;
use super::{count, SandboxStore};
use crate::model::{AuditRecord, Invalidation, Lease, LockKind, ResumeToken};
use crate::store::{
    AcquireOutcome, AcquireRequest, AuditContext, AuditEntry, LeaseChange, LeaseScope, LeaseStore,
    LeaseWatch, OperatorChange, OperatorOutcome, ResumeChange, StoreError, StoreResult,
    SwapOutcome, Tenure, TenureWrite,
};

fn after(now: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(lease)
        .ok()
        .and_then(|d| now.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The acquire filter and update on one (possibly missing) document.
fn acquire_on(
    existing: Option<&Lease>,
    request: &AcquireRequest,
    now: DateTime<Utc>,
) -> Option<Lease> {
    let mut lease = match existing {
        None => {
            let mut fresh = Lease::vacant(&request.resource);
            fresh.version = -1; // bumped to 0 below: version 0 on insert
            fresh
        }
        Some(current) => {
            let mine = current.holder.as_deref() == Some(request.listener.as_str());
            let bulk_excluded = request.kind == LockKind::Update && current.kind == LockKind::Bulk;
            if bulk_excluded || !(mine || current.is_expired(now)) {
                return None;
            }
            current.clone()
        }
    };
    if lease.holder.as_deref() != Some(request.listener.as_str()) {
        lease.version += 1;
        lease.acquired_at = Some(now);
    }
    lease.holder = Some(request.listener.clone());
    lease.kind = request.kind;
    lease.expires_at = Some(after(now, request.lease));
    lease.renewed_at = Some(now);
    if request.watch.is_some() {
        lease.watch = request.watch.clone();
    }
    Some(lease)
}

fn holds(lease: Option<&Lease>, tenure: &Tenure) -> bool {
    lease.is_some_and(|l| {
        l.holder.as_deref() == Some(tenure.listener.as_str()) && l.version == tenure.version
    })
}

impl SandboxStore {
    fn tenure_write(
        &self,
        tenure: &Tenure,
        apply: impl FnOnce(&mut Lease, DateTime<Utc>),
        done: impl FnOnce() -> HistoryEntry,
    ) -> TenureWrite {
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let Some(lease) = state
            .leases
            .get_mut(&tenure.resource)
            .filter(|l| holds(Some(l), tenure))
        else {
            state.record(|| HistoryEntry::TenureRefused {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
            });
            return TenureWrite::LostLock;
        };
        apply(lease, now);
        self.publish_lease(lease);
        // Recorded under the same lock as the write, so the history orders them as they happened.
        state.record(done);
        TenureWrite::Done
    }
}

impl LeaseStore for SandboxStore {
    type Watch = SandboxLeaseWatch;

    async fn acquire(&self, request: &AcquireRequest) -> StoreResult<AcquireOutcome> {
        count(&self.inner.calls.acquire);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let Some(lease) = acquire_on(state.leases.get(&request.resource), request, now) else {
            return Ok(AcquireOutcome::HeldByOther);
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
        count(&self.inner.calls.commit);
        Ok(self.tenure_write(
            tenure,
            |doc, now| {
                doc.resume_token = Some(token.clone());
                doc.committed_at = Some(now);
                doc.expires_at = Some(after(now, lease));
            },
            || HistoryEntry::Committed {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
                token_time: token.time(),
            },
        ))
    }

    async fn renew(&self, tenure: &Tenure, lease: Duration) -> StoreResult<TenureWrite> {
        count(&self.inner.calls.renew);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let Some(held) = state
            .leases
            .get_mut(&tenure.resource)
            .filter(|l| holds(Some(l), tenure))
        else {
            return Ok(TenureWrite::LostLock);
        };
        held.expires_at = Some(after(now, lease));
        held.renewed_at = Some(now);
        self.publish_lease(held);
        Ok(TenureWrite::Done)
    }

    async fn record_invalidation(
        &self,
        tenure: &Tenure,
        invalidation: &Invalidation,
    ) -> StoreResult<TenureWrite> {
        count(&self.inner.calls.record_invalidation);
        Ok(self.tenure_write(
            tenure,
            |doc, _| doc.invalidated = Some(invalidation.clone()),
            || HistoryEntry::Invalidated {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
            },
        ))
    }

    async fn release(&self, tenure: &Tenure) -> StoreResult<TenureWrite> {
        count(&self.inner.calls.release);
        Ok(self.tenure_write(
            tenure,
            |doc, now| {
                doc.holder = None;
                doc.expires_at = Some(now);
            },
            || HistoryEntry::Released {
                resource: tenure.resource.clone(),
                listener: tenure.listener.clone(),
                version: tenure.version,
            },
        ))
    }

    async fn get(&self, resource: &str) -> StoreResult<Option<Lease>> {
        count(&self.inner.calls.get);
        Ok(self.lock().leases.get(resource).cloned())
    }

    async fn list(&self) -> StoreResult<Vec<Lease>> {
        count(&self.inner.calls.list);
        Ok(self.lock().leases.values().cloned().collect())
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

    async fn operator_update(
        &self,
        change: &OperatorChange,
        audit: &AuditContext,
    ) -> StoreResult<OperatorOutcome> {
        count(&self.inner.calls.operator_update);
        let now = self.inner.clock.now();
        // The swap and its audit record under one lock: atomic, like a transaction.
        let mut state = self.lock();
        Ok(match self.swap_locked(&mut state, change, now) {
            SwapOutcome::Changed { current } => OperatorOutcome::Changed { current },
            SwapOutcome::Applied {
                before,
                after,
                operation_time,
            } => {
                let audit_id = push_audit(
                    &mut state,
                    &AuditEntry {
                        resource: change.resource.clone(),
                        context: audit.clone(),
                        before: Some(before.clone()),
                        after: Some(after.clone()),
                        outcome: "applied".into(),
                    },
                    now,
                );
                OperatorOutcome::Applied {
                    before,
                    after,
                    operation_time,
                    audit_id,
                }
            }
        })
    }

    async fn operator_swap(&self, change: &OperatorChange) -> StoreResult<SwapOutcome> {
        count(&self.inner.calls.operator_swap);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        Ok(self.swap_locked(&mut state, change, now))
    }

    async fn append_audit(&self, entry: &AuditEntry) -> StoreResult<String> {
        count(&self.inner.calls.append_audit);
        let now = self.inner.clock.now();
        Ok(push_audit(&mut self.lock(), entry, now))
    }

    async fn audit_log(&self, limit: usize) -> StoreResult<Vec<AuditRecord>> {
        Ok(self
            .lock()
            .audit
            .iter()
            .rev()
            .take(limit)
            .cloned()
            .collect())
    }

    async fn audit_record(&self, id: &str) -> StoreResult<Option<AuditRecord>> {
        Ok(self.lock().audit.iter().find(|r| r.id == id).cloned())
    }
}

fn push_audit(state: &mut State, entry: &AuditEntry, now: DateTime<Utc>) -> String {
    let id = format!("{}-{}", now.timestamp_millis(), state.audit.len() + 1);
    state.audit.push(AuditRecord {
        id: id.clone(),
        operator: entry.context.operator.clone(),
        at: now,
        action: entry.context.action.clone(),
        resource: entry.resource.clone(),
        before: entry.before.clone(),
        after: entry.after.clone(),
        reason: entry.context.reason.clone(),
        outcome: entry.outcome.clone(),
    });
    id
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
        let Some(before) = current
            .clone()
            .filter(|l| l.version == change.expected_version)
        else {
            return SwapOutcome::Changed { current };
        };
        let mut after_lease = before.clone();
        after_lease.version += 1;
        after_lease.holder = change.holder.clone();
        after_lease.expires_at = Some(after(now, change.expires_in));
        after_lease.kind = change.kind;
        after_lease.note = Some(change.note.clone());
        // Like the adapter: naming a holder is an acquire for that holder.
        if change.holder.is_some() {
            after_lease.acquired_at = Some(now);
            after_lease.renewed_at = Some(now);
        }
        if let ResumeChange::Set { token, at } = &change.resume {
            after_lease.resume_token = token.clone();
            after_lease.resume_at = *at;
            after_lease.invalidated = None;
        }
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
            operation_time,
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
                        });
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return Err(StoreError::Closed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(listener: &str, kind: LockKind) -> AcquireRequest {
        AcquireRequest {
            resource: "r".into(),
            listener: listener.into(),
            kind,
            lease: Duration::from_secs(10),
            watch: None,
        }
    }

    #[test]
    fn insert_starts_at_version_zero_and_refresh_keeps_it() {
        let now = Utc::now();
        let first = acquire_on(None, &request("a", LockKind::Update), now).unwrap();
        assert_eq!(first.version, 0);
        assert_eq!(first.acquired_at, Some(now));
        let later = now + TimeDelta::seconds(3);
        let refreshed = acquire_on(Some(&first), &request("a", LockKind::Update), later).unwrap();
        assert_eq!(refreshed.version, 0);
        assert_eq!(
            refreshed.acquired_at,
            Some(now),
            "acquiredAt moves only with the holder"
        );
        assert_eq!(refreshed.expires_at, Some(later + TimeDelta::seconds(10)));
    }

    #[test]
    fn others_wait_for_expiry_then_bump_the_version() {
        let now = Utc::now();
        let held = acquire_on(None, &request("a", LockKind::Update), now).unwrap();
        assert_eq!(
            acquire_on(Some(&held), &request("b", LockKind::Update), now),
            None
        );
        let at_expiry = now + TimeDelta::seconds(10);
        let taken = acquire_on(Some(&held), &request("b", LockKind::Update), at_expiry).unwrap();
        assert_eq!(taken.version, 1);
        assert_eq!(taken.holder.as_deref(), Some("b"));
    }

    #[test]
    fn bulk_is_never_taken_by_update_however_old() {
        let now = Utc::now();
        let mut bulk = acquire_on(None, &request("op", LockKind::Bulk), now).unwrap();
        bulk.expires_at = Some(now - TimeDelta::days(365));
        assert_eq!(
            acquire_on(Some(&bulk), &request("b", LockKind::Update), now),
            None
        );
        assert!(acquire_on(Some(&bulk), &request("op", LockKind::Bulk), now).is_some());
    }

    #[test]
    fn a_released_lease_goes_to_anyone_with_a_new_version() {
        let now = Utc::now();
        let mut lease = acquire_on(None, &request("a", LockKind::Update), now).unwrap();
        lease.holder = None;
        lease.expires_at = Some(now);
        let again = acquire_on(Some(&lease), &request("a", LockKind::Update), now).unwrap();
        assert_eq!(
            again.version, 1,
            "every tenure has its own version, even the same listener's"
        );
    }
}
