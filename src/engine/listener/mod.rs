//! The listener runtime (docs/protocol.md §6): acquire → resume/bootstrap → stream → handle
//! → commit → refresh, with standby, rotation and lost-lock handling, and one way of
//! waiting for an operator where it cannot go on by itself (history lost, a closed
//! stream).

mod commit;
mod failure;
mod handout;
mod stuck;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::commits::{CommitReply, CommitTask, InFlight, Staged};
use super::fleet::{Fleet, FleetSeat};
use super::observer::ListenerObserver;
use super::standby::{
    note_version, operator_moved, still_failing, wait_for_vacancy, wait_on_lease, Recovery, Vacancy,
};
use super::status::{ListenerSnapshot, ListenerState, RateMeter};
use super::transaction_cut::{Handout, TransactionCut};
use super::{Bootstrap, CommitPolicy, Handler, HandlerError, ListenerConfig};
use chrono::{DateTime, Utc};

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
    /// Whether `staged`'s commit clears the lease's record of a failing change: what it
    /// covers got past that change.
    fn clears_failure(&self, staged: &Staged) -> bool {
        staged.past_failure
            || crate::engine::failing::passed_by(self.failure.as_ref(), &staged.token)
    }

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
    /// Who is told what happens, when the host application asked (its metrics).
    observer: Option<Arc<dyn ListenerObserver>>,
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
            observer: None,
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

    /// Tells `observer` what happens as it goes (`metrics::EngineMetrics::observer`).
    pub fn with_observer(mut self, observer: Arc<dyn ListenerObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// A live view of this listener's state and counters.
    pub fn subscribe(&self) -> watch::Receiver<ListenerSnapshot> {
        self.status.subscribe()
    }

    pub async fn run(mut self) -> ListenerExit {
        if let Some(observer) = self.observer.clone() {
            // Every state goes through the status channel: told from there, on a task
            // of its own that ends when the listener is dropped.
            let mut states = self.status.subscribe();
            tokio::spawn(async move {
                loop {
                    let state = states.borrow_and_update().state;
                    observer.state(state);
                    if states.changed().await.is_err() {
                        break;
                    }
                }
            });
        }
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
        if let Some(observer) = &self.observer {
            observer.lost_lock();
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

/// Why a listener stops when its lease is gone (`found` `None`) or was created anew
/// below a version it had seen.
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

#[cfg(test)]
mod tests {
    use super::commit::document_time;
    use super::{behind, Backoff};
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
