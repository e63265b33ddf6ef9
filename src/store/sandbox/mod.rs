//! The embedded store: MongoDB's semantics where the engine depends
//! on them, in process, fast, and deterministic under a virtual clock.

mod capped;
mod catalog;
mod change_log;
mod checkpoints;
mod clock;
mod ddl;
mod documents;
mod feed;
mod history;
mod increments;
mod leases;
mod membership;
mod state;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{broadcast, Notify};

pub use capped::SandboxTail;
pub use clock::Clock;
pub use feed::SandboxStream;
pub use history::{HistoryEntry, StartMark};
pub use leases::SandboxLeaseWatch;

use crate::model::{ClusterTime, Lease};
use crate::store::{LeaseChange, Namespace, StoreError, StoreResult};
use state::State;

#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// How many changes the log keeps before the oldest fall off.
    pub log_capacity: usize,
    /// How many bytes of changes (documents and a fixed overhead each) the log keeps
    /// before the oldest fall off, as an oplog sized in megabytes does.
    pub log_bytes: usize,
    /// `false` behaves like a user without `read` on `local`: no oplog window.
    pub oplog_readable: bool,
    /// Keep a step-by-step history for invariant checkers.
    pub record_history: bool,
    /// `false` behaves like a listener without write access to its checkpoints.
    pub checkpoints_writable: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            log_capacity: 100_000,
            log_bytes: usize::MAX,
            oplog_readable: true,
            record_history: false,
            checkpoints_writable: true,
        }
    }
}

/// Calls made through the ports, per method, so tests can bound them.
#[derive(Debug, Default)]
pub struct CallCounts {
    pub acquire: AtomicU64,
    pub commit: AtomicU64,
    pub record_invalidation: AtomicU64,
    pub record_failure: AtomicU64,
    pub release: AtomicU64,
    pub renew: AtomicU64,
    pub get: AtomicU64,
    pub list: AtomicU64,
    pub watch: AtomicU64,
    pub record_checkpoint: AtomicU64,
    pub membership: AtomicU64,
    pub server_now: AtomicU64,
    pub operator_swap: AtomicU64,
    pub audit_writes: AtomicU64,
    pub open: AtomicU64,
    pub next_batch: AtomicU64,
    pub oplog_window: AtomicU64,
    pub cluster_time: AtomicU64,
    pub count_changes: AtomicU64,
    pub documents: AtomicU64,
}

impl CallCounts {
    pub fn lease_calls(&self) -> u64 {
        [
            &self.acquire,
            &self.commit,
            &self.record_invalidation,
            &self.record_failure,
            &self.release,
            &self.renew,
            &self.get,
            &self.list,
            &self.watch,
            &self.server_now,
            &self.operator_swap,
            &self.audit_writes,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    /// Calls by which operator actions write, or try to (a compare-and-swap that finds
    /// another version still counts): a dry run must make none.
    pub fn operator_writes(&self) -> u64 {
        [&self.operator_swap, &self.audit_writes]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

pub(crate) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The sequence number after the newest log entry, for streams waiting on new changes.
///
/// A `Notify` wakes its waiters in the order they began to wait. A `watch` channel
/// would wake them in an order drawn from tokio's per-thread random generator, which
/// is seeded at random, so two runs of the same test on a paused clock could differ.
struct LogEnd {
    end: AtomicU64,
    grew: Notify,
}

impl LogEnd {
    fn publish(&self, end: u64) {
        self.end.store(end, Ordering::SeqCst);
        self.grew.notify_waiters();
    }

    /// Returns once the log has grown past `position`.
    async fn grown_past(&self, position: u64) {
        loop {
            let notified = self.grew.notified();
            tokio::pin!(notified);
            // Registered before the check, so a write between the two still wakes it.
            notified.as_mut().enable();
            if self.end.load(Ordering::SeqCst) > position {
                return;
            }
            notified.await;
        }
    }
}

struct Inner {
    state: Mutex<State>,
    clock: Clock,
    config: SandboxConfig,
    log_end: LogEnd,
    /// Appends to capped collections, for waiting tails.
    capped_end: LogEnd,
    lease_changes: broadcast::Sender<LeaseChange>,
    calls: CallCounts,
    /// Writes into these collections fail with the error, until cleared
    /// ([`SandboxStore::fail_writes_to`]).
    write_faults: Mutex<std::collections::BTreeMap<Namespace, StoreError>>,
}

/// A handle to one embedded store; clones share it.
#[derive(Clone)]
pub struct SandboxStore {
    inner: Arc<Inner>,
}

impl SandboxStore {
    pub fn new(config: SandboxConfig, clock: Clock) -> Self {
        let state = State::new(
            change_log::ChangeLog::with_byte_budget(config.log_capacity, config.log_bytes),
            config.record_history,
        );
        let log_end = LogEnd {
            end: AtomicU64::new(state.log.end()),
            grew: Notify::new(),
        };
        let (lease_changes, _) = broadcast::channel(1024);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                clock,
                config,
                log_end,
                capped_end: LogEnd {
                    end: AtomicU64::new(0),
                    grew: Notify::new(),
                },
                lease_changes,
                calls: CallCounts::default(),
                write_faults: Mutex::new(std::collections::BTreeMap::new()),
            }),
        }
    }

    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    pub fn calls(&self) -> &CallCounts {
        &self.inner.calls
    }

    /// Fault injection: from now on every application write into `ns` (`put`,
    /// `delete_one`, `delete_where`, `replace_all`, `append_entry`) fails with `error`,
    /// as writes do while a cluster has no primary; `None` lets them through again.
    pub fn fail_writes_to(&self, ns: &Namespace, error: Option<StoreError>) {
        let mut faults = self
            .inner
            .write_faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match error {
            Some(error) => faults.insert(ns.clone(), error),
            None => faults.remove(ns),
        };
    }

    /// A hand edit of a lease document (an operator's `updateOne` outside streamward):
    /// stores `lease` as it is, whatever the protocol's rules, and tells the lease's
    /// watchers. For tests of what the protocol does with what it would never write.
    pub fn put_lease_by_hand(&self, lease: Lease) {
        self.lock()
            .leases
            .insert(lease.resource.clone(), lease.clone());
        self.publish_lease(&lease);
    }

    /// The injected fault for writes into `ns`, if any ([`SandboxStore::fail_writes_to`]).
    pub(crate) fn write_fault(&self, ns: &Namespace) -> StoreResult<()> {
        let faults = self
            .inner
            .write_faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        faults.get(ns).cloned().map_or(Ok(()), Err)
    }

    /// The recorded history so far (empty unless `record_history`).
    pub fn history(&self) -> Vec<HistoryEntry> {
        self.lock().history.clone().unwrap_or_default()
    }

    /// Adds an entry from outside, e.g. a test handler noting what it handled, so
    /// that it is ordered with the store's own entries.
    pub fn record(&self, entry: HistoryEntry) {
        self.lock().record(|| entry);
    }

    /// Whether the change log has dropped any entry (history can have been lost).
    pub fn has_dropped_history(&self) -> bool {
        self.lock().log.has_dropped()
    }

    /// The newest cluster time written, without counting a call.
    pub fn last_time(&self) -> ClusterTime {
        self.lock().log.last_time()
    }

    /// How many changes were written after `after` (all of the log's, if `after` has
    /// fallen off it), counting at most `limit`. Not counted as a call.
    pub fn entries_after(&self, after: ClusterTime, limit: u64) -> u64 {
        let state = self.lock();
        let log = &state.log;
        let from = log
            .position_after(after)
            .unwrap_or_else(|_| log.first_seq());
        log.end().saturating_sub(from).min(limit)
    }

    /// How many documents `ns` holds now. Not counted as a call: for a census of the
    /// sandbox (the demo logs one), not for the engine.
    pub fn document_count(&self, ns: &crate::store::Namespace) -> usize {
        self.lock()
            .collections
            .get(ns)
            .map_or(0, |c| c.documents.len())
    }

    /// How many changes the log holds now (at most its capacity). Not counted as a call.
    pub fn log_len(&self) -> u64 {
        let state = self.lock();
        state.log.end() - state.log.first_seq()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-written in a way
        // that matters more than stopping the whole sandbox would.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Releases the state lock taken for a write, then tells the change feed where
    /// the log ends now.
    fn publish_after(&self, state: MutexGuard<'_, State>) {
        let end = state.log.end();
        drop(state);
        self.inner.log_end.publish(end);
    }

    /// Tells watchers about a lease write. Called under the state lock, so watchers see
    /// changes in the order they were made; skipped (no copy made) when nobody watches.
    fn publish_lease(&self, lease: &Lease) {
        if self.inner.lease_changes.receiver_count() > 0 {
            let _ = self.inner.lease_changes.send(LeaseChange {
                resource: lease.resource.clone(),
                lease: Some(lease.clone()),
                malformed: None,
            });
        }
    }

    fn require_oplog(&self) -> StoreResult<()> {
        if self.inner.config.oplog_readable {
            Ok(())
        } else {
            Err(StoreError::NotPermitted {
                action: "read local.oplog.rs".into(),
                detail: "the sandbox was started without oplog access".into(),
                hint: "the clusterMonitor role, or read on the local database".into(),
            })
        }
    }
}
