//! Executing a plan: one compare-and-swap on the captured version, audited.

use super::plan::Plan;
use super::{ActionKind, OpsError};
use crate::model::{ClusterTime, Lease};
use crate::store::{AuditContext, LeaseStore, OperatorChange, OperatorOutcome, StoreError};

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

/// Executes a takeover, rewind, reset, abort-bulk or undo plan: a compare-and-swap on
/// the version captured when it was planned, and its audit record. A refused plan
/// writes nothing (`Refused`); a lease that moved on writes nothing (`Changed`, exit 4).
/// Rebuild plans go through [`super::rebuild`].
pub async fn execute<S: LeaseStore>(
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
    match store.operator_update(change, &context).await {
        Ok(OperatorOutcome::Applied {
            before,
            after,
            operation_time,
            audit_id,
        }) => Ok(Executed {
            action: plan.action,
            resource: change.resource.clone(),
            before,
            after,
            audit_id,
            operation_time,
        }),
        Ok(OperatorOutcome::Changed { current }) => Err(changed(change, current)),
        Err(error) => Err(explain_failure(store, plan, change, error).await),
    }
}

/// After a failed call the swap may or may not have applied: read the lease back and
/// say which, so the operator never guesses.
async fn explain_failure<S: LeaseStore>(
    store: &S,
    plan: &Plan,
    change: &OperatorChange,
    error: StoreError,
) -> OpsError {
    match store.get(&change.resource).await {
        Ok(Some(lease))
            if lease.version == change.expected_version + 1
                && lease.note.as_deref() == Some(change.note.as_str()) =>
        {
            OpsError::AuditMissing {
                action: plan.action.name().to_string(),
                resource: change.resource.clone(),
                version: lease.version,
                source: Box::new(error),
            }
        }
        _ => OpsError::Store(error),
    }
}
