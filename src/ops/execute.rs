//! Executing a plan: one compare-and-swap on the captured version, then its audit record.

use super::plan::Plan;
use super::{ActionKind, OpsError};
use crate::model::{ClusterTime, Lease};
use crate::store::{
    AuditContext, AuditEntry, AuditLog, OperatorChange, OperatorStore, SwapOutcome,
};

/// An action that was applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    pub action: ActionKind,
    pub resource: String,
    /// The lease as the swap found it and as it left it (for a rebuild: before the bulk
    /// write and after the final release).
    pub before: Lease,
    pub after: Lease,
    pub audit_id: String,
    /// Cluster time of the (first) lease write.
    pub operation_time: ClusterTime,
}

/// Who acts and why, for the audit record.
pub fn audit_context(plan: &Plan, reason: Option<String>) -> AuditContext {
    AuditContext {
        operator: plan.operator.clone(),
        action: plan.action.name().to_string(),
        reason,
    }
}

/// The change a plan may execute, or why not.
pub(super) fn executable(plan: &Plan) -> Result<&OperatorChange, OpsError> {
    if let Some(refusal) = &plan.refusal {
        return Err(OpsError::Refused(refusal.clone()));
    }
    plan.change.as_ref().ok_or_else(|| {
        OpsError::WrongPlan(format!(
            "the {} plan has no lease change to make",
            plan.action
        ))
    })
}

pub(super) fn changed(change: &OperatorChange, current: Option<Lease>) -> OpsError {
    OpsError::Changed {
        resource: change.resource.clone(),
        planned: change.expected_version,
        current: current.as_ref().map(|l| l.version),
        holder: current.and_then(|l| l.holder),
    }
}

/// What an operator change did: applied and audited, or nothing because the lease
/// moved on since it was planned.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum OperatorOutcome {
    Applied {
        before: Lease,
        after: Lease,
        /// Cluster time of the write (the rebuild's T0).
        operation_time: ClusterTime,
        audit_id: String,
    },
    /// The lease changed since it was planned (or does not exist): nothing written.
    Changed { current: Option<Lease> },
}

/// One operator change in two steps: the compare-and-swap, then, only once it has
/// applied, its audit record. A swap that did not apply wrote nothing; a swap whose
/// reply was lost is `OutcomeUnknown` (the operator must look at the lease); a failed append after an applied swap is `AuditMissing`,
/// naming the version the lease is now at.
pub async fn apply_audited<S: OperatorStore + AuditLog>(
    store: &S,
    change: &OperatorChange,
    context: &AuditContext,
) -> Result<OperatorOutcome, OpsError> {
    let swapped = store.operator_swap(change).await.map_err(|error| {
        if error.write_may_have_applied() {
            OpsError::OutcomeUnknown {
                action: context.action.clone(),
                resource: change.resource.clone(),
                planned_version: change.expected_version,
                source: Box::new(error),
            }
        } else {
            OpsError::Store(error)
        }
    })?;
    let (before, after, operation_time) = match swapped {
        SwapOutcome::Applied {
            before,
            after,
            operation_time,
        } => (before, after, operation_time),
        SwapOutcome::Changed { current } => return Ok(OperatorOutcome::Changed { current }),
    };
    let entry = AuditEntry {
        resource: change.resource.clone(),
        context: context.clone(),
        before: Some(before.clone()),
        after: Some(after.clone()),
        outcome: "applied".into(),
    };
    match store.append_audit(&entry).await {
        Ok(audit_id) => Ok(OperatorOutcome::Applied {
            before,
            after,
            operation_time,
            audit_id,
        }),
        Err(source) => Err(OpsError::AuditMissing {
            action: context.action.clone(),
            resource: change.resource.clone(),
            version: after.version,
            source: Box::new(source),
        }),
    }
}

/// Executes a takeover, rewind, reset, abort-bulk or undo plan: a compare-and-swap on
/// the version captured when it was planned, then its audit record. A refused plan
/// writes nothing (`Refused`); a lease that moved on writes nothing (`Changed`, exit 4).
/// Rebuild plans go through [`super::rebuild`].
pub async fn execute<S: OperatorStore + AuditLog>(
    store: &S,
    plan: &Plan,
    reason: Option<String>,
) -> Result<Executed, OpsError> {
    let change = executable(plan)?;
    if plan.action == ActionKind::Rebuild {
        return Err(OpsError::WrongPlan(
            "a rebuild plan runs through ops::rebuild with its definition".into(),
        ));
    }
    let context = audit_context(plan, reason);
    match apply_audited(store, change, &context).await? {
        OperatorOutcome::Applied {
            before,
            after,
            operation_time,
            audit_id,
        } => Ok(Executed {
            action: plan.action,
            resource: change.resource.clone(),
            before,
            after,
            audit_id,
            operation_time,
        }),
        OperatorOutcome::Changed { current } => Err(changed(change, current)),
    }
}
