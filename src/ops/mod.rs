//! Guarded operator actions (docs/runbook.md): plan → preview → confirm → execute → audit.
//!
//! - [`gather`] reads what planning needs ([`PlanFacts`]) from a store (reads only);
//! - [`plan`] is pure: the exact lease change, its effect, warnings, whether the
//!   console must ask for the resource name, and any refusal;
//! - [`execute`] applies a plan with one compare-and-swap on the version captured when
//!   it was planned, then appends its audit record (two steps, so what was written is
//!   always known); [`rebuild`] runs a rebuild plan under the
//!   bulk lock with progress and cancellation;
//! - [`describe`] renders plans and outcomes as text, [`json`] as the JSON printed.
//!
//! Underneath, `resume` is the resume-point arithmetic and `target` the resume point a
//! request asks for, checked against the oplog window; planning and gathering share them.
//!
//! Refused plans and dry runs write nothing, not even an audit record.

mod audited;
pub mod describe;
mod error;
mod execute;
mod facts;
mod fold_increments;
mod gather;
pub mod json;
pub mod lease_transfer;
#[cfg(feature = "mongo")]
mod pipeline;
mod plan;
mod rebuild;
mod refusal;
mod request;
mod resume;
mod skip;
mod target;
pub mod transaction;

pub use audited::{apply_audited, audit_context, OperatorOutcome};
pub use error::OpsError;
pub use execute::{execute, execute_as, Executed};
pub use facts::{
    CappedHistory, ChangeCount, ChangeRange, GatherOptions, PlanFacts, RebuildTarget, SkippedEntry,
};
pub use fold_increments::{
    fold_pending_increments, plan_fold, FoldError, FoldPlan, FoldReport, FoldedDocument,
};
pub use gather::gather;
#[cfg(feature = "mongo")]
pub use pipeline::PipelineRebuild;
pub use plan::{
    plan, plan_restore, predict_after, refuse_before_reading, refuse_read_only, Captured, Plan,
    PlanEffect,
};
pub use rebuild::{
    rebuild, Progress, RebuildDefinition, RebuildFailure, RebuildOutcome, RebuildProgress,
    RebuildReport,
};
pub use refusal::{Refusal, RefusalKind};
pub use request::{
    parse_token, ActionKind, ActionRequest, CheckpointRef, ResetTarget, RewindTarget, TimeSpec,
};
pub use resume::{describe_point, Direction, ResumeMove};
pub use target::affected_range;
