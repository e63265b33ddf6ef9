//! The fleet scenario: processes joining, leaving and crashing while a workload writes.
//!
//! Each process is a [`Fleet`] (its own process id, its membership renewed through the
//! fault layer) with one listener per resource, all on the one sandbox through
//! [`FaultyStore`]: every lease, stream, commit, fenced write and membership call can
//! fail, time out or lose its reply, and stepdowns cut everything for a while. The
//! seed decides the number of resources (8–12), the processes there are at the start
//! (1–3) and, step by step, writes of keyed changes, processes joining, leaving
//! gracefully (listeners stop and release, then the fleet leaves) and crashing
//! (listeners and fleet aborted: nothing released, the membership left to expire),
//! handlers paused past their lease, and stepdowns. Then the disturbances stop (faults
//! off, nobody joins or leaves, pauses released) while the workload goes on lightly.
//!
//! Checked from the observations in the [`Trace`] (never from what the engine or the
//! fleet says about itself), besides everything [`Checker`] checks per listener:
//!
//! - **per-key order**: within a tenure each handler sees each key's changes in
//!   increasing order (a stream's own re-delivery, marked by the fault layer, aside);
//!   across handlers a key's change is given to a handler again only when it had
//!   not been committed at the moment the handler was given it (the uncommitted
//!   work of a holder that crashed, failed or lost its lease). A holder paused in
//!   its handler may *return* after a newer holder committed the same change: its
//!   fenced writes landed before the newer holder's or were refused (checked per
//!   write by [`Checker`]) and its commit is refused, which is what the protocol
//!   promises (docs/protocol.md §5.3, timeline T2). A holder that releases its lease without having seen a failure has
//!   committed everything it handled (a handover leaves nothing to redo);
//! - **no lease held twice at one version**: every acquire the store granted, as an
//!   observer saw it, maps (resource, version) to one listener;
//! - **balance**: after two lease periods of quiet (begun once no lease records a
//!   failing change: each failed attempt hands its lease to whoever acquires it next),
//!   every live process holds
//!   `floor(R/N)` or `ceil(R/N)` of the `R` leases with `N` live processes, every lease
//!   is held by a listener of a live process, and through one more lease period no
//!   lease changes hands;
//! - **no change lost**: at the end every change the workload wrote was handled (`Ok`)
//!   by some handler, and every lease's token has reached its namespace's last change.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson};
use chrono::{TimeZone, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use streamward::engine::{
    Fleet, FleetConfig, Handler, HandlerError, ListenerConfig, ListenerHandle,
};
use streamward::model::{ClusterTime, Fence, Partition};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{
    ChangeEvent, DocumentStore, LeaseStore, MemberScope, MembershipStore, Namespace, WriteFence,
    WriteOutcome,
};

use crate::checks::{self, failure_outlived, Checker, Outcome, Violation};
use crate::faults::{now_or_never, Cluster, FaultProfile, FaultyStore};
use crate::observe::{Observed, PauseSwitch, Recorder};
use crate::poison::{Poison, PoisonProfile, Poisoned};
use crate::trace::{opt, times, AcquireDone, Entry, Obs, Resume, TenureDone, Trace, T};

const SECOND: Duration = Duration::from_secs(1);
/// The lease, the membership's ttl and the grace.
pub const LEASE: Duration = Duration::from_secs(10);
pub const FLEET_STEPS: usize = 50;
const MAX_PROCESSES: usize = 5;
/// The longest injected timeout (12 s) and the longest back-off (60 s), and a little.
const DRAIN: Duration = Duration::from_secs(75);
/// The most the quiet waits for poisoned changes written before it to be fixed or
/// stepped over: a lease may hold several, each fixed up to 30 s after its first
/// failure, which its back-off (up to a minute) may delay by as much again.
const FAILURES_DRAIN: Duration = Duration::from_secs(20 * 60);
/// Keys per resource: few, so each key sees many changes.
const KEYS: usize = 6;
const DB: &str = "fleet";
/// The partitioned resource: its leases are `pr#i/P`.
const PARTITIONED: &str = "pr";

/// One lease the processes run a listener for.
#[derive(Debug, Clone)]
struct LeaseSpec {
    /// The lease id: the resource, or `resource#i/P` for a partition.
    lease: String,
    /// The resource, whose namespace the listener watches.
    resource: String,
    partition: Option<Partition>,
}

fn resource_name(i: usize) -> String {
    format!("r{i:02}")
}

fn watched(resource: &str) -> Namespace {
    Namespace::new(DB, resource)
}

fn out(resource: &str) -> Namespace {
    Namespace::new(DB, format!("{resource}_out"))
}

/// The process a listener id (`p3/r05`) belongs to.
fn process_of(listener: &str) -> &str {
    listener.split('/').next().unwrap_or(listener)
}

/// The application's handler: records each key's newest change downstream, fenced by
/// the lease, so a holder that lost its lease is refused there.
struct KeyLog {
    store: FaultyStore,
    out: Namespace,
}

impl Handler for KeyLog {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            let key = event.document_key.get("_id").cloned().unwrap_or(Bson::Null);
            let at = event.cluster_time.map_or(0, |t| t.as_u64() as i64);
            let outcome = self
                .store
                .fenced_upsert(
                    &self.out,
                    &key,
                    &WriteFence::Lease(fence.clone()),
                    doc! { "last": at },
                )
                .await?;
            if outcome == WriteOutcome::Stale {
                return Err(HandlerError::Fenced(format!(
                    "{} v{} refused on {key}",
                    fence.resource, fence.version
                )));
            }
        }
        Ok(())
    }
}

struct Process {
    fleet: Fleet,
    listeners: Vec<(ListenerHandle, Arc<PauseSwitch>)>,
}

pub struct FleetSim {
    pub seed: u64,
    pub rng: SmallRng,
    pub store: SandboxStore,
    pub trace: Trace,
    profile: FaultProfile,
    cluster: Arc<Cluster>,
    sim: Arc<str>,
    app: Recorder,
    /// The resources the workload writes to (their namespaces).
    resources: Vec<String>,
    /// Every lease, a partitioned resource's one per partition.
    leases: Vec<LeaseSpec>,
    processes: BTreeMap<String, Process>,
    started: u64,
    writes: u64,
    checker: Checker,
    fleet_checker: FleetChecker,
    /// A listener found dead when it was stopped.
    died: Option<Violation>,
    poison: Arc<Poison>,
    /// Every listener's `skip_after` (one policy for the whole fleet).
    skip_after: Option<u32>,
}

impl FleetSim {
    pub fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xf1ee_7000);
        let scale = std::env::var("STREAMWARD_SIM_FAULT_SCALE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1.0);
        let profile = FaultProfile::draw(&mut rng, scale);
        let resources = rng.gen_range(6..=9);
        let partitions = rng.gen_range(2..=4);
        // Poison that is never fixed only where the listeners step over it by
        // themselves (no operator here); the rest is fixed well within the drain.
        let skip_after = rng.gen_bool(0.5).then(|| rng.gen_range(2..=4));
        let poison = PoisonProfile::draw(&mut rng, skip_after.is_some(), 30 * SECOND);
        let mut sim = Self::with(seed, rng, profile, resources, partitions);
        sim.poisoned(poison, skip_after);
        sim
    }

    /// A run with this fault profile, this many plain resources and one resource split
    /// into `partitions` (none when 0).
    pub fn with(
        seed: u64,
        rng: SmallRng,
        profile: FaultProfile,
        resources: usize,
        partitions: u32,
    ) -> Self {
        let mut resources: Vec<String> = (0..resources).map(resource_name).collect();
        let mut leases: Vec<LeaseSpec> = resources
            .iter()
            .map(|r| LeaseSpec {
                lease: r.clone(),
                resource: r.clone(),
                partition: None,
            })
            .collect();
        if partitions > 0 {
            resources.push(PARTITIONED.into());
            for partition in Partition::all(partitions).expect("a valid count") {
                leases.push(LeaseSpec {
                    lease: partition.lease_id(PARTITIONED),
                    resource: PARTITIONED.into(),
                    partition: Some(partition),
                });
            }
        }
        let epoch = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        let store = SandboxStore::new(
            SandboxConfig {
                record_history: true,
                ..SandboxConfig::default()
            },
            Clock::virtual_from(epoch),
        );
        let trace = Trace::new();
        let cluster = Cluster::new(trace.clone(), profile.clone());
        Self {
            seed,
            rng,
            app: Recorder::new(store.clone(), trace.clone()),
            store,
            trace,
            profile,
            cluster,
            sim: Arc::from("sim"),
            resources,
            leases,
            processes: BTreeMap::new(),
            started: 0,
            writes: 0,
            checker: Checker::default(),
            fleet_checker: FleetChecker::default(),
            died: None,
            poison: Poison::new(PoisonProfile::none()),
            skip_after: None,
        }
    }

    /// This run's poison, and every listener's `skip_after`, for listeners that join
    /// from now on.
    pub fn poisoned(&mut self, poison: PoisonProfile, skip_after: Option<u32>) {
        self.poison = Poison::new(poison);
        self.skip_after = skip_after;
    }

    fn note(&self, text: String) {
        self.trace.push(&self.sim, Obs::Sim(text));
    }

    pub fn check(&mut self) -> Result<(), Violation> {
        if let Some(died) = self.died.take() {
            return Err(died);
        }
        // The fleet's invariants first: where both would object, theirs is the report.
        self.fleet_checker.check(&self.trace)?;
        self.checker.check(&self.trace)?;
        // The leases as they are now: a failure record goes with the point that passes it.
        for spec in &self.leases {
            if let Some(Ok(Some(lease))) = now_or_never(self.store.get(&spec.lease)) {
                if let Some(message) = failure_outlived(&lease) {
                    return Err(violation(&spec.lease, message));
                }
            }
        }
        Ok(())
    }

    fn actor_seed(&self, n: u64) -> u64 {
        self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (self.started << 16) ^ n
    }

    /// A new process joins: its fleet, then a listener per resource.
    pub fn join(&mut self) {
        self.started += 1;
        let name = format!("p{}", self.started);
        let fleet_store = FaultyStore::new(
            self.store.clone(),
            &self.cluster,
            &format!("{name}/fleet"),
            self.actor_seed(0),
        );
        let mut config = FleetConfig::new(&name).with_ttl(LEASE);
        config.host = "sim".into();
        config.pid = u32::try_from(self.started).unwrap_or(u32::MAX);
        let fleet = Fleet::start(fleet_store, config);
        let batch = self.rng.gen_range(1..=4);
        let read_ahead = self.rng.gen_bool(0.8);
        self.note(format!(
            "join {name}: {} listeners, batch {batch}, read-ahead {read_ahead}",
            self.leases.len()
        ));
        let mut listeners = Vec::new();
        for (i, spec) in self.leases.clone().iter().enumerate() {
            let resource = &spec.resource;
            let id = format!("{name}/{}", spec.lease);
            let mut config = ListenerConfig::new(resource.as_str(), id.clone(), watched(resource));
            if let Some(partition) = spec.partition {
                config = config.partitioned(partition);
            }
            config.lease = LEASE;
            config.max_batch_wait = Duration::from_millis(300);
            config.heartbeat = 2 * SECOND;
            config.batch_size = batch;
            config.retry_backoff = SECOND;
            config.read_ahead = read_ahead;
            config.skip_after = self.skip_after;
            let n = (i as u64 + 1) << 1;
            let engine =
                FaultyStore::new(self.store.clone(), &self.cluster, &id, self.actor_seed(n));
            let handler = FaultyStore::new(
                self.store.clone(),
                &self.cluster,
                &format!("{id}/handler"),
                self.actor_seed(n | 1),
            );
            // The per-listener checks expect every change of the namespace in a hold;
            // a partition's listener sees its keys only, checked by the fleet's checks.
            if spec.partition.is_none() {
                self.checker.register(&id, resource, watched(resource));
            }
            self.fleet_checker
                .register(&id, watched(resource), spec.partition);
            let pause = Arc::new(PauseSwitch::default());
            let actor = engine.actor().clone();
            let inner = Poisoned::new(
                KeyLog {
                    store: handler,
                    out: out(resource),
                },
                &self.poison,
            );
            let handle = ListenerHandle::spawn_in_fleet(
                engine,
                config,
                Observed::new(inner, &self.trace, &actor, &pause),
                &fleet,
            );
            listeners.push((handle, pause));
        }
        self.processes.insert(name, Process { fleet, listeners });
    }

    fn pick_process(&mut self) -> Option<String> {
        if self.processes.is_empty() {
            return None;
        }
        let pick = self.rng.gen_range(0..self.processes.len());
        self.processes.keys().nth(pick).cloned()
    }

    /// Leaves gracefully: each listener stops (releasing its lease), then the fleet.
    async fn leave(&mut self, name: &str) {
        let Some(process) = self.processes.remove(name) else {
            return;
        };
        self.note(format!("leave {name}"));
        for (handle, pause) in process.listeners {
            pause.release();
            let id = handle.snapshot().listener_id;
            if handle.stop().await.is_none() && self.died.is_none() {
                self.died = Some(Violation {
                    resource: None,
                    message: format!(
                        "{id}'s task had died (it panicked) when it was asked to stop"
                    ),
                });
            }
        }
        process.fleet.stop().await;
    }

    /// Crashes: every listener and the fleet aborted; nothing released, nobody leaves.
    fn crash(&mut self, name: &str) {
        let Some(process) = self.processes.remove(name) else {
            return;
        };
        self.note(format!("crash {name}"));
        for (handle, _) in process.listeners {
            handle.crash();
        }
        process.fleet.crash();
    }

    /// The workload: `count` changes, each to a random key of a random resource.
    pub async fn write(&mut self, count: usize) {
        if self.cluster.is_down() {
            return;
        }
        for _ in 0..count {
            let resource = self.resources[self.rng.gen_range(0..self.resources.len())].clone();
            let key = format!("k{}", self.rng.gen_range(0..KEYS));
            self.writes += 1;
            let document = doc! { "_id": &key, "n": self.writes as i64 };
            // The application's writes go straight to the sandbox: they do not fail.
            let _ = self.app.put(&watched(&resource), document).await;
        }
    }

    pub async fn step(&mut self) {
        match self.rng.gen_range(0..100) {
            0..=34 => {
                let count = self.rng.gen_range(1..=6);
                self.write(count).await;
            }
            35..=49 => {
                let secs = self.rng.gen_range(0..15);
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
            50..=64 => {
                if self.processes.len() < MAX_PROCESSES {
                    self.join();
                }
            }
            65..=74 => {
                if self.processes.len() > 1 {
                    if let Some(name) = self.pick_process() {
                        self.leave(&name).await;
                    }
                }
            }
            75..=84 => {
                if self.processes.len() > 1 {
                    if let Some(name) = self.pick_process() {
                        self.crash(&name);
                    }
                }
            }
            85..=91 => self.pause(),
            _ => {
                if self.profile != FaultProfile::none() {
                    let length = Duration::from_millis(self.rng.gen_range(1000..12_000));
                    self.note(format!("stepdown: no primary for {length:?}"));
                    self.cluster.step_down(length);
                }
            }
        }
    }

    /// Pauses the next batch of one listener for up to four lease periods.
    fn pause(&mut self) {
        let Some(name) = self.pick_process() else {
            return;
        };
        let length = Duration::from_secs(self.rng.gen_range(5..40));
        let Some(process) = self.processes.get(&name) else {
            return;
        };
        let i = self.rng.gen_range(0..process.listeners.len());
        let pause = process.listeners[i].1.clone();
        pause.arm();
        self.note(format!(
            "pause the next batch of {name}/{} for {length:?}",
            self.leases[i].lease
        ));
        tokio::spawn(async move {
            tokio::time::sleep(length).await;
            pause.release();
        });
    }

    /// The disturbances stop: faults off, pauses released, at least two processes.
    /// Nobody joins or leaves from here on.
    pub fn quiet(&mut self) {
        while self.processes.len() < 2 {
            self.join();
        }
        self.note(format!(
            "quiet from here: faults off, no joins or leaves, no new poison; live processes {:?}",
            self.processes.keys().collect::<Vec<_>>()
        ));
        self.cluster.set_enabled(false);
        // Every change from this second of the server's clock on (nothing may have
        // been written yet).
        let secs = u32::try_from(self.store.clock().now().timestamp()).unwrap_or(u32::MAX);
        self.poison.clean_from(ClusterTime::new(secs, 0));
        for process in self.processes.values() {
            for (_, pause) in &process.listeners {
                pause.release();
            }
        }
    }

    /// Lets `length` pass, the workload writing a change about every second.
    pub async fn idle(&mut self, length: Duration) -> Result<(), Violation> {
        let end = tokio::time::Instant::now() + length;
        while tokio::time::Instant::now() < end {
            self.write(1).await;
            let gap = Duration::from_millis(self.rng.gen_range(200..1800));
            tokio::time::sleep(gap.min(end - tokio::time::Instant::now())).await;
            self.check()?;
        }
        Ok(())
    }

    /// Poison written before the quiet may still fail in it: its fix counts from its
    /// first failure, which a change behind another poisoned one reaches late, and each
    /// failed attempt hands its lease to whoever acquires it next. The last of the
    /// disturbances: idles until no lease records a failure, at most `limit`.
    pub async fn drain_failures(&mut self, limit: Duration) -> Result<(), Violation> {
        let end = tokio::time::Instant::now() + limit;
        loop {
            let failing: Vec<String> = now_or_never(self.store.list())
                .and_then(|r| r.ok())
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|lease| lease.failure.is_some())
                .map(|lease| lease.resource)
                .collect();
            if failing.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= end {
                return Err(Violation {
                    resource: None,
                    message: format!(
                        "{failing:?} still record a failing change {limit:?} into the quiet, \
                         though every poisoned change is fixed or stepped over by then"
                    ),
                });
            }
            self.idle(LEASE).await?;
        }
    }

    /// Who holds each lease now, as an observer reads it: resource → (holder, version)
    /// for a live holder.
    fn holders(&self) -> BTreeMap<String, (Option<String>, i64)> {
        let now = self.store.clock().now();
        let leases = now_or_never(self.store.list())
            .and_then(|r| r.ok())
            .map(|l| l.items)
            .unwrap_or_default();
        let mut holders: BTreeMap<String, (Option<String>, i64)> = self
            .leases
            .iter()
            .map(|l| (l.lease.clone(), (None, -1)))
            .collect();
        for lease in leases {
            if let Some(entry) = holders.get_mut(&lease.resource) {
                *entry = (lease.live_holder(now).map(str::to_string), lease.version);
            }
        }
        holders
    }

    /// Every live process holds within one lease of its fair share, computed here:
    /// with `R` resources and `N` processes all running every resource, `floor(R/N)`
    /// or `ceil(R/N)`; and every lease has a live holder of a live process.
    pub fn check_balance(&self) -> Result<BTreeMap<String, (Option<String>, i64)>, Violation> {
        let holders = self.holders();
        let r = self.leases.len();
        let n = self.processes.len();
        let (low, high) = (r / n, r.div_ceil(n));
        let mut held: BTreeMap<&str, usize> =
            self.processes.keys().map(|p| (p.as_str(), 0)).collect();
        let mut unheld = Vec::new();
        for (resource, (holder, version)) in &holders {
            match holder.as_deref().map(process_of) {
                Some(process) if held.contains_key(process) => {
                    *held.entry(process).or_default() += 1;
                }
                other => unheld.push(format!("{resource} v{version} ({other:?})")),
            }
        }
        let unfair: Vec<String> = held
            .iter()
            .filter(|(_, h)| **h < low || **h > high)
            .map(|(p, h)| format!("{p} holds {h}"))
            .collect();
        if unheld.is_empty() && unfair.is_empty() {
            self.note(format!("balanced: {held:?} of {r} (fair {low}..={high})"));
            return Ok(holders);
        }
        Err(Violation {
            resource: None,
            message: format!(
                "not balanced after two lease periods of quiet: {r} leases over {n} processes should be {low}..={high} each, \
                 but {}{}{} (holdings {held:?})",
                unfair.join(", "),
                if unfair.is_empty() || unheld.is_empty() { "" } else { "; " },
                if unheld.is_empty() {
                    String::new()
                } else {
                    format!("no live process holds {}", unheld.join(", "))
                },
            ),
        })
    }

    /// Through the quiet, a balanced fleet moves nothing.
    pub fn check_stable(
        &self,
        before: &BTreeMap<String, (Option<String>, i64)>,
    ) -> Result<(), Violation> {
        let now = self.holders();
        let moved: Vec<String> = now
            .iter()
            .filter(|(r, h)| before.get(*r) != Some(h))
            .map(|(r, (holder, v))| {
                let (was, wv) = before.get(r).cloned().unwrap_or((None, -1));
                format!("{r}: {was:?} v{wv} -> {holder:?} v{v}")
            })
            .collect();
        if moved.is_empty() {
            return Ok(());
        }
        Err(Violation {
            resource: None,
            message: format!(
                "a balanced fleet moved leases through a quiet lease period: {}",
                moved.join(", ")
            ),
        })
    }

    /// No change lost: every change written was handled by someone or is kept as
    /// skipped (from the store: the skipped collection and the audit log, judged by
    /// [`checks::nothing_missed`]), and every lease's token has reached its
    /// namespace's last change.
    pub async fn check_nothing_lost(&self) -> Result<(), Violation> {
        let mut skipped = BTreeSet::new();
        for spec in &self.leases {
            let resource = &spec.lease;
            let ns = watched(&spec.resource);
            let kept = checks::kept(&self.store, resource)
                .await
                .map_err(|message| violation(resource, message))?;
            let end = now_or_never(self.store.get(resource))
                .and_then(|r| r.ok())
                .flatten()
                .map_or(Resume::Oldest, |l| Resume::of(&l.resume_point()));
            let handled = |at| self.fleet_checker.handled.contains(&(ns.clone(), at));
            let outcome = Outcome {
                resource,
                changes: self.fleet_checker.changes(&ns, spec.partition),
                end,
                handled: &handled,
                lost_before: None,
                failed: self.fleet_checker.failed.get(&ns),
            };
            checks::nothing_missed(&outcome, &kept)
                .map_err(|message| violation(resource, message))?;
            skipped.extend(kept.iter().filter_map(|k| Some((ns.clone(), k.at()?))));
        }
        let never_handled: Vec<_> = self
            .fleet_checker
            .never_handled()
            .into_iter()
            .filter(|(ns, time, _)| !skipped.contains(&(ns.clone(), *time)))
            .collect();
        if let Some(missing) = never_handled.first() {
            let (ns, time, key) = missing;
            return Err(Violation {
                resource: None,
                message: format!(
                    "change lost: {ns} {key} at {} was never handled by anyone nor kept as skipped ({} of {} changes never handled)",
                    T(*time),
                    never_handled.len(),
                    self.fleet_checker.written()
                ),
            });
        }
        for spec in &self.leases {
            let resource = &spec.lease;
            let lease = now_or_never(self.store.get(resource))
                .and_then(|r| r.ok())
                .flatten();
            let token = lease
                .as_ref()
                .and_then(|l| l.resume_token.as_ref())
                .and_then(|t| t.time());
            let last = self
                .fleet_checker
                .last_change(&watched(&spec.resource), spec.partition);
            if last.is_some_and(|last| token.is_none_or(|t| t < last)) {
                return Err(Violation {
                    resource: Some(resource.clone()),
                    message: format!(
                        "{resource} did not catch up: its token is at {}, the last change at {}",
                        opt(&token),
                        opt(&last)
                    ),
                });
            }
        }
        Ok(())
    }

    pub async fn stop_all(&mut self) -> Result<(), Violation> {
        let names: Vec<String> = self.processes.keys().cloned().collect();
        for name in names {
            self.leave(&name).await;
        }
        self.check()?;
        let left = now_or_never(self.store.list_members(MemberScope::All))
            .and_then(|r| r.ok())
            .map(|l| l.items)
            .unwrap_or_default();
        let now = self.store.clock().now();
        if let Some(member) = left.iter().find(|m| m.is_live(now)) {
            return Err(Violation {
                resource: None,
                message: format!(
                    "{} is still a live member after every process left or crashed long ago",
                    member.process
                ),
            });
        }
        Ok(())
    }

    pub fn dump(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "fleet: {} leases, faults {:?}",
            self.leases.len(),
            self.profile
        )];
        lines.push("-- what every actor observed (time, actor, observation):".into());
        lines.extend(self.trace.render(|_| true));
        lines.push("-- where things stand:".into());
        for (resource, (holder, version)) in self.holders() {
            lines.push(format!(
                "lease {resource}: v{version} live holder {holder:?}"
            ));
        }
        if let Some(Ok(members)) = now_or_never(self.store.list_members(MemberScope::All)) {
            for member in members.items {
                lines.push(format!(
                    "member {} expires {} runs {}",
                    member.process,
                    member.expires_at,
                    member.listeners.len()
                ));
            }
        }
        for (name, process) in &self.processes {
            lines.push(format!(
                "process {name}: plan {:?}, last error {:?}",
                process.fleet.plan().map(|p| p.shares.clone()),
                process.fleet.last_error()
            ));
            for (handle, _) in &process.listeners {
                let s = handle.snapshot();
                lines.push(format!(
                    "  {}: {:?} v{:?} last error {:?}",
                    s.listener_id, s.state, s.version, s.last_error
                ));
            }
        }
        lines
    }
}

/// One run of the fleet scenario.
pub async fn run(sim: &mut FleetSim) -> Result<(), Violation> {
    for _ in 0..sim.rng.gen_range(1..=3) {
        sim.join();
    }
    for _ in 0..FLEET_STEPS {
        sim.step().await;
        let gap = Duration::from_millis(sim.rng.gen_range(0..500));
        tokio::time::sleep(gap).await;
        sim.check()?;
    }
    sim.quiet();
    // A call under way when the faults stopped may still time out, and a listener
    // whose calls failed waits out its back-off (up to a minute, docs/protocol.md §6)
    // before it can take a lease again: the last effects of the disturbances.
    sim.idle(DRAIN).await?;
    sim.drain_failures(FAILURES_DRAIN).await?;
    sim.note(format!(
        "two lease periods of quiet begin ({:?})",
        2 * LEASE
    ));
    sim.idle(2 * LEASE).await?;
    let balanced = sim.check_balance()?;
    sim.idle(LEASE).await?;
    sim.check_stable(&balanced)?;
    // The workload stops; everything written gets handled and committed.
    tokio::time::sleep(3 * LEASE).await;
    sim.check()?;
    sim.check_nothing_lost().await?;
    sim.stop_all().await
}

/// One listener as the fleet checks see it.
struct SeatObs {
    ns: Namespace,
    partition: Option<Partition>,
    /// Non-empty batches its stream handed over and its handler has not been given
    /// yet, with how many of their first changes the stream re-delivered.
    delivered: VecDeque<(Vec<ClusterTime>, usize)>,
    /// The handler call under way: how far its lease had been committed when the
    /// handler was given its batch.
    given: Option<Given>,
    /// After the handler failed on a batch: its changes not handed again alone yet,
    /// each with whether the stream had re-delivered it.
    singles: Option<VecDeque<(ClusterTime, bool)>>,
    tenure: Option<TenureObs>,
}

/// A handler call as it began. The changes count as handed over then: a holder
/// paused inside its handler may return after a newer holder committed the same
/// changes, and that is the protocol working (docs/protocol.md §5.3, timeline T2),
/// not a committed change handed out again.
struct Given {
    events: Vec<ClusterTime>,
    committed: Option<ClusterTime>,
}

/// One tenure of one listener, from the acquire its engine was told succeeded.
struct TenureObs {
    version: i64,
    /// Per key, the newest change this handler was given in this tenure.
    keys: BTreeMap<String, ClusterTime>,
    handled_through: Option<ClusterTime>,
    committed_through: Option<ClusterTime>,
    /// A call of this tenure failed as the engine saw it (a handler error, a commit not
    /// told done): work may be left for the next holder.
    failed: bool,
}

/// The fleet's invariants over the trace (see the module's comment).
#[derive(Default)]
pub struct FleetChecker {
    seen: usize,
    /// Every change the workload made: (namespace, time) → key.
    keys: BTreeMap<(Namespace, ClusterTime), String>,
    seats: BTreeMap<Arc<str>, SeatObs>,
    /// (resource, version) → the listener the store granted it to.
    granted: BTreeMap<(String, i64), Arc<str>>,
    /// Per resource, the newest token a commit that applied wrote.
    committed: BTreeMap<String, ClusterTime>,
    /// Per (namespace, key), the newest change of it any handler was given.
    key_last: BTreeMap<(Namespace, String), ClusterTime>,
    /// Changes some handler returned `Ok` for.
    handled: BTreeSet<(Namespace, ClusterTime)>,
    /// Per namespace, changes a handler failed on when handed alone.
    failed: BTreeMap<Namespace, BTreeSet<ClusterTime>>,
}

/// Whether `key` (a string `_id`) is `partition`'s, by the hash the server uses.
fn holds(partition: Partition, key: &str) -> bool {
    partition.holds_key(&doc! { "_id": key }).unwrap_or(false)
}

fn violation(resource: &str, message: String) -> Violation {
    Violation {
        resource: Some(resource.to_string()),
        message,
    }
}

impl FleetChecker {
    pub fn register(&mut self, id: &str, ns: Namespace, partition: Option<Partition>) {
        self.seats.insert(
            Arc::from(id),
            SeatObs {
                ns,
                partition,
                delivered: VecDeque::new(),
                given: None,
                singles: None,
                tenure: None,
            },
        );
    }

    pub fn check(&mut self, trace: &Trace) -> Result<(), Violation> {
        let from = self.seen;
        trace.read(from, |entries| {
            for entry in entries {
                self.seen += 1;
                self.apply(entry)?;
            }
            Ok(())
        })
    }

    pub fn written(&self) -> usize {
        self.keys.len()
    }

    /// The changes of `ns` (of its keys in `partition`, when one is named), in order.
    pub fn changes(&self, ns: &Namespace, partition: Option<Partition>) -> Vec<ClusterTime> {
        self.keys
            .iter()
            .filter(|((n, _), key)| n == ns && partition.is_none_or(|p| holds(p, key)))
            .map(|((_, t), _)| *t)
            .collect()
    }

    /// The last change of `ns` (of its keys in `partition`, when one is named).
    pub fn last_change(&self, ns: &Namespace, partition: Option<Partition>) -> Option<ClusterTime> {
        self.keys
            .iter()
            .filter(|((n, _), key)| n == ns && partition.is_none_or(|p| holds(p, key)))
            .map(|((_, t), _)| *t)
            .next_back()
    }

    /// The changes written that no handler returned `Ok` for.
    pub fn never_handled(&self) -> Vec<(Namespace, ClusterTime, String)> {
        self.keys
            .iter()
            .filter(|(at, _)| !self.handled.contains(at))
            .map(|((ns, t), key)| (ns.clone(), *t, key.clone()))
            .collect()
    }

    fn apply(&mut self, entry: &Entry) -> Result<(), Violation> {
        let actor = &entry.actor;
        match &entry.obs {
            Obs::Wrote { ns, id, time, .. } => {
                self.keys.insert((ns.clone(), *time), id.clone());
                Ok(())
            }
            Obs::Acquire { resource, call, .. } => {
                if let Some(AcquireDone::Acquired { version, .. }) = &call.done {
                    let first = self
                        .granted
                        .entry((resource.clone(), *version))
                        .or_insert_with(|| actor.clone());
                    if first != actor {
                        return Err(violation(
                            resource,
                            format!(
                                "lease {resource} v{version} held twice: granted to {first}, then to {actor}"
                            ),
                        ));
                    }
                }
                if let (Some(AcquireDone::Acquired { version, .. }), Some(seat)) =
                    (call.told(), self.seats.get_mut(actor))
                {
                    if seat.tenure.as_ref().map(|t| t.version) != Some(*version) {
                        seat.tenure = Some(TenureObs {
                            version: *version,
                            keys: BTreeMap::new(),
                            handled_through: None,
                            committed_through: None,
                            failed: false,
                        });
                    }
                }
                Ok(())
            }
            Obs::Open { call, .. } => {
                if let (Some(Ok(())), Some(seat)) = (call.told(), self.seats.get_mut(actor)) {
                    seat.delivered.clear();
                    seat.singles = None;
                }
                Ok(())
            }
            Obs::Batch {
                events,
                duplicates,
                call,
                ..
            } => {
                if let (Some(Ok(())), Some(seat)) = (call.told(), self.seats.get_mut(actor)) {
                    if !events.is_empty() {
                        seat.delivered.push_back((events.clone(), *duplicates));
                    }
                }
                Ok(())
            }
            Obs::Given {
                resource, events, ..
            } => {
                let committed = self.committed.get(resource).copied();
                if let Some(seat) = self.seats.get_mut(actor) {
                    seat.given = Some(Given {
                        events: events.clone(),
                        committed,
                    });
                }
                Ok(())
            }
            Obs::Handled {
                resource,
                version,
                events,
                result,
            } => self.handled(actor, resource, *version, events, result),
            Obs::Commit {
                resource,
                version,
                token,
                before,
                call,
                ..
            } => {
                let applied = call.done == Some(TenureDone::Done);
                // Nobody rewinds here: a commit only ever moves a lease's point on.
                if let (true, Some(token), Some(Resume::After(was))) =
                    (applied, token, before.as_ref().map(|b| b.resume))
                {
                    if *token < was {
                        return Err(violation(
                            resource,
                            format!(
                                "{actor} v{version} committed {}, behind the lease's point after {}: the next holder would handle committed changes again",
                                T(*token),
                                T(was)
                            ),
                        ));
                    }
                }
                if let (true, Some(token)) = (applied, token) {
                    let newest = self.committed.entry(resource.clone()).or_insert(*token);
                    *newest = (*newest).max(*token);
                }
                if let Some(tenure) = self
                    .seats
                    .get_mut(actor)
                    .and_then(|s| s.tenure.as_mut())
                    .filter(|t| t.version == *version)
                {
                    if applied {
                        tenure.committed_through = tenure.committed_through.max(*token);
                    }
                    if call.told() != Some(&TenureDone::Done) {
                        tenure.failed = true;
                    }
                }
                Ok(())
            }
            Obs::Release {
                resource,
                version,
                call,
                ..
            } => {
                let Some(seat) = self.seats.get_mut(actor) else {
                    return Ok(());
                };
                let Some(tenure) = seat.tenure.take_if(|t| t.version == *version) else {
                    return Ok(());
                };
                let left_behind = tenure
                    .handled_through
                    .is_some_and(|h| tenure.committed_through.is_none_or(|c| c < h));
                if call.done == Some(TenureDone::Done) && !tenure.failed && left_behind {
                    return Err(violation(
                        resource,
                        format!(
                            "{actor} released {resource} v{version} with changes handled and never committed \
                             (handled through {}, committed through {}), though nothing had failed: \
                             its successor handles them again",
                            opt(&tenure.handled_through),
                            opt(&tenure.committed_through)
                        ),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn handled(
        &mut self,
        actor: &Arc<str>,
        resource: &str,
        version: i64,
        events: &[ClusterTime],
        result: &Result<(), String>,
    ) -> Result<(), Violation> {
        let Some(seat) = self.seats.get_mut(actor) else {
            return Ok(());
        };
        // Where the lease's commits stood when this call began; without a record of
        // its beginning, where they stand now (the stricter reading).
        let committed = match seat.given.take() {
            Some(given) if given.events.as_slice() == events => given.committed,
            _ => self.committed.get(resource).copied(),
        };
        let ns = seat.ns.clone();
        let partition = seat.partition;
        // One at a time after a failed batch: the stream re-delivered a change handed
        // again alone if it had in that batch.
        let single = match (seat.singles.as_mut(), events) {
            (Some(singles), [one]) if singles.front().map(|s| s.0) == Some(*one) => {
                singles.pop_front().map(|(_, again)| usize::from(again))
            }
            _ => None,
        };
        let duplicates = match (single, seat.delivered.front()) {
            (Some(duplicates), _) => duplicates,
            (None, Some((batch, duplicates))) if batch.as_slice() == events => {
                let duplicates = *duplicates;
                seat.delivered.pop_front();
                duplicates
            }
            _ => 0,
        };
        let Some(tenure) = seat.tenure.as_mut().filter(|t| t.version == version) else {
            return Err(violation(
                resource,
                format!(
                    "{actor} handled {} under v{version}, a version it was never told it holds",
                    times(events)
                ),
            ));
        };
        if let Err(error) = result {
            tenure.failed = true;
            if error.starts_with("handler failed") {
                match events {
                    [one] => {
                        seat.singles = None;
                        self.failed.entry(ns).or_default().insert(*one);
                    }
                    _ => {
                        let again = |i: usize| i < duplicates;
                        seat.singles = Some(
                            events
                                .iter()
                                .enumerate()
                                .map(|(i, t)| (*t, again(i)))
                                .collect(),
                        );
                    }
                }
            }
            return Ok(());
        }
        if seat.singles.as_ref().is_some_and(VecDeque::is_empty) {
            seat.singles = None;
        }
        for (i, time) in events.iter().enumerate() {
            let Some(key) = self.keys.get(&(ns.clone(), *time)) else {
                return Err(violation(
                    resource,
                    format!(
                        "{actor} handled a change at {} nobody wrote to {ns}",
                        T(*time)
                    ),
                ));
            };
            if let Some(p) = partition.filter(|p| !holds(*p, key)) {
                return Err(violation(
                    resource,
                    format!(
                        "{actor} v{version}, reading partition {}/{}, was given {key}'s change at {}, a key of another partition",
                        p.index(),
                        p.count(),
                        T(*time)
                    ),
                ));
            }
            let again = !self.handled.insert((ns.clone(), *time));
            if i < duplicates {
                // The stream itself delivered this one again (the fault layer says so).
                continue;
            }
            if let Some(previous) = tenure.keys.get(key).filter(|p| **p >= *time) {
                return Err(violation(
                    resource,
                    format!(
                        "{actor} v{version} was given {key}'s change at {} after its change at {}: out of order",
                        T(*time),
                        T(*previous)
                    ),
                ));
            }
            tenure.keys.insert(key.clone(), *time);
            tenure.handled_through = tenure.handled_through.max(Some(*time));
            let last = self
                .key_last
                .entry((ns.clone(), key.clone()))
                .or_insert(*time);
            if again && committed.is_some_and(|c| c >= *time) {
                return Err(violation(
                    resource,
                    format!(
                        "{actor} v{version} was given {key}'s change at {} again, after it had been committed (through {})",
                        T(*time),
                        opt(&committed),
                    ),
                ));
            }
            if !again && *last > *time {
                return Err(violation(
                    resource,
                    format!(
                        "{actor} v{version} handled {key}'s change at {} for the first time after its change at {} had been handled: out of order across handlers",
                        T(*time),
                        T(*last),
                    ),
                ));
            }
            *last = (*last).max(*time);
        }
        Ok(())
    }
}

/// The re-handling rule on hand-made histories: it judges a change by when the
/// handler was given it, so a paused holder's late return passes and a hand-over
/// after a commit does not.
#[cfg(test)]
mod rehandling {
    use super::*;
    use crate::trace::Call;

    const T1: ClusterTime = ClusterTime::new(1_767_225_601, 2);

    fn entry(actor: &str, obs: Obs) -> Entry {
        Entry {
            at: Duration::ZERO,
            actor: Arc::from(actor),
            obs,
        }
    }

    fn acquired(actor: &str, version: i64) -> Entry {
        let call = Call {
            done: Some(AcquireDone::Acquired {
                version,
                resume: Resume::Oldest,
            }),
            fault: None,
        };
        entry(
            actor,
            Obs::Acquire {
                resource: "r".into(),
                before: None,
                call,
            },
        )
    }

    fn batch(actor: &str) -> Entry {
        let call = Call {
            done: Some(Ok(())),
            fault: None,
        };
        entry(
            actor,
            Obs::Batch {
                stream: 1,
                events: vec![T1],
                duplicates: 0,
                token: Some(T1),
                call,
                lost_before: None,
            },
        )
    }

    fn given(actor: &str, version: i64) -> Entry {
        let obs = Obs::Given {
            resource: "r".into(),
            version,
            events: vec![T1],
        };
        entry(actor, obs)
    }

    fn handled(actor: &str, version: i64) -> Entry {
        let obs = Obs::Handled {
            resource: "r".into(),
            version,
            events: vec![T1],
            result: Ok(()),
        };
        entry(actor, obs)
    }

    fn committed(actor: &str, version: i64) -> Entry {
        let call = Call {
            done: Some(TenureDone::Done),
            fault: None,
        };
        entry(
            actor,
            Obs::Commit {
                resource: "r".into(),
                listener: actor.into(),
                version,
                token: Some(T1),
                before: None,
                call,
            },
        )
    }

    /// Holder `a` (v1) is given the change and pauses in its handler; `b` takes v2,
    /// handles and commits it; then `a` is given it (when `a_given_late`) and returns.
    fn run(a_given_late: bool) -> Result<(), Violation> {
        let mut checker = FleetChecker::default();
        for seat in ["a", "b"] {
            checker.register(seat, watched("r"), None);
        }
        let wrote = Obs::Wrote {
            ns: watched("r"),
            id: "k1".into(),
            time: T1,
            document: doc! {},
            transaction: None,
        };
        let mut history = vec![entry("app", wrote), acquired("a", 1), batch("a")];
        if !a_given_late {
            history.push(given("a", 1));
        }
        history.extend([
            acquired("b", 2),
            batch("b"),
            given("b", 2),
            handled("b", 2),
            committed("b", 2),
        ]);
        if a_given_late {
            history.push(given("a", 1));
        }
        history.push(handled("a", 1));
        history.iter().try_for_each(|e| checker.apply(e))
    }

    #[test]
    fn a_paused_holder_returning_after_a_newer_commit_is_the_protocol_working() {
        assert!(run(false).is_ok(), "{:?}", run(false).err());
    }

    #[test]
    fn a_change_given_after_it_was_committed_is_a_violation() {
        let error = run(true).expect_err("given after the commit");
        assert!(
            error.message.contains("after it had been committed"),
            "{}",
            error.message
        );
    }
}
