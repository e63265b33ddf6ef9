//! Executing a skip, intent first: the pending audit record, then the change kept in
//! the skipped collection under the record's id (what the lease recorded of it, and
//! its oplog entry while the oplog holds it), then the compare-and-swap. A change that
//! cannot be kept is not skipped: the record is finalized as not applied.

use super::execute::{apply_begun, begin, finish, intent, OperatorOutcome};
use super::plan::Plan;
use super::OpsError;
use crate::model::{AuditState, Lease};
use crate::store::{
    AuditContext, AuditFinish, AuditLog, OperatorChange, OperatorStore, ResumeChange,
    SkippedChange, StoreError, StoreResult,
};

pub(super) async fn apply_skip<S: OperatorStore + AuditLog>(
    store: &S,
    plan: &Plan,
    change: &OperatorChange,
    planned: &Lease,
    context: &AuditContext,
) -> Result<OperatorOutcome, OpsError> {
    let audit_id = begin(store, &intent(change, Some(planned), context)).await?;
    if let Err(source) = keep(store, plan, change, planned, &audit_id).await {
        let audit = finish(
            store,
            &audit_id,
            AuditFinish {
                state: AuditState::NotApplied,
                after: Some(planned.clone()),
                outcome: format!("not applied: the skipped change could not be kept: {source}"),
            },
        )
        .await;
        return Err(OpsError::NotApplied {
            action: context.action.clone(),
            resource: change.resource.clone(),
            audit_id,
            audit,
            cause: Box::new(source),
        });
    }
    apply_begun(store, audit_id, change, Some(planned), context).await
}

/// Keeps the change `change` steps over, under `audit_id`.
async fn keep<S: OperatorStore>(
    store: &S,
    plan: &Plan,
    change: &OperatorChange,
    planned: &Lease,
    audit_id: &str,
) -> StoreResult<()> {
    let ResumeChange::Set {
        token: Some(token), ..
    } = &change.resume
    else {
        return Err(StoreError::InvalidArgument(
            "a skip resumes after a token, and this plan names none".into(),
        ));
    };
    let failure = planned
        .failure
        .clone()
        .filter(|f| f.names(token, token.time()));
    let skipped = SkippedChange {
        audit_id: audit_id.to_string(),
        resource: change.resource.clone(),
        operator: plan.operator.clone(),
        at: plan.planned_at,
        token: token.clone(),
        failure,
        entry: None,
        entry_missing: None,
    };
    store.keep_skipped(&skipped.with_entry(store).await).await
}
