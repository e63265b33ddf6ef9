//! Resume-point arithmetic: where a listener (re)starts from a resume point, and what a
//! move from one resume point to another replays or skips. Pure: no I/O, no clock.

use std::time::Duration;

use super::facts::ChangeCount;
use crate::model::text::{group_digits, short_duration};
use crate::model::{ClusterTime, Lease, OplogWindow, ResumePoint, ResumeToken};
use crate::store::Namespace;

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
    /// The watched namespace (`None` when the lease does not say).
    pub ns: Option<Namespace>,
    pub from: ClusterTime,
    pub to: ClusterTime,
    /// How much history that is (`to − from`).
    pub span: Duration,
    /// Bounded count of the changes on `ns` in `from..=to`; `None` when not counted.
    pub count: Option<ChangeCount>,
}

impl ResumeMove {
    pub fn describe(&self) -> String {
        let verb = match self.direction {
            Direction::Replay => "replayed",
            Direction::Skip => "skipped",
        };
        let on = self
            .ns
            .as_ref()
            .map(|ns| format!(" on {ns}"))
            .unwrap_or_default();
        let count = match &self.count {
            Some(c) if c.at_least() => format!("at least {} changes", group_digits(c.counted)),
            Some(c) if c.counted == 1 => "1 change".to_string(),
            Some(c) => format!("{} changes", group_digits(c.counted)),
            None => "an uncounted number of changes".to_string(),
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
        ResumePoint::Token(token) => token.time().map(next),
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

/// From the lease's resume point to `new`: which way, and the inclusive range of times
/// passed over. `None` when nothing moves or an end is unknown.
pub(crate) fn movement(
    lease: &Lease,
    new: &ResumePoint,
    window: Option<&OplogWindow>,
) -> Option<(Direction, ClusterTime, ClusterTime)> {
    let current = start_of(&lease.resume_point(), window)?;
    let target = start_of(new, window)?;
    match target.cmp(&current) {
        std::cmp::Ordering::Less => Some((Direction::Replay, target, prev(current))),
        std::cmp::Ordering::Greater => Some((Direction::Skip, current, prev(target))),
        std::cmp::Ordering::Equal => None,
    }
}

pub fn describe_point(point: &ResumePoint) -> String {
    point.describe()
}
