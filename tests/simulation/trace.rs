//! What every actor of a run did, as it saw it: the record the checks read and a
//! failing seed dumps. Entries are appended on the simulation's one thread, right
//! after the store call they describe returned to its caller, so their order is the
//! order things happened in.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bson::Document;
use streamward::model::{ClusterTime, Lease, LockKind, ResumePoint};
use streamward::store::Namespace;
use streamward::store::StartPoint;
use tokio::time::Instant;

/// A lease as an observer read it from the store, at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseSeen {
    pub holder: Option<String>,
    pub version: i64,
    /// Not expired by the server's clock at that moment.
    pub live: bool,
    pub kind: LockKind,
    pub resume: Resume,
}

impl LeaseSeen {
    pub fn of(lease: &Lease, now: chrono::DateTime<chrono::Utc>) -> Self {
        Self {
            holder: lease.holder.clone(),
            version: lease.version,
            live: lease.live_holder(now).is_some(),
            kind: lease.kind,
            resume: Resume::of(&lease.resume_point()),
        }
    }
}

/// A resume point, or a stream's start point, by cluster time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// After this time (a token).
    After(ClusterTime),
    /// At this time, inclusive.
    At(ClusterTime),
    /// A lease with no point: from the oldest entry.
    Oldest,
    /// A stream opened at the end of the log.
    Now,
    /// A token whose time cannot be decoded.
    Undecodable,
}

impl Resume {
    pub fn of(point: &ResumePoint) -> Self {
        match point {
            ResumePoint::Token(token) => token.time().map_or(Resume::Undecodable, Resume::After),
            ResumePoint::At(time) => Resume::At(*time),
            ResumePoint::Oldest => Resume::Oldest,
        }
    }

    pub fn of_start(start: &StartPoint) -> Self {
        match start {
            StartPoint::After(token) => token.time().map_or(Resume::Undecodable, Resume::After),
            StartPoint::At(time) => Resume::At(*time),
            StartPoint::Now => Resume::Now,
        }
    }

    /// Whether a change at `time` comes after this point (is read by a stream from it).
    pub fn admits(self, time: ClusterTime) -> bool {
        match self {
            Resume::After(t) => time > t,
            Resume::At(t) => time >= t,
            Resume::Oldest | Resume::Now | Resume::Undecodable => true,
        }
    }
}

/// An injected fault, as the caller met it.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultSeen {
    /// Failed before reaching the server: nothing happened.
    Failed(String),
    /// No primary (a stepdown window): nothing happened.
    Stepdown,
    /// The call was carried out; its reply was lost.
    LostReply(String),
    /// No reply within the time limit; `applied` says whether the server carried it out.
    TimedOut { after: Duration, applied: bool },
}

/// What one store call did and what its caller was told: `done` is what the store
/// did (absent when the call never reached it), `fault` what replaced its reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Call<T> {
    pub done: Option<T>,
    pub fault: Option<FaultSeen>,
}

impl<T> Call<T> {
    /// What the caller saw, when it saw the store's answer.
    pub fn told(&self) -> Option<&T> {
        match self.fault {
            None => self.done.as_ref(),
            Some(_) => None,
        }
    }
}

/// An acquire's answer from the store.
#[derive(Debug, Clone, PartialEq)]
pub enum AcquireDone {
    Acquired { version: i64, resume: Resume },
    HeldByOther,
    Error(String),
}

/// A commit's, release's or renewal's answer from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenureDone {
    Done,
    LostLock,
    Error,
}

/// A fenced write's answer from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteDone {
    Applied,
    Stale,
    Error,
}

/// Which fence a write carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceKind {
    /// `_fence` ≤ the lease version.
    Lease,
    /// `_v` < the source version.
    Source,
    /// A member's `v` < the source version.
    Member,
}

#[derive(Debug, Clone)]
pub enum Obs {
    /// The application wrote a document: the change it made, read through a change
    /// stream opened just before the write.
    Wrote {
        ns: Namespace,
        id: String,
        time: ClusterTime,
        document: Document,
        /// The application's transaction the write was part of (numbered by the
        /// recorder), if any.
        transaction: Option<u64>,
    },
    /// An acquire or refresh, with the lease as an observer read it just before.
    Acquire {
        resource: String,
        before: Option<LeaseSeen>,
        call: Call<AcquireDone>,
    },
    OplogWindow {
        call: Call<Option<ClusterTime>>,
    },
    /// A stream opened (`stream` numbers it), and the oldest entry of the log as an
    /// observer read it right after.
    Open {
        ns: Namespace,
        start: Resume,
        stream: u64,
        call: Call<Result<(), String>>,
        first: Option<ClusterTime>,
    },
    /// A batch handed to the engine by stream `stream`: the changes by cluster time,
    /// `duplicates` of them re-delivered by the fault layer, and the batch's token.
    Batch {
        stream: u64,
        events: Vec<ClusterTime>,
        duplicates: usize,
        token: Option<ClusterTime>,
        call: Call<Result<(), String>>,
        lost_before: Option<ClusterTime>,
    },
    Commit {
        resource: String,
        listener: String,
        version: i64,
        token: Option<ClusterTime>,
        before: Option<LeaseSeen>,
        call: Call<TenureDone>,
    },
    /// A commit's reply reaching the engine, after any reply latency: what it was told
    /// (`Error` for a fault). `Commit` is recorded when the store acted; with group
    /// commits the engine goes on handling until this reply.
    CommitTold {
        resource: String,
        version: i64,
        told: TenureDone,
    },
    Release {
        resource: String,
        listener: String,
        version: i64,
        before: Option<LeaseSeen>,
        call: Call<TenureDone>,
    },
    /// A handler was called with these changes (before any pause): the moment the
    /// engine handed them over, which a late return does not move.
    Given {
        resource: String,
        version: i64,
        events: Vec<ClusterTime>,
    },
    /// What a handler was given and what it returned (the wrapper in `observe`).
    Handled {
        resource: String,
        version: i64,
        events: Vec<ClusterTime>,
        result: Result<(), String>,
    },
    /// A fenced write, with the target's stored fence (the member's `v` for a
    /// member write) read just before and just after it.
    Fenced {
        ns: Namespace,
        id: String,
        kind: FenceKind,
        value: i64,
        before: Option<i64>,
        after: Option<i64>,
        call: Call<WriteDone>,
    },
    /// An operator's compare-and-swap: the lease after it, if it applied.
    Swap {
        resource: String,
        expected: i64,
        call: Call<Result<Option<LeaseSeen>, String>>,
    },
    /// Any other call whose reply a fault replaced (reads, watches, plain writes).
    Faulted {
        call: &'static str,
        fault: FaultSeen,
    },
    /// An actor made `calls` store calls without the virtual clock moving.
    Spin {
        calls: u32,
    },
    /// What an operator did and how it ended.
    Operator(String),
    /// A disturbance the simulation caused (pause, crash, stepdown, …).
    Sim(String),
}

pub struct Entry {
    pub at: Duration,
    pub actor: Arc<str>,
    pub obs: Obs,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>9.3}s {:<28} {}",
            self.at.as_secs_f64(),
            self.actor,
            self.obs
        )
    }
}

/// The simulation's epoch (2026-01-01T00:00:00Z) in cluster-time seconds: times in
/// the dump are `seconds since the epoch # increment`.
const EPOCH_SECS: u32 = 1_767_225_600;

/// A cluster time, short: `24#38`.
pub struct T(pub ClusterTime);

impl fmt::Display for T {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.secs.checked_sub(EPOCH_SECS) {
            Some(secs) => write!(f, "{secs}#{}", self.0.inc),
            None => write!(f, "Timestamp({}, {})", self.0.secs, self.0.inc),
        }
    }
}

pub fn times(times: &[ClusterTime]) -> String {
    let shown: Vec<String> = times.iter().map(|t| T(*t).to_string()).collect();
    format!("[{}]", shown.join(" "))
}

pub fn opt(time: &Option<ClusterTime>) -> String {
    time.map_or_else(|| "-".into(), |t| T(t).to_string())
}

impl fmt::Display for Resume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resume::After(t) => write!(f, "after {}", T(*t)),
            Resume::At(t) => write!(f, "at {}", T(*t)),
            Resume::Oldest => f.write_str("oldest"),
            Resume::Now => f.write_str("now"),
            Resume::Undecodable => f.write_str("an undecodable token"),
        }
    }
}

impl fmt::Display for LeaseSeen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{{} v{} {} {}, {}}}",
            self.holder.as_deref().unwrap_or("no holder"),
            self.version,
            if self.live { "live" } else { "expired" },
            self.kind,
            self.resume
        )
    }
}

fn lease(seen: &Option<LeaseSeen>) -> String {
    seen.as_ref()
        .map_or_else(|| "none".into(), |l| l.to_string())
}

/// `→ what the store did` and, when a fault replaced the reply, `; told: the fault`.
fn call<T: fmt::Debug>(call: &Call<T>) -> String {
    let done = match &call.done {
        Some(done) => format!("-> {done:?}"),
        None => "-> (never reached the store)".into(),
    };
    match &call.fault {
        Some(fault) => format!("{done}; the caller got: {fault:?}"),
        None => done,
    }
}

impl fmt::Display for Obs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Obs::Wrote {
                ns,
                id,
                time,
                document,
                transaction,
            } => {
                write!(f, "wrote {ns} {id} at {}: {document}", T(*time))?;
                match transaction {
                    Some(n) => write!(f, " (transaction {n})"),
                    None => Ok(()),
                }
            }
            Obs::Acquire {
                resource,
                before,
                call: c,
            } => write!(
                f,
                "acquire {resource} (lease was {}) {}",
                lease(before),
                call(c)
            ),
            Obs::OplogWindow { call: c } => write!(f, "oplog window {}", call(c)),
            Obs::Open {
                ns,
                start,
                stream,
                call: c,
                first,
            } => write!(
                f,
                "open stream {stream} on {ns} {start} (oldest entry {}) {}",
                opt(first),
                call(c)
            ),
            Obs::Batch {
                stream,
                events,
                duplicates,
                token,
                call: c,
                lost_before,
            } => {
                write!(f, "stream {stream} batch {}", times(events))?;
                if *duplicates > 0 {
                    write!(f, " ({duplicates} re-delivered)")?;
                }
                write!(f, " token {} {}", opt(token), call(c))?;
                if let Some(first) = lost_before {
                    write!(f, " (oldest entry now {})", T(*first))?;
                }
                Ok(())
            }
            Obs::Commit {
                resource,
                listener,
                version,
                token,
                before,
                call: c,
            } => write!(
                f,
                "commit {resource} {listener} v{version} token {} (lease was {}) {}",
                opt(token),
                lease(before),
                call(c)
            ),
            Obs::CommitTold {
                resource,
                version,
                told,
            } => write!(f, "commit {resource} v{version} told {told:?}"),
            Obs::Release {
                resource,
                listener,
                version,
                before,
                call: c,
            } => write!(
                f,
                "release {resource} {listener} v{version} (lease was {}) {}",
                lease(before),
                call(c)
            ),
            Obs::Given {
                resource,
                version,
                events,
            } => write!(f, "given {resource} v{version} {}", times(events)),
            Obs::Handled {
                resource,
                version,
                events,
                result,
            } => write!(
                f,
                "HANDLED {resource} v{version} {} -> {result:?}",
                times(events)
            ),
            Obs::Fenced {
                ns,
                id,
                kind,
                value,
                before,
                after,
                call: c,
            } => write!(
                f,
                "{kind:?}-fenced write {value} to {ns} {id} (stored {before:?} -> {after:?}) {}",
                call(c)
            ),
            Obs::Swap {
                resource,
                expected,
                call: c,
            } => {
                let done = match &c.done {
                    Some(Ok(Some(after))) => format!("-> applied, now {after}"),
                    Some(Ok(None)) => "-> changed since planned".into(),
                    Some(Err(e)) => format!("-> {e}"),
                    None => "-> (never reached the store)".into(),
                };
                write!(f, "operator swap {resource} at v{expected} {done}")?;
                if let Some(fault) = &c.fault {
                    write!(f, "; the caller got: {fault:?}")?;
                }
                Ok(())
            }
            Obs::Faulted { call, fault } => write!(f, "{call}: {fault:?}"),
            Obs::Spin { calls } => write!(f, "SPINS: {calls} store calls without the clock moving"),
            Obs::Operator(text) | Obs::Sim(text) => f.write_str(text),
        }
    }
}

#[derive(Clone)]
pub struct Trace {
    entries: Arc<Mutex<Vec<Entry>>>,
    start: Instant,
}

impl Trace {
    pub fn new() -> Self {
        Self {
            entries: Arc::new(Mutex::new(Vec::new())),
            start: Instant::now(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push(&self, actor: &Arc<str>, obs: Obs) {
        let at = Instant::now().saturating_duration_since(self.start);
        self.lock().push(Entry {
            at,
            actor: actor.clone(),
            obs,
        });
    }

    /// Runs `f` over the entries from `from` on.
    pub fn read<R>(&self, from: usize, f: impl FnOnce(&[Entry]) -> R) -> R {
        let entries = self.lock();
        f(&entries[from.min(entries.len())..])
    }

    /// Every entry, rendered, for which `keep` holds.
    pub fn render(&self, mut keep: impl FnMut(&Entry) -> bool) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|e| keep(e))
            .map(|e| e.to_string())
            .collect()
    }
}
