//! An audit record and an applied action's outcome, as printed.

use serde::Serialize;

use super::lease::LeaseJson;
use super::time::{ClusterTimeJson, Rfc3339};
use crate::model::{AuditRecord, AuditStep, PendingJudgment};
use crate::ops::execute::Executed;

/// An audit record in JSON; a pending one with its judgment against the lease read now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditJson<'a> {
    pub id: &'a str,
    pub at: Rfc3339,
    pub operator: &'a str,
    pub action: &'a str,
    pub resource: &'a str,
    pub reason: Option<&'a str>,
    pub state: &'static str,
    #[serde(rename = "finishedAt")]
    pub finished_at: Option<Rfc3339>,
    pub outcome: &'a str,
    pub before: Option<LeaseJson<'a>>,
    pub intended: Option<LeaseJson<'a>>,
    pub after: Option<LeaseJson<'a>>,
    pub steps: Vec<AuditStepJson<'a>>,
    pub pending: Option<PendingJson<'a>>,
}

impl<'a> AuditJson<'a> {
    pub fn of(record: &'a AuditRecord, judged: Option<&'a PendingJudgment>) -> Self {
        Self {
            id: &record.id,
            at: Rfc3339(record.at),
            operator: &record.operator,
            action: &record.action,
            resource: &record.resource,
            reason: record.reason.as_deref(),
            state: record.state.as_str(),
            finished_at: Rfc3339::of(record.finished_at),
            outcome: &record.outcome,
            before: record.before.as_ref().map(LeaseJson::of),
            intended: record.intended.as_ref().map(LeaseJson::of),
            after: record.after.as_ref().map(LeaseJson::of),
            steps: record.steps.iter().map(AuditStepJson::of).collect(),
            pending: judged.map(PendingJson::of),
        }
    }
}

/// One step of an action that writes more than once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditStepJson<'a> {
    pub at: Rfc3339,
    pub what: &'a str,
}

impl<'a> AuditStepJson<'a> {
    pub fn of(step: &'a AuditStep) -> Self {
        Self {
            at: Rfc3339(step.at),
            what: &step.what,
        }
    }
}

/// What a pending record means now, and what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingJson<'a> {
    pub verdict: &'static str,
    pub recovery: &'a str,
}

impl<'a> PendingJson<'a> {
    pub fn of(judged: &'a PendingJudgment) -> Self {
        Self {
            verdict: judged.verdict.as_str(),
            recovery: &judged.recovery,
        }
    }
}

/// An applied action: the lease before and after, and its audit record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutedJson<'a> {
    pub action: &'static str,
    pub resource: &'a str,
    #[serde(rename = "auditId")]
    pub audit_id: &'a str,
    #[serde(rename = "operationTime")]
    pub operation_time: Option<ClusterTimeJson>,
    pub remark: Option<&'a str>,
    pub before: LeaseJson<'a>,
    pub after: LeaseJson<'a>,
}

impl<'a> ExecutedJson<'a> {
    pub fn of(done: &'a Executed) -> Self {
        Self {
            action: done.action.name(),
            resource: &done.resource,
            audit_id: &done.audit_id,
            operation_time: ClusterTimeJson::of_optional(done.operation_time),
            remark: done.remark.as_deref(),
            before: LeaseJson::of(&done.before),
            after: LeaseJson::of(&done.after),
        }
    }
}
