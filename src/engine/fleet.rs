//! A process's membership of a fleet (docs/protocol.md, "Membership and balancing"):
//! it announces itself and the listeners it runs on the server's clock, reads the
//! members and the leases on a timer, plans (`model::BalancePlan`) and tells its
//! listeners which lease to hand over at their next batch boundary and whether to leave
//! a vacant lease to a member short of its share for a while. Fencing keeps every
//! handover safe; balancing only decides who tries.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use crate::model::{Announcement, BalancePlan, MemberListener};
use crate::store::{LeaseStore, MemberScope, MembershipStore, StoreResult};

/// How a process takes part in a fleet.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Unique per running process: its membership document's `_id`.
    pub process: String,
    pub host: String,
    pub pid: u32,
    /// How long the membership lasts without a renewal (`expiresAt = $$NOW + ttl`).
    pub ttl: Duration,
    /// How often it renews and plans again: well inside the ttl.
    pub renew_every: Duration,
    /// How long a process at or over its share leaves a vacant lease to a member short
    /// of its own before it takes it anyway, so no lease stays orphaned.
    pub grace: Duration,
}

impl FleetConfig {
    /// `process` on this host and pid; membership for 10 s, renewed every third of it,
    /// a vacant lease left to another for one ttl at most.
    pub fn new(process: impl Into<String>) -> Self {
        let ttl = Duration::from_secs(10);
        Self {
            process: process.into(),
            host: host_name(),
            pid: std::process::id(),
            ttl,
            renew_every: ttl,
            grace: ttl,
        }
        .with_ttl(ttl)
    }

    /// The same with a different ttl, the renewal and the grace derived from it.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self.renew_every = ttl / 3;
        self.grace = ttl;
        self
    }
}

/// This machine's name, for operators: `HOSTNAME`, else the kernel's, else "unknown".
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// One registered listener, as the fleet knows it.
#[derive(Debug, Clone)]
struct Seat {
    listener: String,
    /// Able to take its lease: not stuck waiting for an operator. Only available seats
    /// (and holding ones) are announced, so no lease is handed towards a listener that
    /// would not take it.
    available: bool,
    /// Holding its lease now (told by the listener).
    holding: bool,
    /// The last plan asks it to hand its lease over.
    handover: bool,
}

struct Shared {
    config: FleetConfig,
    seats: Mutex<BTreeMap<String, Seat>>,
    /// What the last round left: a plan, or why there is none.
    plan: Mutex<Planned>,
    /// Wakes every listener waiting in `clear_to_acquire` when the plan or a holding
    /// changes. A `Notify` wakes its waiters in the order they came (a `watch` channel
    /// spreads them over several at random, so a run on a paused clock would not
    /// replay).
    changed: Notify,
    /// Asks the task to announce and plan now (a listener registered).
    nudge: Notify,
    shutdown: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
    last_error: Mutex<Option<String>>,
}

/// What the listeners go by.
#[derive(Debug, Clone, Default)]
enum Planned {
    /// Before the first round: a listener waits for it (at most the grace).
    #[default]
    NotYet,
    Plan(Arc<BalancePlan>),
    /// The last round failed (the membership may lapse, others may not count this
    /// process): no plan, so no handovers and no deferring. The listeners behave as
    /// outside any fleet until a round succeeds again.
    Failed,
}

/// A process's handle on its fleet membership; clones share it.
#[derive(Clone)]
pub struct Fleet {
    shared: Arc<Shared>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Fleet {
    /// Joins: starts the task that announces, renews and plans.
    pub fn start<S>(store: S, config: FleetConfig) -> Self
    where
        S: LeaseStore + MembershipStore + Clone + 'static,
    {
        let fleet = Fleet {
            shared: Arc::new(Shared {
                config,
                seats: Mutex::new(BTreeMap::new()),
                plan: Mutex::new(Planned::NotYet),
                changed: Notify::new(),
                nudge: Notify::new(),
                shutdown: CancellationToken::new(),
                task: Mutex::new(None),
                last_error: Mutex::new(None),
            }),
        };
        let task = tokio::spawn(fleet.clone().run(store));
        *lock(&fleet.shared.task) = Some(task);
        fleet
    }

    pub fn config(&self) -> &FleetConfig {
        &self.shared.config
    }

    /// The last plan, once there is one.
    pub fn plan(&self) -> Option<Arc<BalancePlan>> {
        match &*lock(&self.shared.plan) {
            Planned::Plan(plan) => Some(plan.clone()),
            Planned::NotYet | Planned::Failed => None,
        }
    }

    /// The last error of announcing or planning, cleared by the next success.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.shared.last_error).clone()
    }

    /// How many of this process's listeners hold their lease now.
    pub fn holding(&self) -> u32 {
        let held = lock(&self.shared.seats)
            .values()
            .filter(|s| s.holding)
            .count();
        u32::try_from(held).unwrap_or(u32::MAX)
    }

    /// Leaves gracefully: stops renewing and deletes the membership document. Stop the
    /// listeners first (their leases are released by their own stop).
    pub async fn stop(&self) {
        self.shared.shutdown.cancel();
        let task = lock(&self.shared.task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// A crash: stops renewing without leaving; the membership runs until it expires.
    pub fn crash(&self) {
        if let Some(task) = lock(&self.shared.task).take() {
            task.abort();
        }
    }

    /// Registers the listener of `resource` with this process (announced at once).
    pub fn seat(&self, resource: &str, listener: &str) -> FleetSeat {
        lock(&self.shared.seats).insert(
            resource.to_string(),
            Seat {
                listener: listener.to_string(),
                available: true,
                holding: false,
                handover: false,
            },
        );
        self.shared.nudge.notify_one();
        FleetSeat {
            fleet: self.clone(),
            resource: resource.to_string(),
            listener: listener.to_string(),
        }
    }

    fn bump(&self) {
        self.shared.changed.notify_waiters();
    }

    async fn run<S: LeaseStore + MembershipStore>(self, store: S) {
        let config = self.shared.config.clone();
        loop {
            match self.round(&store).await {
                Ok(()) => *lock(&self.shared.last_error) = None,
                Err(error) => {
                    tracing::warn!(process = %config.process, %error, "fleet: announcing or planning failed; its listeners neither hand over nor defer until it succeeds");
                    *lock(&self.shared.last_error) = Some(error.to_string());
                    for seat in lock(&self.shared.seats).values_mut() {
                        seat.handover = false;
                    }
                    *lock(&self.shared.plan) = Planned::Failed;
                    self.bump();
                }
            }
            let next = Instant::now() + config.renew_every;
            tokio::select! {
                biased;
                () = self.shared.shutdown.cancelled() => break,
                () = self.shared.nudge.notified() => {}
                () = sleep_until(next) => {}
            }
        }
        if let Err(error) = store.leave(&config.process).await {
            tracing::warn!(process = %config.process, %error, "fleet: could not leave; the membership runs until it expires");
        }
    }

    /// One renewal and one plan: announce, read the live members, the leases and the
    /// server's clock, plan, and tell the seats.
    async fn round<S: LeaseStore + MembershipStore>(&self, store: &S) -> StoreResult<()> {
        let config = &self.shared.config;
        let listeners: Vec<MemberListener> = lock(&self.shared.seats)
            .iter()
            .filter(|(_, seat)| seat.available || seat.holding)
            .map(|(resource, seat)| MemberListener {
                resource: resource.clone(),
                listener: seat.listener.clone(),
            })
            .collect();
        let announced = store
            .announce(
                &Announcement {
                    process: config.process.clone(),
                    host: config.host.clone(),
                    pid: config.pid,
                    listeners,
                },
                config.ttl,
            )
            .await?;
        let members = store.list_members(MemberScope::Live).await?;
        let leases = store.list().await?;
        // The server's clock at the renewal: a round trip or two before the reads,
        // nothing to a plan made again every third of the ttl, and one call less.
        let now = announced.renewed_at;
        let plan = BalancePlan::of(&members.items, &leases.items, now);
        {
            let mut seats = lock(&self.shared.seats);
            for (resource, seat) in seats.iter_mut() {
                seat.handover = plan
                    .hands_over(resource)
                    .is_some_and(|h| h.from == config.process);
            }
        }
        tracing::debug!(process = %config.process, share = ?plan.share(&config.process), held = plan.held(&config.process), handovers = plan.handovers.len(), "fleet: planned");
        *lock(&self.shared.plan) = Planned::Plan(Arc::new(plan));
        self.bump();
        Ok(())
    }
}

/// What one listener asks of its process's fleet.
#[derive(Clone)]
pub struct FleetSeat {
    fleet: Fleet,
    resource: String,
    listener: String,
}

impl FleetSeat {
    /// Whether the last plan asks this listener to hand its lease over.
    pub fn handover_requested(&self) -> bool {
        lock(&self.fleet.shared.seats)
            .get(&self.resource)
            .is_some_and(|s| s.handover && s.holding)
    }

    /// The listener holds its lease (`true`) or no longer does.
    pub fn set_holding(&self, holding: bool) {
        let changed = {
            let mut seats = lock(&self.fleet.shared.seats);
            match seats.get_mut(&self.resource) {
                Some(seat) if seat.holding != holding => {
                    seat.holding = holding;
                    if !holding {
                        // Asked once per plan: a lease taken back later is not
                        // handed over again on the same plan's word.
                        seat.handover = false;
                    }
                    true
                }
                _ => false,
            }
        };
        if changed {
            self.fleet.bump();
        }
    }

    /// The listener can take its lease (`true`), or is stuck waiting for an operator.
    /// Announced at once.
    pub fn set_available(&self, available: bool) {
        if let Some(seat) = lock(&self.fleet.shared.seats).get_mut(&self.resource) {
            seat.available = available;
        }
        self.fleet.shared.nudge.notify_one();
    }

    /// The listener has exited: it no longer runs here. Announced at once.
    pub fn withdraw(&self) {
        let mut seats = lock(&self.fleet.shared.seats);
        // A listener of the same resource seated since is not this one's to withdraw.
        if seats
            .get(&self.resource)
            .is_some_and(|seat| seat.listener == self.listener)
        {
            seats.remove(&self.resource);
            drop(seats);
            self.fleet.shared.nudge.notify_one();
        }
    }

    /// Whether the listener may try to acquire now, rather than wait for the first plan
    /// or leave the lease to a member short of its share as the plan says.
    pub fn may_acquire_now(&self) -> bool {
        let plan = match &*lock(&self.fleet.shared.plan) {
            Planned::NotYet => return false,
            Planned::Failed => return true,
            Planned::Plan(plan) => plan.clone(),
        };
        !plan.defers(
            &self.fleet.shared.config.process,
            &self.resource,
            self.fleet.holding(),
        )
    }

    /// Waits until the listener may try to acquire: at once unless the plan says to
    /// leave the lease to another, and at most the grace. `false` when shut down.
    pub async fn clear_to_acquire(&self, shutdown: &CancellationToken) -> bool {
        let deadline = Instant::now() + self.fleet.shared.config.grace;
        loop {
            // Registered before the check, so a change between the two is not missed.
            let changed = self.fleet.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.may_acquire_now() {
                return true;
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return false,
                () = sleep_until(deadline) => return true,
                () = changed => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use chrono::TimeZone;

    fn sandbox() -> SandboxStore {
        let epoch = chrono::Utc
            .with_ymd_and_hms(2031, 6, 1, 12, 0, 0)
            .single()
            .unwrap_or_default();
        SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch))
    }

    fn runs(process: &str, resources: &[&str]) -> Announcement {
        Announcement {
            process: process.into(),
            host: "h".into(),
            pid: 1,
            listeners: resources
                .iter()
                .map(|r| MemberListener {
                    resource: (*r).into(),
                    listener: format!("{process}/{r}"),
                })
                .collect(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_process_at_its_share_leaves_a_vacant_lease_to_one_short_of_it_for_the_grace_at_most()
    {
        let store = sandbox();
        // b runs both resources and holds nothing: it is short of its share of one.
        store
            .announce(&runs("b", &["r0", "r1"]), Duration::from_secs(3600))
            .await
            .unwrap();
        let config = FleetConfig::new("a").with_ttl(Duration::from_secs(3));
        let fleet = Fleet::start(store.clone(), config.clone());
        let r0 = fleet.seat("r0", "a/r0");
        let r1 = fleet.seat("r1", "a/r1");
        assert!(!r0.may_acquire_now(), "no plan yet: wait for the first");
        r1.set_holding(true);
        let start = Instant::now();
        let shutdown = CancellationToken::new();
        assert!(r0.clear_to_acquire(&shutdown).await);
        let waited = start.elapsed();
        assert!(fleet.plan().is_some());
        assert!(
            waited >= config.grace && waited < config.grace + Duration::from_millis(50),
            "a with its share (r1) leaves r0 to b for the grace, then takes it: {waited:?}"
        );

        // b leaves: a's share is both, and the next round says so.
        store.leave("b").await.unwrap();
        tokio::time::sleep(config.renew_every + Duration::from_millis(10)).await;
        assert_eq!(fleet.plan().and_then(|p| p.share("a")), Some(2));
        assert!(r0.may_acquire_now());

        // A listener that exits is no longer announced.
        r0.withdraw();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let members = store.list_members(MemberScope::Live).await.unwrap();
        let announced: Vec<&str> = members.items[0]
            .listeners
            .iter()
            .map(|l| l.resource.as_str())
            .collect();
        assert_eq!(announced, ["r1"]);

        fleet.stop().await;
        let left = store.list_members(MemberScope::All).await.unwrap();
        assert!(left.items.is_empty(), "a left on stop: {:?}", left.items);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_ends_the_wait_and_a_handover_is_asked_only_of_a_holder() {
        let store = sandbox();
        store
            .announce(&runs("b", &["r0", "r1"]), Duration::from_secs(3600))
            .await
            .unwrap();
        // a holds both leases.
        for r in ["r0", "r1"] {
            let request = crate::store::AcquireRequest {
                resource: r.into(),
                listener: format!("a/{r}"),
                kind: crate::model::LockKind::Update,
                lease: Duration::from_secs(3600),
                watch: None,
                seen_version: None,
            };
            store.acquire(&request).await.unwrap();
        }
        let fleet = Fleet::start(store.clone(), FleetConfig::new("a"));
        let r0 = fleet.seat("r0", "a/r0");
        let r1 = fleet.seat("r1", "a/r1");
        r0.set_holding(true);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let plan = fleet.plan().expect("planned");
        assert_eq!(plan.handovers.len(), 1, "{plan:?}");
        let handed = plan.handovers.keys().next().cloned().unwrap_or_default();
        // Acquired at the same server time: the smaller resource goes first.
        assert_eq!(handed, "r0");
        // Only a seat that holds its lease is asked: r1's listener has not said it holds.
        assert!(r0.handover_requested());
        assert!(!r1.handover_requested());
        // Once it has released, it is not asked again on the same plan's word.
        r0.set_holding(false);
        r0.set_holding(true);
        assert!(!r0.handover_requested());

        r0.set_holding(false);
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        // a holds two of a share of one in the plan's eyes and b is short: it would
        // wait, but it is shut down.
        r1.set_holding(true);
        assert!(!r0.clear_to_acquire(&shutdown).await);
        fleet.crash();
        let stayed = store.list_members(MemberScope::All).await.unwrap();
        assert_eq!(stayed.items.len(), 2, "a crash does not leave");
    }
}
