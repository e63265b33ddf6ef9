//! The JSON documents several commands print around what they show: an action's
//! plan with whether it was written and its outcome, and a failure.

use serde::Serialize;

use crate::cli::common::exit;
use crate::model::ClusterTime;
use crate::ops::json::{ClusterTimeJson, ExecutedJson, PlanJson};
use crate::ops::Plan;

/// The plan as printed, with the exit code its refusal (if any) means.
pub fn plan_json(plan: &Plan) -> PlanJson<'_> {
    PlanJson::of(plan).with_exit_code(exit::for_refusal)
}

/// What an action (takeover, rewind, …, rebuild) prints with `--output json`: its plan,
/// whether the lease was written, and, as far as it got, its audit record and outcome.
/// Members it did not get to are left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionJson<'a> {
    /// Null for a refusal found before anything was read.
    pub plan: Option<PlanJson<'a>>,
    /// Null when it cannot be known (the reply to the write was lost).
    pub written: Option<bool>,
    /// A failed execute's audit record: null when it left none.
    #[serde(rename = "auditId", skip_serializing_if = "Option::is_none")]
    pub audit_id: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<ExecutedJson<'a>>,
    /// A rebuild's: where its listeners replay from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t0: Option<ClusterTimeJson>,
    /// A rebuild's: what its definition reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<&'a str>,
}

impl<'a> ActionJson<'a> {
    /// Refused before anything was read: no plan, nothing written.
    pub fn refused_early() -> Self {
        Self::written(None, Some(false))
    }

    /// A dry run or a refused plan: nothing written.
    pub fn not_written(plan: &'a Plan) -> Self {
        Self::written(Some(plan_json(plan)), Some(false))
    }

    /// An execute that failed: whether it wrote, and the audit record it left.
    pub fn failed(plan: &'a Plan, written: Option<bool>, audit_id: Option<&'a str>) -> Self {
        Self {
            audit_id: Some(audit_id),
            ..Self::written(Some(plan_json(plan)), written)
        }
    }

    /// An applied action.
    pub fn applied(plan: &'a Plan, outcome: ExecutedJson<'a>) -> Self {
        Self {
            outcome: Some(outcome),
            ..Self::written(Some(plan_json(plan)), Some(true))
        }
    }

    /// An applied rebuild: where its listeners replay from, and its report.
    pub fn rebuilt(mut self, t0: ClusterTime, summary: &'a str) -> Self {
        self.t0 = Some(ClusterTimeJson::of(t0));
        self.summary = Some(summary);
        self
    }

    fn written(plan: Option<PlanJson<'a>>, written: Option<bool>) -> Self {
        Self {
            plan,
            written,
            audit_id: None,
            outcome: None,
            t0: None,
            summary: None,
        }
    }
}

/// A failure with `--output json`: `{"message", "exit", "kind"}` under `error`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorJson<'a> {
    pub message: &'a str,
    pub exit: u8,
    pub kind: &'static str,
}

impl<'a> ErrorJson<'a> {
    pub fn new(message: &'a str, exit: u8) -> Self {
        Self {
            message,
            exit,
            kind: exit::kind_of(exit),
        }
    }
}

/// A document that is only a failure: `{"error": …}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorDocumentJson<'a> {
    pub error: ErrorJson<'a>,
}
