//! Guarded operator actions (DESIGN §5): plan → preview → confirm → execute → audit.
//!
//! - [`gather`] reads what planning needs from a store (reads only);
//! - [`plan`] is pure: the exact lease change, its effect, warnings, whether the
//!   console must ask for the resource name, and any refusal;
//! - [`execute`] applies a plan with one compare-and-swap on the version captured when
//!   it was planned, and its audit record; [`rebuild`] runs a rebuild plan under the
//!   bulk lock with progress and cancellation;
//! - [`describe`] renders plans and outcomes as text and JSON.
//!
//! Refused plans and dry runs write nothing, not even an audit record.

pub mod describe;
mod error;
mod execute;
mod facts;
mod pipeline;
mod plan;
mod rebuild;
mod request;

pub use error::{exit, OpsError};
pub use execute::{audit_context, execute, Executed};
pub use facts::{gather, ChangeCount, ChangeRange, GatherOptions, PlanFacts, RebuildTarget};
pub use pipeline::PipelineRebuild;
pub use plan::{
    affected_range, describe_point, group_digits, plan, predict_after, Captured, Direction, Effect,
    Plan, Refusal, RefusalKind, ResumeMove,
};
pub use rebuild::{
    rebuild, Progress, RebuildDefinition, RebuildFailure, RebuildOutcome, RebuildProgress,
    RebuildReport,
};
pub use request::{parse_token, ActionKind, ActionRequest, ResetTarget, RewindTarget, TimeSpec};
