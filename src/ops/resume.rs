//! Resume-point arithmetic: where a listener (re)starts from a resume point, and what a
//! move from one resume point to another replays or skips. Pure: no I/O, no clock.

use std::time::Duration;

use super::facts::ChangeCount;
use crate::model::text::{escape_control, group_digits, short_duration};
use crate::model::{
    capped_collection, entry_time, ClusterTime, EntrySpan, EntryStart, Lease, OplogWindow,
    ResumePoint, ResumeToken, WatchedCollection,
};

/// Which way a resume point moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Back: changes already processed are processed again.
    Replay,
    /// Forward: changes not yet processed never will be.
    Skip,
}

/// The changes a move of the resume point replays or skips.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeMove {
    pub direction: Direction,
    /// The collection whose changes are passed over (`None` when the lease does not say).
    pub on: Option<WatchedCollection>,
    pub from: ClusterTime,
    pub to: ClusterTime,
    /// How much history that is (`to − from`).
    pub span: Duration,
    /// Bounded count of the changes on `ns` in `from..=to` (of a capped lease: of the
    /// entries in `entries`); `None` when not counted.
    pub count: Option<ChangeCount>,
    /// For a capped lease: the entries passed over, by `_id`.
    pub entries: Option<EntrySpan>,
}

impl ResumeMove {
    pub fn describe(&self) -> String {
        let verb = match self.direction {
            Direction::Replay => "replayed",
            Direction::Skip => "skipped",
        };
        let (one, many, on) = match self.entries {
            Some(_) => ("entry", "entries", " of capped collection"),
            None => ("change", "changes", " on"),
        };
        let on = self
            .on
            .as_ref()
            .map(|c| format!("{on} {}", escape_control(&c.to_string())))
            .unwrap_or_default();
        let count = match &self.count {
            Some(c) if c.at_least() => format!("at least {} {many}", group_digits(c.counted)),
            Some(c) if c.counted == 1 => format!("1 {one}"),
            Some(c) => format!("{} {many}", group_digits(c.counted)),
            None => format!("an uncounted number of {many}"),
        };
        format!(
            "{count}{on} will be {verb}, {} of history ({} to {})",
            short_duration(self.span),
            self.from,
            self.to
        )
    }
}

/// `resumeToken` and `resumeAt` as an action sets them.
pub(crate) type NewResume = (Option<ResumeToken>, Option<ClusterTime>);

pub(crate) fn next(time: ClusterTime) -> ClusterTime {
    ClusterTime::from_u64(time.as_u64().saturating_add(1))
}

pub(crate) fn prev(time: ClusterTime) -> ClusterTime {
    ClusterTime::from_u64(time.as_u64().saturating_sub(1))
}

/// The first cluster time a listener (re)processes from `point`; `None` when unknown.
pub(crate) fn start_of(point: &ResumePoint, window: Option<&OplogWindow>) -> Option<ClusterTime> {
    match point {
        // A stream resumed after a high-water mark at T returns the changes at T (their
        // tokens sort after it); after a change's token, those after it.
        ResumePoint::Token(token) => match token.kind() {
            Some(crate::model::TokenKind::HighWaterMark) => token.time(),
            _ => token.time().map(next),
        },
        ResumePoint::At(time) => Some(*time),
        ResumePoint::Oldest => window.map(|w| w.first),
    }
}

pub(crate) fn point_of(token: &Option<ResumeToken>, at: Option<ClusterTime>) -> ResumePoint {
    match (token, at) {
        (Some(token), _) => ResumePoint::Token(token.clone()),
        (None, Some(at)) => ResumePoint::At(at),
        (None, None) => ResumePoint::Oldest,
    }
}

/// One move of a resume point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Movement {
    pub direction: Direction,
    /// The inclusive range of times passed over.
    pub from: ClusterTime,
    pub to: ClusterTime,
    /// For a capped lease: the entries passed over, by `_id` (their times are only
    /// whole seconds, too coarse to tell two entries of one second apart).
    pub entries: Option<EntrySpan>,
}

/// Whether where a listener (re)starts from `point` is known: a capped lease's point
/// must name an entry or a time, another's must tell its time.
pub(crate) fn start_known(
    lease: &Lease,
    point: &ResumePoint,
    window: Option<&OplogWindow>,
) -> bool {
    match capped_collection(lease) {
        Some(_) => EntryStart::of(point).is_some(),
        None => start_of(point, window).is_some(),
    }
}

/// From the lease's resume point to `new`: which way, and what is passed over. `None`
/// when nothing moves or an end is unknown.
pub(crate) fn movement(
    lease: &Lease,
    new: &ResumePoint,
    window: Option<&OplogWindow>,
) -> Option<Movement> {
    if capped_collection(lease).is_some() {
        return entry_movement(lease, new, window);
    }
    let current = start_of(&lease.resume_point(), window)?;
    let target = start_of(new, window)?;
    let (direction, from, to) = match target.cmp(&current) {
        std::cmp::Ordering::Less => (Direction::Replay, target, prev(current)),
        std::cmp::Ordering::Greater => (Direction::Skip, current, prev(target)),
        std::cmp::Ordering::Equal => return None,
    };
    Some(Movement {
        direction,
        from,
        to,
        entries: None,
    })
}

/// A capped lease's move, in the order of its collection's entries.
fn entry_movement(
    lease: &Lease,
    new: &ResumePoint,
    window: Option<&OplogWindow>,
) -> Option<Movement> {
    let current = EntryStart::of(&lease.resume_point())?;
    let target = EntryStart::of(new)?;
    let span = EntrySpan::between(current, target)?;
    let time_of = |start: EntryStart| match start {
        EntryStart::Oldest => window.map(|w| w.first),
        EntryStart::From(id) | EntryStart::After(id) => Some(entry_time(&id)),
    };
    Some(Movement {
        direction: if target < current {
            Direction::Replay
        } else {
            Direction::Skip
        },
        from: time_of(span.from)?,
        to: time_of(span.until)?,
        entries: Some(span),
    })
}

pub fn describe_point(point: &ResumePoint) -> String {
    point.describe()
}
