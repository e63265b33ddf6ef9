//! A rebuild under the bulk lock (docs/runbook.md "Corrupted aggregate"): take the lease with kind bulk, renew it
//! while the definition runs, then give it back with `resumeAt = T0`; one audit record.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::execute::{audit_context, changed, executable, Executed};
use super::plan::Plan;
use super::{ActionKind, OpsError};
use crate::model::{ClusterTime, Lease, LockKind};
use crate::store::{
    AuditEntry, AuditLog, LeaseStore, OperatorChange, OperatorStore, ResumeChange, SwapOutcome,
    Tenure, TenureWrite,
};

/// How far a rebuild has got: `done` of `total` units (`total` unknown for a pipeline
/// the server runs in one command).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RebuildProgress {
    pub done: u64,
    pub total: Option<u64>,
    /// What it is doing now ("reading animals", "writing tag fluffy").
    pub stage: String,
    pub finished: bool,
}

/// The sending side of a rebuild's progress; the console and the command line watch the
/// receiver `Progress::channel` returns.
#[derive(Debug)]
pub struct Progress {
    sender: watch::Sender<RebuildProgress>,
}

impl Progress {
    pub fn channel() -> (Progress, watch::Receiver<RebuildProgress>) {
        let (sender, receiver) = watch::channel(RebuildProgress::default());
        (Progress { sender }, receiver)
    }

    pub fn set_total(&self, total: u64) {
        self.sender.send_modify(|p| p.total = Some(total));
    }

    pub fn stage(&self, stage: impl Into<String>) {
        let stage = stage.into();
        self.sender.send_modify(|p| p.stage = stage);
    }

    pub fn advance(&self, units: u64) {
        self.sender.send_modify(|p| p.done += units);
    }

    fn finish(&self) {
        self.sender.send_modify(|p| p.finished = true);
    }
}

/// Why a definition did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebuildFailure {
    Cancelled,
    Failed(String),
}

/// What a finished definition did, for the audit record and the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    pub summary: String,
}

/// A rebuild an application defines: in process, a Rust function
/// (`demo::rebuild::PetRebuild`); attached, an aggregation pipeline ending in `$merge`
/// (`ops::PipelineRebuild`). It must check `cancel` between units of work and report
/// progress; it runs while the caller holds the bulk lease.
pub trait RebuildDefinition<S>: Send + Sync {
    /// What it does, for the plan.
    fn describe(&self) -> String;

    fn run(
        &self,
        store: &S,
        progress: &Progress,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<RebuildReport, RebuildFailure>> + Send;
}

/// A finished rebuild.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuildOutcome {
    pub executed: Executed,
    /// The cluster time of the bulk write: where listeners replay from.
    pub t0: ClusterTime,
    pub report: RebuildReport,
}

/// Runs a rebuild plan: compare-and-swap to kind bulk with the operator as holder
/// (`Changed` → nothing written, exit 4), renew that tenure every third of the bulk
/// lease while `definition` runs, then swap to kind update, resumeToken null,
/// resumeAt T0, released. If the definition fails or is cancelled, or the bulk lease
/// is taken away, the lease stays bulk, released at once so it shows as STUCK BULK,
/// and the error says how to recover. One audit record in every case.
pub async fn rebuild<S, D>(
    store: &S,
    plan: &Plan,
    definition: &D,
    progress: &Progress,
    cancel: &CancellationToken,
    reason: Option<String>,
) -> Result<RebuildOutcome, OpsError>
where
    S: OperatorStore + AuditLog,
    D: RebuildDefinition<S>,
{
    let change = executable(plan)?;
    let super::ActionRequest::Rebuild { name } = &plan.request else {
        return Err(OpsError::WrongPlan(format!(
            "a {} plan runs through ops::execute",
            plan.action
        )));
    };
    let name = name.clone();
    let context = audit_context(plan, reason);
    if cancel.is_cancelled() {
        return Err(OpsError::WrongPlan(
            "the rebuild was cancelled before it started; nothing was written".into(),
        ));
    }
    let swapped = match store.operator_swap(change).await {
        Ok(swapped) => swapped,
        Err(error) if error.write_may_have_applied() => {
            return Err(after_a_lost_bulk_swap(store, plan, change, &context, name, error).await)
        }
        Err(error) => return Err(OpsError::Store(error)),
    };
    let (original, bulk, t0) = match swapped {
        SwapOutcome::Applied {
            before,
            after,
            operation_time,
        } => (before, after, operation_time),
        SwapOutcome::Changed { current } => return Err(changed(change, current)),
    };
    let tenure = Tenure {
        resource: bulk.resource.clone(),
        listener: change.holder.clone().unwrap_or_default(),
        version: bulk.version,
    };
    let lease_for = change.expires_in;
    progress.stage("running");
    let ran = tokio::select! {
        ran = definition.run(store, progress, cancel) => ran,
        lost = keep_renewing(store, &tenure, lease_for) => Err(RebuildFailure::Failed(lost)),
    };
    progress.finish();
    let audit = |after: Option<Lease>, outcome: String| AuditEntry {
        resource: bulk.resource.clone(),
        context: context.clone(),
        before: Some(original.clone()),
        after,
        outcome,
    };
    let report = match ran {
        Ok(report) => report,
        Err(failure) => {
            let what = match &failure {
                RebuildFailure::Cancelled => "was cancelled".to_string(),
                RebuildFailure::Failed(detail) => format!("failed: {detail}"),
            };
            let outcome = format!("{what}; the lease stays bulk (STUCK BULK)");
            return Err(
                leave_stuck_bulk(store, &bulk, |now| audit(now, outcome), name, what).await,
            );
        }
    };
    let give_back = OperatorChange {
        resource: bulk.resource.clone(),
        expected_version: bulk.version,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Set {
            token: None,
            at: Some(t0),
        },
        note: format!("rebuilt {name} by {}: replay from {t0}", plan.operator),
    };
    let (after, remark) = match store.operator_swap(&give_back).await {
        Ok(SwapOutcome::Applied { after, .. }) => (after, String::new()),
        Ok(SwapOutcome::Changed { current }) => {
            let what = format!(
                "finished ({}) but the bulk lease was taken away meanwhile (now version {}), so it was not given back with resumeAt {t0}",
                report.summary,
                current.as_ref().map_or_else(|| "missing".into(), |l| l.version.to_string())
            );
            let audit_id = store
                .append_audit(&audit(current.clone(), format!("failed: {what}")))
                .await
                .map_err(|e| e.to_string());
            return Err(OpsError::BulkTakenAway {
                name,
                resource: bulk.resource.clone(),
                what,
                audit_id,
            });
        }
        Err(e) => match landed(store, &give_back).await {
            // The reply was lost but the lease was given back: the rebuild is done.
            Some(after) => (
                after,
                format!(" (the give-back's reply was lost: {e}; read back as given back)"),
            ),
            None => {
                let what = format!(
                    "finished ({}) but the lease could not be given back: {e}",
                    report.summary
                );
                let outcome = format!("failed: {what}");
                return Err(
                    leave_stuck_bulk(store, &bulk, |now| audit(now, outcome), name, what).await,
                );
            }
        },
    };
    let audit_id = store
        .append_audit(&audit(
            Some(after.clone()),
            format!(
                "applied: {}; listeners replay from {t0}{remark}",
                report.summary
            ),
        ))
        .await
        .map_err(|source| OpsError::AuditMissing {
            action: "rebuild".into(),
            resource: bulk.resource.clone(),
            version: after.version,
            source: Box::new(source),
        })?;
    Ok(RebuildOutcome {
        executed: Executed {
            action: ActionKind::Rebuild,
            resource: bulk.resource.clone(),
            before: original,
            after,
            audit_id,
            operation_time: t0,
        },
        t0,
        report,
    })
}

/// The lease as `change` left it, when a read-back shows it applied although its
/// reply was lost: the next version, with the holder and kind it sets.
async fn landed<S: OperatorStore>(store: &S, change: &OperatorChange) -> Option<Lease> {
    let lease = store.get(&change.resource).await.ok().flatten()?;
    (lease.version == change.expected_version + 1
        && lease.holder == change.holder
        && lease.kind == change.kind)
        .then_some(lease)
}

/// The bulk swap's reply was lost. If it applied, the lease is bulk and held by the
/// operator with nothing running: release it (STUCK BULK at once), record that, and
/// say how to recover. If it did not, nothing was written.
async fn after_a_lost_bulk_swap<S: OperatorStore + AuditLog>(
    store: &S,
    plan: &Plan,
    change: &OperatorChange,
    context: &crate::store::AuditContext,
    name: String,
    error: crate::store::StoreError,
) -> OpsError {
    let Some(bulk) = landed(store, change).await else {
        return OpsError::OutcomeUnknown {
            action: plan.action.name().to_string(),
            resource: change.resource.clone(),
            planned_version: change.expected_version,
            source: Box::new(error),
        };
    };
    let what =
        format!("lost the reply of its bulk swap ({error}); it was applied, nothing was rebuilt");
    let outcome = format!("failed: {what}; the lease stays bulk (STUCK BULK)");
    let entry = |after: Option<Lease>| AuditEntry {
        resource: bulk.resource.clone(),
        context: context.clone(),
        before: plan.before.clone(),
        after,
        outcome,
    };
    leave_stuck_bulk(store, &bulk, entry, name, what).await
}

/// Releases the bulk lease (STUCK BULK at once, not when it runs out), records the
/// failure with the lease as it is then, and says how to recover.
async fn leave_stuck_bulk<S: OperatorStore + AuditLog>(
    store: &S,
    bulk: &Lease,
    entry: impl FnOnce(Option<Lease>) -> AuditEntry,
    name: String,
    what: String,
) -> OpsError {
    if let Some(tenure) = Tenure::of(bulk) {
        let _ = store.release(&tenure).await;
    }
    let now = store.get(&bulk.resource).await.ok().flatten();
    let audit_id = store
        .append_audit(&entry(now.or(Some(bulk.clone()))))
        .await
        .map_err(|e| e.to_string());
    OpsError::StuckBulk {
        name,
        resource: bulk.resource.clone(),
        what,
        audit_id,
    }
}

/// Renews the bulk tenure every third of its lease; returns only when it is lost. A
/// failed renewal is tried again at the next tick: nobody but an operator can take a
/// bulk lease, so an expiry in between costs nothing.
async fn keep_renewing<S: LeaseStore>(store: &S, tenure: &Tenure, lease: Duration) -> String {
    let every = (lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(every).await;
        match store.renew(tenure, lease).await {
            Ok(TenureWrite::Done) => {}
            Ok(TenureWrite::LostLock) => {
                return format!(
                    "the bulk lease {} (version {}) was taken away while the rebuild ran",
                    tenure.resource, tenure.version
                )
            }
            Err(e) => {
                tracing::warn!(resource = %tenure.resource, error = %e, "could not renew the bulk lease; trying again")
            }
        }
    }
}
