//! What the sandbox did, step by step, for checkers that verify the protocol's
//! invariants from the outside (the simulation).

use crate::model::{ClusterTime, Lease, ResumePoint};
use crate::store::Namespace;

#[derive(Debug, Clone, PartialEq)]
pub enum HistoryEntry {
    Acquired {
        resource: String,
        listener: String,
        version: i64,
        /// The lease's resume point when this tenure began.
        start: StartMark,
    },
    Committed {
        resource: String,
        listener: String,
        version: i64,
        token_time: Option<ClusterTime>,
    },
    /// The holder recorded on its lease that its stream was closed (INVALIDATED).
    Invalidated {
        resource: String,
        listener: String,
        version: i64,
    },
    /// A commit or release that matched nothing.
    TenureRefused {
        resource: String,
        listener: String,
        version: i64,
    },
    Released {
        resource: String,
        listener: String,
        version: i64,
    },
    OperatorChanged {
        resource: String,
        version: i64,
        holder: Option<String>,
        start: StartMark,
    },
    /// A collection replaced wholesale (a rebuild), with the fences its documents now carry.
    Replaced {
        ns: Namespace,
        fences: Vec<(String, i64)>,
    },
    /// A change written to a collection.
    Changed { ns: Namespace, time: ClusterTime },
    /// Noted by a test's handler: this tenure handled the change at `time`.
    Handled {
        resource: String,
        listener: String,
        version: i64,
        time: ClusterTime,
    },
    /// A fenced write that the fence admitted; `stored` is the fence value it replaced.
    FencedWrite {
        ns: Namespace,
        id: String,
        lease_fence: Option<i64>,
        source_version: Option<i64>,
        stored: Option<i64>,
    },
}

/// A resume point reduced to what a checker needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMark {
    /// Changes after this time (a committed token).
    After(ClusterTime),
    /// Changes at or after this time (`resumeAt`).
    At(ClusterTime),
    /// From the oldest entry (or a token that cannot be decoded).
    Oldest,
}

impl StartMark {
    pub fn of(lease: &Lease) -> Self {
        match lease.resume_point() {
            ResumePoint::Token(token) => token.time().map_or(StartMark::Oldest, StartMark::After),
            ResumePoint::At(time) => StartMark::At(time),
            ResumePoint::Oldest => StartMark::Oldest,
        }
    }
}
