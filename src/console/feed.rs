//! Background tasks that read the cluster and send [`DataEvent`]s to the console.
//! Leases are pushed by a change stream on the lease collection (never polled);
//! the oplog window, members and audit log are read periodically. A task that
//! loses its source reports it and retries; the UI never waits on any of this.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::data::{DataEvent, DataSource};
use crate::engine::ListenerSnapshot;
use crate::model::{Deployment, Lease, LossTracker, OplogAccess};
use crate::observe::{ClusterProbe, HistoryReading, WindowSource, WriteRate};
use crate::store::{
    read_time_to_loss, AuditLog, CheckpointStore, LeaseScope, LeaseStore, LeaseWatch, StoreError,
};

/// How often each source is read, and how soon a failed one is retried.
#[derive(Debug, Clone, Copy)]
pub struct FeedIntervals {
    pub window: Duration,
    /// Members are read every this many window reads.
    pub members_every: u32,
    pub audit: Duration,
    pub listeners: Duration,
    /// How often each lease's time to loss is predicted (two reads give the first).
    pub loss: Duration,
    /// How often the detail view's checkpoints are read again (they are recorded once a
    /// minute by default).
    pub checkpoints: Duration,
    pub retry: Duration,
}

impl Default for FeedIntervals {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(1),
            members_every: 5,
            audit: Duration::from_secs(2),
            listeners: Duration::from_millis(500),
            loss: Duration::from_secs(5),
            checkpoints: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        }
    }
}

/// Audit records the console keeps.
pub const AUDIT_SHOWN: usize = 100;

/// What runs in this process (IN-PROCESS and DEMO modes), read each time the
/// listeners panel is refreshed.
pub type ListenerSource = Arc<dyn Fn() -> InProcess + Send + Sync>;

/// The listeners this process runs, and its demo workload's status when it runs one.
#[derive(Debug, Clone, PartialEq)]
pub struct InProcess {
    pub listeners: Vec<ListenerSnapshot>,
    pub workload: Option<crate::demo::workload::WorkloadStatus>,
}

/// Starts every data task; they end when `cancel` fires or the console goes away.
pub fn spawn<S: ClusterProbe>(
    store: S,
    listeners: Option<ListenerSource>,
    intervals: FeedIntervals,
    events: mpsc::Sender<DataEvent>,
    cancel: CancellationToken,
) -> Vec<JoinHandle<()>> {
    let known = KnownLeases::default();
    let mut tasks = vec![
        tokio::spawn(until_cancelled(
            cancel.clone(),
            watch_leases(store.clone(), intervals, events.clone(), known.clone()),
        )),
        tokio::spawn(until_cancelled(
            cancel.clone(),
            read_cluster(store.clone(), intervals, events.clone(), known.clone()),
        )),
        tokio::spawn(until_cancelled(
            cancel.clone(),
            predict_loss(store.clone(), intervals, events.clone(), known),
        )),
        tokio::spawn(until_cancelled(
            cancel.clone(),
            read_audit(store, intervals, events.clone()),
        )),
    ];
    if let Some(source) = listeners {
        tasks.push(tokio::spawn(until_cancelled(
            cancel,
            read_listeners(source, intervals, events),
        )));
    }
    tasks
}

async fn until_cancelled(cancel: CancellationToken, task: impl std::future::Future<Output = ()>) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = task => {}
    }
}

/// A closed channel means the console has gone: the task stops.
struct Gone;

async fn send(events: &mpsc::Sender<DataEvent>, event: DataEvent) -> Result<(), Gone> {
    events.send(event).await.map_err(|_| Gone)
}

async fn report(
    events: &mpsc::Sender<DataEvent>,
    source: DataSource,
    error: &StoreError,
) -> Result<(), Gone> {
    send(
        events,
        DataEvent::SourceFailed {
            source,
            error: error.to_string(),
        },
    )
    .await
}

enum Stop {
    Gone,
    Failed(StoreError),
}

impl From<StoreError> for Stop {
    fn from(error: StoreError) -> Self {
        Stop::Failed(error)
    }
}

impl From<Gone> for Stop {
    fn from(_: Gone) -> Self {
        Stop::Gone
    }
}

/// The leases as the watch last delivered them, for the tasks that need them all now
/// and then (the time to loss): kept by the watch, so the leases are never polled.
#[derive(Debug, Clone, Default)]
struct KnownLeases(Arc<Mutex<HashMap<String, Lease>>>);

impl KnownLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lease>> {
        // A map of plain values: whatever a panicking holder left is still a map.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn replace(&self, leases: &[Lease]) {
        let mut known = self.lock();
        known.clear();
        known.extend(leases.iter().map(|l| (l.resource.clone(), l.clone())));
    }

    fn all(&self) -> Vec<Lease> {
        self.lock().values().cloned().collect()
    }
}

async fn watch_leases<S: LeaseStore>(
    store: S,
    intervals: FeedIntervals,
    events: mpsc::Sender<DataEvent>,
    known: KnownLeases,
) {
    loop {
        match follow_leases(&store, &events, &known).await {
            Stop::Gone => return,
            Stop::Failed(error) => {
                tracing::warn!(%error, "lease watch lost; retrying");
                if report(&events, DataSource::Leases, &error).await.is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(intervals.retry).await;
    }
}

/// Opens the watch first and lists second, so no change falls between the two.
async fn follow_leases<S: LeaseStore>(
    store: &S,
    events: &mpsc::Sender<DataEvent>,
    known: &KnownLeases,
) -> Stop {
    let run = async {
        let mut watch = store.watch(LeaseScope::All).await?;
        let leases = store.list().await?;
        known.replace(&leases.items);
        send(events, DataEvent::LeaseSnapshot(leases)).await?;
        loop {
            let change = watch.changed().await?;
            if let Some(lease) = change.lease {
                known.lock().insert(lease.resource.clone(), lease.clone());
                send(events, DataEvent::LeaseChanged(Box::new(lease))).await?;
            } else if let Some(malformed) = change.malformed {
                if let Some(id) = &malformed.id {
                    known.lock().remove(id);
                }
                send(events, DataEvent::LeaseMalformed(malformed)).await?;
            } else {
                known.lock().remove(&change.resource);
                send(events, DataEvent::LeaseDeleted(change.resource)).await?;
            }
        }
    };
    match run.await {
        Ok(()) => Stop::Gone,
        Err(stop) => stop,
    }
}

/// Every `intervals.window`: what the cluster is, its members and the fleet's processes
/// (every `members_every` reads), then the histories and the clock
/// ([`HistoryReading`]): the oplog window with the write rate, and the windows of the
/// capped collections the known capped leases tail (sent while there are any, and
/// once more when the last one goes, so none is kept).
async fn read_cluster<S: ClusterProbe>(
    store: S,
    intervals: FeedIntervals,
    events: mpsc::Sender<DataEvent>,
    known: KnownLeases,
) {
    let mut ticker = tokio::time::interval(intervals.window);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rate = WriteRate::default();
    let mut reads: u32 = 0;
    let mut oplog_readable = true;
    let mut router = false;
    let mut capped_sent = false;
    loop {
        ticker.tick().await;
        // The window when the topology read it this tick: not read twice.
        let mut read_with_topology = None;
        if reads.is_multiple_of(intervals.members_every.max(1)) {
            if let Ok(Some((topology, window))) = store.topology().await {
                oplog_readable = topology.oplog == OplogAccess::Readable;
                // A router has no members (replSetGetStatus does not exist there).
                router = topology.deployment == Deployment::Sharded;
                read_with_topology = window;
                if send(&events, DataEvent::Topology(topology)).await.is_err() {
                    return;
                }
            }
            if !router {
                let members = store.members().await.map_err(|e| e.to_string());
                if send(&events, DataEvent::Members(members)).await.is_err() {
                    return;
                }
            }
            let processes = store
                .list_members(crate::store::MemberScope::All)
                .await
                .map(|listing| listing.items)
                .map_err(|e| e.to_string());
            if send(&events, DataEvent::Processes(processes))
                .await
                .is_err()
            {
                return;
            }
        }
        reads = reads.wrapping_add(1);
        // Unreadable: the header says why from the topology; reading would only fail
        // again. The server's clock still judges lag, EXPIRED and UNCLAIMED.
        let source = match (oplog_readable, read_with_topology) {
            (false, _) => WindowSource::Unreadable,
            (true, Some(window)) => WindowSource::Known(window),
            (true, None) => WindowSource::Read,
        };
        let history = HistoryReading::read(&store, &known.all(), source).await;
        // The capped windows first: read whatever became of the oplog's, they are sent
        // while there are any (and once more when the last one goes, so none is kept).
        let capped = history.capped;
        let any = !capped.entries.is_empty() || !capped.unread.is_empty();
        if any || capped_sent {
            for why in capped.unread.values() {
                tracing::debug!(%why, "capped collection window not read");
            }
            capped_sent = any;
            if send(&events, DataEvent::CappedWindows(capped))
                .await
                .is_err()
            {
                return;
            }
        }
        let clock = match history.clock {
            Ok((Some(window), server_now)) => {
                // A failed count costs the rate only, never the window and clock read.
                let ops_per_sec = rate
                    .sample(&store, window.last)
                    .await
                    .unwrap_or_else(|error| {
                        tracing::warn!(%error, "oplog write rate not measured");
                        None
                    });
                DataEvent::Window {
                    window,
                    server_now,
                    ops_per_sec,
                }
            }
            Ok((None, server_now)) => DataEvent::ServerClock(server_now),
            Err(error) => {
                if report(&events, DataSource::Oplog, error.store_error())
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
        };
        if send(&events, clock).await.is_err() {
            return;
        }
    }
}

/// Predicts each lease's time to loss (the leases as the watch delivered them) from its
/// own reads of the oplogs' windows and figures, keeping the rates between reads
/// ([`LossTracker`]).
async fn predict_loss<S: ClusterProbe>(
    store: S,
    intervals: FeedIntervals,
    events: mpsc::Sender<DataEvent>,
    known: KnownLeases,
) {
    let mut ticker = tokio::time::interval(intervals.loss);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tracker = LossTracker::default();
    loop {
        ticker.tick().await;
        let event = match store.server_now().await {
            Ok(read_at) => DataEvent::TimeToLoss {
                read_at,
                reading: read_time_to_loss(&store, &mut tracker, read_at, &known.all()).await,
            },
            // The window read reports the failure.
            Err(error) => {
                tracing::debug!(%error, "time to loss not predicted");
                continue;
            }
        };
        if send(&events, event).await.is_err() {
            return;
        }
    }
}

/// Checkpoints shown per lease in the detail view.
pub const CHECKPOINTS_SHOWN: u32 = 20;

/// Reads the checkpoints of the lease the detail view shows (`detail`), when it opens on
/// one and then every `intervals.checkpoints` while it stays; nothing while it is closed.
pub fn spawn_checkpoints<S: ClusterProbe>(
    store: S,
    intervals: FeedIntervals,
    events: mpsc::Sender<DataEvent>,
    mut detail: tokio::sync::watch::Receiver<Option<String>>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(until_cancelled(cancel, async move {
        loop {
            let shown = detail.borrow_and_update().clone();
            if let Some(resource) = shown {
                let read = match store.checkpoint_store() {
                    Some(checkpoints) => checkpoints
                        .checkpoints(&resource, CHECKPOINTS_SHOWN)
                        .await
                        .map_err(|e| e.to_string()),
                    None => Err(crate::store::NO_CHECKPOINTS.to_string()),
                };
                if send(&events, DataEvent::Checkpoints { resource, read })
                    .await
                    .is_err()
                {
                    return;
                }
                // Again after a while, or at once for another lease.
                tokio::select! {
                    changed = detail.changed() => if changed.is_err() { return },
                    () = tokio::time::sleep(intervals.checkpoints) => {}
                }
            } else if detail.changed().await.is_err() {
                return;
            }
        }
    }))
}

async fn read_audit<S: AuditLog>(
    store: S,
    intervals: FeedIntervals,
    events: mpsc::Sender<DataEvent>,
) {
    let mut ticker = tokio::time::interval(intervals.audit);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let sent = match store.audit_log(AUDIT_SHOWN).await {
            Ok(records) => send(&events, DataEvent::Audit(records)).await,
            Err(error) => report(&events, DataSource::Audit, &error).await,
        };
        if sent.is_err() {
            return;
        }
    }
}

async fn read_listeners(
    source: ListenerSource,
    intervals: FeedIntervals,
    events: mpsc::Sender<DataEvent>,
) {
    let mut ticker = tokio::time::interval(intervals.listeners);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let InProcess {
            listeners,
            workload,
        } = source();
        if send(&events, DataEvent::Listeners(listeners))
            .await
            .is_err()
        {
            return;
        }
        if let Some(workload) = workload {
            if send(&events, DataEvent::Workload(workload)).await.is_err() {
                return;
            }
        }
    }
}
