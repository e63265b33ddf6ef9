//! A seeded, randomized simulation of the lease protocol on the virtual clock.
//!
//! Several listeners per resource run against the sandbox while the workload
//! writes and the simulation pauses listeners past their lease, crashes and
//! restarts them, and performs operator takeovers, rewinds and rebuilds. After
//! every step the recorded history is checked against the protocol's invariants;
//! after quiescence the aggregates must equal a recomputation.
//!
//! `STREAMWARD_SIM_SEEDS=N` sets how many seeds run (default 24);
//! `STREAMWARD_SIM_SEED=S` replays one seed alone.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use streamward::demo::orders::{orders_ns, outbox_ns, OrderOutbox, ORDERS_RESOURCE};
use streamward::demo::pets::{
    self, animals_ns, expected_counts, read_animals, stored_counts, PetAggregates, PET_RESOURCE,
};
use streamward::demo::workload::{Workload, WorkloadConfig};
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerState};
use streamward::model::{ClusterTime, Fence, Lease, LockKind};
use streamward::ops::apply_audited;
use streamward::ops::OperatorOutcome;
use streamward::store::sandbox::{Clock, HistoryEntry, SandboxConfig, SandboxStore, StartMark};
use streamward::store::{
    AuditContext, ChangeEvent, ChangeFeed, DocumentStore, LeaseStore, Namespace, OperatorChange,
    ResumeChange,
};
use tokio::sync::Notify;

const SECOND: Duration = Duration::from_secs(1);
const LISTENERS_PER_RESOURCE: usize = 3;
const STEPS: usize = 40;
/// At most this many rounds of recovery at quiescence.
const QUIESCENCE_ROUNDS: usize = 6;

/// Pauses a listener inside its handler, like a long GC pause or a frozen VM.
#[derive(Default)]
struct PauseSwitch {
    armed: Mutex<bool>,
    resume: Notify,
}

/// Wraps an application handler: honours pauses and notes every handled change in
/// the store's history, so the checker sees it ordered with commits.
struct Recorded<H> {
    inner: H,
    store: SandboxStore,
    listener: String,
    pause: Arc<PauseSwitch>,
}

impl<H> Recorded<H> {
    fn new(inner: H, store: &SandboxStore, listener: String, pause: &Arc<PauseSwitch>) -> Self {
        Self {
            inner,
            store: store.clone(),
            listener,
            pause: pause.clone(),
        }
    }
}

impl<H: Handler> Handler for Recorded<H> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        let pause_now =
            std::mem::take(&mut *self.pause.armed.lock().unwrap_or_else(|p| p.into_inner()));
        if pause_now {
            self.pause.resume.notified().await;
        }
        self.inner.handle(events, fence).await?;
        for event in events {
            self.store.record(HistoryEntry::Handled {
                resource: fence.resource.clone(),
                listener: self.listener.clone(),
                version: fence.version,
                time: event.cluster_time,
            });
        }
        Ok(())
    }
}

struct Running {
    handle: ListenerHandle,
    pause: Arc<PauseSwitch>,
}

struct Sim {
    store: SandboxStore,
    rng: SmallRng,
    workload: Workload<SandboxStore>,
    listeners: BTreeMap<(String, usize), Running>,
    incarnations: usize,
    checker: Checker,
    history_was_lost: bool,
    /// Resources whose history fell off at some point, observed by the simulation.
    lost: std::collections::BTreeSet<String>,
}

/// Fences out the holder and moves the resume point: to `at`, or (`None`) the oldest entry.
fn restart_from(
    resource: &str,
    version: i64,
    at: Option<ClusterTime>,
    note: String,
) -> OperatorChange {
    OperatorChange {
        resource: resource.into(),
        expected_version: version,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Set { token: None, at },
        note,
    }
}

fn watched(resource: &str) -> Namespace {
    if resource == PET_RESOURCE {
        animals_ns()
    } else {
        orders_ns()
    }
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        // Mostly roomy logs; sometimes small enough that history is lost for real.
        let capacity = if rng.gen_bool(0.2) {
            rng.gen_range(30..120)
        } else {
            100_000
        };
        Self::with(rng, seed, capacity)
    }

    fn with(rng: SmallRng, seed: u64, capacity: usize) -> Self {
        let epoch = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        let store = SandboxStore::new(
            SandboxConfig {
                log_capacity: capacity,
                oplog_readable: true,
                record_history: true,
            },
            Clock::virtual_from(epoch),
        );
        let workload = Workload::new(
            store.clone(),
            WorkloadConfig {
                seed,
                max_animals: 25,
                ..WorkloadConfig::default()
            },
        );
        Self {
            store,
            rng,
            workload,
            listeners: BTreeMap::new(),
            incarnations: 0,
            checker: Checker::default(),
            history_was_lost: false,
            lost: std::collections::BTreeSet::new(),
        }
    }

    fn start(&mut self, resource: &str, slot: usize) {
        self.incarnations += 1;
        let listener = format!("{resource}-{slot}#{}", self.incarnations);
        let mut config = ListenerConfig::new(resource, listener.clone(), watched(resource));
        config.lease = 10 * SECOND;
        config.max_batch_wait = 300 * Duration::from_millis(1);
        config.heartbeat = 2 * SECOND;
        config.batch_size = self.rng.gen_range(1..=4);
        config.retry_backoff = SECOND;
        if self.rng.gen_bool(0.3) {
            config.max_tenure = Some(Duration::from_secs(self.rng.gen_range(15..60)));
        }
        let pause = Arc::new(PauseSwitch::default());
        let store = self.store.clone();
        let handle = if resource == PET_RESOURCE {
            let inner = PetAggregates::new(store.clone());
            ListenerHandle::spawn(
                store.clone(),
                config,
                Recorded::new(inner, &store, listener, &pause),
            )
        } else {
            let inner = OrderOutbox::new(store.clone());
            ListenerHandle::spawn(
                store.clone(),
                config,
                Recorded::new(inner, &store, listener, &pause),
            )
        };
        self.listeners
            .insert((resource.to_string(), slot), Running { handle, pause });
    }

    fn pick_listener(&mut self) -> (String, usize) {
        let resource = if self.rng.gen_bool(0.5) {
            PET_RESOURCE
        } else {
            ORDERS_RESOURCE
        };
        (
            resource.to_string(),
            self.rng.gen_range(0..LISTENERS_PER_RESOURCE),
        )
    }

    async fn current(&self, resource: &str) -> Option<Lease> {
        self.store.get(resource).await.expect("sandbox get")
    }

    async fn operator(
        &mut self,
        change: OperatorChange,
        action: &str,
    ) -> Option<(Lease, ClusterTime)> {
        let ctx = AuditContext {
            operator: "sim@test".into(),
            action: action.into(),
            reason: Some("simulation".into()),
        };
        match apply_audited(&self.store, &change, &ctx)
            .await
            .expect("sandbox operator update")
        {
            OperatorOutcome::Applied {
                after,
                operation_time,
                ..
            } => Some((after, operation_time)),
            OperatorOutcome::Changed { .. } => None,
        }
    }

    async fn step(&mut self) {
        match self.rng.gen_range(0..100) {
            0..=34 => {
                for _ in 0..self.rng.gen_range(1..=6) {
                    self.workload.step().await.expect("workload write");
                }
            }
            35..=54 => {
                let secs = self.rng.gen_range(0..15);
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
            55..=64 => {
                let key = self.pick_listener();
                if let Some(running) = self.listeners.get(&key) {
                    *running
                        .pause
                        .armed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = true;
                    let pause = running.pause.clone();
                    let length = Duration::from_secs(self.rng.gen_range(5..40));
                    tokio::spawn(async move {
                        tokio::time::sleep(length).await;
                        pause.resume.notify_one();
                    });
                }
            }
            65..=72 => {
                let key = self.pick_listener();
                if let Some(running) = self.listeners.remove(&key) {
                    if self.rng.gen_bool(0.5) {
                        running.handle.crash();
                    } else {
                        running.pause.resume.notify_one();
                        running.handle.stop().await;
                    }
                }
                self.start(&key.0, key.1);
            }
            73..=80 => self.takeover().await,
            81..=88 => self.rewind().await,
            89..=95 => {
                let complete = self.rng.gen_bool(0.8);
                self.rebuild(complete).await;
            }
            _ => self.restart_ended(),
        }
    }

    /// Restarts listeners that ended (refused) as new incarnations; a listener whose
    /// history was lost waits for the operator and goes on by itself.
    fn restart_ended(&mut self) {
        let ended: Vec<(String, usize)> = self
            .listeners
            .iter()
            .filter(|(_, r)| r.handle.snapshot().state.is_final())
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            self.listeners.remove(&key);
            self.start(&key.0, key.1);
        }
    }

    fn pick_resource(&mut self) -> &'static str {
        if self.rng.gen_bool(0.5) {
            PET_RESOURCE
        } else {
            ORDERS_RESOURCE
        }
    }

    /// The lease of a resource an operator may act on now (not under a bulk lease).
    async fn actionable(&self, resource: &str) -> Option<Lease> {
        self.current(resource)
            .await
            .filter(|l| l.kind != LockKind::Bulk)
    }

    async fn takeover(&mut self) {
        let resource = self.pick_resource();
        let Some(lease) = self.actionable(resource).await else {
            return;
        };
        let (holder, expires_in) = match self.rng.gen_range(0..3) {
            0 => (None, Duration::ZERO),
            1 => {
                let slot = self.rng.gen_range(0..LISTENERS_PER_RESOURCE);
                let to = self
                    .listeners
                    .get(&(resource.to_string(), slot))
                    .map(|r| r.handle.snapshot().listener_id);
                (to, 10 * SECOND)
            }
            _ => (
                Some("sim-operator".to_string()),
                Duration::from_secs(self.rng.gen_range(1..20)),
            ),
        };
        let change = OperatorChange {
            resource: resource.into(),
            expected_version: lease.version,
            holder,
            expires_in,
            kind: LockKind::Update,
            resume: ResumeChange::Keep,
            note: "takeover".into(),
        };
        self.operator(change, "takeover").await;
    }

    async fn rewind(&mut self) {
        let resource = self.pick_resource();
        let Some(lease) = self.actionable(resource).await else {
            return;
        };
        // A rewind goes back: somewhere between the oldest entry and the current resume point.
        let window = self.store.oplog_window().await.expect("window");
        if lease
            .resume_point()
            .time()
            .is_some_and(|t| t < window.first)
        {
            // Already LOST: a "rewind" can only skip what fell off; the recovery at
            // quiescence must rebuild what it cannot replay.
            self.lost.insert(resource.to_string());
        }
        let until = lease
            .resume_point()
            .time()
            .unwrap_or(window.first)
            .max(window.first);
        let span = until.as_u64() - window.first.as_u64();
        let to = ClusterTime::from_u64(window.first.as_u64() + self.rng.gen_range(0..=span));
        let change = restart_from(resource, lease.version, Some(to), format!("rewind to {to}"));
        self.operator(change, "rewind").await;
    }

    /// The rebuild of DESIGN §5, or (when `complete` is false) one that fails
    /// midway and is later given back with abort-bulk.
    async fn rebuild(&mut self, complete: bool) {
        let Some(lease) = self.current(PET_RESOURCE).await else {
            return;
        };
        if lease.kind == LockKind::Bulk {
            return;
        }
        let take = OperatorChange {
            resource: PET_RESOURCE.into(),
            expected_version: lease.version,
            holder: Some("sim-rebuild".into()),
            expires_in: 30 * SECOND,
            kind: LockKind::Bulk,
            resume: ResumeChange::Keep,
            note: "rebuild".into(),
        };
        let Some((bulk, t0)) = self.operator(take, "rebuild").await else {
            return;
        };
        // Writers keep writing while the rebuild reads.
        for _ in 0..self.rng.gen_range(0..4) {
            self.workload.step().await.expect("workload write");
        }
        tokio::time::sleep(Duration::from_secs(self.rng.gen_range(0..40))).await;
        let resume = if complete {
            pets::rebuild(&self.store).await.expect("rebuild");
            ResumeChange::Set {
                token: None,
                at: Some(t0),
            }
        } else {
            ResumeChange::Keep
        };
        let give_back = OperatorChange {
            resource: PET_RESOURCE.into(),
            expected_version: bulk.version,
            holder: None,
            expires_in: Duration::ZERO,
            kind: LockKind::Update,
            resume,
            note: if complete { "rebuilt" } else { "abort-bulk" }.into(),
        };
        let action = if complete { "rebuild" } else { "abort-bulk" };
        assert!(
            self.operator(give_back, action).await.is_some(),
            "nobody else touches a bulk lease"
        );
    }

    /// Stops the disturbances and lets every listener catch up. Every resource gets
    /// a listener first; then, round by round, whatever stopped and waits for an
    /// operator (history lost, also while catching up here) is recovered the way an
    /// operator would, until every lease has caught up.
    async fn quiesce(&mut self) {
        for running in self.listeners.values() {
            running.pause.resume.notify_one();
        }
        tokio::time::sleep(30 * SECOND).await;
        for running in self.listeners.values() {
            running.pause.resume.notify_one();
        }
        self.restart_ended();
        for resource in [PET_RESOURCE, ORDERS_RESOURCE] {
            if !(0..LISTENERS_PER_RESOURCE)
                .any(|slot| self.listeners.contains_key(&(resource.to_string(), slot)))
            {
                self.start(resource, 0);
            }
        }
        for _round in 0..QUIESCENCE_ROUNDS {
            tokio::time::sleep(60 * SECOND).await;
            let recovered = self.recover_stopped().await;
            if !recovered && self.caught_up().await {
                break;
            }
        }
        tokio::time::sleep(60 * SECOND).await;
    }

    /// Recovers each resource whose history was lost; whether any was.
    async fn recover_stopped(&mut self) -> bool {
        let mut recovered = false;
        let window = self.store.oplog_window().await.expect("window");
        for resource in [PET_RESOURCE, ORDERS_RESOURCE] {
            let Some(lease) = self.current(resource).await else {
                continue;
            };
            let lost = lease
                .resume_point()
                .time()
                .is_some_and(|t| t < window.first);
            let stopped = self.listeners.iter().any(|((r, _), run)| {
                r == resource && run.handle.snapshot().state == ListenerState::HistoryLost
            });
            if lost || stopped || self.lost.remove(resource) {
                recovered = true;
                self.history_was_lost = true;
                if resource == PET_RESOURCE {
                    self.rebuild(true).await;
                } else {
                    let reset =
                        restart_from(resource, lease.version, None, "reset to oldest".into());
                    self.operator(reset, "reset").await;
                }
            }
        }
        recovered
    }

    /// Whether each lease's token has reached the last change of its namespace.
    async fn caught_up(&self) -> bool {
        for resource in [PET_RESOURCE, ORDERS_RESOURCE] {
            let Some(lease) = self.current(resource).await else {
                return false;
            };
            let token = lease.resume_token.as_ref().and_then(|t| t.time());
            if !token.is_some_and(|t| t >= self.checker.last_change(&watched(resource))) {
                return false;
            }
        }
        true
    }

    async fn check_quiescent(&mut self, seed: u64) {
        let last = self.store.last_time();
        for resource in [PET_RESOURCE, ORDERS_RESOURCE] {
            let lease = self
                .current(resource)
                .await
                .expect("lease exists after quiescence");
            let caught_up = lease.resume_token.as_ref().and_then(|t| t.time());
            assert!(
                caught_up.is_some_and(|t| t >= self.checker.last_change(&watched(resource))),
                "seed {seed}: {resource} did not catch up: {lease:?} last change {last}"
            );
        }
        let animals = read_animals(&self.store).await.expect("animals");
        if std::env::var("STREAMWARD_SIM_DUMP").is_ok() {
            for a in &animals {
                eprintln!("animal {a:?}");
            }
            for d in self
                .store
                .find_all(&pets::aggregates_ns())
                .await
                .expect("aggregates")
            {
                eprintln!("tagdoc {d}");
            }
            for h in self.store.history() {
                let text = format!("{h:?}");
                if text.contains("pet-aggregates")
                    || text.contains("animals")
                    || text.contains("Replaced")
                {
                    eprintln!("{text}");
                }
            }
        }
        assert_eq!(
            stored_counts(&self.store).await.expect("aggregates"),
            expected_counts(&animals),
            "seed {seed}: aggregates differ from a recomputation"
        );
        let messages = self.store.find_all(&outbox_ns()).await.expect("outbox");
        // At least once, exactly one message per change: provable only while no history fell off.
        if !self.history_was_lost && !self.store.has_dropped_history() {
            let expected = self.checker.changes.get(&orders_ns()).map_or(0, Vec::len);
            if messages.len() != expected && std::env::var("STREAMWARD_SIM_DUMP").is_ok() {
                for h in self.store.history() {
                    let text = format!("{h:?}");
                    if text.contains("shop") && !text.contains("FencedWrite") {
                        eprintln!("{text}");
                    }
                }
                for m in &messages {
                    eprintln!("message {m}");
                }
            }
            assert_eq!(
                messages.len(),
                expected,
                "seed {seed}: one outbox message per order change"
            );
        }
    }
}

/// Replays the store's history and checks the protocol's invariants.
#[derive(Default)]
struct Checker {
    seen: usize,
    /// Per resource: current holder, current version, highest version seen.
    leases: HashMap<String, (Option<String>, i64)>,
    /// Per tenure (resource, listener, version): where it started and what it handled.
    tenures: HashMap<(String, String, i64), Tenure>,
    changes: HashMap<Namespace, Vec<ClusterTime>>,
    fences: HashMap<(Namespace, String), i64>,
}

struct Tenure {
    start: StartMark,
    handled: Vec<ClusterTime>,
}

impl Checker {
    fn last_change(&self, ns: &Namespace) -> ClusterTime {
        self.changes
            .get(ns)
            .and_then(|c| c.last().copied())
            .unwrap_or_default()
    }

    fn changes_in(
        &self,
        ns: &Namespace,
        after: Option<ClusterTime>,
        from: Option<ClusterTime>,
        to: ClusterTime,
    ) -> Vec<ClusterTime> {
        self.changes
            .get(ns)
            .map(|all| {
                all.iter()
                    .copied()
                    .filter(|t| {
                        after.is_none_or(|a| *t > a) && from.is_none_or(|f| *t >= f) && *t <= to
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn check(&mut self, history: &[HistoryEntry], seed: u64) {
        for entry in &history[self.seen..] {
            self.apply(entry, seed);
        }
        self.seen = history.len();
    }

    fn new_tenure(
        &mut self,
        seed: u64,
        resource: &str,
        holder: Option<&String>,
        version: i64,
        start: StartMark,
    ) {
        let previous = self.leases.get(resource).map_or(-1, |(_, v)| *v);
        assert!(
            version > previous,
            "seed {seed}: {resource} version went from {previous} to {version}"
        );
        self.leases
            .insert(resource.to_string(), (holder.cloned(), version));
        if let Some(holder) = holder {
            self.tenures.insert(
                (resource.to_string(), holder.clone(), version),
                Tenure {
                    start,
                    handled: Vec::new(),
                },
            );
        }
    }

    fn apply(&mut self, entry: &HistoryEntry, seed: u64) {
        match entry {
            HistoryEntry::Acquired {
                resource,
                listener,
                version,
                start,
            } => {
                self.new_tenure(seed, resource, Some(listener), *version, *start);
            }
            HistoryEntry::OperatorChanged {
                resource,
                version,
                holder,
                start,
            } => {
                self.new_tenure(seed, resource, holder.as_ref(), *version, *start);
            }
            HistoryEntry::Released {
                resource,
                listener,
                version,
            } => {
                let current = self.leases.get(resource).cloned();
                assert_eq!(
                    current,
                    Some((Some(listener.clone()), *version)),
                    "seed {seed}: release by a non-holder"
                );
                self.leases.insert(resource.clone(), (None, *version));
            }
            HistoryEntry::Committed {
                resource,
                listener,
                version,
                token_time,
            } => {
                let current = self.leases.get(resource).cloned();
                assert_eq!(
                    current,
                    Some((Some(listener.clone()), *version)),
                    "seed {seed}: commit by {listener} at version {version} while the lease is {current:?}"
                );
                let Some(token_time) = token_time else { return };
                self.check_covered(seed, resource, listener, *version, *token_time);
            }
            HistoryEntry::Invalidated {
                resource,
                listener,
                version,
            } => {
                let current = self.leases.get(resource).cloned();
                assert_eq!(
                    current,
                    Some((Some(listener.clone()), *version)),
                    "seed {seed}: a stream closed under a tenure that is not the holder's"
                );
            }
            HistoryEntry::TenureRefused {
                resource,
                listener,
                version,
            } => {
                let current = self.leases.get(resource).cloned();
                assert_ne!(
                    current,
                    Some((Some(listener.clone()), *version)),
                    "seed {seed}: the holder's own commit or release was refused"
                );
            }
            HistoryEntry::Replaced { ns, fences } => {
                self.fences.retain(|(n, _), _| n != ns);
                for (id, fence) in fences {
                    self.fences.insert((ns.clone(), id.clone()), *fence);
                }
            }
            HistoryEntry::Changed { ns, time } => {
                let times = self.changes.entry(ns.clone()).or_default();
                assert!(
                    times.last().is_none_or(|last| last < time),
                    "seed {seed}: cluster time went backwards"
                );
                times.push(*time);
            }
            HistoryEntry::Handled {
                resource,
                listener,
                version,
                time,
            } => {
                let key = (resource.clone(), listener.clone(), *version);
                let Some(tenure) = self.tenures.get_mut(&key) else {
                    panic!("seed {seed}: {listener} handled a change under version {version} it never held");
                };
                assert!(
                    tenure.handled.last().is_none_or(|last| last < time),
                    "seed {seed}: {listener} handled changes out of order"
                );
                tenure.handled.push(*time);
            }
            HistoryEntry::FencedWrite {
                ns,
                id,
                lease_fence,
                source_version,
                stored,
            } => {
                let key = (ns.clone(), id.clone());
                let previous = self.fences.get(&key).copied();
                assert_eq!(
                    previous, *stored,
                    "seed {seed}: fence of {id} changed outside the history"
                );
                if let Some(fence) = lease_fence {
                    assert!(
                        previous.is_none_or(|p| p <= *fence),
                        "seed {seed}: stale lease fence {fence} applied to {id}"
                    );
                    self.fences.insert(key, *fence);
                } else if let Some(version) = source_version {
                    assert!(
                        previous.is_none_or(|p| p < *version),
                        "seed {seed}: stale source version {version} applied to {id}"
                    );
                    self.fences.insert(key, *version);
                }
            }
        }
    }

    /// A commit at `token_time` covers every change the tenure should have handled, in order.
    fn check_covered(
        &self,
        seed: u64,
        resource: &str,
        listener: &str,
        version: i64,
        token_time: ClusterTime,
    ) {
        let key = (resource.to_string(), listener.to_string(), version);
        let Some(tenure) = self.tenures.get(&key) else {
            panic!("seed {seed}: commit by unknown tenure {key:?}");
        };
        let ns = watched(resource);
        let (after, from) = match tenure.start {
            StartMark::After(t) => (Some(t), None),
            StartMark::At(t) => (None, Some(t)),
            // From the oldest entry: whatever history still held when it opened.
            StartMark::Oldest => match tenure.handled.first() {
                Some(first) => (None, Some(*first)),
                None => return,
            },
        };
        let due = self.changes_in(&ns, after, from, token_time);
        let handled: Vec<ClusterTime> = tenure
            .handled
            .iter()
            .copied()
            .filter(|t| *t <= token_time)
            .collect();
        assert_eq!(
            handled, due,
            "seed {seed}: {listener} v{version} committed {token_time} without handling exactly the changes it covers"
        );
    }
}

fn run_seed(seed: u64) {
    run_seed_history(seed);
}

/// Runs one seed; returns the store's history, rendered.
fn run_seed_history(seed: u64) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mut sim = Sim::new(seed);
        for resource in [PET_RESOURCE, ORDERS_RESOURCE] {
            for slot in 0..LISTENERS_PER_RESOURCE {
                if sim.rng.gen_bool(0.8) {
                    sim.start(resource, slot);
                }
            }
        }
        for _ in 0..STEPS {
            sim.step().await;
            tokio::time::sleep(Duration::from_millis(sim.rng.gen_range(0..500))).await;
            let history = sim.store.history();
            sim.checker.check(&history, seed);
        }
        sim.quiesce().await;
        let history = sim.store.history();
        sim.checker.check(&history, seed);
        sim.check_quiescent(seed).await;
        for (_, running) in std::mem::take(&mut sim.listeners) {
            running.pause.resume.notify_one();
            running.handle.stop().await;
        }
        sim.store
            .history()
            .iter()
            .map(|h| format!("{h:?}"))
            .collect()
    })
}

/// A seed is a replay: two runs of it do exactly the same, step by step, so the
/// `STREAMWARD_SIM_SEED=N` a failure prints reproduces it.
#[test]
fn a_seed_replays_exactly() {
    for seed in 0..4 {
        let first = run_seed_history(seed);
        let second = run_seed_history(seed);
        let diverged = first.iter().zip(&second).position(|(a, b)| a != b);
        assert!(
            first == second,
            "seed {seed} ran differently twice: first difference at history entry {diverged:?} of {} and {}",
            first.len(),
            second.len()
        );
    }
}

/// Seeds 14530, 15115, 16251 and 16284 ended with "pet-aggregates did not catch up"
/// (version 0, released, nobody holding): no pet listener ran until quiescence
/// started one, on a log that had rolled over. Catching up from the oldest entry,
/// its own aggregate writes (six per animal change, into the same log) pushed the
/// entries it had not read yet off the log, and it stopped `history-lost`, waiting
/// for an operator, as the protocol says. Quiescence had already made its one
/// recovery pass, before it started that listener, so nobody came.
#[test]
fn a_listener_that_loses_history_while_catching_up_is_recovered_at_quiescence() {
    let seed = 14530;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let mut sim = Sim::with(SmallRng::seed_from_u64(seed), seed, 40);
        // Only the orders run; the animals are written, and nobody aggregates them yet.
        for slot in 0..LISTENERS_PER_RESOURCE {
            sim.start(ORDERS_RESOURCE, slot);
        }
        for _ in 0..80 {
            sim.workload.step().await.expect("workload write");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(sim.store.has_dropped_history(), "the log rolled over");
        sim.quiesce().await;
        let history = sim.store.history();
        sim.checker.check(&history, seed);
        sim.check_quiescent(seed).await;
        for (_, running) in std::mem::take(&mut sim.listeners) {
            running.handle.stop().await;
        }
    });
}

#[test]
fn randomized_lease_protocol_simulation() {
    if let Ok(one) = std::env::var("STREAMWARD_SIM_SEED") {
        let seed: u64 = one.parse().expect("STREAMWARD_SIM_SEED must be a number");
        run_seed(seed);
        return;
    }
    let seeds: u64 = std::env::var("STREAMWARD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let failures: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                scope.spawn(move || {
                    let mut failed = Vec::new();
                    for seed in (worker..seeds).step_by(threads as usize) {
                        if std::panic::catch_unwind(|| run_seed(seed)).is_err() {
                            eprintln!("simulation failed for seed {seed}: replay with STREAMWARD_SIM_SEED={seed}");
                            failed.push(seed);
                        }
                    }
                    failed
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds failed: {failures:?}",
        failures.len()
    );
    println!("simulation: {seeds} seeds passed");
}
