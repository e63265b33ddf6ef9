//! A rebuild under the bulk lock (docs/runbook.md "Corrupted aggregate"): take the lease with kind bulk, renew it
//! while the definition runs, then give it back with `resumeAt = T0`; one audit record.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::Utc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::audited::{
    audit_context, begin, changed, executable, finish, finish_changed, intent, left_by,
    swap_failed, swap_resolved, Resolved,
};
use super::execute::Executed;
use super::plan::Plan;
use super::{ActionKind, OpsError};
use crate::model::{AuditState, ClusterTime, Lease, LockKind};
use crate::store::{
    AuditFinish, AuditLog, LeaseStore, OperatorChange, OpsStore, ResumeChange, Tenure, TenureWrite,
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

/// Runs a rebuild plan, intent first: a pending audit record, then a compare-and-swap
/// to kind bulk with the operator as holder (`Changed` → nothing written to the lease,
/// exit 4), renewing that tenure every third of the bulk lease while `definition`
/// runs, then a swap to kind update, resumeToken null, resumeAt T0, released. Each
/// lease write is a step of the record, which is finalized at the end. If the
/// definition fails or is cancelled, the lease stays bulk, released at once so it
/// shows as STUCK BULK, and the error says how to recover; if another writer takes
/// the bulk lease, the run is abandoned and the lease is that writer's
/// (`BulkTakenAway`).
pub async fn rebuild<S, D>(
    store: &S,
    plan: &Plan,
    definition: &D,
    progress: &Progress,
    cancel: &CancellationToken,
    reason: Option<String>,
) -> Result<RebuildOutcome, OpsError>
where
    S: OpsStore,
    D: RebuildDefinition<S>,
{
    let (change, planned) = executable(plan)?;
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
    let audit_id = begin(store, &intent(change, Some(planned), &context)).await?;
    let (original, bulk, t0) = match swap_resolved(store, change).await {
        Ok(Resolved::Applied {
            before,
            after,
            operation_time: Some(t0),
            ..
        }) => (before.unwrap_or_else(|| planned.clone()), after, t0),
        Ok(Resolved::Applied {
            after,
            operation_time: None,
            remark,
            ..
        }) => {
            // Applied, but without its cluster time there is no T0 to replay from.
            let what = format!(
                "took the bulk lease, but {}; without the write's cluster time there is no point to replay from, so nothing was rebuilt",
                remark.unwrap_or_default()
            );
            step(
                store,
                &audit_id,
                "bulk swap applied (its reply was lost)",
                Some(&after),
                None,
            )
            .await;
            return Err(leave_stuck_bulk(store, &after, &audit_id, name, what).await);
        }
        Ok(Resolved::Changed { current, remark }) => {
            let audit = finish_changed(store, &audit_id, change, current.as_ref(), remark).await;
            return Err(changed(change, current, Some((audit_id, audit))));
        }
        Err(error) => {
            let action = plan.action.name().to_string();
            return Err(swap_failed(store, audit_id, action, change, Some(planned), error).await);
        }
    };
    step(
        store,
        &audit_id,
        &format!(
            "bulk swap applied: version {} → {}, T0 {t0}",
            change.expected_version, bulk.version
        ),
        Some(&bulk),
        None,
    )
    .await;
    let tenure = Tenure {
        resource: bulk.resource.clone(),
        listener: change.holder.clone().unwrap_or_default(),
        version: bulk.version,
    };
    let lease_for = change.expires_in;
    let renewals = AtomicU64::new(0);
    progress.stage("running");
    let ran = tokio::select! {
        ran = definition.run(store, progress, cancel) => Ok(ran),
        lost = keep_renewing(store, &tenure, lease_for, &renewals) => Err(lost),
    };
    progress.finish();
    let renewed = renewals.load(Ordering::Relaxed);
    let report = match ran {
        Ok(Ok(report)) => report,
        Ok(Err(failure)) => {
            let what = match &failure {
                RebuildFailure::Cancelled => "was cancelled".to_string(),
                RebuildFailure::Failed(detail) => format!("failed: {detail}"),
            };
            return Err(leave_stuck_bulk(store, &bulk, &audit_id, name, what).await);
        }
        // Someone else's write took the bulk lease (an abort-bulk, another rebuild):
        // the lease is theirs now, not STUCK BULK.
        Err(lost) => {
            let current = store.get(&bulk.resource).await.ok().flatten();
            let what = format!(
                "stopped: {lost} (now {}); the run was abandoned half-way",
                current
                    .as_ref()
                    .map_or_else(|| "missing".into(), |l| format!("version {}", l.version))
            );
            return Err(taken_away(store, &audit_id, &bulk, current, name, what).await);
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
        protocol: Default::default(),
    };
    step(
        store,
        &audit_id,
        &format!(
            "ran: {} (the bulk lease renewed {renewed} times); giving the lease back with resumeAt {t0}",
            report.summary
        ),
        None,
        Some(&give_back.applied_to(&bulk, Utc::now())),
    )
    .await;
    let (after, remark) = match swap_resolved(store, &give_back).await {
        Ok(Resolved::Applied { after, remark, .. }) => (after, remark),
        Ok(Resolved::Changed { current, .. }) => {
            let what = format!(
                "finished ({}) but the bulk lease was taken away meanwhile (now version {}), so it was not given back with resumeAt {t0}",
                report.summary,
                current.as_ref().map_or_else(|| "missing".into(), |l| l.version.to_string())
            );
            return Err(taken_away(store, &audit_id, &bulk, current, name, what).await);
        }
        Err(e) => {
            // Sent twice without a reply, it may still have applied: read it back.
            let read_back = store.get(&bulk.resource).await.ok().flatten();
            match read_back.filter(|lease| left_by(&give_back, lease)) {
                Some(after) => (
                    after,
                    Some(format!("its reply was lost ({e}); read back as given back")),
                ),
                None => {
                    let what = format!(
                        "finished ({}) but the lease could not be given back: {e}",
                        report.summary
                    );
                    return Err(leave_stuck_bulk(store, &bulk, &audit_id, name, what).await);
                }
            }
        }
    };
    let remark = remark
        .map(|r| format!(" (the give-back: {r})"))
        .unwrap_or_default();
    store
        .finish_audit(
            &audit_id,
            &AuditFinish {
                state: AuditState::Applied,
                after: Some(after.clone()),
                outcome: format!(
                    "applied: {}; listeners replay from {t0}{remark}",
                    report.summary
                ),
            },
        )
        .await
        .map_err(|source| OpsError::AuditUnfinished {
            action: "rebuild".into(),
            resource: bulk.resource.clone(),
            version: after.version,
            audit_id: audit_id.clone(),
            cause: Box::new(source),
        })?;
    Ok(RebuildOutcome {
        executed: Executed {
            action: ActionKind::Rebuild,
            resource: bulk.resource.clone(),
            before: original,
            after,
            audit_id,
            operation_time: Some(t0),
            remark: (!remark.is_empty()).then(|| remark.trim().to_string()),
        },
        t0,
        report,
    })
}

/// Records a step; a step that cannot be written leaves the record one step behind,
/// which its finalization or the lease read back makes up for, so the rebuild goes on.
async fn step<S: AuditLog>(
    store: &S,
    audit_id: &str,
    what: &str,
    after: Option<&Lease>,
    intends: Option<&Lease>,
) {
    if let Err(e) = store.audit_step(audit_id, what, after, intends).await {
        tracing::warn!(audit_id, error = %e, step = what, "could not record a rebuild step");
    }
}

/// Another writer took the bulk lease: the record is finalized as failed with the
/// lease as that writer left it.
async fn taken_away<S: AuditLog>(
    store: &S,
    audit_id: &str,
    bulk: &Lease,
    current: Option<Lease>,
    name: String,
    what: String,
) -> OpsError {
    let audit = finish(
        store,
        audit_id,
        AuditFinish {
            state: AuditState::Failed,
            after: current,
            outcome: format!("failed: {what}"),
        },
    )
    .await;
    OpsError::BulkTakenAway {
        name,
        resource: bulk.resource.clone(),
        what,
        audit_id: audit_id.to_string(),
        audit,
    }
}

/// Releases the bulk lease (STUCK BULK at once, not when it runs out) and finalizes the
/// record as failed with the lease as it is then.
async fn leave_stuck_bulk<S: OpsStore>(
    store: &S,
    bulk: &Lease,
    audit_id: &str,
    name: String,
    what: String,
) -> OpsError {
    if let Some(tenure) = Tenure::of(bulk) {
        let _ = store.release(&tenure).await;
    }
    let now = store.get(&bulk.resource).await.ok().flatten();
    let audit = finish(
        store,
        audit_id,
        AuditFinish {
            state: AuditState::Failed,
            after: now.or_else(|| Some(bulk.clone())),
            outcome: format!("failed: {what}; the lease stays bulk (STUCK BULK)"),
        },
    )
    .await;
    OpsError::StuckBulk {
        name,
        resource: bulk.resource.clone(),
        what,
        audit_id: audit_id.to_string(),
        audit,
    }
}

/// Renews the bulk tenure every third of its lease, counting renewals; returns only
/// when it is lost. A failed renewal is tried again at the next tick: nobody but an
/// operator can take a bulk lease, so an expiry in between costs nothing.
async fn keep_renewing<S: LeaseStore>(
    store: &S,
    tenure: &Tenure,
    lease: Duration,
    renewals: &AtomicU64,
) -> String {
    let every = (lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(every).await;
        match store.renew(tenure, lease).await {
            Ok(TenureWrite::Done) => {
                renewals.fetch_add(1, Ordering::Relaxed);
            }
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
