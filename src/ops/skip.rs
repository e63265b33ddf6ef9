//! Executing a skip, intent first: the pending audit record, then the change kept in
//! the skipped collection under the record's id (what the lease recorded of it, and
//! its oplog entry while the oplog holds it) — with `--whole-transaction`, each change
//! stepped over, one record each — then the compare-and-swap. A change that cannot be
//! kept is not skipped: the record is finalized as not applied (records kept before
//! the failure stay, under that record).

use super::audited::{apply_begun, begin, finish, intent, OperatorOutcome};
use super::plan::Plan;
use super::OpsError;
use crate::model::{AuditState, Lease, ResumeToken};
use crate::store::{
    AuditContext, AuditFinish, OperatorChange, OpsStore, ResumeChange, SkippedChange, StoreError,
    StoreResult,
};

pub(super) async fn apply_skip<S: OpsStore>(
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

/// Keeps the change `change` steps over, under `audit_id`; for `skip
/// --whole-transaction`, each of the changes the plan lists, in order, one record each.
async fn keep<S: OpsStore>(
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
    let record = |token: &ResumeToken| SkippedChange {
        audit_id: audit_id.to_string(),
        resource: change.resource.clone(),
        operator: plan.operator.clone(),
        at: plan.planned_at,
        token: token.clone(),
        failure: planned
            .failure
            .clone()
            .filter(|f| f.names(token, token.time())),
        entry: None,
        entry_missing: None,
    };
    let stepped = &plan.effect.stepped_over;
    if stepped.is_empty() {
        return store
            .keep_skipped(&record(token).with_entry(store).await)
            .await;
    }
    if stepped
        .last()
        .is_none_or(|last| last.token.as_document() != token.as_document())
    {
        return Err(StoreError::InvalidArgument(
            "this plan resumes after another change than the last it steps over".into(),
        ));
    }
    for stepped in stepped {
        let mut skipped = record(&stepped.token);
        // The entry read when planned: the one that holds this change.
        skipped.entry = Some(stepped.entry.clone());
        store.keep_skipped(&skipped).await?;
    }
    Ok(())
}
