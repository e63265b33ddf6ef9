//! What the background tasks send to the console: facts, never commands.

use chrono::{DateTime, Utc};

use crate::engine::ListenerSnapshot;
use crate::model::{AuditRecord, Checkpoint, Lease, OplogWindow};
use crate::store::{CappedReading, Listing, LossReading, MalformedDocument};

/// One message from a data task. The console applies them in arrival order.
/// Why the plan of `request` could not be made (a dialog opened since for another
/// request ignores it).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanFailure {
    pub request: crate::ops::ActionRequest,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DataEvent {
    /// Every lease, read when the lease watch (re)opened, and the documents that are
    /// not readable leases.
    LeaseSnapshot(Listing<Lease>),
    /// One lease as it is after a change the watch delivered (boxed: the enum stays
    /// small for the many small events).
    LeaseChanged(Box<Lease>),
    /// A lease document changed into one that cannot be read.
    LeaseMalformed(MalformedDocument),
    /// A lease document was deleted (the protocol never deletes one).
    LeaseDeleted(String),
    Window {
        window: OplogWindow,
        server_now: DateTime<Utc>,
        /// Entries written per second since the previous read, when it could be counted.
        ops_per_sec: Option<f64>,
    },
    /// The windows of the capped collections the known capped leases tail, and why any
    /// could not be read: those leases are measured against them.
    CappedWindows(CappedReading),
    /// Each lease's time to loss, predicted at `read_at` (the server's clock).
    TimeToLoss {
        read_at: DateTime<Utc>,
        reading: LossReading,
    },
    /// The checkpoints of the lease the detail view shows, newest first, or why they
    /// cannot be read.
    Checkpoints {
        resource: String,
        read: Result<Listing<Checkpoint>, String>,
    },
    /// The server's clock, read where the oplog cannot be (lag, EXPIRED and UNCLAIMED
    /// are judged by it, as `leases` judges them).
    ServerClock(DateTime<Utc>),
    /// The replica set members, or why they cannot be read (e.g. a missing role).
    Members(Result<Vec<MemberRow>, String>),
    /// The fleet's process documents, expired ones too, or why they cannot be read
    /// (docs/protocol.md, "Membership and balancing").
    Processes(Result<Vec<crate::model::Member>, String>),
    /// What the cluster is and whether its oplog can be read.
    Topology(crate::model::Topology),
    /// In-process listeners (IN-PROCESS and DEMO modes only).
    Listeners(Vec<ListenerSnapshot>),
    /// What the demo workload is doing: writing, stopped (why), resumed (IN-PROCESS
    /// and DEMO modes only).
    Workload(crate::demo::workload::WorkloadStatus),
    Audit(Listing<AuditRecord>),
    /// The plan of the action the dialog asked for, or why it could not be read.
    Planned(Result<Box<crate::ops::Plan>, PlanFailure>),
    /// An executed action's outcome, for the notice line.
    ActionDone {
        action: crate::ops::ActionKind,
        result: Result<String, String>,
    },
    RebuildProgress(crate::ops::RebuildProgress),
    /// A data task lost its source; it keeps retrying and the next success clears this.
    SourceFailed {
        source: DataSource,
        error: String,
    },
}

/// The independent feeds whose loss the header reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataSource {
    Leases,
    Oplog,
    Audit,
}

impl DataSource {
    pub fn label(self) -> &'static str {
        match self {
            DataSource::Leases => "lease watch",
            DataSource::Oplog => "oplog window",
            DataSource::Audit => "audit log",
        }
    }
}

pub use crate::observe::MemberRow;
