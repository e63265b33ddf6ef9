//! What the sandbox did, step by step, for checkers that verify the protocol's
//! invariants from the outside (the simulation).

use crate::model::ClusterTime;
use crate::store::Namespace;

#[derive(Debug, Clone, PartialEq)]
pub enum HistoryEntry {
    Acquired {
        resource: String,
        listener: String,
        version: i64,
    },
    Committed {
        resource: String,
        listener: String,
        version: i64,
        token_time: Option<ClusterTime>,
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
