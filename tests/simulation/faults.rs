//! A store that fails the way a MongoDB deployment does, decided by the seed.
//!
//! [`FaultyStore`] implements every store port by delegating to the sandbox, and
//! on the way injects, per call and from its own seeded generator:
//!
//! - **errors**: the call fails before it reaches the server; nothing happens;
//! - **lost replies**: a write is carried out and its reply lost, so the caller sees
//!   a network or write-concern error for a write that applied;
//! - **timeouts**: no reply within the operation timeout (1–12 s of virtual time);
//!   a write may or may not have applied;
//! - **latency**: a request or its reply takes up to a quarter of a second;
//! - **stepdowns** ([`Cluster::step_down`]): for a while every call fails as with no
//!   primary, and open change streams and lease watches are cut;
//! - **duplicate deliveries**: a change stream hands over again changes it already
//!   delivered, in front of the new ones, as a stream resumed from an older point
//!   does;
//! - **clock skew**: each handle reads the server's clock (`server_now`) off by its
//!   own amount. Lease expiry is decided by the server's `$$NOW` alone; the one place
//!   a listener's notion of time meets the server's is the standby turning
//!   `expiresAt` into a local timer from one `server_now` reading (protocol §4, §10),
//!   and that reading is what a skewed member, or a stale reply, gets wrong.
//!
//! Each store call is recorded in the run's [`Trace`] as the caller met it, with the
//! lease or the target document as an observer read it right before (and after) the
//! call: on one thread and with no await in between, those reads are exact.
//!
//! The audit log's writes fail like any write (a reply lost after the write applied
//! included); its reads are delegated plainly.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Bson, Document};
use chrono::{DateTime, TimeDelta, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use streamward::demo::FencedMemberWrites;
use streamward::model::{
    Announcement, AuditRecord, ChangeFailure, ClusterTime, Invalidation, Lease, Member,
    OplogWindow, Partition, ResumeToken,
};
use streamward::store::sandbox::{SandboxLeaseWatch, SandboxStore, SandboxStream};
use streamward::store::{
    AcquireOutcome, AcquireRequest, AuditFinish, AuditIntent, AuditLog, Capabilities, ChangeBatch,
    ChangeEvent, ChangeFeed, ChangeStream, CheckpointStore, DocumentStore, FeedOptions,
    LeaseChange, LeaseScope, LeaseStore, LeaseWatch, Listing, MemberScope, MembershipStore,
    Namespace, OperatorChange, OperatorStore, SkippedLog, StartPoint, StoreError, StoreResult,
    SwapOutcome, Tenure, TenureWrite, WriteFence, WriteOutcome, LEASE_FENCE_FIELD,
    SOURCE_VERSION_FIELD,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::trace::{
    AcquireDone, Call, FaultSeen, FenceKind, LeaseSeen, Obs, Resume, TenureDone, Trace, WriteDone,
};

/// More calls than this by one actor at one instant of the virtual clock is a busy
/// loop (an honest burst, a listener catching up at quiescence, stays far below).
const SPIN_LIMIT: u32 = 20_000;

/// How often each fault happens, per call.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultProfile {
    /// A call fails before reaching the server.
    pub error: f64,
    /// A write applies and its reply is lost.
    pub lost_reply: f64,
    /// No reply within the time limit.
    pub timeout: f64,
    /// A request or reply is slow.
    pub latency: f64,
    /// A non-empty batch re-delivers changes already delivered.
    pub duplicate: f64,
    /// Each handle reads the server's clock off by up to this much, either way.
    pub max_skew: Duration,
}

impl FaultProfile {
    pub fn none() -> Self {
        Self {
            error: 0.0,
            lost_reply: 0.0,
            timeout: 0.0,
            latency: 0.0,
            duplicate: 0.0,
            max_skew: Duration::ZERO,
        }
    }

    /// A profile for one seed: one seed in five runs without faults, the rest with
    /// rates drawn per kind.
    /// `scale` multiplies every rate (`STREAMWARD_SIM_FAULT_SCALE`, 1 by default).
    pub fn draw(rng: &mut SmallRng, scale: f64) -> Self {
        if rng.gen_bool(0.2) {
            return Self::none();
        }
        let mut rate = |high: f64| {
            if rng.gen_bool(0.3) {
                0.0
            } else {
                (rng.gen_range(0.0..high) * scale).min(0.9)
            }
        };
        Self {
            error: rate(0.03),
            lost_reply: rate(0.03),
            timeout: rate(0.005),
            latency: rate(0.3),
            duplicate: rate(0.15),
            // Up to what the protocol tolerates without extra attempts: a live
            // holder refreshes every third of the lease (10 s here), and each
            // refresh moves a standby's timer, so a standby that reads the server's
            // clock up to two thirds of a lease ahead never wakes while the holder
            // is alive; once it is not, it wakes that much early and asks again
            // every minimum gap (lease / 20) until the lease has expired.
            max_skew: Duration::from_millis(rng.gen_range(0..=6000)),
        }
    }
}

/// What every store handle of one run shares: the trace, whether faults are on, and
/// the stepdown window.
pub struct Cluster {
    pub trace: Trace,
    profile: FaultProfile,
    enabled: AtomicBool,
    down_until: Mutex<Option<Instant>>,
    /// Woken when a stepdown begins: cuts open streams and lease watches.
    stepdown: Notify,
    streams: AtomicU64,
}

impl Cluster {
    pub fn new(trace: Trace, profile: FaultProfile) -> Arc<Self> {
        Arc::new(Self {
            trace,
            profile,
            enabled: AtomicBool::new(true),
            down_until: Mutex::new(None),
            stepdown: Notify::new(),
            streams: AtomicU64::new(0),
        })
    }

    /// Turns every fault off (quiescence) or on again.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::SeqCst);
        if !enabled {
            *self.down() = None;
        }
    }

    fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    fn down(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.down_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// No primary for `length`: every call fails, open streams and watches are cut.
    pub fn step_down(&self, length: Duration) {
        if !self.enabled() {
            return;
        }
        *self.down() = Some(Instant::now() + length);
        self.stepdown.notify_waiters();
    }

    pub fn is_down(&self) -> bool {
        self.enabled() && self.down().is_some_and(|until| Instant::now() < until)
    }

    /// Runs `op` unless a stepdown begins first.
    async fn until_stepdown<O>(&self, op: impl std::future::Future<Output = O>) -> Option<O> {
        let cut = self.stepdown.notified();
        tokio::pin!(cut);
        cut.as_mut().enable();
        if self.is_down() {
            return None;
        }
        tokio::select! {
            biased;
            () = cut => None,
            done = op => Some(done),
        }
    }
}

/// What the fault layer does to one call.
enum Decision {
    Pass,
    Fail(StoreError),
    LoseReply(StoreError),
    TimeOut { after: Duration, applies: bool },
}

struct Plan {
    request: Duration,
    decision: Decision,
    reply: Duration,
}

/// Whether a call changes anything (a reply can only be "lost" for those).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
}

/// One actor's handle on the store: a listener's engine, its handler, the operator.
#[derive(Clone)]
pub struct FaultyStore {
    inner: SandboxStore,
    cluster: Arc<Cluster>,
    actor: Arc<str>,
    rng: Arc<Mutex<SmallRng>>,
    /// Calls made at the current instant of the virtual clock.
    busy: Arc<Mutex<(Instant, u32)>>,
    skew: TimeDelta,
    /// Latency and timeouts; off for a rebuild, whose renewals must tick on time.
    timing: bool,
}

impl FaultyStore {
    pub fn new(inner: SandboxStore, cluster: &Arc<Cluster>, actor: &str, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let max = cluster.profile.max_skew.as_millis() as i64;
        let skew = TimeDelta::milliseconds(if max > 0 {
            rng.gen_range(-max..=max)
        } else {
            0
        });
        Self {
            inner,
            cluster: cluster.clone(),
            actor: Arc::from(actor),
            rng: Arc::new(Mutex::new(rng)),
            busy: Arc::new(Mutex::new((Instant::now(), 0))),
            skew,
            timing: true,
        }
    }

    /// Counts a call; `false` once this actor has made more calls at one instant of
    /// the virtual clock than any honest burst does. A task that loops on store
    /// calls without ever waiting would stop the clock, and the run would hang.
    fn not_spinning(&self) -> bool {
        let now = Instant::now();
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        if busy.0 == now {
            busy.1 += 1;
        } else {
            *busy = (now, 1);
        }
        if busy.1 <= SPIN_LIMIT {
            return true;
        }
        if busy.1 == SPIN_LIMIT + 1 {
            let calls = busy.1;
            drop(busy);
            self.record(Obs::Spin { calls });
        }
        false
    }

    /// The same actor without latency or timeouts.
    pub fn untimed(mut self) -> Self {
        self.timing = false;
        self
    }

    pub fn actor(&self) -> &Arc<str> {
        &self.actor
    }

    pub fn skew(&self) -> TimeDelta {
        self.skew
    }

    fn record(&self, obs: Obs) {
        self.cluster.trace.push(&self.actor, obs);
    }

    fn plan(&self, kind: Kind) -> Plan {
        let pass = Plan {
            request: Duration::ZERO,
            decision: Decision::Pass,
            reply: Duration::ZERO,
        };
        if !self.cluster.enabled() {
            return pass;
        }
        let p = &self.cluster.profile;
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        let delay = |rng: &mut SmallRng| {
            if self.timing && rng.gen_bool(p.latency) {
                Duration::from_millis(rng.gen_range(1..=250))
            } else {
                Duration::ZERO
            }
        };
        let request = delay(&mut rng);
        let reply = delay(&mut rng);
        let roll: f64 = rng.gen();
        let decision = if roll < p.error {
            Decision::Fail(if rng.gen_bool(0.5) {
                StoreError::Unreachable("injected: no server reachable in time".into())
            } else {
                StoreError::Command {
                    code: 11600,
                    message: "injected: interrupted at shutdown".into(),
                }
            })
        } else if kind == Kind::Write && roll < p.error + p.lost_reply {
            Decision::LoseReply(if rng.gen_bool(0.5) {
                StoreError::Network(
                    "injected: connection reset after the request was sent (it applied)".into(),
                )
            } else {
                StoreError::WriteConcern(
                    "injected: waiting for replication timed out (applied on the primary)".into(),
                )
            })
        } else if self.timing && roll < p.error + p.lost_reply + p.timeout {
            Decision::TimeOut {
                after: Duration::from_millis(rng.gen_range(1000..=12_000)),
                applies: kind == Kind::Write && rng.gen_bool(0.5),
            }
        } else {
            Decision::Pass
        };
        Plan {
            request,
            decision,
            reply,
        }
    }

    fn stepdown_error() -> StoreError {
        StoreError::Unreachable("injected stepdown: no primary".into())
    }

    /// Runs `op` (the store call itself, with any observer reads around it) under
    /// the faults the seed decides for this call; `op` is told in advance which
    /// fault will replace its reply, if one will. Returns what `op` gave, if it ran,
    /// and the fault that replaced its reply, with the error the caller gets.
    async fn run<O, F: std::future::Future<Output = O>>(
        &self,
        kind: Kind,
        op: impl FnOnce(Option<FaultSeen>) -> F,
    ) -> (Option<O>, Option<(FaultSeen, StoreError)>) {
        if !self.not_spinning() {
            // Fails the call, so the spinning task backs off and the clock moves.
            let error = StoreError::Unreachable("simulation: the caller spins".into());
            return (None, Some((FaultSeen::Failed(error.to_string()), error)));
        }
        if self.cluster.is_down() {
            return (None, Some((FaultSeen::Stepdown, Self::stepdown_error())));
        }
        let plan = self.plan(kind);
        if !plan.request.is_zero() {
            tokio::time::sleep(plan.request).await;
            if self.cluster.is_down() {
                return (None, Some((FaultSeen::Stepdown, Self::stepdown_error())));
            }
        }
        let outcome = match plan.decision {
            Decision::Pass => (Some(op(None).await), None),
            Decision::Fail(error) => (None, Some((FaultSeen::Failed(error.to_string()), error))),
            Decision::LoseReply(error) => {
                let seen = FaultSeen::LostReply(error.to_string());
                (Some(op(Some(seen.clone())).await), Some((seen, error)))
            }
            Decision::TimeOut { after, applies } => {
                let seen = FaultSeen::TimedOut {
                    after,
                    applied: applies,
                };
                let done = if applies {
                    Some(op(Some(seen.clone())).await)
                } else {
                    None
                };
                tokio::time::sleep(after).await;
                let error = StoreError::Network(format!(
                    "injected: no reply within {} ms",
                    after.as_millis()
                ));
                (done, Some((seen, error)))
            }
        };
        if !plan.reply.is_zero() {
            tokio::time::sleep(plan.reply).await;
        }
        outcome
    }

    /// A call that changes something. `op` makes the call and returns what the
    /// store did, for the trace, with its result; `obs` turns that and the fault
    /// into the observation. It is recorded the moment the store acted (a reply
    /// lost or late comes after), or, when the call never reached the store, when
    /// the caller is told.
    async fn effect<X, T, F: std::future::Future<Output = (X, StoreResult<T>)>>(
        &self,
        op: impl FnOnce() -> F,
        obs: impl Fn(Option<X>, Option<FaultSeen>) -> Obs,
    ) -> StoreResult<T> {
        let (done, fault) = self
            .run(Kind::Write, |planned| async {
                let (seen, result) = op().await;
                self.record(obs(Some(seen), planned));
                result
            })
            .await;
        match (done, fault) {
            (None, Some((seen, error))) => {
                self.record(obs(None, Some(seen)));
                Err(error)
            }
            (_, Some((_, error))) => Err(error),
            (Some(result), None) => result,
            (None, None) => Err(StoreError::Closed),
        }
    }

    /// A commit (`write`, not started yet) of `token` by `tenure`, observed as one.
    async fn observed_commit(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        write: impl std::future::Future<Output = StoreResult<TenureWrite>>,
    ) -> StoreResult<TenureWrite> {
        let result = self
            .effect(
                || async {
                    let before = self.lease_seen(&tenure.resource);
                    let result = write.await;
                    ((before, tenure_done(&result)), result)
                },
                |done, fault| {
                    let (before, done) = split(done);
                    let before = before.flatten();
                    Obs::Commit {
                        resource: tenure.resource.clone(),
                        listener: tenure.listener.clone(),
                        version: tenure.version,
                        token: token.time(),
                        before,
                        call: Call { done, fault },
                    }
                },
            )
            .await;
        self.record(Obs::CommitTold {
            resource: tenure.resource.clone(),
            version: tenure.version,
            told: tenure_done(&result),
        });
        result
    }

    /// A call whose only observation is its fault, if any.
    async fn plain<T>(
        &self,
        name: &'static str,
        kind: Kind,
        op: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let (done, fault) = self.run(kind, |_| op).await;
        match (done, fault) {
            (_, Some((seen, error))) => {
                self.record(Obs::Faulted {
                    call: name,
                    fault: seen,
                });
                Err(error)
            }
            (Some(result), None) => result,
            (None, None) => Err(StoreError::Closed),
        }
    }

    /// The lease of `resource` as an observer reads it now.
    fn lease_seen(&self, resource: &str) -> Option<LeaseSeen> {
        let now = self.inner.clock().now();
        peek_lease(&self.inner, resource).map(|l| LeaseSeen::of(&l, now))
    }
}

/// Reads a lease without going through any fault (an observer's read). The sandbox
/// answers at once: its calls never wait.
fn peek_lease(store: &SandboxStore, resource: &str) -> Option<Lease> {
    now_or_never(store.get(resource))
        .and_then(|r| r.ok())
        .flatten()
}

/// Polls a future once; the sandbox's reads complete on their first poll.
pub fn now_or_never<F: std::future::Future>(future: F) -> Option<F::Output> {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

fn fault_of(fault: &Option<(FaultSeen, StoreError)>) -> Option<FaultSeen> {
    fault.as_ref().map(|(seen, _)| seen.clone())
}

fn stored_i64(document: Option<&Document>, field: &str) -> Option<i64> {
    match document.and_then(|d| d.get(field)) {
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        _ => None,
    }
}

fn member_version(document: Option<&Document>, member: &str) -> Option<i64> {
    let members = document.and_then(|d| d.get_document("members").ok())?;
    stored_i64(members.get_document(member).ok(), "v")
}

impl LeaseStore for FaultyStore {
    type Watch = FaultyWatch;

    async fn acquire(&self, request: &AcquireRequest) -> StoreResult<AcquireOutcome> {
        self.effect(
            || async {
                let before = self.lease_seen(&request.resource);
                let result = self.inner.acquire(request).await;
                let done = match &result {
                    Ok(AcquireOutcome::Acquired(lease)) => AcquireDone::Acquired {
                        version: lease.version,
                        resume: Resume::of(&lease.resume_point()),
                    },
                    Ok(AcquireOutcome::HeldByOther) => AcquireDone::HeldByOther,
                    Ok(AcquireOutcome::Vanished { seen_version }) => {
                        AcquireDone::Error(format!("vanished after version {seen_version}"))
                    }
                    Ok(AcquireOutcome::VersionExhausted) => {
                        AcquireDone::Error("version exhausted".into())
                    }
                    Err(e) => AcquireDone::Error(e.to_string()),
                };
                ((before, done), result)
            },
            |done, fault| {
                let (before, done) = match done {
                    Some((before, done)) => (before, Some(done)),
                    None => (None, None),
                };
                Obs::Acquire {
                    resource: request.resource.clone(),
                    before,
                    call: Call { done, fault },
                }
            },
        )
        .await
    }

    async fn commit(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        let write = self.inner.commit(tenure, token, lease);
        self.observed_commit(tenure, token, write).await
    }

    async fn commit_past_failure(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        let write = self.inner.commit_past_failure(tenure, token, lease);
        self.observed_commit(tenure, token, write).await
    }

    async fn record_failure(
        &self,
        tenure: &Tenure,
        failure: &ChangeFailure,
    ) -> StoreResult<TenureWrite> {
        self.plain(
            "record_failure",
            Kind::Write,
            self.inner.record_failure(tenure, failure),
        )
        .await
    }

    async fn renew(&self, tenure: &Tenure, lease: Duration) -> StoreResult<TenureWrite> {
        self.plain("renew", Kind::Write, self.inner.renew(tenure, lease))
            .await
    }

    async fn record_invalidation(
        &self,
        tenure: &Tenure,
        invalidation: &Invalidation,
    ) -> StoreResult<TenureWrite> {
        self.plain(
            "record_invalidation",
            Kind::Write,
            self.inner.record_invalidation(tenure, invalidation),
        )
        .await
    }

    async fn release(&self, tenure: &Tenure) -> StoreResult<TenureWrite> {
        self.effect(
            || async {
                let before = self.lease_seen(&tenure.resource);
                let result = self.inner.release(tenure).await;
                ((before, tenure_done(&result)), result)
            },
            |done, fault| {
                let (before, done) = split(done);
                let before = before.flatten();
                Obs::Release {
                    resource: tenure.resource.clone(),
                    listener: tenure.listener.clone(),
                    version: tenure.version,
                    before,
                    call: Call { done, fault },
                }
            },
        )
        .await
    }

    async fn get(&self, resource: &str) -> StoreResult<Option<Lease>> {
        self.plain("get", Kind::Read, self.inner.get(resource))
            .await
    }

    async fn list(&self) -> StoreResult<Listing<Lease>> {
        self.plain("list", Kind::Read, self.inner.list()).await
    }

    async fn watch(&self, scope: LeaseScope) -> StoreResult<FaultyWatch> {
        let inner = self
            .plain("watch", Kind::Read, self.inner.watch(scope))
            .await?;
        Ok(FaultyWatch {
            inner,
            store: self.clone(),
        })
    }

    async fn server_now(&self) -> StoreResult<DateTime<Utc>> {
        let now = self
            .plain("server_now", Kind::Read, self.inner.server_now())
            .await?;
        Ok(now + self.skew)
    }
}

impl FaultyStore {
    /// The oldest entry of the log, when a read or an open found history lost.
    fn lost_before<T>(&self, result: &StoreResult<T>) -> Option<ClusterTime> {
        match result {
            Err(StoreError::HistoryLost { .. }) => {
                now_or_never(self.inner.oplog_window()).and_then(|w| w.ok().map(|w| w.first))
            }
            _ => None,
        }
    }
}

/// The simulation drives change streams only; capped collections pass through untouched.
impl streamward::store::CappedFeed for FaultyStore {
    type Tail = streamward::store::sandbox::SandboxTail;

    async fn tail(
        &self,
        ns: &Namespace,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<Self::Tail> {
        self.inner.tail(ns, start, options).await
    }

    async fn capped_window(
        &self,
        ns: &Namespace,
    ) -> StoreResult<Option<streamward::store::CappedWindow>> {
        self.inner.capped_window(ns).await
    }

    async fn ensure_capped(&self, ns: &Namespace, max_bytes: u64) -> StoreResult<()> {
        self.inner.ensure_capped(ns, max_bytes).await
    }

    async fn append_entry(
        &self,
        ns: &Namespace,
        entry: bson::Document,
    ) -> StoreResult<bson::oid::ObjectId> {
        self.inner.append_entry(ns, entry).await
    }

    async fn capped_stats(&self, ns: &Namespace) -> StoreResult<streamward::store::CappedStats> {
        self.inner.capped_stats(ns).await
    }

    async fn entry_bytes(
        &self,
        ns: &Namespace,
        span: streamward::model::EntrySpan,
        limit: u64,
    ) -> StoreResult<streamward::store::EntryBytes> {
        self.inner.entry_bytes(ns, span, limit).await
    }

    async fn count_entries(
        &self,
        ns: &Namespace,
        span: streamward::model::EntrySpan,
        limit: u64,
    ) -> StoreResult<u64> {
        self.inner.count_entries(ns, span, limit).await
    }
}

impl ChangeFeed for FaultyStore {
    type Stream = FaultyStream;

    /// A partition's stream fails like any other: the sandbox filters it by the hash.
    async fn open_partition(
        &self,
        ns: &Namespace,
        partition: Option<Partition>,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<FaultyStream> {
        let stream = self.cluster.streams.fetch_add(1, Ordering::SeqCst) + 1;
        let resume = Resume::of_start(&start);
        let (done, fault) = self
            .run(Kind::Read, |_| async {
                let result = self
                    .inner
                    .open_partition(ns, partition, start, options)
                    .await;
                let first = now_or_never(self.inner.oplog_window())
                    .and_then(|w| w.ok())
                    .map(|w| w.first);
                (result, first)
            })
            .await;
        let (done, first) = match done {
            Some((result, first)) => (Some(result), first),
            None => (None, None),
        };
        self.record(Obs::Open {
            ns: ns.clone(),
            start: resume,
            stream,
            call: Call {
                done: done
                    .as_ref()
                    .map(|r| r.as_ref().map(|_| ()).map_err(|e| e.to_string())),
                fault: fault_of(&fault),
            },
            first,
        });
        let inner = match (done, fault) {
            (_, Some((_, error))) => return Err(error),
            (Some(result), None) => result?,
            (None, None) => return Err(StoreError::Closed),
        };
        Ok(FaultyStream {
            inner,
            store: self.clone(),
            id: stream,
            batch_size: options.batch_size.max(1) as usize,
            delivered: VecDeque::new(),
            pending: VecDeque::new(),
            pending_duplicates: 0,
            pending_at_end: false,
        })
    }

    async fn oplog_window(&self) -> StoreResult<OplogWindow> {
        let (done, fault) = self.run(Kind::Read, |_| self.inner.oplog_window()).await;
        self.record(Obs::OplogWindow {
            call: Call {
                done: done.as_ref().map(|r| r.as_ref().ok().map(|w| w.first)),
                fault: fault_of(&fault),
            },
        });
        match (done, fault) {
            (_, Some((_, error))) => Err(error),
            (Some(result), None) => result,
            (None, None) => Err(StoreError::Closed),
        }
    }

    async fn cluster_time(&self) -> StoreResult<ClusterTime> {
        self.plain("cluster_time", Kind::Read, self.inner.cluster_time())
            .await
    }

    async fn oplog_entry(&self, at: ClusterTime) -> StoreResult<Option<Document>> {
        self.plain("oplog_entry", Kind::Read, self.inner.oplog_entry(at))
            .await
    }
}

/// Checkpoints pass through: a failed one is only logged by the listener, so it has no
/// part in the invariants checked here.
impl CheckpointStore for FaultyStore {
    async fn record_checkpoint(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        kept: u32,
    ) -> StoreResult<()> {
        self.inner.record_checkpoint(tenure, token, kept).await
    }

    async fn checkpoints(
        &self,
        resource: &str,
        limit: u32,
    ) -> StoreResult<streamward::store::Listing<streamward::model::Checkpoint>> {
        self.inner.checkpoints(resource, limit).await
    }
}

impl OperatorStore for FaultyStore {
    async fn operator_swap(&self, change: &OperatorChange) -> StoreResult<SwapOutcome> {
        self.effect(
            || async {
                let result = self.inner.operator_swap(change).await;
                let done = match &result {
                    Ok(SwapOutcome::Applied { after, .. }) => {
                        Ok(Some(LeaseSeen::of(after, self.inner.clock().now())))
                    }
                    Ok(SwapOutcome::Changed { .. }) => Ok(None),
                    Err(e) => Err(e.to_string()),
                };
                (done, result)
            },
            |done, fault| Obs::Swap {
                resource: change.resource.clone(),
                expected: change.expected_version,
                call: Call { done, fault },
            },
        )
        .await
    }

    async fn count_changes(
        &self,
        on: &streamward::model::WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> StoreResult<u64> {
        self.plain(
            "count_changes",
            Kind::Read,
            self.inner.count_changes(on, from, to, limit),
        )
        .await
    }

    async fn token_at(&self, at: ClusterTime) -> StoreResult<streamward::model::ResumeToken> {
        self.plain("token_at", Kind::Read, self.inner.token_at(at))
            .await
    }
}

impl SkippedLog for FaultyStore {
    async fn keep_skipped(&self, skipped: &streamward::store::SkippedChange) -> StoreResult<()> {
        self.plain(
            "keep_skipped",
            Kind::Write,
            self.inner.keep_skipped(skipped),
        )
        .await
    }

    async fn skipped_changes(
        &self,
        resource: &str,
        limit: usize,
    ) -> StoreResult<Vec<streamward::store::SkippedChange>> {
        self.plain(
            "skipped_changes",
            Kind::Read,
            self.inner.skipped_changes(resource, limit),
        )
        .await
    }
}

impl Capabilities for FaultyStore {
    type Capped = Self;
    type Checkpoints = Self;

    fn capped_feed(&self) -> Option<&Self> {
        Some(self)
    }

    fn checkpoint_store(&self) -> Option<&Self> {
        Some(self)
    }
}

impl AuditLog for FaultyStore {
    async fn begin_audit(&self, intent: &AuditIntent) -> StoreResult<String> {
        self.plain("begin_audit", Kind::Write, self.inner.begin_audit(intent))
            .await
    }

    async fn audit_step(
        &self,
        id: &str,
        what: &str,
        after: Option<&Lease>,
        intends: Option<&Lease>,
    ) -> StoreResult<()> {
        self.plain(
            "audit_step",
            Kind::Write,
            self.inner.audit_step(id, what, after, intends),
        )
        .await
    }

    async fn finish_audit(&self, id: &str, finish: &AuditFinish) -> StoreResult<()> {
        self.plain(
            "finish_audit",
            Kind::Write,
            self.inner.finish_audit(id, finish),
        )
        .await
    }

    async fn audit_log(&self, limit: usize) -> StoreResult<Listing<AuditRecord>> {
        self.inner.audit_log(limit).await
    }

    async fn audit_record(&self, id: &str) -> StoreResult<Option<AuditRecord>> {
        self.inner.audit_record(id).await
    }
}

impl DocumentStore for FaultyStore {
    async fn fenced_upsert(
        &self,
        ns: &Namespace,
        id: &Bson,
        fence: &WriteFence,
        fields: Document,
    ) -> StoreResult<WriteOutcome> {
        let (kind, field, value) = match fence {
            WriteFence::Lease(f) => (FenceKind::Lease, LEASE_FENCE_FIELD, f.version),
            WriteFence::SourceVersion(v) => (FenceKind::Source, SOURCE_VERSION_FIELD, *v),
        };
        let read = || {
            now_or_never(self.inner.find_one(ns, id))
                .and_then(|r| r.ok())
                .flatten()
        };
        let id_text = id.to_string();
        self.effect(
            || async {
                let before = stored_i64(read().as_ref(), field);
                let result = self.inner.fenced_upsert(ns, id, fence, fields).await;
                let after = stored_i64(read().as_ref(), field);
                ((before, write_done(&result), after), result)
            },
            |done, fault| fenced_obs(ns, &id_text, kind, value, done, fault),
        )
        .await
    }

    async fn find_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<Option<Document>> {
        self.plain("find_one", Kind::Read, self.inner.find_one(ns, id))
            .await
    }

    async fn find_all(&self, ns: &Namespace) -> StoreResult<Vec<Document>> {
        self.plain("find_all", Kind::Read, self.inner.find_all(ns))
            .await
    }

    async fn put(&self, ns: &Namespace, document: Document) -> StoreResult<()> {
        self.plain("put", Kind::Write, self.inner.put(ns, document))
            .await
    }

    async fn put_together(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        self.plain(
            "put_together",
            Kind::Write,
            self.inner.put_together(ns, documents),
        )
        .await
    }

    async fn delete_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<bool> {
        self.plain("delete_one", Kind::Write, self.inner.delete_one(ns, id))
            .await
    }

    async fn delete_where(&self, ns: &Namespace, field: &str, value: &Bson) -> StoreResult<u64> {
        self.plain(
            "delete_where",
            Kind::Write,
            self.inner.delete_where(ns, field, value),
        )
        .await
    }

    async fn replace_all(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        self.plain(
            "replace_all",
            Kind::Write,
            self.inner.replace_all(ns, documents),
        )
        .await
    }

    async fn drop_collection(&self, ns: &Namespace) -> StoreResult<()> {
        self.plain(
            "drop_collection",
            Kind::Write,
            self.inner.drop_collection(ns),
        )
        .await
    }

    async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StoreResult<()> {
        self.plain(
            "rename_collection",
            Kind::Write,
            self.inner.rename_collection(from, to, drop_target),
        )
        .await
    }

    async fn drop_database(&self, db: &str) -> StoreResult<()> {
        self.plain("drop_database", Kind::Write, self.inner.drop_database(db))
            .await
    }
}

/// A fleet's membership calls fail like any other: an announce or a leave may fail,
/// time out, or apply with its reply lost; a read of the members may fail. Recorded
/// only when a fault replaced the reply.
impl MembershipStore for FaultyStore {
    async fn announce(&self, announcement: &Announcement, ttl: Duration) -> StoreResult<Member> {
        self.plain(
            "announce",
            Kind::Write,
            self.inner.announce(announcement, ttl),
        )
        .await
    }

    async fn list_members(&self, scope: MemberScope) -> StoreResult<Listing<Member>> {
        self.plain("list_members", Kind::Read, self.inner.list_members(scope))
            .await
    }

    async fn leave(&self, process: &str) -> StoreResult<()> {
        self.plain("leave", Kind::Write, self.inner.leave(process))
            .await
    }
}

impl FencedMemberWrites for FaultyStore {
    async fn fenced_member_upsert(
        &self,
        ns: &Namespace,
        id: &str,
        member: &str,
        version: i64,
        value: Option<&str>,
    ) -> StoreResult<WriteOutcome> {
        let key = Bson::String(id.to_string());
        let read = || {
            now_or_never(self.inner.find_one(ns, &key))
                .and_then(|r| r.ok())
                .flatten()
        };
        let id_text = format!("{id}/{member}");
        self.effect(
            || async {
                let before = member_version(read().as_ref(), member);
                let result = self
                    .inner
                    .fenced_member_upsert(ns, id, member, version, value)
                    .await;
                let after = member_version(read().as_ref(), member);
                ((before, write_done(&result), after), result)
            },
            |done, fault| fenced_obs(ns, &id_text, FenceKind::Member, version, done, fault),
        )
        .await
    }
}

fn tenure_done(result: &StoreResult<TenureWrite>) -> TenureDone {
    match result {
        Ok(TenureWrite::Done) => TenureDone::Done,
        Ok(TenureWrite::LostLock) => TenureDone::LostLock,
        Err(_) => TenureDone::Error,
    }
}

fn write_done(result: &StoreResult<WriteOutcome>) -> WriteDone {
    match result {
        Ok(WriteOutcome::Applied) => WriteDone::Applied,
        Ok(WriteOutcome::Stale) => WriteDone::Stale,
        Err(_) => WriteDone::Error,
    }
}

fn split<A, B>(done: Option<(A, B)>) -> (Option<A>, Option<B>) {
    match done {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    }
}

fn fenced_obs(
    ns: &Namespace,
    id: &str,
    kind: FenceKind,
    value: i64,
    done: Option<(Option<i64>, WriteDone, Option<i64>)>,
    fault: Option<FaultSeen>,
) -> Obs {
    let (before, done, after) = match done {
        Some((before, done, after)) => (before, Some(done), after),
        None => (None, None, None),
    };
    Obs::Fenced {
        ns: ns.clone(),
        id: id.to_string(),
        kind,
        value,
        before,
        after,
        call: Call { done, fault },
    }
}

/// A change stream through the fault layer.
pub struct FaultyStream {
    inner: SandboxStream,
    store: FaultyStore,
    id: u64,
    batch_size: usize,
    /// The last few changes handed over, for duplicate deliveries.
    delivered: VecDeque<ChangeEvent>,
    /// Changes read but not handed over yet (a batch a duplicate made too long).
    pending: VecDeque<ChangeEvent>,
    /// How many of `pending`'s first changes are re-deliveries.
    pending_duplicates: usize,
    /// Whether the read `pending` came from was at the stream's end: only the batch
    /// that hands its last change over says so.
    pending_at_end: bool,
}

impl FaultyStream {
    fn hand_over(
        &mut self,
        events: Vec<ChangeEvent>,
        duplicates: usize,
        at_end: bool,
    ) -> ChangeBatch {
        for event in events.iter().skip(duplicates) {
            self.delivered.push_back(event.clone());
            if self.delivered.len() > 3 {
                self.delivered.pop_front();
            }
        }
        let token = events.last().map(|e| e.token.clone());
        self.store.record(Obs::Batch {
            stream: self.id,
            events: events.iter().map(|e| e.cluster_time.unwrap()).collect(),
            duplicates,
            token: token.as_ref().and_then(|t| t.time()),
            call: Call {
                done: Some(Ok(())),
                fault: None,
            },
            lost_before: None,
        });
        ChangeBatch {
            events,
            resume_token: token,
            cluster_time: None,
            at_end,
        }
    }
}

impl ChangeStream for FaultyStream {
    async fn next_batch(&mut self) -> StoreResult<ChangeBatch> {
        if !self.pending.is_empty() {
            let take = self.batch_size.min(self.pending.len());
            let events: Vec<ChangeEvent> = self.pending.drain(..take).collect();
            let duplicates = self.pending_duplicates.min(take);
            self.pending_duplicates -= duplicates;
            let at_end = self.pending_at_end && self.pending.is_empty();
            return Ok(self.hand_over(events, duplicates, at_end));
        }
        let store = self.store.clone();
        let inner = &mut self.inner;
        let (done, fault) = store
            .run(Kind::Read, |_| {
                store.cluster.until_stepdown(inner.next_batch())
            })
            .await;
        let (done, fault) = match done {
            // Cut by a stepdown while it waited.
            Some(None) => (
                None,
                Some((
                    FaultSeen::Stepdown,
                    StoreError::Network(
                        "injected stepdown: the stream's connection was closed".into(),
                    ),
                )),
            ),
            Some(Some(result)) => (Some(result), fault),
            None => (None, fault),
        };
        let batch = match (done, fault) {
            (Some(Ok(batch)), None) => batch,
            (done, fault) => {
                let lost_before = done.as_ref().and_then(|r| store.lost_before(r));
                let error = match (&done, &fault) {
                    (_, Some((_, error))) => error.clone(),
                    (Some(Err(error)), None) => error.clone(),
                    _ => StoreError::Closed,
                };
                store.record(Obs::Batch {
                    stream: self.id,
                    events: Vec::new(),
                    duplicates: 0,
                    token: None,
                    call: Call {
                        done: done.map(|r| r.map(|_| ()).map_err(|e| e.to_string())),
                        fault: fault_of(&fault),
                    },
                    lost_before,
                });
                return Err(error);
            }
        };
        if batch.events.is_empty() {
            // The post-batch token: recorded, handed over as is.
            store.record(Obs::Batch {
                stream: self.id,
                events: Vec::new(),
                duplicates: 0,
                token: batch.resume_token.as_ref().and_then(|t| t.time()),
                call: Call {
                    done: Some(Ok(())),
                    fault: None,
                },
                lost_before: None,
            });
            return Ok(batch);
        }
        let duplicates = {
            let p = store.cluster.profile.duplicate;
            let mut rng = store.rng.lock().unwrap_or_else(|p| p.into_inner());
            if store.cluster.enabled() && !self.delivered.is_empty() && rng.gen_bool(p) {
                rng.gen_range(1..=self.delivered.len())
            } else {
                0
            }
        };
        // The last `duplicates` changes delivered, again, then the new ones; at most
        // a batch's worth now, the rest next time.
        let mut all: VecDeque<ChangeEvent> = self
            .delivered
            .iter()
            .skip(self.delivered.len() - duplicates)
            .cloned()
            .chain(batch.events)
            .collect();
        let take = self.batch_size.min(all.len());
        let events: Vec<ChangeEvent> = all.drain(..take).collect();
        self.pending = all;
        self.pending_duplicates = duplicates - duplicates.min(take);
        self.pending_at_end = batch.at_end;
        let at_end = batch.at_end && self.pending.is_empty();
        Ok(self.hand_over(events, duplicates.min(take), at_end))
    }
}

/// A lease watch through the fault layer: cut by stepdowns, sometimes failing.
pub struct FaultyWatch {
    inner: SandboxLeaseWatch,
    store: FaultyStore,
}

impl LeaseWatch for FaultyWatch {
    async fn changed(&mut self) -> StoreResult<LeaseChange> {
        let cluster = self.store.cluster.clone();
        let Some(change) = cluster.until_stepdown(self.inner.changed()).await else {
            self.store.record(Obs::Faulted {
                call: "watch.changed",
                fault: FaultSeen::Stepdown,
            });
            return Err(StoreError::Network(
                "injected stepdown: the lease watch's connection was closed".into(),
            ));
        };
        let fails = {
            let p = cluster.profile.error;
            let mut rng = self.store.rng.lock().unwrap_or_else(|p| p.into_inner());
            cluster.enabled() && rng.gen_bool(p)
        };
        if fails {
            let error = StoreError::Network("injected: the lease watch's getMore failed".into());
            self.store.record(Obs::Faulted {
                call: "watch.changed",
                fault: FaultSeen::Failed(error.to_string()),
            });
            return Err(error);
        }
        change
    }
}
