//! What planning needs to know. Read from a store by [`super::gather`], or built by hand in tests.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::{
    entry_time, AuditRecord, ClusterTime, EntrySpan, HealthThresholds, Lease, OplogWindow,
    StreamProfile, WatchedCollection,
};
use crate::store::{CappedWindow, Namespace};

use super::transaction::{TransactionChanges, TransactionMiss};

/// The changes between two points of one collection's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRange {
    pub on: WatchedCollection,
    /// Inclusive.
    pub from: ClusterTime,
    /// Inclusive.
    pub to: ClusterTime,
    /// For a capped lease: the entries passed over, by `_id` (what is counted; `from`
    /// and `to` are their times, to the second).
    pub entries: Option<EntrySpan>,
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

/// For a lease that tails a capped collection: the collection and its oldest and newest
/// entries as read (`entries: None` while it holds none). Its positions are checked
/// against these entries, and [`PlanFacts::window`] is their times.
#[derive(Debug, Clone, PartialEq)]
pub struct CappedHistory {
    pub ns: Namespace,
    pub entries: Option<CappedWindow>,
}

impl CappedHistory {
    /// "the entries of capped collection app.events (oldest 65… at 2026-…Z, newest …)"
    /// or, while it holds none, "capped collection app.events, which holds no entries".
    pub fn describe(&self) -> String {
        let ns = crate::model::text::escape_control(&self.ns.to_string());
        match &self.entries {
            Some(w) => format!(
                "the entries of capped collection {ns} (oldest {} at {}, newest {} at {})",
                w.oldest,
                entry_clock(&w.oldest),
                w.newest,
                entry_clock(&w.newest)
            ),
            None => format!("capped collection {ns}, which holds no entries"),
        }
    }
}

/// An entry's `_id` time as people read it (whole seconds, UTC).
pub(crate) fn entry_clock(id: &bson::oid::ObjectId) -> String {
    let time = entry_time(id);
    time.to_datetime().map_or_else(
        || time.to_string(),
        |at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// Everything `plan` reads. Build it with [`super::gather`], or by hand in tests.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFacts {
    /// The lease of the affected resource, as read (`None`: no such lease).
    pub lease: Option<Lease>,
    /// The history the lease's resume point is checked against: the oplog window
    /// (`None` when the oplog may not be read), or for a capped lease the times of its
    /// collection's entries (`None` while it holds none; see `capped`).
    pub window: Option<OplogWindow>,
    /// Why the oplog window is unknown, when it was read and is (a missing privilege,
    /// a mongos, an oplog that shows no entry): what a plan that needs it says.
    pub window_unknown: Option<String>,
    /// Set for a lease that tails a capped collection.
    pub capped: Option<CappedHistory>,
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
    /// For a skip: what was read of the change it steps over (`None`: nothing, as for
    /// every other action).
    pub skipped_entry: Option<SkippedEntry>,
    /// For a move of a seed lease's resume point to a time: the resume token that
    /// stands for that time ([`crate::store::OperatorStore::token_at`]), or why it
    /// could not be had. `None`: not asked.
    pub token_for_time: Option<Result<(ClusterTime, crate::model::ResumeToken), String>>,
    /// The operator's `--hold` for a move of a seed lease's resume point: how long the
    /// operator holds the lease so its holder's refresh fails and it restarts its
    /// stream (`None`: the default, docs/runbook.md "Seed leases").
    pub restart_hold: Option<Duration>,
}

impl PlanFacts {
    /// "the oplog window cannot be read (why)": how every plan that meets an unknown
    /// window says so, with the reason the read gave.
    pub(crate) fn window_unread(&self) -> String {
        match &self.window_unknown {
            Some(why) => format!(
                "the oplog window cannot be read ({})",
                crate::model::text::escape_control(why)
            ),
            None => "the oplog window cannot be read".to_string(),
        }
    }
}

/// What a skip's plan read of the change it steps over.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedEntry {
    /// Its oplog entry, when it could be read (it tells whether the change is one of a
    /// multi-document transaction).
    pub entry: Option<bson::Document>,
    /// For `skip --whole-transaction`: the transaction's changes as the lease sees
    /// them, or why they cannot be told.
    pub transaction: Option<Result<TransactionChanges, TransactionMiss>>,
}

impl SkippedEntry {
    /// Just the entry (a plain skip's facts).
    pub fn of_entry(entry: bson::Document) -> Self {
        Self {
            entry: Some(entry),
            transaction: None,
        }
    }
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
    /// `--hold` of a rewind, reset or undo: [`PlanFacts::restart_hold`].
    pub restart_hold: Option<Duration>,
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
            restart_hold: None,
        }
    }
}
