//! Membership and balancing end to end (docs/protocol.md, "Membership and balancing"),
//! written once over a [`FleetHarness`] and run on the sandbox (`fleet_sandbox.rs`) and
//! on a real replica set (`fleet_live.rs`): processes, each a fleet membership and a
//! listener per resource, on 12 resources, judged by what the leases and the handlers
//! saw.
//!
//! Not a module of `support/mod.rs`, so it is compiled only into the two test crates
//! that include it (`#[path = "support/fleet.rs"] mod fleet;`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::doc;
use streamward::engine::{
    Bootstrap, Fleet, FleetConfig, Handler, HandlerError, ListenerConfig, ListenerHandle,
};
use streamward::model::Fence;
use streamward::store::{
    ChangeEvent, DocumentStore, LeaseScope, LeaseStore, LeaseWatch, MembershipStore, Namespace,
    Store,
};
use tokio::time::Instant;

pub const RESOURCES: usize = 12;
/// The lease, the membership's ttl and the grace: short, so a test takes seconds.
pub const LEASE: Duration = Duration::from_secs(2);

pub trait FleetHarness: Send + Sync + 'static {
    type Store: Store + MembershipStore + DocumentStore;

    /// A store for one process (on a real server, its own client).
    fn process_store(&self) -> impl Future<Output = Self::Store> + Send;

    fn ns(&self, coll: &str) -> Namespace;

    /// How long to wait for what should take a few lease periods.
    fn patience(&self) -> Duration;
}

/// What one handler call saw.
#[derive(Debug, Clone)]
struct Handled {
    resource: String,
    version: i64,
    id: String,
    /// Handled after the crash of the first process.
    after_crash: bool,
}

#[derive(Clone, Default)]
struct Journal {
    handled: Arc<Mutex<Vec<Handled>>>,
    crashed: Arc<std::sync::atomic::AtomicBool>,
}

impl Journal {
    fn entries(&self) -> Vec<Handled> {
        self.handled.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

struct Recorder {
    journal: Journal,
}

impl Handler for Recorder {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        let after_crash = self
            .journal
            .crashed
            .load(std::sync::atomic::Ordering::SeqCst);
        let mut handled = self
            .journal
            .handled
            .lock()
            .map_err(|_| HandlerError::Failed("journal poisoned".into()))?;
        for event in events {
            handled.push(Handled {
                resource: fence.resource.clone(),
                version: fence.version,
                id: event.document_key.get_str("_id").unwrap_or("?").to_string(),
                after_crash,
            });
        }
        Ok(())
    }
}

/// A lease change as the watch saw it: resource, version, holder.
type SeenLease = (String, i64, Option<String>);

fn resource(i: usize) -> String {
    format!("r{i:02}")
}

struct Process {
    fleet: Fleet,
    listeners: Vec<ListenerHandle>,
}

async fn start_process<H: FleetHarness>(h: &H, name: &str, journal: &Journal) -> Process {
    let store = h.process_store().await;
    let fleet = Fleet::start(store.clone(), FleetConfig::new(name).with_ttl(LEASE));
    let listeners = (0..RESOURCES)
        .map(|i| {
            let mut config = ListenerConfig::new(
                resource(i),
                format!("{name}/{}", resource(i)),
                h.ns(&resource(i)),
            );
            config.lease = LEASE;
            config.heartbeat = Duration::from_secs(1);
            config.bootstrap = Bootstrap::Now;
            config.checkpoint_every = None;
            config.retry_backoff = Duration::from_millis(200);
            let handler = Recorder {
                journal: journal.clone(),
            };
            ListenerHandle::spawn_in_fleet(store.clone(), config, handler, &fleet)
        })
        .collect();
    Process { fleet, listeners }
}

/// How many live leases each process holds now (by its listener ids' prefix).
async fn holdings(store: &impl LeaseStore) -> BTreeMap<String, usize> {
    let now = store.server_now().await.expect("server_now");
    let leases = store.list().await.expect("list");
    let mut held = BTreeMap::new();
    for lease in &leases.items {
        if let Some(holder) = lease.live_holder(now) {
            let process = holder.split('/').next().unwrap_or(holder).to_string();
            *held.entry(process).or_insert(0) += 1;
        }
    }
    held
}

/// Polls until `wanted` holds of the holdings; returns how long it took, or panics with
/// the last holdings seen.
async fn wait_for_holdings(
    store: &impl LeaseStore,
    patience: Duration,
    what: &str,
    wanted: impl Fn(&BTreeMap<String, usize>) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let held = holdings(store).await;
        if wanted(&held) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < patience,
            "{what}: not within {patience:?}; holdings now {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn exactly(expected: &[(&str, usize)]) -> impl Fn(&BTreeMap<String, usize>) -> bool {
    let expected = exact(expected);
    move |held| *held == expected
}

/// One process takes all twelve; a second joins and within a few lease periods each
/// holds six, every handover a release after a commit (nothing handled twice) and no
/// lease version held by two listeners; the first crashes and the survivor takes all
/// twelve after expiry.
pub async fn a_second_process_takes_half_and_the_survivor_takes_all<H: FleetHarness>(h: &H) {
    let observer = h.process_store().await;
    let patience = h.patience();
    let journal = Journal::default();

    // Every lease change, in order: (resource, version, holder).
    let mut watch = observer.watch(LeaseScope::All).await.expect("watch leases");
    let seen: Arc<Mutex<Vec<SeenLease>>> = Arc::default();
    let watcher = {
        let seen = seen.clone();
        tokio::spawn(async move {
            loop {
                match watch.changed().await {
                    Ok(change) => {
                        if let Some(lease) = change.lease {
                            if let Ok(mut seen) = seen.lock() {
                                seen.push((lease.resource, lease.version, lease.holder));
                            }
                        }
                    }
                    // A watch that ended saw only part of the changes: the checks
                    // below would pass over a cut-off list.
                    Err(error) => return error.to_string(),
                }
            }
        })
    };

    let a = start_process(h, "a", &journal).await;
    let took_all = wait_for_holdings(
        &observer,
        patience,
        "a alone takes all",
        exactly(&[("a", 12)]),
    )
    .await;
    // Every listener of a has committed its start (a first heartbeat) before writes begin.
    tokio::time::sleep(2 * LEASE).await;

    // Writes to every resource's collection while the fleet changes.
    let written: Arc<Mutex<Vec<String>>> = Arc::default();
    let workload = {
        let store = observer.clone();
        let written = written.clone();
        let namespaces: Vec<Namespace> = (0..RESOURCES).map(|i| h.ns(&resource(i))).collect();
        tokio::spawn(async move {
            for n in 0.. {
                let i = n % RESOURCES;
                let id = format!("{}-{n}", resource(i));
                if store.put(&namespaces[i], doc! { "_id": &id }).await.is_ok() {
                    if let Ok(mut w) = written.lock() {
                        w.push(id);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let b = start_process(h, "b", &journal).await;
    let balanced = wait_for_holdings(
        &observer,
        patience,
        "a and b hold six each",
        exactly(&[("a", 6), ("b", 6)]),
    )
    .await;
    // Quiet for two lease periods: it stays balanced, nothing moves back and forth.
    let versions_before = lease_versions(&observer).await;
    tokio::time::sleep(2 * LEASE).await;
    assert_eq!(
        holdings(&observer).await,
        exact(&[("a", 6), ("b", 6)]),
        "balance held through two quiet lease periods"
    );
    assert_eq!(
        lease_versions(&observer).await,
        versions_before,
        "no lease changed hands while the fleet was balanced"
    );

    // a crashes: no release, no leave. Its leases and its membership expire.
    for listener in a.listeners {
        listener.crash();
    }
    a.fleet.crash();
    journal
        .crashed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let survived = wait_for_holdings(
        &observer,
        patience,
        "b takes all after a's expiry",
        exactly(&[("b", 12)]),
    )
    .await;

    workload.abort();
    let _ = workload.await;
    let written = written.lock().map(|w| w.clone()).unwrap_or_default();
    // Everything written is handled by someone, eventually.
    let deadline = Instant::now() + patience;
    loop {
        let handled: BTreeSet<String> = journal.entries().into_iter().map(|e| e.id).collect();
        let missing: Vec<&String> = written.iter().filter(|w| !handled.contains(*w)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} writes never handled, e.g. {:?}",
            missing.len(),
            written.len(),
            missing.first()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for listener in b.listeners {
        assert!(listener.stop().await.is_some());
    }
    b.fleet.stop().await;
    let gone = observer
        .list_members(streamward::store::MemberScope::All)
        .await
        .expect("members");
    let names: Vec<&str> = gone.items.iter().map(|m| m.process.as_str()).collect();
    assert_eq!(
        names,
        ["a"],
        "b left on its graceful stop; the crashed a did not"
    );
    if watcher.is_finished() {
        let ended = watcher.await;
        panic!(
            "the lease watch ended early, so its checks would see part of the changes: {ended:?}"
        );
    }
    watcher.abort();

    // Each version of each lease had one holder, and versions only grew.
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mut holder_of: BTreeMap<(String, i64), String> = BTreeMap::new();
    let mut last_version: BTreeMap<String, i64> = BTreeMap::new();
    for (resource, version, holder) in &seen {
        let last = last_version.entry(resource.clone()).or_insert(*version);
        assert!(
            *version >= *last,
            "{resource}: version {version} after {last}"
        );
        *last = *version;
        if let Some(holder) = holder {
            let first = holder_of
                .entry((resource.clone(), *version))
                .or_insert_with(|| holder.clone());
            assert_eq!(
                first, holder,
                "{resource} version {version} held by two listeners"
            );
        }
    }
    // Handlers saw each resource's versions only grow, and nothing was handled twice
    // before the crash: every handover released only after its last batch committed.
    let entries = journal.entries();
    let mut handled_version: BTreeMap<&str, i64> = BTreeMap::new();
    let mut first_handling: BTreeMap<&str, &Handled> = BTreeMap::new();
    let mut redelivered_after_crash: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in &entries {
        let last = handled_version
            .entry(&entry.resource)
            .or_insert(entry.version);
        assert!(
            entry.version >= *last,
            "{}: handled under version {} after {}",
            entry.resource,
            entry.version,
            last
        );
        *last = entry.version;
        if let Some(first) = first_handling.get(entry.id.as_str()) {
            assert!(
                !first.after_crash && entry.after_crash,
                "{} handled twice ({:?} then {:?}): a handover released before its commit",
                entry.id,
                first,
                entry
            );
            *redelivered_after_crash.entry(&entry.resource).or_default() += 1;
        } else {
            first_handling.insert(&entry.id, entry);
        }
    }
    // The crash re-delivers at most what a's listener had handled and not committed: one
    // batch of one change (plus the one read ahead) per resource.
    for (resource, n) in &redelivered_after_crash {
        assert!(
            *n <= 2,
            "{resource}: {n} changes re-delivered after the crash"
        );
    }
    let handovers = seen
        .iter()
        .filter(|(_, _, holder)| holder.as_deref().is_some_and(|h| h.starts_with("b/")))
        .map(|(r, v, _)| (r.clone(), *v))
        .collect::<BTreeSet<_>>()
        .len();
    eprintln!(
        "fleet figures: a took all 12 in {took_all:?}; balanced 6/6 {balanced:?} after b started; \
         b held all 12 {survived:?} after a crashed; {} writes handled ({} handlings), \
         {} tenures taken by b, re-delivered after the crash: {redelivered_after_crash:?}",
        written.len(),
        entries.len(),
        handovers,
    );
}

fn exact(expected: &[(&str, usize)]) -> BTreeMap<String, usize> {
    expected.iter().map(|(p, n)| (p.to_string(), *n)).collect()
}

async fn lease_versions(store: &impl LeaseStore) -> BTreeMap<String, (i64, Option<String>)> {
    store
        .list()
        .await
        .expect("list")
        .items
        .into_iter()
        .map(|l| (l.resource, (l.version, l.holder)))
        .collect()
}

/// Three processes settle at four leases each, the two that join at once sharing what
/// the first hands over; one stops gracefully (releases, leaves) and the other two
/// settle at six each without waiting for any expiry.
pub async fn three_processes_settle_at_four_and_a_graceful_leave_at_six<H: FleetHarness>(h: &H) {
    let observer = h.process_store().await;
    let patience = h.patience();
    let journal = Journal::default();
    let a = start_process(h, "a", &journal).await;
    wait_for_holdings(
        &observer,
        patience,
        "a alone takes all",
        exactly(&[("a", 12)]),
    )
    .await;
    let b = start_process(h, "b", &journal).await;
    let c = start_process(h, "c", &journal).await;
    let settled = wait_for_holdings(
        &observer,
        patience,
        "a, b and c hold four each",
        exactly(&[("a", 4), ("b", 4), ("c", 4)]),
    )
    .await;
    let plan = a.fleet.plan().expect("a has planned");
    assert_eq!(
        plan.shares.values().copied().collect::<Vec<_>>(),
        [4, 4, 4],
        "{plan:?}"
    );

    // c stops: its listeners release, its fleet leaves.
    for listener in c.listeners {
        assert!(listener.stop().await.is_some());
    }
    c.fleet.stop().await;
    let left = observer
        .list_members(streamward::store::MemberScope::All)
        .await
        .expect("members");
    assert!(
        left.items.iter().all(|m| m.process != "c"),
        "c left: {:?}",
        left.items
    );
    let resettled = wait_for_holdings(
        &observer,
        // Sooner than a lease period would pass twice if anything waited for expiry.
        patience,
        "a and b hold six each after c left",
        exactly(&[("a", 6), ("b", 6)]),
    )
    .await;
    for process in [a, b] {
        for listener in process.listeners {
            assert!(listener.stop().await.is_some());
        }
        process.fleet.stop().await;
    }
    eprintln!(
        "fleet figures: 4/4/4 {settled:?} after b and c started; 6/6 {resettled:?} after c stopped"
    );
}

/// Two processes, `a` then `b`, balanced at six leases each; for checks of what
/// operators see. Stop them with [`stop_all`].
#[allow(dead_code)]
pub async fn balanced_pair<H: FleetHarness>(h: &H) -> Vec<Running> {
    let observer = h.process_store().await;
    let journal = Journal::default();
    let a = start_process(h, "a", &journal).await;
    wait_for_holdings(
        &observer,
        h.patience(),
        "a takes all",
        exactly(&[("a", 12)]),
    )
    .await;
    let b = start_process(h, "b", &journal).await;
    wait_for_holdings(
        &observer,
        h.patience(),
        "a and b hold six each",
        exactly(&[("a", 6), ("b", 6)]),
    )
    .await;
    vec![Running(a), Running(b)]
}

/// A process started by [`balanced_pair`].
pub struct Running(Process);

/// Stops every listener, then leaves.
#[allow(dead_code)]
pub async fn stop_all(processes: Vec<Running>) {
    for Running(process) in processes {
        for listener in process.listeners {
            assert!(listener.stop().await.is_some());
        }
        process.fleet.stop().await;
    }
}
