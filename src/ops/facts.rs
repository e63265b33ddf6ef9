//! What planning needs to know. Read from a store by [`super::gather`], or built by hand in tests.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::{AuditRecord, ClusterTime, HealthThresholds, Lease, OplogWindow, StreamProfile};
use crate::store::Namespace;

/// The changes between two points of one namespace's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRange {
    pub ns: Namespace,
    /// Inclusive.
    pub from: ClusterTime,
    /// Inclusive.
    pub to: ClusterTime,
}

/// A bounded count of the changes in a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeCount {
    pub range: ChangeRange,
    pub counted: u64,
    /// The count stopped here; `counted == limit` means "at least".
    pub limit: u64,
}

impl ChangeCount {
    pub fn at_least(&self) -> bool {
        self.counted >= self.limit
    }
}

/// A rebuild definition as planning sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuildTarget {
    pub name: String,
    /// The lease the rebuild takes with kind bulk.
    pub resource: String,
    /// What it does, for the plan ("aggregation pipeline on shop.orders ending in $merge").
    pub description: String,
}

/// Everything `plan` reads. Build it with [`super::gather`], or by hand in tests.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFacts {
    /// The lease of the affected resource, as read (`None`: no such lease).
    pub lease: Option<Lease>,
    /// `None` when the oplog may not be read.
    pub window: Option<OplogWindow>,
    /// The server's clock when the facts were read.
    pub now: DateTime<Utc>,
    /// The changes a move of the resume point replays or skips, counted with a bound.
    pub changes: Option<ChangeCount>,
    pub read_only: bool,
    /// The audit record an undo names, if it exists.
    pub audit: Option<AuditRecord>,
    /// The rebuild definition a rebuild names, if one exists.
    pub rebuild: Option<RebuildTarget>,
    /// For a rewind to a checkpoint: the resource's checkpoints, newest first (those a
    /// reference by number or id can name).
    pub checkpoints: Vec<crate::model::Checkpoint>,
    /// Who acts: the holder of a `--hold` or a rebuild, and the audit's operator.
    pub operator: String,
    /// `expiresAt = now + this` when a takeover hands the lease to a named listener.
    pub handover_lease: Duration,
    /// How long the bulk lease lasts between a rebuild's renewals.
    pub bulk_lease: Duration,
    /// The status rules the console and `leases` apply, so a plan says what they say.
    pub thresholds: HealthThresholds,
    /// What the listeners' change streams can do: on Azure Cosmos DB a stream starts
    /// only at now or after a token, never at a time.
    pub profile: StreamProfile,
}

/// Settings for [`super::gather`] that come from the caller, not the store.
#[derive(Debug, Clone, PartialEq)]
pub struct GatherOptions {
    pub read_only: bool,
    pub operator: String,
    /// The count of changes stops here.
    pub count_limit: u64,
    /// The definition of the rebuild the request names (`None`: not defined).
    pub rebuild: Option<RebuildTarget>,
    pub handover_lease: Duration,
    pub bulk_lease: Duration,
    pub thresholds: HealthThresholds,
}

impl GatherOptions {
    pub const DEFAULT_COUNT_LIMIT: u64 = 10_000;
    pub const DEFAULT_HANDOVER_LEASE: Duration = Duration::from_secs(10);
    pub const DEFAULT_BULK_LEASE: Duration = Duration::from_secs(30);

    pub fn new(operator: impl Into<String>) -> Self {
        Self {
            read_only: false,
            operator: operator.into(),
            count_limit: Self::DEFAULT_COUNT_LIMIT,
            rebuild: None,
            handover_lease: Self::DEFAULT_HANDOVER_LEASE,
            bulk_lease: Self::DEFAULT_BULK_LEASE,
            thresholds: HealthThresholds::default(),
        }
    }
}
