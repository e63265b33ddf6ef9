//! The listener runtime (docs/protocol.md §6): acquire → resume/bootstrap → stream → handle
//! → commit → refresh, with standby, rotation and lost-lock handling, and one way of
//! waiting for an operator where it cannot go on by itself (history lost, a closed
//! stream).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::commits::{CommitReply, CommitTask, InFlight, Staged};
use super::fleet::{Fleet, FleetSeat};
use super::standby::{
    note_version, operator_moved, still_failing, wait_for_vacancy, wait_on_lease, Recovery, Vacancy,
};
use super::status::{ListenerSnapshot, ListenerState, RateMeter};
use super::transaction_cut::{Handout, TransactionCut};
use super::{Bootstrap, CommitPolicy, Handler, HandlerError, ListenerConfig};
use chrono::{DateTime, Utc};

use crate::metrics::engine::ListenerMetrics;
use crate::model::{
    ChangeFailure, ClusterTime, Fence, Lease, ResumePoint, ResumeToken, SourceKind, StreamProfile,
};
use crate::store::{
    AcquireOutcome, AcquireRequest, ChangeBatch, ChangeEvent, ChangeStream, FeedOptions,
    StartPoint, Store, StoreError, Tenure, TenureWrite,
};

/// Why a listener's `run` returned. A listener that cannot go on by itself (history
/// lost, a closed stream) does not return: it waits for an operator (see [`Stuck`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ListenerExit {
    /// Shut down on request, lease released.
    Stopped,
    /// Refused to start; the reason says what to configure or grant.
    Refused(String),
}

/// Where one tenure stands.
struct Progress {
    tenure: Tenure,
    fence: Fence,
    started: Instant,
    next_refresh: Instant,
    /// When the last commit landed.
    last_commit: Instant,
    /// When the last group commit was sent.
    last_sent: Instant,
    /// The newest point a commit of this tenure landed with (where it started, before
    /// any): [`Progress::newest`] counts those staged or in flight too.
    committed: Option<ResumeToken>,
    /// Group commits: handled, waiting for the next commit.
    staged: Option<Staged>,
    /// Group commits: the one commit in flight.
    in_flight: Option<InFlight>,
    /// Where what is read may be committed: never inside a transaction.
    cut: TransactionCut,
    /// The change the lease records as failing, as this tenure knows it.
    failure: Option<ChangeFailure>,
}

impl Progress {
    /// The newest point committed, in flight or staged: what the next commit must
    /// not go behind, and what the changes handed next follow.
    fn newest(&self) -> Option<&ResumeToken> {
        let staged = self.staged.as_ref().map(|s| &s.token);
        let in_flight = self.in_flight.as_ref().map(|f| &f.staged.token);
        staged.or(in_flight).or(self.committed.as_ref())
    }

    /// Adds `staged` to what waits for the next commit.
    fn stage(&mut self, staged: Staged) {
        match &mut self.staged {
            Some(older) => older.absorb(staged),
            None => self.staged = Some(staged),
        }
    }

    /// The cluster time [`Self::newest`]'s token tells, decoded once when it was staged.
    fn newest_time(&self) -> Option<ClusterTime> {
        match (&self.staged, &self.in_flight) {
            (Some(staged), _) => staged.time,
            (None, Some(in_flight)) => in_flight.staged.time,
            (None, None) => self.committed.as_ref().and_then(token_time),
        }
    }
}

/// How one tenure (holding one version of the lease) ended.
enum TenureEnd {
    Shutdown,
    LostLock(String),
    /// The handler's fenced write was refused: a newer holder wrote, so the lease is
    /// lost as far as the handler can tell, whatever the lease says.
    FencedOut(String),
    Rotated,
    /// Cannot go on from this resume point: wait for an operator to move it.
    Stuck(Stuck),
    Refused(String),
    /// A store or handler error: back off and start over from the last commit.
    Failed(String),
    /// The handler failed on this change, recorded on the lease: wait out its back-off.
    ChangeFailed(ChangeFailure),
    /// The listener stepped over a failing change by its policy: start again at once.
    SteppedOver,
}

/// LOST or INVALIDATED: the listener released its lease and waits on it, without
/// polling, until an operator moves the resume point; then it starts over.
struct Stuck {
    /// `HistoryLost` or `Invalidated`.
    state: ListenerState,
    /// What happened and what an operator can do, for the console and the log.
    message: String,
    /// The resume point that cannot be resumed from.
    at: ResumePoint,
}

pub struct Listener<S: Store, H: Handler> {
    store: S,
    config: ListenerConfig,
    handler: H,
    status: watch::Sender<ListenerSnapshot>,
    shutdown: CancellationToken,
    rate: RateMeter,
    backoff: Backoff,
    /// Where this listener's series go, when the host application asked for them.
    metrics: Option<ListenerMetrics>,
    checkpoints: Checkpoints,
    /// This listener's seat in its process's fleet, when it runs in one.
    fleet: Option<FleetSeat>,
    /// The highest version of its lease this listener has seen: from then on it never
    /// creates the lease, and stops if the lease is gone or went back.
    seen_version: Option<i64>,
}

/// The checkpoints this listener records: when it last started one, and the one being
/// written (on its own task, so a slow write never holds up the stream or a refresh).
#[derive(Debug, Default)]
struct Checkpoints {
    last: Option<Instant>,
    running: Option<tokio::task::JoinHandle<crate::store::StoreResult<()>>>,
}

/// A batch handed to the handler, as [`TransactionCut`] cut it.
struct Handed<'a> {
    events: &'a [ChangeEvent],
    /// How many of `events` end where a commit may land (between transactions).
    committed_prefix: usize,
    /// The last change handed before `events` that no commit covers yet (a
    /// transaction's earlier parts), and how many such changes there are.
    uncommitted_before: Option<(ResumeToken, usize)>,
}

/// One commit of `token` by `tenure`; `past_failure` also clears the lease's record
/// of a failing change.
async fn write_commit<S: Store>(
    store: &S,
    tenure: &Tenure,
    token: &ResumeToken,
    lease: Duration,
    past_failure: bool,
) -> crate::store::StoreResult<TenureWrite> {
    if past_failure {
        store.commit_past_failure(tenure, token, lease).await
    } else {
        store.commit(tenure, token, lease).await
    }
}

/// Doubles the pause after each consecutive failure, up to a minute; a commit resets it.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    const LIMIT: Duration = Duration::from_secs(60);

    fn next(&mut self, base: Duration) -> Duration {
        let pause = base.saturating_mul(1 << self.failures.min(6));
        self.failures += 1;
        pause.min(Self::LIMIT.max(base))
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

impl<S: Store, H: Handler> Listener<S, H> {
    pub fn new(store: S, config: ListenerConfig, handler: H, shutdown: CancellationToken) -> Self {
        let (status, _) =
            watch::channel(ListenerSnapshot::new(&config.resource, &config.listener_id));
        Self {
            store,
            config,
            handler,
            status,
            shutdown,
            rate: RateMeter::new(),
            backoff: Backoff::default(),
            metrics: None,
            checkpoints: Checkpoints::default(),
            fleet: None,
            seen_version: None,
        }
    }

    /// Runs as one of `fleet`'s listeners: it hands its lease over at a batch boundary
    /// when the fleet's plan asks, and leaves a vacant lease to a member short of its
    /// share for a while (docs/protocol.md, "Membership and balancing").
    pub fn with_fleet(mut self, fleet: &Fleet) -> Self {
        self.fleet = Some(fleet.seat(&self.config.resource, &self.config.listener_id));
        self
    }

    /// Records into `metrics` as it goes (`metrics::EngineMetrics::listener`).
    pub fn with_metrics(mut self, metrics: ListenerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// A live view of this listener's state and counters.
    pub fn subscribe(&self) -> watch::Receiver<ListenerSnapshot> {
        self.status.subscribe()
    }

    pub async fn run(mut self) -> ListenerExit {
        // (Its fleet stops announcing it when it is dropped, right after: see `Drop`.)
        let exit = self.run_until_exit().await;
        self.status.send_modify(|s| {
            s.version = None;
            s.state = match &exit {
                ListenerExit::Stopped => ListenerState::Stopped,
                ListenerExit::Refused(e) => {
                    s.last_error = Some(e.clone());
                    ListenerState::Refused
                }
            };
        });
        exit
    }

    async fn run_until_exit(&mut self) -> ListenerExit {
        if let Some(refusal) = self.refusal() {
            return ListenerExit::Refused(refusal);
        }
        let mut cooldown: Option<Duration> = None;
        // The change this listener last failed on, while it waits out its back-off.
        let mut failed_on: Option<ChangeFailure> = None;
        loop {
            if self.shutdown.is_cancelled() {
                return ListenerExit::Stopped;
            }
            if let Some(pause) = cooldown.take() {
                let waited = match failed_on.take() {
                    Some(failure) => self.wait_out_failure(&failure, pause).await,
                    None => self.pause(pause).await,
                };
                if waited.is_err() {
                    return ListenerExit::Stopped;
                }
            }
            if let Some(seat) = self.fleet.clone() {
                if !seat.may_acquire_now() {
                    self.set_state(ListenerState::Standby);
                    if !seat.clear_to_acquire(&self.shutdown).await {
                        return ListenerExit::Stopped;
                    }
                }
            }
            self.set_state(ListenerState::Acquiring);
            let acquired = self.store.acquire(&self.acquire_request()).await;
            if let Ok(AcquireOutcome::Acquired(lease)) = &acquired {
                if let Err(reason) = self.saw_version(lease.version) {
                    // Someone created it anew and this listener now holds that: give
                    // it back untouched rather than process under a version gone back.
                    if let Some(tenure) = Tenure::of(lease) {
                        let _ = self.store.release(&tenure).await;
                    }
                    return ListenerExit::Refused(reason);
                }
            }
            match acquired {
                Ok(AcquireOutcome::Vanished { seen_version }) => {
                    return ListenerExit::Refused(version_went_back(
                        &self.config.resource,
                        seen_version,
                        None,
                    ));
                }
                Ok(AcquireOutcome::VersionExhausted) => {
                    return ListenerExit::Refused(version_exhausted(&self.config.resource));
                }
                Ok(AcquireOutcome::Acquired(lease)) => match self.hold_seated(lease).await {
                    TenureEnd::Shutdown => return ListenerExit::Stopped,
                    TenureEnd::Stuck(stuck) => {
                        // Not a taker for its lease while it waits: balancing must not
                        // hand the lease towards it.
                        if let Some(seat) = &self.fleet {
                            seat.set_available(false);
                        }
                        let waited = self.wait_for_operator(stuck).await;
                        if let Some(seat) = &self.fleet {
                            seat.set_available(true);
                        }
                        if waited.is_err() {
                            return ListenerExit::Stopped;
                        }
                    }
                    TenureEnd::Refused(e) => return ListenerExit::Refused(e),
                    TenureEnd::LostLock(reason) => self.lost_lock(reason),
                    TenureEnd::FencedOut(reason) => {
                        self.lost_lock(reason);
                        // Refused while the lease may still be ours (a fence taken from
                        // elsewhere), it would be refused again at once: pause, so it is
                        // not a busy loop of acquires and reopened streams.
                        cooldown = Some(self.backoff.next(self.config.retry_backoff));
                    }
                    TenureEnd::Rotated => {
                        self.set_state(ListenerState::Standby);
                        cooldown = Some(self.config.refresh_interval());
                    }
                    TenureEnd::Failed(error) => {
                        self.record_error(error);
                        self.set_state(ListenerState::Standby);
                        cooldown = Some(self.backoff.next(self.config.retry_backoff));
                    }
                    TenureEnd::SteppedOver => self.set_state(ListenerState::Standby),
                    TenureEnd::ChangeFailed(failure) => {
                        self.record_error(super::failing::describe(&failure));
                        self.set_state(ListenerState::Failing);
                        cooldown = Some(failure.backoff(self.config.retry_backoff));
                        failed_on = Some(failure);
                    }
                },
                Ok(AcquireOutcome::HeldByOther) => {
                    self.set_state(ListenerState::Standby);
                    let seen = &mut self.seen_version;
                    let waited =
                        wait_for_vacancy(&self.store, &self.config, seen, &self.shutdown).await;
                    match waited {
                        Ok(Vacancy::Maybe) => {}
                        Ok(Vacancy::WentBack { found }) => {
                            return ListenerExit::Refused(version_went_back(
                                &self.config.resource,
                                self.seen_version.unwrap_or(found),
                                Some(found),
                            ));
                        }
                        Ok(Vacancy::Shutdown) => return ListenerExit::Stopped,
                        Err(e) => {
                            self.record_error(e.to_string());
                            cooldown = Some(self.backoff.next(self.config.retry_backoff));
                        }
                    }
                }
                Err(e) => {
                    self.record_error(e.to_string());
                    cooldown = Some(self.backoff.next(self.config.retry_backoff));
                }
            }
        }
    }

    fn lost_lock(&self, reason: String) {
        tracing::warn!(resource = %self.config.resource, %reason, "lost the lease");
        if let Some(metrics) = &self.metrics {
            metrics.lost_lock();
        }
        self.status.send_modify(|s| {
            s.state = ListenerState::LostLock;
            s.lost_locks += 1;
            s.version = None;
            s.events_per_sec = 0.0;
            s.last_error = Some(reason);
        });
    }

    /// A configuration this store can never serve, refused before anything is written.
    fn refusal(&self) -> Option<String> {
        if let Some(refusal) = super::partitioned::refusal(&self.config, self.store.profile()) {
            return Some(refusal);
        }
        match (self.store.profile(), self.config.bootstrap) {
            (StreamProfile::CosmosDb, Bootstrap::Oldest) => Some(format!(
                "{} is configured to bootstrap from the oldest oplog entry, which Azure Cosmos DB \
                 cannot serve: it keeps no oplog, and Microsoft documents no way for one change \
                 stream to start at the beginning of a collection (GetChangeStreamTokens starts \
                 one stream per physical partition; docs/cosmos.md). Configure bootstrap = now \
                 (ListenerConfig::bootstrap = Bootstrap::Now): a listener with no resume point \
                 then starts at now and skips changes made before its first commit",
                self.config.resource
            )),
            _ => None,
        }
    }

    fn acquire_request(&self) -> AcquireRequest {
        AcquireRequest {
            resource: self.config.resource.clone(),
            listener: self.config.listener_id.clone(),
            kind: self.config.kind,
            lease: self.config.lease,
            watch: Some(self.config.watch_target()),
            seen_version: self.seen_version,
        }
    }

    /// Notes a version of the lease as seen. `Err` when it is below one seen before:
    /// the lease was deleted and created anew (its fencing version went back).
    fn saw_version(&mut self, version: i64) -> Result<(), String> {
        let highest = self.seen_version;
        note_version(&mut self.seen_version, version).map_err(|found| {
            version_went_back(&self.config.resource, highest.unwrap_or(found), Some(found))
        })
    }

    /// [`Self::hold`], telling the fleet (if any) while it holds.
    async fn hold_seated(&mut self, lease: Lease) -> TenureEnd {
        if let Some(seat) = &self.fleet {
            seat.set_holding(true);
        }
        let end = self.hold(lease).await;
        if let Some(seat) = &self.fleet {
            seat.set_holding(false);
        }
        end
    }

    /// Holds one version of the lease until it is lost, released or the listener stops.
    async fn hold(&mut self, lease: Lease) -> TenureEnd {
        let Some(tenure) = Tenure::of(&lease) else {
            return TenureEnd::Failed("acquired a lease without a holder".into());
        };
        let fence = lease.fence();
        if let Some(metrics) = &self.metrics {
            metrics.acquired(tenure.version);
            metrics.failure_attempts(lease.failure.as_ref().map_or(0, |f| f.attempts));
        }
        self.status.send_modify(|s| {
            s.version = Some(tenure.version);
            s.last_committed = lease.resume_point().time();
        });
        if let Some(failure) = &lease.failure {
            if let Err(end) = self.wait_out(&tenure, failure).await {
                return end;
            }
        }
        let start = match self.start_point(&lease).await {
            Ok(start) => start,
            Err(end) => return self.give_back(&tenure, end).await,
        };
        let options = FeedOptions {
            batch_size: self.config.batch_size,
            max_await: self.config.read_wait(),
            post_image: self.config.full_document,
            pre_image: self.config.full_document_before_change,
            expanded_events: self.config.expanded_events,
            read_ahead: self.config.read_ahead,
        };
        let source = self.config.source;
        let watch = &self.config.watch;
        let partition = self.config.partition;
        let mut opened = super::source::open(
            &self.store,
            source,
            watch,
            partition,
            start.clone(),
            options,
        )
        .await;
        if matches!(opened, Err(StoreError::HistoryLost { .. }))
            && lease.resume_point() == ResumePoint::Oldest
        {
            // The oldest entry fell off between reading the window and opening: read it again, once.
            opened = match self.start_point(&lease).await {
                Ok(start) => {
                    let watch = &self.config.watch;
                    super::source::open(&self.store, source, watch, partition, start, options).await
                }
                Err(end) => return self.give_back(&tenure, end).await,
            };
        }
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(StoreError::UnreadableChange(change)) => {
                return self
                    .unreadable(&tenure, &change, lease.failure.as_ref())
                    .await
            }
            Err(e) => return self.end_on(&tenure, e, lease.resume_point()).await,
        };
        self.set_state(ListenerState::Streaming);

        let now = Instant::now();
        let mut progress = Progress {
            tenure,
            fence,
            started: now,
            next_refresh: now + self.config.refresh_interval(),
            last_commit: now,
            last_sent: now,
            committed: lease.resume_token.clone(),
            staged: None,
            in_flight: None,
            cut: TransactionCut::new(self.config.max_transaction_changes),
            failure: lease.failure.clone(),
        };
        let mut batch = tokio::select! {
            biased;
            () = self.shutdown.cancelled() => return self.shut_down(&mut progress).await,
            batch = stream.next_batch() => batch,
        };
        loop {
            let current = match batch {
                Ok(batch) => batch,
                Err(StoreError::UnreadableChange(change)) => {
                    if let Err(end) = self.flush(&mut progress).await {
                        return end;
                    }
                    let previous = progress.failure.clone();
                    return self
                        .unreadable(&progress.tenure, &change, previous.as_ref())
                        .await;
                }
                Err(e) => {
                    if let Err(end) = self.flush(&mut progress).await {
                        return end;
                    }
                    // Where this tenure got to: its last commit, else where it started.
                    let at = progress
                        .committed
                        .clone()
                        .map_or_else(|| lease.resume_point(), ResumePoint::Token);
                    return self.end_on(&progress.tenure, e, at).await;
                }
            };
            // The next batch is read while this one is handled and committed, so the
            // read's round trip overlaps theirs. Nothing of it reaches the handler
            // before this one is settled (under strict commits, its commit landed); a
            // tenure that ends here drops it.
            let mut read = std::pin::pin!(stream.next_batch());
            let mut ahead = None;
            // Settled one handout at a time, as the transaction cut gives them
            // (not in a function of their own: each call would move its future).
            let mut next = Some(progress.cut.take(current));
            while let Some(handout) = next.as_mut() {
                let settled = if self.config.read_ahead {
                    let mut settle = std::pin::pin!(self.settle_handout(&mut progress, handout));
                    loop {
                        // Biased: the two are polled in a fixed order. An unbiased
                        // select draws from tokio's per-thread RNG, which is seeded at
                        // random, so a run on a paused clock (the simulation) could not
                        // be replayed.
                        tokio::select! {
                            biased;
                            settled = &mut settle => break settled,
                            next = &mut read, if ahead.is_none() => ahead = Some(next),
                        }
                    }
                } else {
                    // Not polled until settled: the read starts after the commit.
                    self.settle_handout(&mut progress, handout).await
                };
                if let Err(end) = settled {
                    return end;
                }
                next = progress.cut.next_part();
            }
            if self.shutdown.is_cancelled() {
                return self.shut_down(&mut progress).await;
            }
            batch = match ahead {
                Some(next) => next,
                // The read first: a stop was looked for just above, and a read that is
                // ready at once (catching up) then never registers with the stop's
                // notification, two lock round trips a batch.
                None => tokio::select! {
                    biased;
                    next = &mut read => next,
                    () = self.shutdown.cancelled() => return self.shut_down(&mut progress).await,
                },
            };
        }
    }

    /// Stops on request: what was handled is committed, then the lease released.
    async fn shut_down(&mut self, p: &mut Progress) -> TenureEnd {
        if self.flush(p).await.is_ok() {
            let _ = self.store.release(&p.tenure).await;
        }
        TenureEnd::Shutdown
    }

    /// Hands one handout of what was read (the [`TransactionCut`] cuts a read so that
    /// no commit lands inside a transaction) to the handler and commits it (or, for an
    /// empty read, commits the post-batch token when a heartbeat is due), refreshes the
    /// lease when due and rotates when the tenure is over. `Err` ends the tenure, lease
    /// already given back where it was not lost.
    ///
    /// The handout is borrowed, and the commit staged in place, so that the future,
    /// made anew for every handout, stays small: moving it costs a copy of its size.
    async fn settle_handout(
        &mut self,
        p: &mut Progress,
        handout: &mut Handout,
    ) -> Result<(), TenureEnd> {
        let covers = handout.covers();
        let earlier_parts = handout.earlier_parts();
        let committed_prefix = handout.committed_prefix;
        let batch = &mut handout.batch;
        let count = batch.events.len();
        // The fleet asks for this lease: commit where this batch got to, then release
        // (once a transaction handed in parts is committed).
        let handing_over = !p.cut.in_transaction()
            && self
                .fleet
                .as_ref()
                .is_some_and(FleetSeat::handover_requested);
        let to_commit = if count > 0 {
            // Read, not handled yet: as far behind as the point handled before it (a
            // change that keeps failing keeps it there while the cluster moves on).
            self.measure_lag(batch, || p.newest().and_then(ResumeToken::time));
            // A commit in flight that lost the lease stops the listener before
            // anything more is handled.
            if self.landing_due(p) {
                Box::pin(self.land(p)).await?;
            }
            match self.handler.handle(&batch.events, &p.fence).await {
                Ok(()) => {}
                // A commit in flight is aborted (dropped with the tenure): it may
                // still land, like one whose reply is lost, and is conditional on it.
                Err(HandlerError::Fenced(reason)) => {
                    return Err(TenureEnd::FencedOut(format!(
                        "stale fenced write: {reason}"
                    )))
                }
                // The handler cannot process something in it: find which change.
                Err(HandlerError::Failed(e)) => {
                    let handed = Handed {
                        events: &batch.events,
                        committed_prefix,
                        uncommitted_before: handout.uncommitted_before.take(),
                    };
                    // Boxed: the cold path would more than double the size of the
                    // settle future every batch carries (8 KB against 3.7 KB).
                    return Box::pin(self.one_at_a_time(p, handed, e)).await;
                }
                // The store failed the handler, not the change: start over. A commit
                // in flight is taken in if it has landed (a lost lease is not given
                // back), else aborted, so it cannot land after the release.
                Err(e @ HandlerError::Store(_)) => {
                    self.reap(p).await?;
                    p.in_flight = None;
                    let end = TenureEnd::Failed(e.to_string());
                    return Err(Box::pin(self.give_back(&p.tenure, end)).await);
                }
            }
            if self.config.commit == CommitPolicy::Strict {
                self.set_state(ListenerState::Committing);
            }
            self.measure_lag(batch, || batch.reached());
            batch.resume_token.take()
        } else {
            self.measure_lag(batch, || batch.reached());
            // A transaction handed in parts that has ended is committed at once.
            let heartbeat_due = handing_over
                || earlier_parts > 0
                || p.newest().is_none()
                || p.last_commit.elapsed() >= self.config.heartbeat;
            // The same token is no progress, whatever time is recorded beside either.
            batch.resume_token.take().filter(|t| {
                heartbeat_due && p.newest().map(ResumeToken::as_document) != Some(t.as_document())
            })
        };
        // A stream that hands over again what it delivered before (resumed from an
        // older point) can end a batch behind the last commit: committing that token
        // would move the lease's point back, and the next holder would handle committed
        // changes again. Where both times are known, the point only moves on.
        let to_commit = to_commit.and_then(|token| {
            let time = token_time(&token);
            if before(time, p.newest_time()) {
                return None;
            }
            // One that tells its time needs none recorded beside it.
            Some(match time {
                Some(_) => (token, time),
                None => (self.timed(token, &batch.events, p.newest()), None),
            })
        });
        // One reading of the clock for what follows (each costs a system call's worth
        // on some machines, and the handout is all that happened since).
        let now = Instant::now();
        if let Some((token, time)) = to_commit {
            let committed = &batch.events[..committed_prefix.min(count)];
            let past_failure = super::failing::passes(p.failure.as_ref(), committed);
            // Handled and about to be dropped: moved, not copied, towards the snapshot.
            let mut last = std::mem::take(&mut batch.events);
            super::commits::keep_last(&mut last);
            let staged = Staged::handled(token, time, covers, past_failure, last);
            match self.config.commit {
                // The commit lands before anything more is handed.
                CommitPolicy::Strict => Box::pin(self.commit_now(p, staged)).await?,
                // Staged, with what was staged before and not sent yet, and sent when
                // due: it lands while what follows is handled.
                CommitPolicy::Group { every } => {
                    p.stage(staged);
                    if self.landing_due(p) {
                        Box::pin(self.land(p)).await?;
                    }
                    self.send_if_due(p, every, now);
                }
            }
        }
        if let (0, CommitPolicy::Group { every }) = (count, self.config.commit) {
            // Caught up: what is staged goes now, not once the interval is over.
            if let Some(staged) = &mut p.staged {
                staged.urgent = true;
            }
            if self.landing_due(p) {
                Box::pin(self.land(p)).await?;
            }
            self.send_if_due(p, every, now);
        }
        self.after_commit(p, handing_over, now).await
    }

    /// How far `position` is behind the cluster time `batch`'s reply carried. The
    /// position is read only where there are metrics: it decodes a token.
    fn measure_lag(&self, batch: &ChangeBatch, position: impl FnOnce() -> Option<ClusterTime>) {
        if let (Some(metrics), Some(reply)) = (&self.metrics, batch.cluster_time) {
            let Some(position) = position() else {
                return;
            };
            metrics.lag(reply.saturating_since(position));
        }
    }

    /// Writes `staged`'s commit and waits for it. `Err` ends the tenure.
    async fn commit_now(&mut self, p: &mut Progress, staged: Staged) -> Result<(), TenureEnd> {
        let started = Instant::now();
        let past_failure =
            staged.past_failure || super::failing::passed_by(p.failure.as_ref(), &staged.token);
        let written = write_commit(
            &self.store,
            &p.tenure,
            &staged.token,
            self.config.lease,
            past_failure,
        )
        .await;
        self.landed(p, staged, past_failure, (written, started.elapsed()))
            .await
    }

    /// Sends what is staged, on its own task, when it is due at `now` and no commit is
    /// in flight.
    fn send_if_due(&mut self, p: &mut Progress, every: Duration, now: Instant) {
        if p.in_flight.is_some()
            || !p
                .staged
                .as_ref()
                .is_some_and(|s| s.due(p.last_sent, now, every))
        {
            return;
        }
        let Some(staged) = p.staged.take() else {
            return;
        };
        let past_failure =
            staged.past_failure || super::failing::passed_by(p.failure.as_ref(), &staged.token);
        let (store, tenure, token) = (self.store.clone(), p.tenure.clone(), staged.token.clone());
        let lease = self.config.lease;
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let written = write_commit(&store, &tenure, &token, lease, past_failure).await;
            (written, started.elapsed())
        });
        p.last_sent = now;
        p.in_flight = Some(InFlight {
            task: CommitTask(task),
            staged: Staged {
                past_failure,
                ..staged
            },
            sent: now,
        });
    }

    /// Takes in the commit in flight if it has landed. `Err` ends the tenure (a lost
    /// lock, a failed write): nothing more is handled.
    async fn reap(&mut self, p: &mut Progress) -> Result<(), TenureEnd> {
        if self.landing_due(p) {
            Box::pin(self.land(p)).await?;
        }
        Ok(())
    }

    /// Whether the commit in flight is to be taken in now: it has landed, or has been
    /// out for longer than a lease (the lease may have expired meanwhile, and handing
    /// more under it would be wasted work, so it is waited for). Asked before every
    /// handout, so not async: an async call moves its whole future, and the handout's
    /// would carry [`Self::land`]'s every time (most of the engine's cost at batch 1).
    fn landing_due(&self, p: &Progress) -> bool {
        p.in_flight
            .as_ref()
            .is_some_and(|f| f.task.finished() || f.sent.elapsed() >= self.config.lease)
    }

    /// Waits for the commit in flight, if any, and takes it in. `Err` ends the tenure.
    async fn land(&mut self, p: &mut Progress) -> Result<(), TenureEnd> {
        let Some(mut in_flight) = p.in_flight.take() else {
            return Ok(());
        };
        let reply = match (&mut in_flight.task.0).await {
            Ok(reply) => reply,
            Err(e) => (
                Err(StoreError::Network(format!("the commit's task ended: {e}"))),
                in_flight.sent.elapsed(),
            ),
        };
        let past_failure = in_flight.staged.past_failure;
        self.landed(p, in_flight.staged, past_failure, reply).await
    }

    /// Lands the commit in flight and commits what is staged: nothing handled is left
    /// uncommitted. Before a tenure ends, and before a failed batch is handed again
    /// one change at a time. `Err` ends the tenure.
    async fn flush(&mut self, p: &mut Progress) -> Result<(), TenureEnd> {
        self.land(p).await?;
        match p.staged.take() {
            Some(staged) => self.commit_now(p, staged).await,
            None => Ok(()),
        }
    }

    /// Takes in a commit's reply: the tenure goes on from it, or ends.
    async fn landed(
        &mut self,
        p: &mut Progress,
        staged: Staged,
        past_failure: bool,
        (written, took): CommitReply,
    ) -> Result<(), TenureEnd> {
        match written {
            Ok(TenureWrite::Done) => {}
            Ok(TenureWrite::LostLock) => {
                return Err(TenureEnd::LostLock(format!(
                    "commit of version {} matched nothing",
                    p.tenure.version
                )))
            }
            Err(e) => {
                return Err(self
                    .give_back(&p.tenure, TenureEnd::Failed(e.to_string()))
                    .await)
            }
        }
        let Staged {
            token,
            count,
            batches,
            last_batch_size,
            mut last,
            ..
        } = staged;
        let last = last.pop().map(std::sync::Arc::new);
        let now = Instant::now();
        if let Some(metrics) = &self.metrics {
            metrics.committed(took);
            if count > 0 {
                metrics.batches_committed(batches, count);
            }
            if past_failure {
                metrics.failure_attempts(0);
            }
        }
        self.backoff.reset();
        p.last_commit = now;
        p.next_refresh = now + self.config.refresh_interval();
        if past_failure {
            p.failure = None;
        }
        let time = token.time();
        self.checkpoint(&p.tenure, &token, now);
        p.committed = Some(token);
        // Events count once their commit landed: a fenced-out batch is not progress.
        let rate = self.rate.record(count as u64);
        self.status.send_modify(|s| {
            if count > 0 {
                s.events += count as u64;
                s.batches += batches as u64;
                s.last_batch_size = last_batch_size;
            }
            s.events_per_sec = rate;
            s.commits += 1;
            s.last_committed = time;
            s.state = ListenerState::Streaming;
            if let Some(last) = last {
                s.last_change = Some(last);
            }
        });
        Ok(())
    }

    /// After a batch, at `now`: hands the lease over or rotates when asked or due,
    /// refreshes it when due. `Err` ends the tenure.
    async fn after_commit(
        &mut self,
        p: &mut Progress,
        handing_over: bool,
        now: Instant,
    ) -> Result<(), TenureEnd> {
        // Handing over to balance the fleet and rotating end the same way: released at
        // this batch boundary, after the commit.
        let tenure_over = !p.cut.in_transaction()
            && self
                .config
                .max_tenure
                .is_some_and(|max| p.started.elapsed() >= max);
        if handing_over || tenure_over {
            if handing_over {
                tracing::info!(resource = %p.tenure.resource, version = p.tenure.version, "handing the lease over to balance the fleet");
            }
            Box::pin(self.flush(p)).await?;
            return Err(Box::pin(self.give_back(&p.tenure, TenureEnd::Rotated)).await);
        }
        if now < p.next_refresh {
            return Ok(());
        }
        // A commit refreshes the lease too: one staged goes now, one in flight will.
        if let CommitPolicy::Group { every } = self.config.commit {
            if let Some(staged) = &mut p.staged {
                staged.urgent = true;
                self.send_if_due(p, every, now);
            }
            if p.in_flight.is_some() {
                return Ok(());
            }
        }
        Box::pin(self.refresh(&p.tenure)).await?;
        p.next_refresh = Instant::now() + self.config.refresh_interval();
        Ok(())
    }

    /// Refreshes the lease `tenure` holds (an acquire that finds it held by this
    /// listener at that version). `Err` ends the tenure.
    async fn refresh(&mut self, tenure: &Tenure) -> Result<(), TenureEnd> {
        match self.store.acquire(&self.acquire_request()).await {
            Ok(AcquireOutcome::Acquired(l)) if l.version == tenure.version => Ok(()),
            Ok(_) => Err(TenureEnd::LostLock(format!(
                "refresh of version {} failed",
                tenure.version
            ))),
            Err(e) => Err(self
                .give_back(tenure, TenureEnd::Failed(e.to_string()))
                .await),
        }
    }

    /// The handler failed on a batch with `error` (`HandlerError::Failed`: it cannot
    /// process something in it; a store error is no fault of a change and starts the
    /// tenure over instead): hands its changes one at a time to find the one it fails
    /// on, commits what went through before it, records that one on the lease and
    /// ends the tenure. `Ok` when every change went through on its own (the batch is
    /// then committed where the cut lets it be).
    async fn one_at_a_time(
        &mut self,
        p: &mut Progress,
        handed: Handed<'_>,
        error: String,
    ) -> Result<(), TenureEnd> {
        // What went through before this batch is committed first, as it would have
        // been one commit at a time: the search below then commits only its own.
        self.flush(p).await?;
        let Handed {
            events,
            committed_prefix,
            uncommitted_before,
        } = handed;
        let mut failed = None;
        // Handled since the last commit: committed only where the cut ends the handout...
        let mut uncommitted = uncommitted_before.as_ref().map_or(0, |(_, n)| *n);
        // The last of them: what a failure commits up to.
        let mut went_through: Option<(ResumeToken, Option<&ChangeEvent>)> =
            uncommitted_before.map(|(token, _)| (token, None));
        if let [only] = events {
            failed = Some((only, error));
        } else {
            for (i, event) in events.iter().enumerate() {
                let one = std::slice::from_ref(event);
                match self.handler.handle(one, &p.fence).await {
                    Ok(()) => {
                        uncommitted += 1;
                        went_through = Some((event.token.clone(), Some(event)));
                        // Where the handout's own commit lands, between transactions.
                        if i + 1 != committed_prefix || behind(&event.token, p.newest()) {
                            continue;
                        }
                        let past = super::failing::passes(p.failure.as_ref(), one);
                        let last = vec![event.clone()];
                        let token = event.token.clone();
                        let time = token_time(&token);
                        let staged = Staged::handled(token, time, uncommitted, past, last);
                        self.commit_now(p, staged).await?;
                        uncommitted = 0;
                        went_through = None;
                    }
                    Err(HandlerError::Fenced(reason)) => {
                        return Err(TenureEnd::FencedOut(format!(
                            "stale fenced write: {reason}"
                        )))
                    }
                    Err(HandlerError::Failed(e)) => {
                        failed = Some((event, e));
                        break;
                    }
                    Err(e @ HandlerError::Store(_)) => {
                        let end = TenureEnd::Failed(e.to_string());
                        return Err(self.give_back(&p.tenure, end).await);
                    }
                }
            }
        }
        let Some((event, error)) = failed else {
            return Ok(());
        };
        // ...except where a change fails: what went through before it (in this
        // handout, or in earlier parts of its transaction) is committed, inside its
        // transaction if it is in one, so the lease stops right before the failing
        // change and a skip steps over that change alone (the transaction reached the
        // handler apart anyway).
        if let Some((token, before)) = went_through.filter(|(token, _)| !behind(token, p.newest()))
        {
            let past = before.is_some_and(|e| {
                super::failing::passes(p.failure.as_ref(), std::slice::from_ref(e))
            });
            let last = before.cloned().into_iter().collect();
            let time = token_time(&token);
            let staged = Staged::handled(token, time, uncommitted, past, last);
            self.commit_now(p, staged).await?;
        }
        let previous = p.failure.clone();
        Err(self
            .record_failure(&p.tenure, |now| {
                super::failing::handler_failure(event, &error, now, previous.as_ref())
            })
            .await)
    }

    /// Records the failure `failure_at` makes of the server's current time on the lease
    /// `tenure` holds, gives the lease back and ends the tenure: the change's back-off
    /// is then waited out by whoever takes it.
    async fn record_failure(
        &mut self,
        tenure: &Tenure,
        failure_at: impl FnOnce(DateTime<Utc>) -> ChangeFailure,
    ) -> TenureEnd {
        let failure = match self.store.server_now().await {
            Ok(now) => failure_at(now),
            Err(e) => {
                let end = TenureEnd::Failed(format!(
                    "a change failed; reading the server's clock to record it failed: {e}"
                ));
                return self.give_back(tenure, end).await;
            }
        };
        tracing::warn!(resource = %tenure.resource, attempts = failure.attempts, error = %failure.error, "a change failed");
        match self.store.record_failure(tenure, &failure).await {
            Ok(TenureWrite::Done) => {
                if let Some(metrics) = &self.metrics {
                    metrics.change_failed(failure.attempts);
                }
                let end = match self.config.skip_after {
                    Some(after) if failure.attempts >= after => {
                        self.step_over(tenure, failure, after).await
                    }
                    _ => TenureEnd::ChangeFailed(failure),
                };
                match end {
                    TenureEnd::LostLock(_) => end,
                    end => self.give_back(tenure, end).await,
                }
            }
            Ok(TenureWrite::LostLock) => TenureEnd::LostLock(format!(
                "recording the failed change under version {} matched nothing",
                tenure.version
            )),
            Err(e) => {
                let end = TenureEnd::Failed(format!(
                    "{}; recording it on the lease failed: {e}",
                    super::failing::describe(&failure)
                ));
                self.give_back(tenure, end).await
            }
        }
    }

    /// Steps over `failure`'s change by this listener's policy; the tenure ends either
    /// way (the stream is past it, or it keeps failing).
    async fn step_over(
        &mut self,
        tenure: &Tenure,
        failure: ChangeFailure,
        after: u32,
    ) -> TenureEnd {
        let lease = self.config.lease;
        match super::step_over::step_over(&self.store, tenure, &failure, lease, after).await {
            Ok(audit_id) => {
                tracing::warn!(resource = %tenure.resource, audit_id, "stepped over a change by the skip_after policy");
                self.record_error(format!(
                    "stepped over by the skip_after policy after {} attempts (audit record \
                     {audit_id}; undo brings it back): {}",
                    failure.attempts,
                    super::failing::describe(&failure)
                ));
                TenureEnd::SteppedOver
            }
            Err(super::step_over::NotSteppedOver::LostLock(why)) => TenureEnd::LostLock(format!(
                "{}; stepping over it by the skip_after policy: {why}",
                super::failing::describe(&failure)
            )),
            Err(super::step_over::NotSteppedOver::Failed(why)) => {
                self.record_error(format!(
                    "{}; stepping over it by the skip_after policy failed: {why}",
                    super::failing::describe(&failure)
                ));
                TenureEnd::ChangeFailed(failure)
            }
        }
    }

    /// The stream met a change the server cannot return as asked: recorded like a
    /// handler's failure (counted after `previous`), so it is retried no faster than
    /// the back-off, never in a reopen loop.
    async fn unreadable(
        &mut self,
        tenure: &Tenure,
        change: &crate::model::UnreadableChange,
        previous: Option<&ChangeFailure>,
    ) -> TenureEnd {
        let namespace = self.config.watch.to_string();
        self.record_failure(tenure, |now| {
            super::failing::unreadable_failure(change, &namespace, now, previous)
        })
        .await
    }

    /// A lease acquired with a failing change: waits, holding it, until that change's
    /// back-off is over (counted from its latest attempt, by whichever listener), so
    /// the listeners of a lease hand it no more often than that between them.
    async fn wait_out(
        &mut self,
        tenure: &Tenure,
        failure: &ChangeFailure,
    ) -> Result<(), TenureEnd> {
        let retry_at = failure.retry_at(self.config.retry_backoff);
        let now = match self.store.server_now().await {
            Ok(now) => now,
            Err(e) => {
                return Err(self
                    .give_back(tenure, TenureEnd::Failed(e.to_string()))
                    .await)
            }
        };
        let Ok(wait) = (retry_at - now).to_std() else {
            return Ok(());
        };
        self.set_state(ListenerState::Failing);
        self.record_error(super::failing::describe(failure));
        let until = Instant::now() + wait;
        loop {
            let next = (Instant::now() + self.config.refresh_interval()).min(until);
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => {
                    let _ = self.store.release(tenure).await;
                    return Err(TenureEnd::Shutdown);
                }
                () = sleep_until(next) => {}
            }
            if Instant::now() >= until {
                return Ok(());
            }
            if self
                .fleet
                .as_ref()
                .is_some_and(FleetSeat::handover_requested)
            {
                return Err(self.give_back(tenure, TenureEnd::Rotated).await);
            }
            self.refresh(tenure).await?;
        }
    }

    /// `token` with the time to record beside it, where it cannot tell its own (Azure
    /// Cosmos DB's): the newest [`ListenerConfig::document_time_field`] of `events` and
    /// of what was committed before (the newest change this listener has processed).
    /// A heartbeat (no events) keeps the committed time; events none of which has the
    /// field leave the time unknown, and each event without it is reported, never
    /// given a time it does not have.
    fn timed(
        &self,
        token: ResumeToken,
        events: &[ChangeEvent],
        committed: Option<&ResumeToken>,
    ) -> ResumeToken {
        if token.tells_its_time() {
            return token;
        }
        let before = committed.and_then(ResumeToken::recorded_time);
        if events.is_empty() {
            return token.with_recorded_time(before);
        }
        let Some(field) = self.config.document_time_field.as_deref() else {
            return token.with_recorded_time(None);
        };
        let mut newest = None;
        let mut without = 0;
        let mut first_problem = None;
        for event in events {
            match document_time(event, field) {
                Ok(at) => newest = newest.max(Some(at)),
                Err(problem) => {
                    without += 1;
                    first_problem.get_or_insert(problem);
                }
            }
        }
        if let Some(problem) = first_problem {
            let message = format!(
                "document time field {field:?}: {without} of {} changes have no date there \
                 ({problem}); the time of what is committed is {}",
                events.len(),
                if newest.is_some() {
                    "taken from the others"
                } else {
                    "unknown, and so is its lag"
                }
            );
            self.record_error(message);
        }
        token.with_recorded_time(newest.map(|at| at.max(before.unwrap_or(at))))
    }

    /// Bootstrap order: committed token, operator's `resumeAt`, oldest oplog entry.
    /// A partition lease with neither first takes the oldest point of the resource's
    /// earlier split, where there was one (docs/protocol.md, "Partitions").
    async fn start_point(&mut self, lease: &Lease) -> Result<StartPoint, TenureEnd> {
        let point = lease.resume_point();
        if point == ResumePoint::Oldest && self.config.partition.is_some() {
            match super::partitioned::inherited(&self.store, &self.config).await {
                Ok(Some(at)) => return Ok(StartPoint::At(at)),
                Ok(None) => {}
                Err(e) => return Err(TenureEnd::Failed(e.to_string())),
            }
        }
        match point {
            ResumePoint::Token(token) => Ok(StartPoint::After(token)),
            ResumePoint::At(time) => Ok(StartPoint::At(time)),
            ResumePoint::Oldest => match self.config.bootstrap {
                Bootstrap::Now => Ok(StartPoint::Now),
                Bootstrap::Oldest if self.config.source == SourceKind::Capped => {
                    Ok(super::source::CAPPED_OLDEST)
                }
                Bootstrap::Oldest => match self.store.oplog_window().await {
                    // Through mongos, the latest of the shards' oldest entries.
                    Ok(window) => Ok(StartPoint::At(window.first)),
                    // A shard out of reach: it may come back.
                    Err(e @ StoreError::OplogUnknown(_)) => Err(TenureEnd::Failed(e.to_string())),
                    // A missing privilege (here or on a shard): waiting does not
                    // change that; say what would.
                    Err(e) if e.oplog_unreadable() => Err(TenureEnd::Refused(format!(
                        "{} has no resume point and the oplog cannot be read to start from its oldest entry: {e}. \
                         Grant the role (on the replica set, or on every shard of a sharded cluster), or configure bootstrap = now \
                         (ListenerConfig::bootstrap = Bootstrap::Now) to skip changes made before the first commit",
                        self.config.resource
                    ))),
                    Err(e) => Err(TenureEnd::Failed(e.to_string())),
                },
            },
        }
    }

    /// Ends a tenure on a store error, from resume point `at`. A closed stream is
    /// recorded on the lease first (fenced on the tenure, like a commit), so every
    /// view of the lease says INVALIDATED; if that write fails the tenure fails, and
    /// the next one meets the closed stream again and records it then.
    async fn end_on(&mut self, tenure: &Tenure, error: StoreError, at: ResumePoint) -> TenureEnd {
        if let Some(invalidation) = error.invalidation() {
            match self.store.record_invalidation(tenure, &invalidation).await {
                Ok(TenureWrite::Done) => {}
                Ok(TenureWrite::LostLock) => {
                    return TenureEnd::LostLock(format!(
                        "recording the closed stream under version {} matched nothing",
                        tenure.version
                    ))
                }
                Err(e) => {
                    let end = TenureEnd::Failed(format!(
                        "{error}; recording it on the lease failed: {e}"
                    ));
                    return self.give_back(tenure, end).await;
                }
            }
        }
        let end = classify(error, &self.config.resource, self.config.source, at);
        self.give_back(tenure, end).await
    }

    /// Waits, stuck, until an operator moves the resume point; `Err` when shut down
    /// meanwhile. A failing lease watch is opened again after a pause.
    async fn wait_for_operator(&mut self, stuck: Stuck) -> Result<(), ()> {
        tracing::error!(resource = %self.config.resource, state = %stuck.state, message = %stuck.message, "listener stopped; waiting for an operator");
        if let (Some(metrics), ListenerState::HistoryLost) = (&self.metrics, stuck.state) {
            metrics.history_lost();
        }
        self.status.send_modify(|s| {
            s.state = stuck.state;
            s.version = None;
            s.events_per_sec = 0.0;
            s.last_error = Some(stuck.message.clone());
        });
        let invalidated = stuck.state == ListenerState::Invalidated;
        loop {
            let moved = |lease: Option<&_>| operator_moved(lease, &stuck.at, invalidated);
            match wait_on_lease(
                &self.store,
                &self.config.resource,
                None,
                &self.shutdown,
                moved,
            )
            .await
            {
                Ok(Recovery::Moved) => break,
                Ok(Recovery::Shutdown) => return Err(()),
                Err(e) => {
                    tracing::warn!(resource = %self.config.resource, error = %e, "watching the lease for an operator's decision failed");
                    // Still waiting for the operator, and why it cannot watch just now.
                    self.status.send_modify(|s| {
                        s.last_error = Some(format!(
                            "{} (last attempt to watch the lease: {e})",
                            stuck.message
                        ));
                    });
                    let pause = self.backoff.next(self.config.retry_backoff);
                    self.pause(pause).await?;
                }
            }
        }
        tracing::info!(resource = %self.config.resource, "an operator moved the resume point; starting again");
        self.backoff.reset();
        self.status.send_modify(|s| {
            s.state = ListenerState::Acquiring;
            // It said what an operator had to do, and one did.
            s.last_error = None;
        });
        Ok(())
    }

    /// Ends a tenure that did not lose its lease: release it so a standby need not wait for expiry.
    async fn give_back(&mut self, tenure: &Tenure, end: TenureEnd) -> TenureEnd {
        if let Err(e) = self.store.release(tenure).await {
            tracing::warn!(resource = %tenure.resource, error = %e, "could not release the lease");
        }
        end
    }

    /// Waits out the back-off `pause` after failing on `failure`'s change, ending early
    /// once the lease no longer records that change as failing; where the lease cannot
    /// be watched, the whole back-off. `Err` on shutdown.
    async fn wait_out_failure(
        &mut self,
        failure: &ChangeFailure,
        pause: Duration,
    ) -> Result<(), ()> {
        let started = Instant::now();
        let moved_past = |lease: Option<&_>| !still_failing(lease, failure);
        let (resource, deadline) = (&self.config.resource, Some(started + pause));
        match wait_on_lease(&self.store, resource, deadline, &self.shutdown, moved_past).await {
            Ok(Recovery::Moved) => Ok(()),
            Ok(Recovery::Shutdown) => Err(()),
            Err(e) => {
                // Not recorded as the last error: that says what the change failed on.
                tracing::warn!(resource = %self.config.resource, error = %e, "cannot watch the lease while waiting out a failed change's back-off");
                self.pause(pause.saturating_sub(started.elapsed())).await
            }
        }
    }

    /// Sleeps, or returns `Err` when shut down meanwhile.
    async fn pause(&mut self, pause: Duration) -> Result<(), ()> {
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => Err(()),
            () = sleep_until(Instant::now() + pause) => Ok(()),
        }
    }

    fn set_state(&self, state: ListenerState) {
        self.status.send_if_modified(|s| {
            let changed = s.state != state;
            s.state = state;
            if matches!(state, ListenerState::Standby | ListenerState::Acquiring) {
                s.version = None;
                s.events_per_sec = 0.0;
            }
            changed
        });
    }

    /// Records `token`, just committed by `tenure`, as a checkpoint when the last one
    /// is at least [`ListenerConfig::checkpoint_every`] old and none is being written: on
    /// its own task, never part of the commit. A failed one is reported (the listener's
    /// last error, and the log) when the next commit finds it finished.
    fn checkpoint(&mut self, tenure: &Tenure, token: &ResumeToken, now: Instant) {
        let Some(every) = self.config.checkpoint_every else {
            return;
        };
        if let Some(running) = self.checkpoints.running.take() {
            if !running.is_finished() {
                self.checkpoints.running = Some(running);
                return;
            }
            match futures_util::FutureExt::now_or_never(running) {
                Some(Ok(Err(error))) => self.record_error(format!(
                    "could not record a checkpoint (the stream goes on): {error}"
                )),
                Some(Err(panicked)) => self.record_error(format!(
                    "recording a checkpoint failed (the stream goes on): {panicked}"
                )),
                _ => {}
            }
        }
        if self
            .checkpoints
            .last
            .is_some_and(|last| now.duration_since(last) < every)
        {
            return;
        }
        self.checkpoints.last = Some(now);
        let (store, tenure, token) = (self.store.clone(), tenure.clone(), token.clone());
        let kept = self.config.checkpoints_kept;
        self.checkpoints.running = Some(tokio::spawn(async move {
            store.record_checkpoint(&tenure, &token, kept).await
        }));
    }

    fn record_error(&self, error: String) {
        tracing::warn!(resource = %self.config.resource, %error, "listener error");
        self.status.send_modify(|s| s.last_error = Some(error));
    }
}

/// A listener whose task is aborted (a crash, a panic elsewhere in its task) is
/// dropped without returning from `run`: its fleet must stop announcing it all the
/// same, or the plan would keep leaving leases to a listener that is gone.
impl<S: Store, H: Handler> Drop for Listener<S, H> {
    fn drop(&mut self) {
        if let Some(seat) = &self.fleet {
            seat.withdraw();
        }
    }
}

/// Why a listener stops when its lease is gone (`found` `None`) or was created anew
/// below a version it had seen.
/// Why a listener stops at a lease whose fencing version is `i64::MAX`.
fn version_exhausted(resource: &str) -> String {
    format!(
        "lease {resource} is at the largest fencing version ({}): taking it would move the \
         version past what a version can hold, so no listener can take it and this one \
         stopped without writing. Versions grow by one per change of holder, so this is a \
         version set by hand; to go on, recreate the lease under a new resource name (or \
         set a lower version only once every writer fenced by the old ones has stopped)",
        i64::MAX
    )
}

fn version_went_back(resource: &str, seen: i64, found: Option<i64>) -> String {
    let what = match found {
        None => "is gone (its collection dropped or the document deleted)".to_string(),
        Some(found) => format!("is back at version {found} (deleted and created anew)"),
    };
    format!(
        "lease {resource} was at version {seen} and {what}: a fencing version must never \
         go back (writes fenced by the old versions would refuse every new one, and the \
         resume point and operator moves are lost), so this listener stopped without \
         creating it. To go on, create the lease document again (or set its version) at \
         a version above {seen}, then move its resume point with `streamward leases \
         import` from an export if there is one, and restart the listeners \
         (docs/explanation/listener.md §9a)"
    )
}

/// Whether change stream token `token` is behind `committed` by the cluster times
/// decoded from both (`false` where either has none: a capped collection's position
/// or a time recorded beside the token is no order of the stream).
fn behind(token: &ResumeToken, committed: Option<&ResumeToken>) -> bool {
    before(token_time(token), committed.and_then(token_time))
}

/// [`behind`] on the times already decoded.
fn before(time: Option<ClusterTime>, newest: Option<ClusterTime>) -> bool {
    matches!((time, newest), (Some(time), Some(newest)) if time < newest)
}

/// The cluster time a change stream token tells by itself (not one recorded beside it).
fn token_time(token: &ResumeToken) -> Option<ClusterTime> {
    token.decode().ok().map(|d| d.time)
}

/// The date at `field` (a dotted path through embedded documents) of the event's
/// document, or what is wrong with it, naming the document's key.
fn document_time(event: &ChangeEvent, field: &str) -> Result<DateTime<Utc>, String> {
    let key = || bson::Bson::Document(event.document_key.clone()).into_relaxed_extjson();
    let Some(document) = &event.full_document else {
        return Err(format!(
            "the change to {} came with no document (gone before it was read)",
            key()
        ));
    };
    let mut value = None;
    let mut current = Some(document);
    for part in field.split('.') {
        value = current.and_then(|d| d.get(part));
        current = match value {
            Some(bson::Bson::Document(inner)) => Some(inner),
            _ => None,
        };
    }
    match value {
        Some(bson::Bson::DateTime(at)) => Ok(at.to_chrono()),
        Some(other) => Err(format!(
            "in the document {} it is {:?}, not a date",
            key(),
            other.element_type()
        )),
        None => Err(format!("the document {} has no such field", key())),
    }
}

fn classify(error: StoreError, resource: &str, source: SourceKind, at: ResumePoint) -> TenureEnd {
    let history = match source {
        SourceKind::ChangeStream => "the oplog window",
        SourceKind::Capped => "the capped collection",
    };
    match error {
        StoreError::HistoryLost { .. } => TenureEnd::Stuck(Stuck {
            state: ListenerState::HistoryLost,
            message: format!(
                "{error}. Resuming {} is impossible: the history after it is gone, and nothing \
                 was processed past it. Waiting for an operator: rewind {resource} --to TIME \
                 (inside {history}), reset {resource} --to oldest (or --to now \
                 --accept-skip), or rebuild",
                at.describe()
            ),
            at,
        }),
        StoreError::Invalidated { .. } => {
            let recovery = error
                .invalidation()
                .map(|i| i.recovery(resource))
                .unwrap_or_default();
            TenureEnd::Stuck(Stuck {
                state: ListenerState::Invalidated,
                message: format!(
                    "{error}. Nothing after it was processed and the resume point stays {} \
                     (resuming from there closes the stream again). Waiting for an operator: \
                     {recovery}",
                    at.describe()
                ),
                at,
            })
        }
        StoreError::InvalidArgument(_) => TenureEnd::Refused(error.to_string()),
        other => TenureEnd::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::{behind, document_time, Backoff};
    use crate::model::{ClusterTime, ResumeToken, TokenKind};
    use crate::store::{ChangeEvent, Namespace, OperationType};
    use bson::{doc, Document};
    use chrono::TimeZone;
    use std::time::Duration;

    fn upsert(full_document: Option<Document>) -> ChangeEvent {
        ChangeEvent {
            token: ResumeToken::from_document(doc! { "_data": "page" }),
            cluster_time: None,
            operation: OperationType::Upsert,
            ns: Namespace::new("shop", "orders"),
            document_key: doc! { "_id": "o1" },
            full_document,
            details: Default::default(),
        }
    }

    #[test]
    fn a_document_time_is_a_date_at_its_path_and_nothing_else() {
        let at = chrono::Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        let date = bson::DateTime::from_chrono(at);
        let event = upsert(Some(doc! { "updatedAt": date, "meta": { "at": date } }));
        assert_eq!(document_time(&event, "updatedAt"), Ok(at));
        assert_eq!(document_time(&event, "meta.at"), Ok(at));
        let missing = document_time(&event, "createdAt").unwrap_err();
        assert!(
            missing.contains("no such field") && missing.contains("o1"),
            "{missing}"
        );
        let text = upsert(Some(doc! { "updatedAt": "2024-05-01T12:00:00Z" }));
        let wrong = document_time(&text, "updatedAt").unwrap_err();
        assert!(
            wrong.contains("String") && wrong.contains("not a date"),
            "{wrong}"
        );
        let gone = document_time(&upsert(None), "updatedAt").unwrap_err();
        assert!(gone.contains("no document"), "{gone}");
        assert!(
            document_time(&event, "updatedAt.x").is_err(),
            "a date has no fields"
        );
    }

    #[test]
    fn backoff_doubles_up_to_a_minute_and_resets() {
        let mut backoff = Backoff::default();
        let base = Duration::from_secs(1);
        let pauses: Vec<u64> = (0..9).map(|_| backoff.next(base).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        backoff.reset();
        assert_eq!(backoff.next(base), base);
    }

    #[test]
    fn a_token_is_behind_only_by_decoded_cluster_times() {
        let at = |secs, inc| ResumeToken::encode(ClusterTime::new(secs, inc), TokenKind::Event, 0);
        assert!(behind(&at(100, 1), Some(&at(100, 3))));
        assert!(
            !behind(&at(100, 3), Some(&at(100, 3))),
            "the same time is no step back"
        );
        assert!(!behind(&at(101, 0), Some(&at(100, 3))));
        assert!(!behind(&at(100, 1), None), "nothing committed yet");
        // A capped collection's position has no cluster time to order by.
        let entry =
            ResumeToken::from_document(doc! { "_id": bson::oid::ObjectId::from_bytes([0; 12]) });
        assert!(!behind(&entry, Some(&at(100, 3))));
        assert!(!behind(&at(100, 1), Some(&entry)));
    }
}
