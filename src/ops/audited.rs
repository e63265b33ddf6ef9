//! An operator's lease write, intent first: a pending audit record, one compare-and-swap
//! on the captured version, then the record finalized with what happened. Every action
//! writes through here ([`super::execute`], skip, rebuild, the increments' fold).

use chrono::Utc;

use super::plan::Plan;
use super::OpsError;
use crate::model::{AuditState, ClusterTime, Lease};
use crate::store::{
    AuditContext, AuditFinish, AuditIntent, AuditLog, OperatorChange, OperatorStore, OpsStore,
    StoreError, SwapOutcome,
};

/// Who acts and why, for the audit record.
pub fn audit_context(plan: &Plan, reason: Option<String>) -> AuditContext {
    AuditContext {
        operator: plan.operator.clone(),
        action: plan.action.name().to_string(),
        reason,
    }
}

/// The change a plan may execute and the lease it was planned against, or why not.
pub(super) fn executable(plan: &Plan) -> Result<(&OperatorChange, &Lease), OpsError> {
    if let Some(refusal) = &plan.refusal {
        return Err(OpsError::Refused(refusal.clone()));
    }
    match (&plan.change, &plan.before) {
        (Some(change), Some(before)) => Ok((change, before)),
        _ => Err(OpsError::WrongPlan(format!(
            "the {} plan has no lease change to make",
            plan.action
        ))),
    }
}

/// `audit`: the record's id and how it was finalized.
pub(super) fn changed(
    change: &OperatorChange,
    current: Option<Lease>,
    audit: Option<(String, String)>,
) -> OpsError {
    let (audit_id, audit) = audit.unzip();
    OpsError::Changed {
        resource: change.resource.clone(),
        planned: change.expected_version,
        current: current.as_ref().map(|l| l.version),
        holder: current.and_then(|l| l.holder),
        audit_id,
        audit,
    }
}

/// The pending record written before `change`.
pub(super) fn intent(
    change: &OperatorChange,
    before: Option<&Lease>,
    context: &AuditContext,
) -> AuditIntent {
    AuditIntent {
        resource: change.resource.clone(),
        context: context.clone(),
        before: before.cloned(),
        intended: before.map(|lease| change.applied_to(lease, Utc::now())),
    }
}

/// Writes the pending record, or says why the action cannot start.
pub(super) async fn begin<S: AuditLog>(
    store: &S,
    intent: &AuditIntent,
) -> Result<String, OpsError> {
    store
        .begin_audit(intent)
        .await
        .map_err(|source| OpsError::NotStarted {
            action: intent.context.action.clone(),
            resource: intent.resource.clone(),
            cause: Box::new(source),
        })
}

/// Finalizes a record and says, for the operator's message, where it stands.
pub(crate) async fn finish<S: AuditLog>(store: &S, id: &str, finish: AuditFinish) -> String {
    let state = finish.state;
    match store.finish_audit(id, &finish).await {
        Ok(()) => format!("audit record {id}: {state}"),
        Err(e) => format!("audit record {id} stays pending (it could not be finalized: {e})"),
    }
}

/// Finalizes the record of a swap that found the lease moved on as not applied; says
/// where the record stands.
pub(super) async fn finish_changed<S: AuditLog>(
    store: &S,
    audit_id: &str,
    change: &OperatorChange,
    current: Option<&Lease>,
    remark: Option<String>,
) -> String {
    let now = current.map_or_else(|| "missing".into(), |l| format!("version {}", l.version));
    let outcome = format!(
        "not applied: {} changed since it was planned against version {} (now {now}){}",
        change.resource,
        change.expected_version,
        remark.map(|r| format!("; {r}")).unwrap_or_default()
    );
    finish(
        store,
        audit_id,
        AuditFinish {
            state: AuditState::NotApplied,
            after: current.cloned(),
            outcome,
        },
    )
    .await
}

/// A compare-and-swap whose outcome is known.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Resolved {
    Applied {
        before: Option<Lease>,
        after: Lease,
        operation_time: Option<ClusterTime>,
        remark: Option<String>,
    },
    Changed {
        current: Option<Lease>,
        remark: Option<String>,
    },
}

/// Whether `lease` is what `change` leaves: the next version, with its holder and kind.
/// Versions grow by one per change, so the next version with anything else means
/// another writer's change took it.
pub(super) fn left_by(change: &OperatorChange, lease: &Lease) -> bool {
    lease.version == change.expected_version + 1
        && lease.holder == change.holder
        && lease.kind == change.kind
}

/// The swap, and when its reply is lost (network or write concern) or a node that
/// stopped being primary refused it, the swap sent once more: being conditional on the
/// planned version, the second one applies only if the first did not, and otherwise
/// finds the lease as the first left it. `Err` is a swap that did not apply, or whose
/// outcome is still unknown (`write_may_have_applied`).
pub(super) async fn swap_resolved<S: OperatorStore>(
    store: &S,
    change: &OperatorChange,
) -> Result<Resolved, StoreError> {
    let first = match store.operator_swap(change).await {
        Ok(outcome) => return Ok(resolved(outcome, None)),
        // A lost reply, or a node that stopped being primary (an election): sent once
        // more, through the one path that tells from the lease the second one meets
        // whether the first applied.
        Err(e) if e.write_may_have_applied() || e.is_not_primary() => e,
        Err(e) => return Err(e),
    };
    let why = if first.is_not_primary() {
        format!("refused by a node that was no longer primary ({first})")
    } else {
        format!("its reply was lost ({first})")
    };
    tracing::warn!(resource = %change.resource, error = %first, "the operator swap did not answer for sure; sending it again");
    match store.operator_swap(change).await {
        // The first one applied. Its own cluster time is lost with its reply; the
        // resend's is later, and everything before it is on the server, which is what
        // a T0 needs.
        Ok(SwapOutcome::Changed {
            current: Some(current),
            operation_time,
        }) if left_by(change, &current) => Ok(Resolved::Applied {
            before: None,
            after: current,
            operation_time,
            remark: Some(format!(
                "{why}; sent again, it found the lease as this write leaves it"
            )),
        }),
        // Gone, or moved on past the version this write would have made: whether a
        // first attempt whose reply was lost applied cannot be told. One refused as not
        // primary did not apply: the lease simply changed (below).
        Ok(SwapOutcome::Changed { current, .. })
            if !first.is_not_primary()
                && current
                    .as_ref()
                    .is_none_or(|c| c.version > change.expected_version + 1) =>
        {
            Err(first)
        }
        Ok(outcome) => Ok(resolved(outcome, Some(format!("{why}; sent again")))),
        // The second told nothing of the first: a first whose reply was lost may have
        // applied whatever became of the second (lost too, or refused before it reached
        // the lease: the simulation met a reset that did apply reported as not applied).
        Err(_) if first.write_may_have_applied() => Err(first),
        // A first refused as not primary did not apply: the second decides.
        Err(second) => Err(second),
    }
}

fn resolved(outcome: SwapOutcome, remark: Option<String>) -> Resolved {
    match outcome {
        SwapOutcome::Applied {
            before,
            after,
            operation_time,
        } => Resolved::Applied {
            before: Some(before),
            after,
            operation_time,
            remark,
        },
        SwapOutcome::Changed { current, .. } => Resolved::Changed { current, remark },
    }
}

/// What an operator change did: applied and audited, or nothing because the lease
/// moved on since it was planned.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum OperatorOutcome {
    Applied {
        /// As the swap found it; as planned against when its reply was lost.
        before: Option<Lease>,
        after: Lease,
        operation_time: Option<ClusterTime>,
        audit_id: String,
        remark: Option<String>,
    },
    /// The lease changed since it was planned (or does not exist): nothing written to
    /// it; `audit` says how its record `audit_id` was finalized.
    Changed {
        current: Option<Lease>,
        audit_id: String,
        audit: String,
    },
}

/// One operator change, intent first: the pending record (no record, no write), the
/// compare-and-swap (sent again once if its reply was lost), then the record finalized
/// as applied or not applied. A swap whose outcome stays unknown leaves the record
/// pending (`OutcomeUnknown`); `before` is the lease as planned against, kept in the
/// record so that a pending one can be judged by reading the lease back.
pub async fn apply_audited<S: OpsStore>(
    store: &S,
    change: &OperatorChange,
    before: Option<&Lease>,
    context: &AuditContext,
) -> Result<OperatorOutcome, OpsError> {
    let audit_id = begin(store, &intent(change, before, context)).await?;
    apply_begun(store, audit_id, change, before, context).await
}

/// [`apply_audited`] after its pending record `audit_id` was written.
pub(super) async fn apply_begun<S: OpsStore>(
    store: &S,
    audit_id: String,
    change: &OperatorChange,
    before: Option<&Lease>,
    context: &AuditContext,
) -> Result<OperatorOutcome, OpsError> {
    let action = context.action.clone();
    match swap_resolved(store, change).await {
        Ok(Resolved::Applied {
            before: found,
            after,
            operation_time,
            remark,
        }) => {
            let outcome = match &remark {
                Some(remark) => format!("applied: {remark}"),
                None => "applied".to_string(),
            };
            let finished = store
                .finish_audit(
                    &audit_id,
                    &AuditFinish {
                        state: AuditState::Applied,
                        after: Some(after.clone()),
                        outcome,
                    },
                )
                .await;
            if let Err(source) = finished {
                return Err(OpsError::AuditUnfinished {
                    action,
                    resource: change.resource.clone(),
                    version: after.version,
                    audit_id,
                    cause: Box::new(source),
                });
            }
            Ok(OperatorOutcome::Applied {
                before: found.or_else(|| before.cloned()),
                after,
                operation_time,
                audit_id,
                remark,
            })
        }
        Ok(Resolved::Changed { current, remark }) => {
            let audit = finish_changed(store, &audit_id, change, current.as_ref(), remark).await;
            Ok(OperatorOutcome::Changed {
                current,
                audit_id,
                audit,
            })
        }
        Err(source) => Err(swap_failed(store, audit_id, action, change, before, source).await),
    }
}

/// A swap that did not apply (`NotApplied`: the record is finalized so, with the lease
/// as planned against) or whose outcome is still unknown after the resend
/// (`OutcomeUnknown`: the record stays pending, with a step saying why).
pub(super) async fn swap_failed<S: AuditLog>(
    store: &S,
    audit_id: String,
    action: String,
    change: &OperatorChange,
    planned: Option<&Lease>,
    source: StoreError,
) -> OpsError {
    if source.write_may_have_applied() {
        let what = format!("the {action} write's reply was lost, also when sent again: {source}");
        if let Err(e) = store.audit_step(&audit_id, &what, None, None).await {
            tracing::warn!(audit_id, error = %e, "could not record that the outcome is unknown");
        }
        return OpsError::OutcomeUnknown {
            action,
            resource: change.resource.clone(),
            planned_version: change.expected_version,
            audit_id,
            cause: Box::new(source),
        };
    }
    let audit = finish(
        store,
        &audit_id,
        AuditFinish {
            state: AuditState::NotApplied,
            after: planned.cloned(),
            outcome: format!("not applied: {source}"),
        },
    )
    .await;
    OpsError::NotApplied {
        action,
        resource: change.resource.clone(),
        audit_id,
        audit,
        cause: Box::new(source),
    }
}
