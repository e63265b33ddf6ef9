//! One run: listeners for `pet-aggregates` and `shop.orders` on a faulty store, a
//! workload, and random disturbances and operator actions; then quiescence.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use streamward::demo::orders::{orders_ns, OrderOutbox, ORDERS_RESOURCE};
use streamward::demo::pets::{animals_ns, PetAggregates, PET_RESOURCE};
use streamward::demo::workload::{Workload, WorkloadConfig};
use streamward::engine::{CommitPolicy, ListenerConfig, ListenerHandle, ListenerState};
use streamward::model::{ClusterTime, Lease, LockKind};
use streamward::ops::{ActionRequest, ResetTarget, RewindTarget, TimeSpec};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{ChangeFeed, LeaseStore, Namespace, ResumeChange, SkippedLog};

use crate::checks::{self, failure_outlived, Checker, Downstream, Outcome, Violation};
use crate::faults::{now_or_never, Cluster, FaultProfile, FaultyStore};
use crate::observe::{Observed, PauseSwitch, Recorder};
use crate::operator::{resume_at, Acted, Operator};
use crate::poison::{Poison, PoisonProfile, Poisoned};
use crate::trace::{opt, Obs, Resume, Trace, T};

const SECOND: Duration = Duration::from_secs(1);
pub const LISTENERS_PER_RESOURCE: usize = 3;
pub const STEPS: usize = 60;
/// At most this many rounds of recovery at quiescence (each poison change that is
/// never fixed may take one, for the skip that gets past it).
const QUIESCENCE_ROUNDS: usize = 16;
/// A failing change an operator skips at quiescence has failed this many times.
const SKIP_AT_QUIESCENCE_AFTER: u32 = 3;
pub const RESOURCES: [&str; 2] = [PET_RESOURCE, ORDERS_RESOURCE];

pub fn watched(resource: &str) -> Namespace {
    if resource == PET_RESOURCE {
        animals_ns()
    } else {
        orders_ns()
    }
}

/// A run's fixed shape, drawn from the seed (or set by a focused test).
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub capacity: usize,
    pub profile: FaultProfile,
    pub poison: PoisonProfile,
}

impl SimConfig {
    pub fn draw(rng: &mut SmallRng) -> Self {
        // Mostly roomy logs; sometimes small enough that history is lost for real.
        let capacity = if rng.gen_bool(0.2) {
            rng.gen_range(30..120)
        } else {
            100_000
        };
        let scale = std::env::var("STREAMWARD_SIM_FAULT_SCALE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1.0);
        let profile = FaultProfile::draw(rng, scale);
        Self {
            capacity,
            profile,
            poison: PoisonProfile::draw(rng, true, Duration::from_secs(90)),
        }
    }
}

pub struct Running {
    pub handle: ListenerHandle,
    pub pause: Arc<PauseSwitch>,
}

pub struct Sim {
    pub seed: u64,
    pub config: SimConfig,
    pub store: SandboxStore,
    pub rng: SmallRng,
    pub trace: Trace,
    cluster: Arc<Cluster>,
    sim: Arc<str>,
    pub workload: Workload<Recorder>,
    pub listeners: BTreeMap<(String, usize), Running>,
    incarnations: u64,
    pub checker: Checker,
    pub operator: Operator,
    poison: Arc<Poison>,
    /// Audit records of skips the operator applied, for undo.
    skip_audits: Vec<String>,
    /// How many changes of the pets were kept as skipped when the aggregate was last
    /// rebuilt at quiescence.
    rebuilt_skips: usize,
    /// The pet aggregate cannot be exact until it is rebuilt (a reset skipped changes).
    pets_need_rebuild: bool,
    /// The animals' skip frontier when the aggregate was last rebuilt at quiescence.
    rebuilt_through: Option<Option<ClusterTime>>,
    orders_resets: usize,
    /// A listener found dead when it was stopped.
    died: Option<Violation>,
}

impl Sim {
    pub fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let config = SimConfig::draw(&mut rng);
        Self::with(seed, rng, config)
    }

    pub fn with(seed: u64, rng: SmallRng, config: SimConfig) -> Self {
        let epoch = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        let store = SandboxStore::new(
            SandboxConfig {
                log_capacity: config.capacity,
                record_history: true,
                ..SandboxConfig::default()
            },
            Clock::virtual_from(epoch),
        );
        let trace = Trace::new();
        let cluster = Cluster::new(trace.clone(), config.profile.clone());
        let workload = Workload::new(
            Recorder::new(store.clone(), trace.clone()),
            WorkloadConfig {
                seed,
                max_animals: 25,
                // Few enough that orders are retired within a run: deletes take part.
                orders_kept: 3,
                ..WorkloadConfig::default()
            },
        );
        let operator = Operator::new(&store, &cluster, seed ^ 0x0b5e_55ed);
        let poison = Poison::new(config.poison);
        Self {
            seed,
            config,
            store,
            rng,
            trace,
            cluster,
            sim: Arc::from("sim"),
            workload,
            listeners: BTreeMap::new(),
            incarnations: 0,
            checker: Checker::default(),
            operator,
            poison,
            skip_audits: Vec::new(),
            rebuilt_skips: 0,
            pets_need_rebuild: false,
            rebuilt_through: None,
            orders_resets: 0,
            died: None,
        }
    }

    fn note(&self, text: String) {
        self.trace.push(&self.sim, Obs::Sim(text));
    }

    /// Checks what was observed since the last check.
    pub fn check(&mut self) -> Result<(), Violation> {
        if let Some(died) = self.died.take() {
            return Err(died);
        }
        self.checker.check(&self.trace)?;
        // The leases as they are now: a failure record goes with the point that passes it.
        for resource in RESOURCES {
            if let Some(Ok(Some(lease))) = now_or_never(self.store.get(resource)) {
                if let Some(message) = failure_outlived(&lease) {
                    return Err(Violation {
                        resource: Some(resource.into()),
                        message,
                    });
                }
            }
        }
        Ok(())
    }

    /// Stops a listener gracefully; a task that had already died (a panic) is a
    /// violation, reported at the next check.
    async fn stop(&mut self, key: &(String, usize), running: Running) {
        running.pause.release();
        let id = running.handle.snapshot().listener_id;
        if running.handle.stop().await.is_none() && self.died.is_none() {
            self.died = Some(Violation {
                resource: Some(key.0.clone()),
                message: format!("{id}'s task had died (it panicked) when it was asked to stop"),
            });
        }
    }

    pub fn start(&mut self, resource: &str, slot: usize) {
        self.incarnations += 1;
        let id = format!("{resource}-{slot}#{}", self.incarnations);
        let mut config = ListenerConfig::new(resource, id.clone(), watched(resource));
        config.lease = 10 * SECOND;
        config.max_batch_wait = Duration::from_millis(300);
        config.heartbeat = 2 * SECOND;
        config.batch_size = self.rng.gen_range(1..=4);
        // Litters are two to four changes: some listeners hand them in parts.
        config.max_transaction_changes = self.rng.gen_range(1..=5);
        config.retry_backoff = SECOND;
        config.read_ahead = self.rng.gen_bool(0.8);
        if self.rng.gen_bool(0.3) {
            config.max_tenure = Some(Duration::from_secs(self.rng.gen_range(15..60)));
        }
        if self.rng.gen_bool(0.35) {
            config.skip_after = Some(self.rng.gen_range(2..=5));
        }
        // Group commits (the default) send at most one commit at a time, in flight
        // while the next batch is handled: sometimes at every batch, sometimes seconds apart.
        if self.rng.gen_bool(0.25) {
            config.commit = CommitPolicy::Strict;
        } else {
            let every = Duration::from_millis(self.rng.gen_range(0..=4000));
            config.commit = CommitPolicy::Group { every };
        }
        let actor_seed = self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (self.incarnations << 8);
        let engine = FaultyStore::new(self.store.clone(), &self.cluster, &id, actor_seed);
        let handler = FaultyStore::new(
            self.store.clone(),
            &self.cluster,
            &format!("{id}/handler"),
            actor_seed ^ 1,
        );
        self.note(format!(
            "start {id}: batch {}, commits {:?}, transaction bound {}, read-ahead {}, max tenure {:?}, skip after {:?}, clock skew {} ms",
            config.batch_size,
            config.commit,
            config.max_transaction_changes,
            config.read_ahead,
            config.max_tenure,
            config.skip_after,
            engine.skew().num_milliseconds()
        ));
        self.checker.register(&id, resource, watched(resource));
        let pause = Arc::new(PauseSwitch::default());
        let actor = engine.actor().clone();
        let handle = if resource == PET_RESOURCE {
            let inner = Poisoned::new(PetAggregates::new(handler), &self.poison);
            ListenerHandle::spawn(
                engine,
                config,
                Observed::new(inner, &self.trace, &actor, &pause),
            )
        } else {
            let inner = Poisoned::new(OrderOutbox::new(handler), &self.poison);
            ListenerHandle::spawn(
                engine,
                config,
                Observed::new(inner, &self.trace, &actor, &pause),
            )
        };
        self.listeners
            .insert((resource.to_string(), slot), Running { handle, pause });
    }

    /// Starts listeners at random slots (each with probability 0.8).
    pub fn start_some(&mut self) {
        for resource in RESOURCES {
            for slot in 0..LISTENERS_PER_RESOURCE {
                if self.rng.gen_bool(0.8) {
                    self.start(resource, slot);
                }
            }
        }
    }

    fn pick_resource(&mut self) -> &'static str {
        RESOURCES[self.rng.gen_range(0..RESOURCES.len())]
    }

    fn pick_listener(&mut self) -> (String, usize) {
        let resource = self.pick_resource();
        (
            resource.to_string(),
            self.rng.gen_range(0..LISTENERS_PER_RESOURCE),
        )
    }

    /// The lease as an observer reads it (no faults).
    async fn lease(&self, resource: &str) -> Option<Lease> {
        self.store.get(resource).await.ok().flatten()
    }

    pub async fn write(&mut self, count: usize) {
        if self.cluster.is_down() {
            // Without a primary the application cannot write either.
            return;
        }
        for _ in 0..count {
            // The application's writes go straight to the sandbox: they do not fail.
            let _ = self.workload.step().await;
        }
    }

    pub async fn step(&mut self) {
        match self.rng.gen_range(0..100) {
            0..=29 => {
                let count = self.rng.gen_range(1..=6);
                self.write(count).await;
            }
            30..=44 => {
                let secs = self.rng.gen_range(0..15);
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
            45..=52 => self.pause(),
            53..=59 => self.restart().await,
            60..=64 => {
                if self.config.profile != FaultProfile::none() {
                    let length = Duration::from_millis(self.rng.gen_range(1000..12_000));
                    self.note(format!("stepdown: no primary for {length:?}"));
                    self.cluster.step_down(length);
                }
            }
            65..=71 => self.takeover().await,
            72..=77 => self.rewind().await,
            78..=80 => self.reset().await,
            81..=85 => {
                let step = Duration::from_millis(self.rng.gen_range(0..3000) * 2 + 1);
                let fail_after = self.rng.gen_bool(0.2).then(|| self.rng.gen_range(0..6));
                if self.operator.start_rebuild(step, fail_after).await {
                    self.note(format!(
                        "rebuild started: a tag every {step:?}, failing after {fail_after:?}"
                    ));
                }
            }
            86..=88 => self.abort_bulk().await,
            89..=92 => self.undo().await,
            93..=96 => self.skip().await,
            _ => self.restart_ended(),
        }
    }

    fn pause(&mut self) {
        let key = self.pick_listener();
        let length = Duration::from_secs(self.rng.gen_range(5..40));
        if let Some(running) = self.listeners.get(&key) {
            running.pause.arm();
            let pause = running.pause.clone();
            self.note(format!("pause the next batch of {key:?} for {length:?}"));
            tokio::spawn(async move {
                tokio::time::sleep(length).await;
                pause.release();
            });
        }
    }

    async fn restart(&mut self) {
        let key = self.pick_listener();
        let crash = self.rng.gen_bool(0.5);
        if let Some(running) = self.listeners.remove(&key) {
            if crash {
                self.note(format!("crash {key:?}"));
                running.handle.crash();
            } else {
                self.note(format!("stop {key:?}"));
                self.stop(&key, running).await;
            }
        }
        self.start(&key.0, key.1);
    }

    /// Restarts listeners that ended (refused) as new incarnations; a listener whose
    /// history was lost waits for the operator and goes on by itself.
    pub fn restart_ended(&mut self) {
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

    fn ensure_listeners(&mut self) {
        for resource in RESOURCES {
            if !(0..LISTENERS_PER_RESOURCE)
                .any(|slot| self.listeners.contains_key(&(resource.to_string(), slot)))
            {
                self.start(resource, 0);
            }
        }
    }

    async fn takeover(&mut self) {
        let resource = self.pick_resource();
        let (to, hold) = match self.rng.gen_range(0..3) {
            0 => (None, None),
            1 => {
                let slot = self.rng.gen_range(0..LISTENERS_PER_RESOURCE);
                let to = self
                    .listeners
                    .get(&(resource.to_string(), slot))
                    .map(|r| r.handle.snapshot().listener_id);
                (to, None)
            }
            _ => (None, Some(Duration::from_secs(self.rng.gen_range(1..20)))),
        };
        self.operator
            .act(ActionRequest::Takeover {
                resource: resource.into(),
                to,
                hold,
            })
            .await;
    }

    /// A rewind between the oldest entry and the current resume point (planning
    /// refuses anything that would skip).
    async fn rewind(&mut self) {
        let resource = self.pick_resource();
        let Some(lease) = self.lease(resource).await else {
            return;
        };
        let Ok(window) = self.store.oplog_window().await else {
            return;
        };
        let to = if self.rng.gen_bool(0.3) {
            RewindTarget::By(Duration::from_secs(self.rng.gen_range(0..30)))
        } else {
            // A change of the namespace still in the log, up to the resume point, or
            // the oldest entry: where an operator would rewind to.
            let until = lease.resume_point().time().unwrap_or(window.last);
            let mut points: Vec<ClusterTime> = self
                .checker
                .changes(&watched(resource))
                .iter()
                .copied()
                .filter(|t| *t >= window.first && *t <= until)
                .collect();
            points.push(window.first);
            let at = points[self.rng.gen_range(0..points.len())];
            RewindTarget::Time(TimeSpec::Cluster(at))
        };
        self.operator
            .act(ActionRequest::Rewind {
                resource: resource.into(),
                to,
            })
            .await;
    }

    async fn reset(&mut self) {
        let resource = self.pick_resource();
        let to = if self.rng.gen_bool(0.35) {
            ResetTarget::Now
        } else {
            ResetTarget::Oldest
        };
        self.reset_to(resource, to).await;
    }

    async fn reset_to(&mut self, resource: &str, to: ResetTarget) -> Acted {
        let request = ActionRequest::Reset {
            resource: resource.into(),
            to,
            accept_skip: to == ResetTarget::Now,
        };
        let plan = match self.operator.plan(&request).await {
            Ok(plan) => plan,
            Err((_, acted)) => return acted,
        };
        let mut skip = None;
        if to == ResetTarget::Now {
            // Skipping on purpose: what comes before the new point may never be
            // handled. Noted before the write, which a listener may act on at once.
            if let Some(Some(at)) = resume_at(&plan) {
                skip = Some((at, self.checker.skipped(&watched(resource), at)));
            }
            if resource == PET_RESOURCE {
                self.pets_need_rebuild = true;
            }
        }
        let acted = self.operator.execute(&plan).await;
        // Not written (refused, changed, failed before the swap): nothing was skipped.
        if let (Some((at, previous)), Acted::Changed | Acted::Refused | Acted::Failed) =
            (skip, &acted)
        {
            self.checker.not_skipped(&watched(resource), at, previous);
        }
        acted
    }

    async fn abort_bulk(&mut self) {
        // A careful operator aborts only a rebuild it knows is not running.
        if self.operator.rebuild_running() {
            return;
        }
        if self
            .lease(PET_RESOURCE)
            .await
            .is_some_and(|l| l.kind == LockKind::Bulk)
        {
            self.operator
                .act(ActionRequest::AbortBulk {
                    resource: PET_RESOURCE.into(),
                })
                .await;
        }
    }

    /// Undoes an earlier action, a skip half the time there is one to undo (the
    /// change skipped is handed again).
    async fn undo(&mut self) {
        let audits = if !self.skip_audits.is_empty() && self.rng.gen_bool(0.5) {
            &self.skip_audits
        } else {
            &self.operator.audits
        };
        if audits.is_empty() {
            return;
        }
        let audit_id = audits[self.rng.gen_range(0..audits.len())].clone();
        self.operator.act(ActionRequest::Undo { audit_id }).await;
    }

    /// Skips the change a lease records as failing, if one does.
    async fn skip(&mut self) {
        for resource in RESOURCES {
            if self
                .lease(resource)
                .await
                .is_some_and(|l| l.failure.is_some())
            {
                self.skip_failing(resource).await;
                return;
            }
        }
    }

    /// `skip` of the change `resource`'s lease records as failing, through the plan
    /// and execution every other action takes. The step over is noted to the checker
    /// before the write (a listener may act on it at once), and taken back when it
    /// was not written.
    async fn skip_failing(&mut self, resource: &str) -> Acted {
        let request = ActionRequest::Skip {
            resource: resource.into(),
            to_token: None,
        };
        let plan = match self.operator.plan(&request).await {
            Ok(plan) => plan,
            Err((_, acted)) => return acted,
        };
        let ns = watched(resource);
        let at = match plan.change.as_ref().map(|c| &c.resume) {
            Some(ResumeChange::Set {
                token: Some(token), ..
            }) => token.time(),
            _ => None,
        };
        if let Some(at) = at {
            self.note(format!("skip the change at {} of {resource}", T(at)));
            self.checker.steps_over(&ns, at);
        }
        let acted = self.operator.execute(&plan).await;
        match (&acted, at) {
            (Acted::Changed | Acted::Refused | Acted::Failed, Some(at)) => {
                self.checker.not_stepped_over(&ns, at);
            }
            (Acted::Applied, _) => {
                if let Some(audit_id) = self.operator.audits.last() {
                    self.skip_audits.push(audit_id.clone());
                }
            }
            _ => {}
        }
        acted
    }

    /// How many changes of `resource` are kept as skipped (an observer's read).
    async fn kept_count(&self, resource: &str) -> usize {
        self.store
            .skipped_changes(resource, usize::MAX)
            .await
            .map_or(0, |k| k.len())
    }

    /// Stops the disturbances and lets every listener catch up. Every resource gets
    /// a listener first; then, round by round, whatever stopped and waits for an
    /// operator (history lost, also while catching up here) is recovered the way an
    /// operator would, until every lease has caught up.
    pub async fn quiesce(&mut self) -> Result<(), Violation> {
        self.note("quiescence: faults off".into());
        self.cluster.set_enabled(false);
        for running in self.listeners.values() {
            running.pause.release();
        }
        self.operator.finish_rebuild().await;
        self.restart_ended();
        self.ensure_listeners();
        for round in 0..QUIESCENCE_ROUNDS {
            tokio::time::sleep(60 * SECOND).await;
            self.check()?;
            let mut settled = true;
            for resource in RESOURCES {
                match self.assess(resource).await {
                    Assessment::CaughtUp => {}
                    Assessment::Behind(why) => {
                        self.note(format!("quiescence round {round}: {resource} {why}"));
                        settled = false;
                    }
                    Assessment::Stuck(why) => {
                        self.note(format!(
                            "quiescence round {round}: {resource} {why}; recover"
                        ));
                        settled = false;
                        self.recover(resource).await;
                    }
                }
            }
            if settled {
                break;
            }
        }
        // Changes that were skipped (on purpose, or lost) never reached the aggregate:
        // only a rebuild makes it exact again.
        let frontier = self.checker.frontier(&animals_ns());
        let kept = self.kept_count(PET_RESOURCE).await;
        if self.pets_need_rebuild
            || (frontier.is_some() && self.rebuilt_through != Some(frontier))
            || kept > self.rebuilt_skips
        {
            self.note(format!(
                "quiescence: rebuild the aggregate (skipped before {}, {kept} changes kept as skipped)",
                opt(&frontier)
            ));
            self.recover(PET_RESOURCE).await;
            tokio::time::sleep(60 * SECOND).await;
        }
        tokio::time::sleep(30 * SECOND).await;
        self.check()
    }

    async fn assess(&self, resource: &str) -> Assessment {
        let stuck = self.listeners.iter().any(|((r, _), run)| {
            r == resource
                && matches!(
                    run.handle.snapshot().state,
                    ListenerState::HistoryLost | ListenerState::Invalidated
                )
        });
        if stuck {
            return Assessment::Stuck("has a listener waiting for an operator".into());
        }
        let Some(lease) = self.lease(resource).await else {
            return Assessment::Behind("has no lease yet".into());
        };
        let now = self.store.clock().now();
        if lease.kind == LockKind::Bulk && lease.live_holder(now).is_none() {
            return Assessment::Stuck("is STUCK BULK".into());
        }
        if let Some(failure) = &lease.failure {
            let why = format!(
                "records the change at {} failing ({} attempts)",
                opt(&failure.at),
                failure.attempts
            );
            return if failure.attempts >= SKIP_AT_QUIESCENCE_AFTER {
                Assessment::Stuck(why)
            } else {
                Assessment::Behind(why)
            };
        }
        if let Ok(window) = self.store.oplog_window().await {
            if lease
                .resume_point()
                .time()
                .is_some_and(|t| t < window.first)
            {
                return Assessment::Stuck("is LOST".into());
            }
        }
        let token = lease.resume_token.as_ref().and_then(|t| t.time());
        let last = self.checker.last_change(&watched(resource));
        let caught_up = match (token, last) {
            (_, None) => lease.resume_token.is_some(),
            (Some(token), Some(last)) => token >= last,
            (None, Some(_)) => false,
        };
        if caught_up {
            Assessment::CaughtUp
        } else {
            Assessment::Behind(format!(
                "is behind: its token is at {}, the last change at {}",
                opt(&token),
                opt(&last)
            ))
        }
    }

    /// What an operator does about a resource that stopped: skip the change its lease
    /// records as failing; else rebuild the aggregate, reset the orders to the oldest
    /// entry, and if that keeps being overrun, to now.
    async fn recover(&mut self, resource: &str) {
        if self
            .lease(resource)
            .await
            .is_some_and(|l| l.failure.is_some() && l.kind != LockKind::Bulk)
            // Refused where more than that change is to move over (history lost past
            // it): then as for any other stop.
            && self.skip_failing(resource).await == Acted::Applied
        {
            return;
        }
        if resource == PET_RESOURCE {
            let frontier = self.checker.frontier(&animals_ns());
            let kept = self.kept_count(PET_RESOURCE).await;
            if self.operator.rebuild_now().await {
                self.pets_need_rebuild = false;
                self.rebuilt_through = Some(frontier);
                self.rebuilt_skips = kept;
            }
            return;
        }
        if self
            .lease(resource)
            .await
            .is_some_and(|l| l.kind == LockKind::Bulk)
        {
            self.operator
                .act(ActionRequest::AbortBulk {
                    resource: resource.into(),
                })
                .await;
            return;
        }
        self.orders_resets += 1;
        let to = if self.orders_resets <= 2 {
            ResetTarget::Oldest
        } else {
            ResetTarget::Now
        };
        self.reset_to(resource, to).await;
    }

    /// After quiescence: every lease caught up with a holder streaming it, and the
    /// documents downstream right.
    pub async fn check_quiescent(&mut self) -> Result<(), Violation> {
        self.check()?;
        for resource in RESOURCES {
            if let Assessment::Behind(why) | Assessment::Stuck(why) = self.assess(resource).await {
                return Err(Violation {
                    resource: Some(resource.into()),
                    message: format!("{resource} did not catch up: it {why}"),
                });
            }
        }
        let mut skipped_orders = BTreeSet::new();
        for resource in RESOURCES {
            let kept = checks::kept(&self.store, resource)
                .await
                .map_err(|message| Violation {
                    resource: Some(resource.into()),
                    message,
                })?;
            let ns = watched(resource);
            let committed = self.checker.committed(&ns);
            let handled = |at| committed.is_some_and(|c| c.contains(&at));
            let end = self
                .lease(resource)
                .await
                .map_or(Resume::Oldest, |l| Resume::of(&l.resume_point()));
            let outcome = Outcome {
                resource,
                changes: self.checker.changes(&ns).to_vec(),
                end,
                handled: &handled,
                lost_before: self.checker.frontier(&ns),
                failed: self.checker.failed(&ns),
            };
            self.note(format!(
                "{resource}: {} changes failed alone, {} kept as skipped ({} by a listener's skip_after)",
                outcome.failed.map_or(0, BTreeSet::len),
                kept.len(),
                kept.iter()
                    .filter(|k| k.skipped.operator != crate::operator::OPERATOR)
                    .count()
            ));
            checks::nothing_missed(&outcome, &kept).map_err(|message| Violation {
                resource: Some(resource.into()),
                message,
            })?;
            if resource == ORDERS_RESOURCE {
                skipped_orders.extend(kept.iter().filter_map(checks::Kept::at));
            }
        }
        let downstream = Downstream {
            store: &self.store,
            checker: &self.checker,
        };
        downstream.aggregates().await.map_err(|message| Violation {
            resource: Some(PET_RESOURCE.into()),
            message,
        })?;
        downstream
            .outbox(&orders_ns(), &skipped_orders)
            .await
            .map_err(|message| Violation {
                resource: Some(ORDERS_RESOURCE.into()),
                message,
            })
    }

    /// Stops every listener gracefully and checks what they did on the way out.
    pub async fn stop_all(&mut self) -> Result<(), Violation> {
        for (key, running) in std::mem::take(&mut self.listeners) {
            self.stop(&key, running).await;
        }
        self.check()
    }

    /// Everything a failing seed prints: the observations (for `resource`, if one is
    /// named), the sandbox's own history of it, and where everything stands.
    pub fn dump(&self, resource: Option<&str>) -> Vec<String> {
        let ns = resource.map(|r| watched(r).to_string());
        let mut lines = vec![format!(
            "config: log capacity {}, faults {:?}, poison {:?}",
            self.config.capacity, self.config.profile, self.config.poison
        )];
        lines.push("-- what every actor observed (time, actor, observation):".into());
        lines.extend(self.trace.render(|entry| {
            let actor: &str = &entry.actor;
            match resource {
                None => true,
                Some(r) => {
                    actor.starts_with(r)
                        || actor == "operator"
                        || actor == "sim"
                        || actor.starts_with("rebuild#")
                        || matches!(&entry.obs, Obs::Wrote { ns: n, .. } if Some(n.to_string()) == ns)
                }
            }
        }));
        lines.push("-- the sandbox's own history of it:".into());
        for entry in self.store.history() {
            let text = format!("{entry:?}");
            let relevant = match (resource, &ns) {
                (Some(r), Some(ns)) => {
                    text.contains(&format!("\"{r}\"")) || text.contains(ns.as_str())
                }
                _ => true,
            };
            if relevant {
                lines.push(text);
            }
        }
        lines.push("-- where things stand:".into());
        for resource in RESOURCES {
            let lease = now_or_never(self.store.get(resource));
            lines.push(format!("lease {resource}: {lease:?}"));
        }
        for (key, running) in &self.listeners {
            lines.push(format!("listener {key:?}: {:?}", running.handle.snapshot()));
        }
        lines
    }
}

enum Assessment {
    CaughtUp,
    Behind(String),
    Stuck(String),
}
