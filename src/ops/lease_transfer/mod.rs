//! `leases export` and `leases import`: every lease's resume point saved as JSON, and
//! restored through the guarded actions' plan, compare-and-swap and audit.
//!
//! - [`format`]: the file, rendered and parsed (pure);
//! - [`plan`]: what an import does to each lease (pure, over [`crate::ops::PlanFacts`]);
//! - [`run`]: reading the leases for an export, gathering an import's facts and moving
//!   the leases one audited action at a time (generic over the store).

pub mod format;
pub mod plan;
pub mod run;

pub use format::{
    parse_export, ExportFileJson, ExportOrigin, ExportOriginJson, ExportedLease, ExportedLeaseJson,
    FileTime, LeaseExport, TransferFileError, WatchedNamespace, WatchedNamespaceJson, FORMAT,
    FORMAT_VERSION, MAX_FILE_BYTES,
};
pub use plan::{
    at_point, judge_origin, plan_item, restore_request, select, ImportItem, ImportOptions,
    ImportPlan, ImportStep, IMPORT_ACTION,
};
pub use run::{execute_import, export, plan_import, ImportReport, ImportStopped};
