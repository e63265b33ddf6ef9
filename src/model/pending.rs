//! What is left to process on a lease: the changes after its resume point, as counted.

use std::fmt;

use super::{ClusterTime, OplogWindow};

/// Changes on a lease's watched collection after its resume point: what is left to
/// process, counted up to a bound on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// Exactly this many (zero: caught up, whatever its token's age).
    Counted(u64),
    /// At least this many: the count stopped at its bound.
    AtLeast(u64),
    /// At most this many: the listener's pipeline or partition may filter some out,
    /// so whether any is left is not known.
    AtMost(u64),
}

impl Pending {
    /// `count` entries found by a count that stops at `limit`.
    pub fn from_count(count: u64, limit: u64) -> Self {
        if count >= limit {
            Pending::AtLeast(count)
        } else {
            Pending::Counted(count)
        }
    }

    pub fn is_none_left(self) -> bool {
        self == Pending::Counted(0)
    }

    /// The count, where it says at least that many are left (exact, or stopped at its
    /// bound); `None` for an upper bound (a pipeline or partition filters).
    pub fn lower_bound(self) -> Option<u64> {
        match self {
            Pending::Counted(n) | Pending::AtLeast(n) => Some(n),
            Pending::AtMost(_) => None,
        }
    }

    /// The one rule for "caught up": nothing left to process where that was counted;
    /// where it was not, or only as an upper bound (a pipeline or partition filters),
    /// a resume point at the newest entry of its history.
    pub fn caught_up(
        pending: Option<Pending>,
        token_time: Option<ClusterTime>,
        window: Option<&OplogWindow>,
    ) -> bool {
        match pending {
            Some(Pending::Counted(n)) => n == 0,
            Some(Pending::AtLeast(_)) => false,
            Some(Pending::AtMost(_)) | None => {
                token_time.zip(window).is_some_and(|(t, w)| t >= w.last)
            }
        }
    }
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pending::Counted(n) => write!(f, "{n}"),
            Pending::AtLeast(n) => write!(f, "≥{n}"),
            Pending::AtMost(n) => write!(f, "≤{n}"),
        }
    }
}
