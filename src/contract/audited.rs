//! An operator change written as the guarded actions write one, through the ports
//! alone: a pending audit record, the compare-and-swap, then the record finalized as
//! applied or not applied. The checks hold the stores to what this sequence needs;
//! what `ops` adds around it (sending a lost swap again, the operator's messages) is
//! tested with `ops`.

use chrono::Utc;

use crate::model::{AuditState, Lease};
use crate::store::{
    AuditContext, AuditFinish, AuditIntent, AuditLog, LeaseStore, OperatorChange, OperatorStore,
    SwapOutcome,
};

/// What [`apply_audited`] did: the swap's outcome, and the id of the record written
/// around it.
#[derive(Debug)]
pub(super) struct Audited {
    pub(super) swap: SwapOutcome,
    pub(super) audit_id: String,
}

/// Writes `change` intent first, as planned against `before`: the record says
/// `applied`, or `not applied: …` when the lease had moved on.
pub(super) async fn apply_audited<S: OperatorStore + LeaseStore + AuditLog>(
    store: &S,
    change: &OperatorChange,
    before: Option<&Lease>,
    context: &AuditContext,
) -> Audited {
    let intent = AuditIntent {
        resource: change.resource.clone(),
        context: context.clone(),
        before: before.cloned(),
        intended: before.map(|lease| change.applied_to(lease, Utc::now())),
    };
    let audit_id = store.begin_audit(&intent).await.expect("begin_audit");
    let swap = store.operator_swap(change).await.expect("operator_swap");
    let finish = match &swap {
        SwapOutcome::Applied { after, .. } => AuditFinish {
            state: AuditState::Applied,
            after: Some(after.clone()),
            outcome: "applied".into(),
        },
        SwapOutcome::Changed { current, .. } => AuditFinish {
            state: AuditState::NotApplied,
            after: current.clone(),
            outcome: format!(
                "not applied: {} changed since it was planned against version {}",
                change.resource, change.expected_version
            ),
        },
    };
    store
        .finish_audit(&audit_id, &finish)
        .await
        .expect("finish_audit");
    Audited { swap, audit_id }
}
