//! The I/O of an export and an import, generic over the store: the sandbox in tests, a
//! cluster from the command line.

use thiserror::Error;

use super::format::{ExportOrigin, ExportedLease, LeaseExport};
use super::plan::{judge_origin, plan_item, restore_request, ImportOptions, ImportPlan};
use super::IMPORT_ACTION;
use crate::model::text::escape_control;
use crate::ops::{execute_as, gather, Executed, GatherOptions, OpsError};
use crate::store::{LeaseStore, OpsStore, StoreError};

/// Every lease of `store`, read once, with the server's clock. Reads only.
pub async fn export<S: LeaseStore>(
    store: &S,
    origin: ExportOrigin,
) -> Result<LeaseExport, StoreError> {
    let listing = store.list().await?;
    let now = store.server_now().await?;
    let unreadable = listing.malformed.iter().map(ToString::to_string).collect();
    Ok(LeaseExport::new(now, origin, &listing.items, unreadable))
}

/// Plans the import of `selected` (leases of `file`): each lease's facts read as for a
/// rewind to its recorded point, then planned. Reads only.
pub async fn plan_import<S: OpsStore>(
    store: &S,
    file: &LeaseExport,
    selected: &[&ExportedLease],
    here: &ExportOrigin,
    gather_options: &GatherOptions,
    options: &ImportOptions,
) -> Result<ImportPlan, OpsError> {
    let (refusal, mut warnings) = judge_origin(&file.origin, here, options);
    if !file.unreadable.is_empty() {
        warnings.push(format!(
            "{} lease documents could not be read when the file was exported and are not in it: {}",
            file.unreadable.len(),
            escape_control(&file.unreadable.join("; "))
        ));
    }
    let mut items = Vec::with_capacity(selected.len());
    if refusal.is_none() {
        for exported in selected {
            let facts = gather(store, &restore_request(exported), gather_options).await?;
            items.push(plan_item(exported, &facts, options, file.exported_at));
        }
    }
    Ok(ImportPlan {
        origin: file.origin.clone(),
        exported_at: file.exported_at,
        refusal,
        warnings,
        items,
    })
}

/// What an executed import did.
#[derive(Debug, Default)]
pub struct ImportReport {
    /// Moved, each with its own audit record, in order.
    pub moved: Vec<Executed>,
    /// Left alone: already at the file's point.
    pub unchanged: Vec<String>,
    /// Not moved because an earlier move failed (the failed one first).
    pub not_moved: Vec<String>,
}

/// An import that stopped part way: which leases were moved (with their audit records)
/// and which not. The cause decides the exit code.
#[derive(Debug, Error)]
#[error(
    "the import stopped at lease {failed}: {cause}. Moved before it: {moved}. Not moved: {not_moved}. \
     Running the import again moves only the leases not yet at the file's point"
)]
pub struct ImportStopped {
    pub failed: String,
    /// "a (audit …), b (audit …)" or "none".
    pub moved: String,
    pub not_moved: String,
    #[source]
    pub cause: OpsError,
    pub report: ImportReport,
}

/// Moves every lease the plan moves, one audited action each, in order; stops at the
/// first that fails. The plan must not be refused (`OpsError::Refused` otherwise,
/// nothing written).
pub async fn execute_import<S: OpsStore>(
    store: &S,
    plan: &ImportPlan,
    reason: Option<String>,
) -> Result<ImportReport, Box<ImportStopped>> {
    let mut report = ImportReport {
        unchanged: plan.unchanged().map(str::to_string).collect(),
        ..ImportReport::default()
    };
    if let Some(refusal) = plan.first_refusal() {
        return Err(stopped(
            report,
            "(none)".into(),
            OpsError::Refused(refusal),
            Vec::new(),
        ));
    }
    let moves: Vec<_> = plan.moves().collect();
    for (i, move_plan) in moves.iter().enumerate() {
        match execute_as(store, move_plan, reason.clone(), IMPORT_ACTION).await {
            Ok(done) => report.moved.push(done),
            Err(cause) => {
                let resource = move_plan.resource.clone().unwrap_or_default();
                let rest = moves[i..]
                    .iter()
                    .filter_map(|p| p.resource.clone())
                    .collect();
                return Err(stopped(report, resource, cause, rest));
            }
        }
    }
    Ok(report)
}

fn stopped(
    mut report: ImportReport,
    failed: String,
    cause: OpsError,
    not_moved: Vec<String>,
) -> Box<ImportStopped> {
    report.not_moved = not_moved;
    let moved = if report.moved.is_empty() {
        "none".to_string()
    } else {
        report
            .moved
            .iter()
            .map(|m| format!("{} (audit {})", escape_control(&m.resource), m.audit_id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let not_moved = if report.not_moved.is_empty() {
        "none".to_string()
    } else {
        report
            .not_moved
            .iter()
            .map(|r| escape_control(r))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Box::new(ImportStopped {
        failed: escape_control(&failed),
        moved,
        not_moved,
        cause,
        report,
    })
}
