//! The invariants, checked against what the actors observed (the [`Trace`]) and
//! against the documents downstream, never against the sandbox's own account of
//! what it did.
//!
//! Per listener, the checker follows the engine's tenures ("holds": from an acquire
//! it was told succeeded to the release, lost lock or failure that ends it) and
//! asserts that within each:
//!
//! - the stream opens exactly at the lease's resume point (its token, its
//!   `resumeAt`, or the oldest entry it read);
//! - the handler is given exactly the changes the stream handed over, in order,
//!   none skipped and none twice, and only while the engine holds the lease (in
//!   batches of the engine's own cut: it never commits inside a transaction);
//! - the changes handled are the watched namespace's changes in order, with no gap
//!   (a change handled again is only one the stream re-delivered);
//! - a commit that applied covers only changes the handler returned `Ok` for, and
//!   lands between the application's transactions, never inside one (unless it
//!   stops right before a change that failed there, or steps over it);
//! - a batch the handler failed on (`HandlerError::Failed`) is handed again one
//!   change at a time, in order, under the same tenure, until one fails (nothing
//!   else is handed meanwhile, and nothing already committed); after a change failed
//!   on its own, nothing more is handled, and the commits allowed are of what went
//!   through before it and the step over that change (`skip_after`), which covers
//!   everything before it and not it;
//! - after a lost lock (a fenced write refused, a commit that matched nothing, a
//!   refresh that did not keep the version) nothing more is handled or committed,
//!   and the lease is not released; after a failure nothing more is committed;
//! - a standby does not spin (bounded acquires per ten seconds).
//!
//! Across listeners, from the observer's reads around each call: a lease is only
//! taken when it was free or expired by the server's clock, commits and releases
//! apply only to the current tenure, and a fenced write never lands where a newer
//! fence (or source version) is already stored.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bson::{Bson, Document};
use streamward::demo::orders::outbox_ns;
use streamward::demo::pets::{self, expected_counts, read_animals, stored_counts, TAGS};
use streamward::model::{AuditRecord, AuditState, ClusterTime, Lease, LockKind, ResumePoint};
use streamward::store::sandbox::SandboxStore;
use streamward::store::{AuditLog, DocumentStore, Namespace, SkippedChange, SkippedLog};

use crate::trace::{
    opt, times, AcquireDone, Call, Entry, FenceKind, LeaseSeen, Obs, Resume, TenureDone, Trace,
    WriteDone, T,
};

/// A broken invariant: which resource, and what happened.
#[derive(Debug, Clone)]
pub struct Violation {
    pub resource: Option<String>,
    pub message: String,
}

impl Violation {
    fn of(resource: &str, message: String) -> Self {
        Self {
            resource: Some(resource.to_string()),
            message,
        }
    }
}

/// The actor name a rebuild's store handle starts with.
pub const REBUILD: &str = "rebuild#";

/// How many acquires a listener that holds nothing may make in ten seconds.
const STANDBY_ACQUIRES_PER_10S: usize = 30;

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    LostLock,
    Failed,
    /// The handler failed on this change, handed alone: the tenure records it and
    /// gives the lease back, or steps over it.
    Failing(ClusterTime),
    Released,
}

/// One engine tenure of one listener, as observed.
#[derive(Debug)]
struct Hold {
    version: i64,
    /// The lease's resume point as the acquire returned it.
    resume: Resume,
    /// The oldest entry, as the listener last read it in this hold.
    window: Option<ClusterTime>,
    start: Option<Resume>,
    stream: Option<u64>,
    /// Changes the stream handed over and not yet given to the handler, in order
    /// (the engine may regroup them: it never commits inside a transaction).
    delivered: VecDeque<ClusterTime>,
    /// After the handler failed on a batch: its changes not handed again alone yet.
    singles: Option<VecDeque<ClusterTime>>,
    /// Changes the handler returned `Ok` for.
    handled: BTreeSet<ClusterTime>,
    /// The newest change handled.
    last: Option<ClusterTime>,
    ended: Option<End>,
    /// A handler call given changes while the hold was active has not returned: a
    /// commit in flight beside it (group commits) may end the hold meanwhile, and the
    /// call still returns into it.
    in_handler: bool,
}

impl Hold {
    fn active(&self) -> bool {
        self.ended.is_none()
    }
}

struct ListenerObs {
    resource: String,
    ns: Namespace,
    hold: Option<Hold>,
    /// When it called acquire while holding nothing, for the last ten seconds.
    standby_acquires: VecDeque<Duration>,
}

#[derive(Default)]
pub struct Checker {
    seen: usize,
    /// Every change the application made, per namespace, in order.
    truth: BTreeMap<Namespace, Vec<ClusterTime>>,
    /// The documents those changes wrote.
    writes: BTreeMap<(Namespace, ClusterTime), (String, Document)>,
    /// The application's transaction each change made in one belongs to.
    in_transaction: BTreeMap<(Namespace, ClusterTime), u64>,
    /// The time of each transaction's last change, per namespace.
    transaction_ends: BTreeMap<(Namespace, u64), ClusterTime>,
    listeners: BTreeMap<Arc<str>, ListenerObs>,
    /// Changes before this time may never have been handled: history lost, a
    /// bootstrap from an oldest entry that had moved on.
    frontier: BTreeMap<Namespace, ClusterTime>,
    /// The same for resets that skipped on purpose, apart: a reset that turns out not
    /// to have been written is taken back.
    skip_frontier: BTreeMap<Namespace, ClusterTime>,
    /// Changes handled by a hold that then committed past them.
    committed: BTreeMap<Namespace, BTreeSet<ClusterTime>>,
    /// Changes a handler failed on when handed alone (`HandlerError::Failed`).
    failed: BTreeMap<Namespace, BTreeSet<ClusterTime>>,
    /// Changes stepped over (a listener's `skip_after` commit that applied, an
    /// operator's skip noted before its write), with how many such steps may stand:
    /// a stream may start past them.
    stepped: BTreeMap<(Namespace, ClusterTime), u32>,
}

impl Checker {
    /// A listener the simulation started: `id` is its engine's actor name.
    pub fn register(&mut self, id: &str, resource: &str, ns: Namespace) {
        self.listeners.insert(
            Arc::from(id),
            ListenerObs {
                resource: resource.to_string(),
                ns,
                hold: None,
                standby_acquires: VecDeque::new(),
            },
        );
    }

    /// An operator skips, on purpose, every change of `ns` before `to` (noted before
    /// the write, which a listener may act on at once); returns what to hand
    /// [`Checker::not_skipped`] if the write turns out not to have been made.
    pub fn skipped(&mut self, ns: &Namespace, to: ClusterTime) -> Option<ClusterTime> {
        let previous = self.skip_frontier.get(ns).copied();
        self.skip_frontier
            .insert(ns.clone(), previous.map_or(to, |p| p.max(to)));
        previous
    }

    /// The skip to `to` was not written: nothing before it was skipped on its account.
    pub fn not_skipped(&mut self, ns: &Namespace, to: ClusterTime, previous: Option<ClusterTime>) {
        if self.skip_frontier.get(ns) == Some(&to) {
            match previous {
                Some(previous) => self.skip_frontier.insert(ns.clone(), previous),
                None => self.skip_frontier.remove(ns),
            };
        }
    }

    /// An operator steps over the one change of `ns` at `at` (noted before the write,
    /// which a listener may act on at once).
    pub fn steps_over(&mut self, ns: &Namespace, at: ClusterTime) {
        *self.stepped.entry((ns.clone(), at)).or_default() += 1;
    }

    /// The step over `at` noted by [`Checker::steps_over`] was not written.
    pub fn not_stepped_over(&mut self, ns: &Namespace, at: ClusterTime) {
        let key = (ns.clone(), at);
        if let Some(count) = self.stepped.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                self.stepped.remove(&key);
            }
        }
    }

    /// Whether a step over the change of `ns` at `at` may stand.
    fn stepped_over(&self, ns: &Namespace, at: ClusterTime) -> bool {
        self.stepped.contains_key(&(ns.clone(), at))
    }

    /// Changes of `ns` a handler failed on when handed alone.
    pub fn failed(&self, ns: &Namespace) -> Option<&BTreeSet<ClusterTime>> {
        self.failed.get(ns)
    }

    /// Changes of `ns` before `first` can no longer be read: those never handled and
    /// committed (nor stepped over) are skipped.
    fn fell_off(&mut self, ns: &Namespace, first: ClusterTime) {
        let committed = self.committed.get(ns);
        let skipped = self.changes(ns).iter().any(|c| {
            *c < first
                && !committed.is_some_and(|done| done.contains(c))
                && !self.stepped_over(ns, *c)
        });
        if skipped {
            self.advance(ns, first);
        }
    }

    fn advance(&mut self, ns: &Namespace, to: ClusterTime) {
        let frontier = self.frontier.entry(ns.clone()).or_default();
        *frontier = (*frontier).max(to);
    }

    /// Changes before this may have been skipped (`None`: nothing was).
    pub fn frontier(&self, ns: &Namespace) -> Option<ClusterTime> {
        self.frontier
            .get(ns)
            .copied()
            .max(self.skip_frontier.get(ns).copied())
    }

    pub fn changes(&self, ns: &Namespace) -> &[ClusterTime] {
        self.truth.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn last_change(&self, ns: &Namespace) -> Option<ClusterTime> {
        self.changes(ns).last().copied()
    }

    pub fn write(&self, ns: &Namespace, time: ClusterTime) -> Option<&(String, Document)> {
        self.writes.get(&(ns.clone(), time))
    }

    pub fn committed(&self, ns: &Namespace) -> Option<&BTreeSet<ClusterTime>> {
        self.committed.get(ns)
    }

    /// Checks every entry recorded since the last call.
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

    fn apply(&mut self, entry: &Entry) -> Result<(), Violation> {
        let actor = entry.actor.clone();
        match &entry.obs {
            Obs::Wrote {
                ns,
                id,
                time,
                document,
                transaction,
            } => {
                if let Some(transaction) = transaction {
                    self.in_transaction
                        .insert((ns.clone(), *time), *transaction);
                    self.transaction_ends
                        .insert((ns.clone(), *transaction), *time);
                }
                let times = self.truth.entry(ns.clone()).or_default();
                if times.last().is_some_and(|last| last >= time) {
                    return Err(Violation {
                        resource: None,
                        message: format!("cluster time went backwards on {ns} at {}", T(*time)),
                    });
                }
                times.push(*time);
                self.writes
                    .insert((ns.clone(), *time), (id.clone(), document.clone()));
                Ok(())
            }
            Obs::Acquire {
                resource,
                before,
                call,
            } => {
                // The store only hands over a lease that was free or had expired.
                if let Some(AcquireDone::Acquired { version, .. }) = &call.done {
                    match before {
                        Some(b)
                            if b.version == *version && b.holder.as_deref() != Some(&*actor) =>
                        {
                            return Err(Violation::of(resource, format!(
                                "{actor} was given version {version} as a refresh, but the lease was {b}"
                            )));
                        }
                        Some(b)
                            if b.version != *version && (b.live || b.kind == LockKind::Bulk) =>
                        {
                            return Err(Violation::of(resource, format!(
                                "{actor} took version {version} of a lease that was live or bulk: {b}"
                            )));
                        }
                        _ => {}
                    }
                }
                self.acquired(&actor, entry.at, call.told().cloned())
            }
            Obs::OplogWindow { call } => {
                if let Some(Some(first)) = call.told() {
                    if let Some(hold) = self.hold_mut(&actor).filter(|h| h.active()) {
                        hold.window = Some(*first);
                    }
                }
                Ok(())
            }
            Obs::Open {
                ns,
                start,
                stream,
                call,
                first,
            } => match call.told() {
                Some(Ok(())) => self.opened(&actor, ns, *start, *stream, *first),
                Some(Err(error)) if error.contains("history lost") => {
                    if let Some(first) = first {
                        self.fell_off(ns, *first);
                    }
                    Ok(())
                }
                _ => Ok(()),
            },
            Obs::Batch {
                stream,
                events,
                call,
                lost_before,
                ..
            } => {
                if let Some(first) = lost_before {
                    if let Some(l) = self.listeners.get(&actor) {
                        let ns = l.ns.clone();
                        self.fell_off(&ns, *first);
                    }
                }
                if events.is_empty() || call.told().is_none() {
                    return Ok(());
                }
                if let Some(hold) = self.hold_mut(&actor).filter(|h| h.active()) {
                    if hold.stream == Some(*stream) {
                        hold.delivered.extend(events.iter().copied());
                    }
                }
                Ok(())
            }
            Obs::Handled {
                resource,
                version,
                events,
                result,
            } => self.handled(&actor, resource, *version, events, result),
            Obs::Commit {
                resource,
                listener,
                version,
                token,
                before,
                call,
            } => {
                let applied = tenure_write(
                    "commit",
                    resource,
                    listener,
                    *version,
                    before.as_ref(),
                    call,
                )?;
                self.committed_by(&actor, resource, *version, *token, applied)
            }
            // The engine learns of a lost lease or a failed commit when the reply
            // reaches it: from then on it hands and commits nothing more.
            Obs::CommitTold { version, told, .. } => {
                if let Some(hold) = self
                    .hold_mut(&actor)
                    .filter(|h| h.version == *version && h.active())
                {
                    match told {
                        TenureDone::Done => {}
                        TenureDone::LostLock => hold.ended = Some(End::LostLock),
                        TenureDone::Error => hold.ended = Some(End::Failed),
                    }
                }
                Ok(())
            }
            Obs::Release {
                resource,
                listener,
                version,
                before,
                call,
            } => {
                tenure_write(
                    "release",
                    resource,
                    listener,
                    *version,
                    before.as_ref(),
                    call,
                )?;
                self.released(&actor, resource, *version)
            }
            Obs::Fenced {
                ns,
                id,
                kind,
                value,
                before,
                after,
                call,
            } => fenced_write(&actor, ns, id, *kind, *value, *before, *after, call.done),
            Obs::Swap { resource, call, .. } => {
                // A rebuild gives the lease back with `resumeAt` T0: what came before
                // is in the rebuilt aggregate, and listeners go on from there.
                if let Some(Ok(Some(after))) = &call.done {
                    if actor.starts_with(REBUILD) && after.kind == LockKind::Update {
                        if let (Resume::At(t0), Some(ns)) = (after.resume, self.namespace(resource))
                        {
                            let before: Vec<ClusterTime> = self
                                .changes(&ns)
                                .iter()
                                .copied()
                                .filter(|c| *c < t0)
                                .collect();
                            self.committed.entry(ns).or_default().extend(before);
                        }
                    }
                }
                Ok(())
            }
            Obs::Spin { calls } => Err(Violation {
                resource: self.listeners.get(&actor).map(|l| l.resource.clone()),
                message: format!(
                    "{actor} made {calls} store calls without the virtual clock moving: a busy loop"
                ),
            }),
            // Judged when the call returns (`Handled`): whether it was given while active.
            Obs::Given { .. } => {
                if let Some(hold) = self.hold_mut(&actor) {
                    hold.in_handler = hold.active();
                }
                Ok(())
            }
            Obs::Faulted { .. } | Obs::Operator(_) | Obs::Sim(_) => Ok(()),
        }
    }

    /// The namespace a resource's listeners watch (from any registered listener).
    fn namespace(&self, resource: &str) -> Option<Namespace> {
        self.listeners
            .values()
            .find(|l| l.resource == resource)
            .map(|l| l.ns.clone())
    }

    fn hold_mut(&mut self, actor: &Arc<str>) -> Option<&mut Hold> {
        self.listeners.get_mut(actor).and_then(|l| l.hold.as_mut())
    }

    fn acquired(
        &mut self,
        actor: &Arc<str>,
        at: Duration,
        told: Option<AcquireDone>,
    ) -> Result<(), Violation> {
        let Some(listener) = self.listeners.get_mut(actor) else {
            return Ok(());
        };
        let holding = listener.hold.as_ref().is_some_and(Hold::active);
        if !holding {
            listener.standby_acquires.push_back(at);
            while listener
                .standby_acquires
                .front()
                .is_some_and(|t| at.saturating_sub(*t) > Duration::from_secs(10))
            {
                listener.standby_acquires.pop_front();
            }
            if listener.standby_acquires.len() > STANDBY_ACQUIRES_PER_10S {
                return Err(Violation::of(
                    &listener.resource,
                    format!(
                        "{actor} spins: {} acquires within ten seconds while holding nothing",
                        listener.standby_acquires.len()
                    ),
                ));
            }
        }
        match (holding, told) {
            (false, Some(AcquireDone::Acquired { version, resume })) => {
                listener.hold = Some(Hold {
                    version,
                    resume,
                    window: None,
                    start: None,
                    stream: None,
                    delivered: VecDeque::new(),
                    singles: None,
                    handled: BTreeSet::new(),
                    last: None,
                    ended: None,
                    in_handler: false,
                });
            }
            (false, _) => {}
            // A refresh: the tenure goes on only if the version stayed.
            (true, told) => {
                let Some(hold) = listener.hold.as_mut() else {
                    return Ok(());
                };
                match told {
                    Some(AcquireDone::Acquired { version, .. }) if version == hold.version => {}
                    Some(AcquireDone::Acquired { .. }) | Some(AcquireDone::HeldByOther) => {
                        hold.ended = Some(End::LostLock)
                    }
                    Some(AcquireDone::Error(_)) | None => hold.ended = Some(End::Failed),
                }
            }
        }
        Ok(())
    }

    fn opened(
        &mut self,
        actor: &Arc<str>,
        ns: &Namespace,
        start: Resume,
        stream: u64,
        first: Option<ClusterTime>,
    ) -> Result<(), Violation> {
        let Some(listener) = self.listeners.get_mut(actor) else {
            return Ok(());
        };
        let resource = listener.resource.clone();
        let Some(hold) = listener.hold.as_mut().filter(|h| h.active()) else {
            return Err(Violation::of(
                &resource,
                format!("{actor} opened a stream while holding no lease"),
            ));
        };
        let expected = match hold.resume {
            Resume::Oldest => hold.window.map(Resume::At),
            other => Some(other),
        };
        if expected != Some(start) {
            return Err(Violation::of(&resource, format!(
                "{actor} v{} opened its stream {start}, but the lease's resume point was {} (oldest entry read: {})",
                hold.version, hold.resume, opt(&hold.window)
            )));
        }
        hold.start = Some(start);
        hold.stream = Some(stream);
        // Changes before the start that no hold ever handled and committed are
        // skipped from here on: allowed only where they fell off the log (history
        // lost, or a bootstrap from an oldest entry that had moved on), or where an
        // operator skipped them on purpose.
        let frontier = self.frontier(ns);
        let committed = self.committed.get(ns);
        let skipped: Vec<ClusterTime> = self
            .changes(ns)
            .iter()
            .copied()
            .filter(|c| !start.admits(*c))
            .filter(|c| !committed.is_some_and(|done| done.contains(c)))
            .filter(|c| !self.stepped_over(ns, *c))
            .filter(|c| frontier.is_none_or(|f| *c >= f))
            .collect();
        if let Some(readable) = skipped.iter().find(|c| first.is_none_or(|f| **c >= f)) {
            return Err(Violation::of(&resource, format!(
                "{actor} starts {start}, past the change at {}, which is still in the log (oldest entry {}) and was never handled and committed",
                T(*readable),
                opt(&first)
            )));
        }
        if let Some(last) = skipped.last() {
            let bound = ClusterTime::from_u64(last.as_u64() + 1);
            self.advance(ns, bound);
        }
        Ok(())
    }

    fn handled(
        &mut self,
        actor: &Arc<str>,
        resource: &str,
        version: i64,
        events: &[ClusterTime],
        result: &Result<(), String>,
    ) -> Result<(), Violation> {
        // Borrowed field by field: the truth is read while a listener is updated.
        let truth = &self.truth;
        let Some(listener) = self.listeners.get_mut(actor) else {
            return Ok(());
        };
        let ns = listener.ns.clone();
        let Some(hold) = listener
            .hold
            .as_mut()
            .filter(|h| h.active() || h.in_handler)
        else {
            return Err(Violation::of(resource, format!(
                "{actor} handled {} under v{version} while holding no lease (its tenure had ended: {:?})",
                times(events),
                listener.hold.as_ref().and_then(|h| h.ended)
            )));
        };
        if hold.version != version {
            return Err(Violation::of(
                resource,
                format!(
                    "{actor} handled under fence v{version} while holding v{}",
                    hold.version
                ),
            ));
        }
        match hold.singles.as_mut() {
            // One at a time: exactly the failed batch's next change, alone.
            Some(singles) => {
                let next = singles.pop_front();
                if next.is_none() || events != next.as_slice() {
                    return Err(Violation::of(resource, format!(
                        "{actor} v{version}: after its handler failed on a batch, the handler was given {}, but the failed batch's next change to hand again alone was {}",
                        times(events),
                        opt(&next)
                    )));
                }
            }
            None => {
                let next: Vec<ClusterTime> =
                    hold.delivered.iter().take(events.len()).copied().collect();
                if next != events {
                    return Err(Violation::of(resource, format!(
                        "{actor} v{version}: the handler was given {}, but the next changes the stream handed over were {}",
                        times(events),
                        times(&next)
                    )));
                }
                hold.delivered.drain(..events.len());
            }
        }
        hold.in_handler = false;
        if let Err(error) = result {
            if !hold.active() {
                // Ended while the call ran (a commit beside it lost the lease): the
                // engine goes no further, whatever the handler answered.
                return Ok(());
            }
            hold.ended = match events {
                _ if !error.starts_with("handler failed") => {
                    Some(if error.starts_with("fenced out") {
                        End::LostLock
                    } else {
                        End::Failed
                    })
                }
                // The change it fails on: recorded on the lease (or stepped over).
                [one] => {
                    hold.singles = None;
                    self.failed.entry(ns.clone()).or_default().insert(*one);
                    Some(End::Failing(*one))
                }
                // Which change it fails on is found by handing them again alone.
                _ => {
                    hold.singles = Some(events.iter().copied().collect());
                    None
                }
            };
            return Ok(());
        }
        if hold.singles.as_ref().is_some_and(VecDeque::is_empty) {
            // Every change of the failed batch went through alone.
            hold.singles = None;
        }
        let changes = truth.get(&ns).map_or(&[][..], Vec::as_slice);
        let start = hold.start.unwrap_or(Resume::Oldest);
        for time in events {
            if hold.last.is_some_and(|last| *time <= last) {
                // Only a change already handled in this hold may come again.
                if !hold.handled.contains(time) {
                    return Err(Violation::of(
                        resource,
                        format!(
                            "{actor} v{version} handled {} out of order (after {})",
                            T(*time),
                            opt(&hold.last)
                        ),
                    ));
                }
                continue;
            }
            let expected = changes
                .iter()
                .find(|c| hold.last.is_none_or(|last| **c > last) && start.admits(**c));
            if expected != Some(time) {
                return Err(Violation::of(resource, format!(
                    "{actor} v{version} handled {}, but the next change of {ns} after {} (from {start}) is {}",
                    T(*time),
                    opt(&hold.last),
                    opt(&expected.copied())
                )));
            }
            hold.handled.insert(*time);
            hold.last = Some(*time);
        }
        Ok(())
    }

    fn committed_by(
        &mut self,
        actor: &Arc<str>,
        resource: &str,
        version: i64,
        token: Option<ClusterTime>,
        applied: bool,
    ) -> Result<(), Violation> {
        // Borrowed field by field: the truth is read while a listener is updated.
        let truth = &self.truth;
        let Some(listener) = self.listeners.get_mut(actor) else {
            return Ok(());
        };
        let ns = listener.ns.clone();
        // After the handler failed on one change, the one commit allowed steps over it.
        let failing = match listener.hold.as_ref().and_then(|h| h.ended) {
            Some(End::Failing(at)) => Some(at),
            _ => None,
        };
        let step_over = failing.filter(|at| token == Some(*at));
        // What went through before a failing change, committed once it failed: the
        // lease then stops right before it, inside its transaction if it is in one.
        let before_failing = failing.is_some_and(|at| token.is_some_and(|t| t < at));
        // A commit lands between transactions, never inside one (a step over a change
        // lands where that change is, on purpose).
        if let (Some(at), None, false) = (token, step_over, before_failing) {
            let key = (ns.clone(), at);
            if let Some(transaction) = self.in_transaction.get(&key) {
                let end = self.transaction_ends.get(&(ns.clone(), *transaction));
                if end.is_some_and(|end| *end > at) {
                    return Err(Violation::of(
                        resource,
                        format!(
                            "{actor} v{version} committed {} inside transaction {transaction}, which goes on to {}",
                            T(at),
                            opt(&end.copied())
                        ),
                    ));
                }
            }
        }
        let Some(hold) = listener
            .hold
            .as_mut()
            .filter(|h| h.active() || step_over.is_some() || before_failing)
        else {
            return Err(Violation::of(
                resource,
                format!(
                "{actor} committed {} v{version} while holding no lease (its tenure had ended: {:?})",
                opt(&token),
                listener.hold.as_ref().and_then(|h| h.ended)
            ),
            ));
        };
        if hold.version != version {
            return Err(Violation::of(
                resource,
                format!(
                    "{actor} committed v{version} while holding v{}",
                    hold.version
                ),
            ));
        }
        if applied {
            let (Some(token), Some(start)) = (token, hold.start) else {
                return Err(Violation::of(
                    resource,
                    format!(
                        "{actor} v{version} committed {token:?} before its stream opened ({:?})",
                        hold.start
                    ),
                ));
            };
            let due: Vec<ClusterTime> = truth
                .get(&ns)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .copied()
                .filter(|c| start.admits(*c) && *c <= token)
                .collect();
            let missing: Vec<ClusterTime> = due
                .iter()
                .copied()
                .filter(|c| !hold.handled.contains(c) && Some(*c) != step_over)
                .collect();
            if !missing.is_empty() {
                return Err(Violation::of(
                    resource,
                    format!(
                    "{actor} v{version} committed {} without its handler having returned Ok for {}",
                    T(token),
                    times(&missing)
                ),
                ));
            }
            self.committed
                .entry(ns.clone())
                .or_default()
                .extend(due.iter().copied().filter(|c| Some(*c) != step_over));
            if let Some(at) = step_over {
                *self.stepped.entry((ns, at)).or_default() += 1;
            }
        }
        Ok(())
    }

    fn released(
        &mut self,
        actor: &Arc<str>,
        resource: &str,
        version: i64,
    ) -> Result<(), Violation> {
        let Some(hold) = self.hold_mut(actor) else {
            return Ok(());
        };
        if hold.version != version {
            return Ok(());
        }
        if hold.ended == Some(End::LostLock) {
            return Err(Violation::of(
                resource,
                format!(
                    "{actor} released v{version} after losing it (a lost lock is not released)"
                ),
            ));
        }
        hold.ended = Some(End::Released);
        Ok(())
    }
}

/// A write conditional on `listener`'s tenure at `version` (a commit, a release)
/// applies exactly when the lease it met was that tenure. Returns whether it applied.
fn tenure_write(
    what: &str,
    resource: &str,
    listener: &str,
    version: i64,
    before: Option<&LeaseSeen>,
    call: &Call<TenureDone>,
) -> Result<bool, Violation> {
    let applied = call.done == Some(TenureDone::Done);
    let current =
        before.is_some_and(|b| b.holder.as_deref() == Some(listener) && b.version == version);
    if applied != current && call.done.is_some() {
        return Err(Violation::of(
            resource,
            format!(
                "a {what} by {listener} v{version} {} while the lease was {before:?}",
                if applied { "applied" } else { "was refused" }
            ),
        ));
    }
    Ok(applied)
}

/// A fenced write, from the target's stored fence before and after it.
#[allow(clippy::too_many_arguments)]
fn fenced_write(
    actor: &str,
    ns: &Namespace,
    id: &str,
    kind: FenceKind,
    value: i64,
    before: Option<i64>,
    after: Option<i64>,
    done: Option<WriteDone>,
) -> Result<(), Violation> {
    let admissible = match kind {
        FenceKind::Lease => before.is_none_or(|b| b <= value),
        FenceKind::Source | FenceKind::Member => before.is_none_or(|b| b < value),
    };
    let changed = after != before;
    let problem = match done {
        Some(WriteDone::Applied) if !admissible => Some("landed over a newer fence"),
        Some(WriteDone::Applied) if after != Some(value) => {
            Some("said applied but the target does not carry its fence")
        }
        Some(WriteDone::Stale) if admissible => Some("was refused though the fence admitted it"),
        Some(WriteDone::Stale) if changed => Some("was refused but changed the target"),
        _ if changed && (!admissible || after != Some(value)) => {
            Some("moved the target's fence somewhere it may not go")
        }
        _ => None,
    };
    match problem {
        Some(problem) => Err(Violation {
            resource: None,
            message: format!(
                "{actor}: a {kind:?}-fenced write of {value} to {ns} {id} {problem} (stored before {before:?}, after {after:?}, outcome {done:?})"
            ),
        }),
        None => Ok(()),
    }
}

/// A lease whose resume point is past the change its failure record names, and
/// still records it: a commit past the change, and every operator move of the point,
/// removes the record with it. `None` when the lease is as it should be.
pub fn failure_outlived(lease: &Lease) -> Option<String> {
    let failure = lease.failure.as_ref()?;
    let at = failure.at?;
    let past = match lease.resume_point() {
        ResumePoint::Token(token) => token.time().is_some_and(|t| t >= at),
        ResumePoint::At(t) => t > at,
        ResumePoint::Oldest => false,
    };
    past.then(|| {
        format!(
            "lease {} v{} resumes {}, past the change at {} it still records as failing ({} attempts): the record outlived its change",
            lease.resource,
            lease.version,
            Resume::of(&lease.resume_point()),
            T(at),
            failure.attempts
        )
    })
}

/// A change kept in `streamward.skipped`, with the audit record its id names, as the
/// store holds them.
#[derive(Debug, Clone)]
pub struct Kept {
    pub skipped: SkippedChange,
    pub audit: Option<AuditRecord>,
}

impl Kept {
    /// The change's cluster time, by its token.
    pub fn at(&self) -> Option<ClusterTime> {
        self.skipped.token.time()
    }

    /// Whether the skip may have moved the resume point: its audit record says
    /// applied, or pending (the skip's commit or swap lost its reply). A record
    /// finalized as not applied kept the change, but nothing stepped over it.
    fn stands(&self) -> bool {
        self.audit
            .as_ref()
            .is_some_and(|a| matches!(a.state, AuditState::Applied | AuditState::Pending))
    }
}

/// Every change kept as skipped for `resource`, each with its audit record, read from
/// the store.
pub async fn kept(store: &SandboxStore, resource: &str) -> Result<Vec<Kept>, String> {
    let skipped = store
        .skipped_changes(resource, usize::MAX)
        .await
        .map_err(|e| format!("reading the skipped changes of {resource}: {e}"))?;
    let mut kept = Vec::new();
    for skipped in skipped {
        let audit = store
            .audit_record(&skipped.audit_id)
            .await
            .map_err(|e| format!("reading audit record {}: {e}", skipped.audit_id))?;
        kept.push(Kept { skipped, audit });
    }
    Ok(kept)
}

/// What a resource's changes came to, for [`nothing_missed`].
pub struct Outcome<'a> {
    pub resource: &'a str,
    /// Every change of the watched namespace (of the lease's partition), in order.
    pub changes: Vec<ClusterTime>,
    /// The lease's resume point at the end: every change before it is judged.
    pub end: Resume,
    /// Changes handled by a handler call whose commit stands (or covered by a
    /// rebuild that applied).
    pub handled: &'a dyn Fn(ClusterTime) -> bool,
    /// Changes before this may have been lost with the history, or skipped on purpose
    /// by a reset to now (which keeps no skipped record).
    pub lost_before: Option<ClusterTime>,
    /// Changes a handler failed on when handed alone.
    pub failed: Option<&'a BTreeSet<ClusterTime>>,
}

/// The poison invariant, from the store's state at the end (the lease's point, the
/// skipped collection, the audit log): every change before the lease's point was
/// handled, or is kept in `streamward.skipped` under an audit record of a skip of this
/// resource that stands; nothing else is missed. And nothing is kept that no handler
/// failed on: every kept change names a change of the namespace some handler failed
/// on when handed alone, with the failure it recorded naming it too.
pub fn nothing_missed(outcome: &Outcome<'_>, kept: &[Kept]) -> Result<(), String> {
    let resource = outcome.resource;
    let mut standing = BTreeSet::new();
    for k in kept {
        let id = &k.skipped.audit_id;
        let Some(audit) = &k.audit else {
            return Err(format!(
                "a change of {resource} is kept as skipped under audit record {id}, but the audit log holds no such record"
            ));
        };
        if audit.action != "skip" || audit.resource != resource {
            return Err(format!(
                "a change of {resource} is kept as skipped under audit record {id}, which records a {} of {}",
                audit.action, audit.resource
            ));
        }
        let Some(at) = k.at().filter(|t| outcome.changes.contains(t)) else {
            return Err(format!(
                "the skipped change kept under {id} (token {}) names no change of {resource}'s namespace",
                k.skipped.token
            ));
        };
        if !outcome.failed.is_some_and(|f| f.contains(&at)) {
            return Err(format!(
                "the change at {} of {resource} was skipped (audit record {id}, {}), but no handler ever failed on it",
                T(at),
                audit.state
            ));
        }
        if let Some(failure) = k.skipped.failure.as_ref().filter(|f| f.at != Some(at)) {
            return Err(format!(
                "the change at {} of {resource} is kept with the failure of another change (at {})",
                T(at),
                opt(&failure.at)
            ));
        }
        if k.stands() {
            standing.insert(at);
        }
    }
    for at in outcome.changes.iter().copied() {
        if outcome.end.admits(at)
            || (outcome.handled)(at)
            || standing.contains(&at)
            || outcome.lost_before.is_some_and(|f| at < f)
        {
            continue;
        }
        let kept_not_applied = kept.iter().any(|k| k.at() == Some(at));
        return Err(format!(
            "the change at {} of {resource} is behind its lease's point ({}) but was neither handled (no commit of it stands) nor kept in streamward.skipped with an audit record of a skip that stands{} (nothing before {} was lost or skipped on purpose)",
            T(at),
            outcome.end,
            if kept_not_applied {
                " (it is kept, under a record of a skip not applied)"
            } else {
                ""
            },
            opt(&outcome.lost_before)
        ));
    }
    Ok(())
}

/// What the downstream documents must say once everything has caught up.
pub struct Downstream<'a> {
    pub store: &'a SandboxStore,
    pub checker: &'a Checker,
}

impl Downstream<'_> {
    /// Every tag document holds every animal at its current version, and its counts
    /// equal a recomputation from the animals.
    pub async fn aggregates(&self) -> Result<(), String> {
        let animals = read_animals(self.store).await.map_err(|e| e.to_string())?;
        let documents = self
            .store
            .find_all(&pets::aggregates_ns())
            .await
            .map_err(|e| e.to_string())?;
        for tag in TAGS {
            let document = documents.iter().find(|d| d.get_str("_id") == Ok(tag));
            let members = document.and_then(|d| d.get_document("members").ok());
            for animal in &animals {
                let member = members.and_then(|m| m.get_document(&animal.id).ok());
                let version = member.and_then(|m| m.get_i64("v").ok());
                let value = member.and_then(|m| m.get_str("value").ok());
                let expected = animal
                    .tags
                    .iter()
                    .any(|t| t == tag)
                    .then_some(animal.location.as_str());
                if version != Some(animal.version) || value != expected {
                    return Err(format!(
                        "tag {tag}: member {} is {member:?}, but the animal is at v{} {expected:?}",
                        animal.id, animal.version
                    ));
                }
            }
        }
        let stored = stored_counts(self.store).await.map_err(|e| e.to_string())?;
        let expected = expected_counts(&animals);
        if stored != expected {
            return Err(format!(
                "the aggregate counts {stored:?} differ from a recomputation {expected:?}"
            ));
        }
        Ok(())
    }

    /// One outbox message per order change, with that change's content; nothing
    /// else. Changes before the frontier (skipped on purpose, or lost) and changes
    /// kept as skipped (`skipped`, read from the store) may be missing; changes a
    /// listener handled and committed may not.
    pub async fn outbox(
        &self,
        orders: &Namespace,
        skipped: &BTreeSet<ClusterTime>,
    ) -> Result<(), String> {
        let messages = self
            .store
            .find_all(&outbox_ns())
            .await
            .map_err(|e| e.to_string())?;
        // An order's first write inserts it ("created"), every later one replaces it.
        let mut seen = BTreeSet::new();
        let created: BTreeSet<ClusterTime> = self
            .checker
            .changes(orders)
            .iter()
            .filter(|t| {
                self.checker
                    .write(orders, **t)
                    .is_some_and(|(order, _)| seen.insert(order.clone()))
            })
            .copied()
            .collect();
        let mut per_change: BTreeMap<ClusterTime, Vec<&Document>> = BTreeMap::new();
        for message in &messages {
            let Some(Bson::Timestamp(ts)) = message.get("clusterTime") else {
                return Err(format!("a message without a cluster time: {message}"));
            };
            let time = ClusterTime::from(*ts);
            let Some((order, written)) = self.checker.write(orders, time) else {
                return Err(format!(
                    "message {message} names no change the application made"
                ));
            };
            let status = written.get_str("status").ok();
            let event = if created.contains(&time) {
                "created"
            } else {
                "changed"
            };
            if message.get_str("order").ok() != Some(order.as_str())
                || message.get_str("status").ok() != status
                || message.get_str("event").ok() != Some(event)
            {
                return Err(format!(
                    "message {message} does not match the change it names: {order} {written}"
                ));
            }
            per_change.entry(time).or_default().push(message);
        }
        if let Some((time, twice)) = per_change.iter().find(|(_, m)| m.len() > 1) {
            return Err(format!(
                "{} messages for the change at {}: {twice:?}",
                twice.len(),
                T(*time)
            ));
        }
        let frontier = self.checker.frontier(orders);
        let committed = self.checker.committed(orders);
        // A retired order's delete (recorded as an empty write): its handler writes no
        // message and removes the order's messages, and a handler may have applied that
        // in a batch whose commit then failed (and the delete itself been skipped by a
        // reset later). So once the application deleted an order, its messages may be
        // gone, committed or not.
        let retired: BTreeSet<&String> = self
            .checker
            .changes(orders)
            .iter()
            .filter_map(|t| self.checker.write(orders, *t))
            .filter(|(_, written)| written.is_empty())
            .map(|(order, _)| order)
            .collect();
        for time in self.checker.changes(orders) {
            if per_change.contains_key(time) {
                continue;
            }
            match self.checker.write(orders, *time) {
                Some((_, written)) if written.is_empty() => continue,
                Some((order, _)) if retired.contains(order) => continue,
                _ => {}
            }
            if committed.is_some_and(|c| c.contains(time)) {
                return Err(format!(
                    "the change at {} was handled and committed, but has no message",
                    T(*time)
                ));
            }
            if skipped.contains(time) {
                continue;
            }
            if frontier.is_none_or(|f| *time >= f) {
                return Err(format!(
                    "the change at {} has no message (nothing before {} was skipped)",
                    T(*time),
                    opt(&frontier)
                ));
            }
        }
        Ok(())
    }
}

/// The poison rules on hand-made histories: a failed batch handed again one change at
/// a time, the failing change stepped over and kept, passes; a change dropped without
/// a skipped record, a record for a change that never failed, a committed change
/// handed again alone, a commit past a failed change that is no step over, and a
/// stream started past a failed change nobody stepped over, are each reported.
#[cfg(test)]
mod poison_histories {
    use super::*;
    use bson::doc;
    use chrono::{TimeZone, Utc};
    use streamward::model::{ChangeFailure, FailureCause, ResumeToken, TokenKind};
    use streamward::store::{AuditContext, AuditIntent};

    const EPOCH: u32 = 1_767_225_600;
    const T0: ClusterTime = ClusterTime::new(EPOCH + 1, 1);
    const A: ClusterTime = ClusterTime::new(EPOCH + 2, 1);
    const X: ClusterTime = ClusterTime::new(EPOCH + 2, 2);
    const B: ClusterTime = ClusterTime::new(EPOCH + 3, 1);
    const POISON: &str = "handler failed: poison change";

    fn ns() -> Namespace {
        Namespace::new("db", "coll")
    }

    fn entry(actor: &str, obs: Obs) -> Entry {
        Entry {
            at: Duration::ZERO,
            actor: Arc::from(actor),
            obs,
        }
    }

    fn wrote(time: ClusterTime) -> Entry {
        let obs = Obs::Wrote {
            ns: ns(),
            id: format!("k{}", time.inc),
            time,
            document: doc! {},
            transaction: None,
        };
        entry("workload", obs)
    }

    fn lease(holder: &str, version: i64) -> Option<LeaseSeen> {
        Some(LeaseSeen {
            holder: Some(holder.into()),
            version,
            live: true,
            kind: LockKind::Update,
            resume: Resume::Oldest,
        })
    }

    fn done<T>(done: T) -> Call<T> {
        Call {
            done: Some(done),
            fault: None,
        }
    }

    /// `actor` acquires `version`, resuming after `after`, and opens stream `stream` there.
    fn holds(actor: &str, version: i64, after: ClusterTime, stream: u64) -> Vec<Entry> {
        let resume = Resume::After(after);
        let acquire = Obs::Acquire {
            resource: "r".into(),
            before: None,
            call: done(AcquireDone::Acquired { version, resume }),
        };
        let open = Obs::Open {
            ns: ns(),
            start: resume,
            stream,
            call: done(Ok(())),
            first: None,
        };
        vec![entry(actor, acquire), entry(actor, open)]
    }

    fn batch(actor: &str, stream: u64, events: &[ClusterTime]) -> Entry {
        let obs = Obs::Batch {
            stream,
            events: events.to_vec(),
            duplicates: 0,
            token: events.last().copied(),
            call: done(Ok(())),
            lost_before: None,
        };
        entry(actor, obs)
    }

    fn handled(actor: &str, version: i64, events: &[ClusterTime], ok: bool) -> Entry {
        let obs = Obs::Handled {
            resource: "r".into(),
            version,
            events: events.to_vec(),
            result: if ok { Ok(()) } else { Err(POISON.into()) },
        };
        entry(actor, obs)
    }

    fn commit(actor: &str, version: i64, token: ClusterTime) -> Entry {
        let obs = Obs::Commit {
            resource: "r".into(),
            listener: actor.into(),
            version,
            token: Some(token),
            before: lease(actor, version),
            call: done(TenureDone::Done),
        };
        entry(actor, obs)
    }

    fn release(actor: &str, version: i64) -> Entry {
        let obs = Obs::Release {
            resource: "r".into(),
            listener: actor.into(),
            version,
            before: lease(actor, version),
            call: done(TenureDone::Done),
        };
        entry(actor, obs)
    }

    /// `a` is given A and X, fails, hands A alone (committed) and X alone (fails) and
    /// gives the lease back.
    fn a_fails_on_x_and_gives_the_lease_back() -> Vec<Entry> {
        let mut history = vec![wrote(A), wrote(X), wrote(B)];
        history.extend(holds("a", 1, T0, 1));
        history.extend([
            batch("a", 1, &[A, X]),
            handled("a", 1, &[A, X], false),
            handled("a", 1, &[A], true),
            commit("a", 1, A),
            handled("a", 1, &[X], false),
            release("a", 1),
        ]);
        history
    }

    /// [`a_fails_on_x_and_gives_the_lease_back`]; then `b` takes it, fails on X again, alone, and steps over it
    /// (its `skip_after` policy); `a` takes it again and handles B.
    fn legitimate() -> Vec<Entry> {
        let mut history = a_fails_on_x_and_gives_the_lease_back();
        history.extend(holds("b", 2, A, 2));
        history.extend([
            batch("b", 2, &[X, B]),
            handled("b", 2, &[X, B], false),
            handled("b", 2, &[X], false),
            commit("b", 2, X),
            release("b", 2),
        ]);
        history.extend(holds("a", 3, X, 3));
        history.extend([
            batch("a", 3, &[B]),
            handled("a", 3, &[B], true),
            commit("a", 3, B),
        ]);
        history
    }

    /// The application writes A and X in one transaction, then B; `a` is given all
    /// three and commits at `at`.
    fn a_commits_a_transaction_at(at: ClusterTime) -> Vec<Entry> {
        let in_transaction = |time: ClusterTime| {
            let obs = Obs::Wrote {
                ns: ns(),
                id: format!("k{}", time.inc),
                time,
                document: doc! {},
                transaction: Some(0),
            };
            entry("workload", obs)
        };
        let mut history = vec![in_transaction(A), in_transaction(X), wrote(B)];
        history.extend(holds("a", 1, T0, 1));
        history.extend([
            batch("a", 1, &[A, X, B]),
            handled("a", 1, &[A, X, B], true),
            commit("a", 1, at),
        ]);
        history
    }

    #[test]
    fn a_commit_inside_a_transaction_is_a_violation() {
        let inside = checker(&a_commits_a_transaction_at(A))
            .err()
            .map(|v| v.message);
        assert!(
            inside
                .as_deref()
                .is_some_and(|m| m.contains("inside transaction 0")),
            "{inside:?}"
        );
        for between in [X, B] {
            if let Err(v) = checker(&a_commits_a_transaction_at(between)) {
                panic!(
                    "a commit at {between:?} is between transactions: {}",
                    v.message
                );
            }
        }
    }

    fn checker(history: &[Entry]) -> Result<Checker, Violation> {
        let mut checker = Checker::default();
        for listener in ["a", "b"] {
            checker.register(listener, "r", ns());
        }
        for entry in history {
            checker.apply(entry)?;
        }
        Ok(checker)
    }

    /// The change at `at` kept as skipped, under an applied `skip` of `r`.
    fn kept(at: ClusterTime) -> Kept {
        let now = Utc.timestamp_opt(i64::from(EPOCH) + 10, 0).unwrap();
        let token = ResumeToken::encode(at, TokenKind::Event, 0);
        let failure = ChangeFailure::first(
            Some(token.clone()),
            Some(at),
            "db.coll",
            "insert",
            "{}",
            POISON,
            FailureCause::Handler,
            now,
        );
        let intent = AuditIntent {
            resource: "r".into(),
            context: AuditContext {
                operator: "b".into(),
                action: "skip".into(),
                reason: None,
            },
            before: None,
            intended: None,
        };
        let mut audit = intent.pending_record("audit-1".into(), now);
        audit.state = AuditState::Applied;
        Kept {
            skipped: SkippedChange {
                audit_id: "audit-1".into(),
                resource: "r".into(),
                operator: "b".into(),
                at: now,
                token,
                failure: Some(failure),
                entry: None,
                entry_missing: None,
            },
            audit: Some(audit),
        }
    }

    /// The end-of-run invariant on `checker`, the lease resuming after B.
    fn judge(checker: &Checker, kept: &[Kept]) -> Result<(), String> {
        let committed = checker.committed(&ns());
        let handled = |at| committed.is_some_and(|c| c.contains(&at));
        let outcome = Outcome {
            resource: "r",
            changes: checker.changes(&ns()).to_vec(),
            end: Resume::After(B),
            handled: &handled,
            lost_before: checker.frontier(&ns()),
            failed: checker.failed(&ns()),
        };
        nothing_missed(&outcome, kept)
    }

    #[test]
    fn a_poison_change_handed_alone_stepped_over_and_kept_passes() {
        let checker = checker(&legitimate()).expect("a legitimate history");
        assert_eq!(judge(&checker, &[kept(X)]), Ok(()));
    }

    #[test]
    fn a_change_dropped_without_a_skipped_record_is_a_violation() {
        let checker = checker(&legitimate()).expect("the trace alone cannot tell");
        let error = judge(&checker, &[]).expect_err("X is neither handled nor kept");
        assert!(
            error.contains(&T(X).to_string()) && error.contains("neither handled"),
            "{error}"
        );
        // Kept, but under a skip that was not applied: nothing stepped over it.
        let mut not_applied = kept(X);
        not_applied.audit.as_mut().unwrap().state = AuditState::NotApplied;
        let error = judge(&checker, &[not_applied]).expect_err("the skip was not applied");
        assert!(error.contains("a skip not applied"), "{error}");
        // Kept under an audit record the audit log does not hold.
        let mut orphan = kept(X);
        orphan.audit = None;
        let error = judge(&checker, &[orphan]).expect_err("no audit record");
        assert!(error.contains("holds no such record"), "{error}");
    }

    #[test]
    fn a_skipped_record_for_a_change_that_never_failed_is_a_violation() {
        let checker = checker(&legitimate()).expect("a legitimate history");
        let error = judge(&checker, &[kept(X), kept(B)]).expect_err("B never failed");
        assert!(
            error.contains(&T(B).to_string()) && error.contains("no handler ever failed"),
            "{error}"
        );
    }

    #[test]
    fn a_committed_change_handed_again_alone_is_a_violation() {
        let mut history = vec![wrote(A), wrote(X), wrote(B)];
        history.extend(holds("a", 1, T0, 1));
        history.extend([
            batch("a", 1, &[A]),
            handled("a", 1, &[A], true),
            commit("a", 1, A),
            batch("a", 1, &[X, B]),
            handled("a", 1, &[X, B], false),
            // A was committed before this batch: not one of its changes.
            handled("a", 1, &[A], true),
        ]);
        let error = checker(&history).err().expect("A handed again");
        assert!(
            error.message.contains("the failed batch's next change"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_commit_past_a_failed_change_that_is_no_step_over_is_a_violation() {
        let mut history = vec![wrote(A), wrote(X), wrote(B)];
        history.extend(holds("a", 1, T0, 1));
        history.extend([
            batch("a", 1, &[A, X, B]),
            handled("a", 1, &[A, X, B], false),
            handled("a", 1, &[A], true),
            commit("a", 1, A),
            handled("a", 1, &[X], false),
            commit("a", 1, B),
        ]);
        let error = checker(&history).err().expect("B committed after X failed");
        assert!(
            error.message.contains("while holding no lease"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_stream_started_past_a_failed_change_nobody_stepped_over_is_a_violation() {
        let mut history = a_fails_on_x_and_gives_the_lease_back();
        history.extend(holds("b", 2, X, 2));
        let error = checker(&history).err().expect("X skipped unnoted");
        assert!(
            error.message.contains("never handled and committed"),
            "{}",
            error.message
        );
    }
}
