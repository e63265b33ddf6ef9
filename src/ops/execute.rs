//! Executing a plan: the action's lease write, audited ([`super::audited`]).

use super::audited::{apply_audited, audit_context, changed, executable, OperatorOutcome};
use super::plan::Plan;
use super::{ActionKind, OpsError};
use crate::model::{ClusterTime, Lease};
use crate::store::OpsStore;

/// An action that was applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    pub action: ActionKind,
    pub resource: String,
    /// The lease as the swap found it (as planned against, when its reply was lost)
    /// and as it left it (for a rebuild: before the bulk write and after the final
    /// release).
    pub before: Lease,
    pub after: Lease,
    pub audit_id: String,
    /// Cluster time of the (first) lease write; unknown when its reply was lost and the
    /// lease was read back.
    pub operation_time: Option<ClusterTime>,
    /// How it got there, when not plainly ("the reply was lost; read back as applied").
    pub remark: Option<String>,
}

/// Executes a takeover, rewind, reset, abort-bulk or undo plan: a compare-and-swap on
/// the version captured when it was planned, intent-first audited. A refused plan
/// writes nothing (`Refused`); a lease that moved on is not written (`Changed`, exit 4).
/// Rebuild plans go through [`super::rebuild`].
pub async fn execute<S: OpsStore>(
    store: &S,
    plan: &Plan,
    reason: Option<String>,
) -> Result<Executed, OpsError> {
    execute_as(store, plan, reason, plan.action.name()).await
}

/// [`execute`], with the audit record naming the action `action` (an import's moves
/// are rewinds recorded as `import`); undo treats the record as any resume move's.
pub async fn execute_as<S: OpsStore>(
    store: &S,
    plan: &Plan,
    reason: Option<String>,
    action: &str,
) -> Result<Executed, OpsError> {
    let (change, planned) = executable(plan)?;
    if plan.action == ActionKind::Rebuild {
        return Err(OpsError::WrongPlan(
            "a rebuild plan runs through ops::rebuild with its definition".into(),
        ));
    }
    let mut context = audit_context(plan, reason);
    context.action = action.to_string();
    let applied = match plan.action {
        ActionKind::Skip => super::skip::apply_skip(store, plan, change, planned, &context).await,
        _ => apply_audited(store, change, Some(planned), &context).await,
    };
    match applied? {
        OperatorOutcome::Applied {
            before,
            after,
            operation_time,
            audit_id,
            remark,
        } => Ok(Executed {
            action: plan.action,
            resource: change.resource.clone(),
            before: before.unwrap_or_else(|| planned.clone()),
            after,
            audit_id,
            operation_time,
            remark,
        }),
        OperatorOutcome::Changed {
            current,
            audit_id,
            audit,
        } => Err(changed(change, current, Some((audit_id, audit)))),
    }
}
