//! Planning an import: for each lease of the file, what would change on this cluster.
//! Pure: the facts of each lease come from [`crate::ops::gather`], as for a rewind.
//!
//! A lease at the file's point is left alone (idempotent reruns). Any other lease is
//! moved by the very plan a rewind makes (`RewindTarget::Token` or `Time`, or a reset to
//! the oldest entry when the file has neither), with its guards: the window check, the
//! live holder fenced out and warned about, a bulk lease refused. The one difference:
//! a move forward (it skips changes) is refused unless the operator accepts the skip.

use super::format::{ExportOrigin, ExportedLease, LeaseExport};
use crate::model::text::escape_control;
use crate::model::{Lease, ResumePoint};
use crate::ops::{
    plan_restore, predict_after, ActionRequest, Plan, PlanFacts, Refusal, RefusalKind, ResetTarget,
    RewindTarget, TimeSpec,
};

/// The audit records' action name for an import's moves.
pub const IMPORT_ACTION: &str = "import";

/// What the operator asked of the import besides the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Allow moves forward (they skip changes).
    pub accept_skip: bool,
    /// Allow a file exported from another replica set.
    pub accept_other_cluster: bool,
}

/// What the import does to one lease.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum ImportStep {
    /// Already at the file's resume point: nothing is written.
    Unchanged,
    /// No such lease on this cluster: refused (an import moves existing leases only).
    Missing(Refusal),
    /// Moved, by this plan (which may be refused).
    Move(Plan),
}

/// One lease of the file and what the import does to it.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportItem {
    pub exported: ExportedLease,
    /// The lease as read on this cluster.
    pub current: Option<Lease>,
    pub step: ImportStep,
}

impl ImportItem {
    pub fn resource(&self) -> &str {
        &self.exported.resource
    }

    /// Why this lease may not be moved, if it may not.
    pub fn refusal(&self) -> Option<&Refusal> {
        match &self.step {
            ImportStep::Unchanged => None,
            ImportStep::Missing(refusal) => Some(refusal),
            ImportStep::Move(plan) => plan.refusal.as_ref(),
        }
    }

    /// The plan of a move that may go ahead.
    pub fn move_plan(&self) -> Option<&Plan> {
        match &self.step {
            ImportStep::Move(plan) if plan.refusal.is_none() => Some(plan),
            _ => None,
        }
    }
}

/// The whole import's plan, in the file's order (by resource).
#[derive(Debug, Clone, PartialEq)]
pub struct ImportPlan {
    pub origin: ExportOrigin,
    pub exported_at: chrono::DateTime<chrono::Utc>,
    /// Refuses the whole import (another cluster's file), before any lease.
    pub refusal: Option<Refusal>,
    /// About the whole file (another lease collection, leases not restorable).
    pub warnings: Vec<String>,
    pub items: Vec<ImportItem>,
}

impl ImportPlan {
    /// The first refusal: the file's, else the first lease's. A refused import writes nothing.
    pub fn first_refusal(&self) -> Option<Refusal> {
        if let Some(refusal) = &self.refusal {
            return Some(refusal.clone());
        }
        let refused: Vec<&ImportItem> = self
            .items
            .iter()
            .filter(|i| i.refusal().is_some())
            .collect();
        let first = refused.first()?;
        let refusal = first.refusal()?;
        let others = match refused.len() {
            1 => String::new(),
            n => format!(" ({} more leases are refused, see the plan)", n - 1),
        };
        Some(Refusal {
            kind: refusal.kind,
            reason: format!(
                "lease {}: {}{others}; nothing was written (leave refused leases out with --only RESOURCE …)",
                escape_control(first.resource()),
                refusal.reason
            ),
        })
    }

    pub fn moves(&self) -> impl Iterator<Item = &Plan> {
        self.items.iter().filter_map(ImportItem::move_plan)
    }

    /// The leases already at the file's point: nothing to do for them.
    pub fn unchanged(&self) -> impl Iterator<Item = &str> {
        self.items
            .iter()
            .filter(|i| i.step == ImportStep::Unchanged)
            .map(ImportItem::resource)
    }
}

/// The request that moves a lease back to `exported`'s point: a rewind to its token
/// or time, or a reset to the oldest entry when it had neither.
pub fn restore_request(exported: &ExportedLease) -> ActionRequest {
    let resource = exported.resource.clone();
    match exported.point() {
        ResumePoint::Token(token) => ActionRequest::Rewind {
            resource,
            to: RewindTarget::Token(token),
        },
        ResumePoint::At(at) => ActionRequest::Rewind {
            resource,
            to: RewindTarget::Time(TimeSpec::Cluster(at)),
        },
        ResumePoint::Oldest => ActionRequest::Reset {
            resource,
            to: ResetTarget::Oldest,
            accept_skip: false,
        },
    }
}

/// Whether `lease` resumes exactly where `exported` did: the same token document
/// (byte for byte), or no token and the same `resumeAt`, or neither.
pub fn at_point(lease: &Lease, exported: &ExportedLease) -> bool {
    match (&lease.resume_token, &exported.resume_token) {
        (Some(now), Some(then)) => now.as_document() == then.as_document(),
        (None, None) => lease.resume_at == exported.resume_at,
        _ => false,
    }
}

/// Plans one lease of the file against its facts (as [`crate::ops::gather`] reads them
/// for [`restore_request`]).
pub fn plan_item(
    exported: &ExportedLease,
    facts: &PlanFacts,
    options: &ImportOptions,
    exported_at: chrono::DateTime<chrono::Utc>,
) -> ImportItem {
    let resource = escape_control(&exported.resource);
    let step = match &facts.lease {
        None => ImportStep::Missing(Refusal::new(
            RefusalKind::UnknownResource,
            format!(
                "there is no lease {resource:?} on this cluster, and an import moves existing \
                 leases only: start its listener once (it creates the lease), then import \
                 again with --accept-skip (the new lease starts at the oldest entry, so the \
                 recorded point is a move forward); or leave it out with --only"
            ),
        )),
        Some(lease) if at_point(lease, exported) => ImportStep::Unchanged,
        Some(lease) => {
            let mut plan = plan_restore(&restore_request(exported), facts, options.accept_skip);
            // The rewind's advice (a reset) is not the import's way to skip.
            if let Some(refusal) = plan
                .refusal
                .as_mut()
                .filter(|r| r.kind == RefusalKind::WouldSkip)
            {
                let what = refusal
                    .reason
                    .split(": use reset --to now")
                    .next()
                    .unwrap_or_default()
                    .replace("the target is after", "the file's point is after");
                refusal.reason =
                    format!("{what}: import with --accept-skip to move it forward on purpose");
            }
            if let Some(change) = plan.change.as_mut() {
                change.note = format!(
                    "import of the resume point exported at {} by {}",
                    exported_at.format("%Y-%m-%dT%H:%M:%SZ"),
                    facts.operator
                );
                plan.after = Some(predict_after(lease, change, facts.now));
            }
            if let (Some(then), Some(now)) = (&exported.watch, &lease.watch) {
                if then.db != now.db || then.coll != now.coll {
                    plan.warnings.push(format!(
                        "the file says this lease watched {}.{}, the lease here watches {}.{}: \
                         a token of one collection's stream means nothing on another's",
                        escape_control(&then.db),
                        escape_control(&then.coll),
                        escape_control(&now.db),
                        escape_control(&now.coll)
                    ));
                }
                if then.source != now.source {
                    plan.warnings.push(format!(
                        "the file says this lease read a {} source, the lease here reads a {} \
                         one: a position of one kind means nothing to the other",
                        then.source, now.source
                    ));
                }
            }
            ImportStep::Move(plan)
        }
    };
    ImportItem {
        exported: exported.clone(),
        current: facts.lease.clone(),
        step,
    }
}

/// What the file's origin means here: a refusal when it names another replica set
/// (unless accepted), a warning when it names another lease collection (moving the
/// lease database is what an import is for) or when it cannot be told.
pub fn judge_origin(
    file: &ExportOrigin,
    here: &ExportOrigin,
    options: &ImportOptions,
) -> (Option<Refusal>, Vec<String>) {
    let mut warnings = Vec::new();
    let shown = |o: &ExportOrigin| {
        let set = o
            .replica_set
            .as_deref()
            .map(|s| format!("replica set {}", escape_control(s)))
            .unwrap_or_else(|| "no replica set name".into());
        let uri = o.uri.as_deref().map(escape_control).unwrap_or_default();
        format!("{uri} ({set}, leases {})", escape_control(&o.leases))
    };
    let mut refusal = None;
    match (&file.replica_set, &here.replica_set) {
        (Some(then), Some(now)) if then != now => {
            let what = format!(
                "the file was exported from {}, and this is {}: a resume token of another \
                 cluster means nothing here (a listener resuming from it fails or skips)",
                shown(file),
                shown(here)
            );
            if options.accept_other_cluster {
                warnings.push(format!("{what}; accepted (--accept-other-cluster)"));
            } else {
                refusal = Some(Refusal::new(
                    RefusalKind::OtherCluster,
                    format!(
                        "{what}. If this really is the same data (a replica set renamed), \
                         accept it with --accept-other-cluster"
                    ),
                ));
            }
        }
        (Some(_), Some(_)) => {}
        _ => warnings.push(format!(
            "whether the file comes from this cluster cannot be told (it says {}, this is {}): \
             a resume token of another cluster means nothing here",
            shown(file),
            shown(here)
        )),
    }
    if refusal.is_none() && !file.leases.is_empty() && file.leases != here.leases {
        warnings.push(format!(
            "the file was exported from the lease collection {}; this import writes to {}",
            escape_control(&file.leases),
            escape_control(&here.leases)
        ));
    }
    (refusal, warnings)
}

/// Which leases of `export` the import takes: all, or those `only` names (each must
/// be in the file). `Err` names one that is not.
pub fn select<'a>(
    export: &'a LeaseExport,
    only: &[String],
) -> Result<Vec<&'a ExportedLease>, String> {
    if only.is_empty() {
        return Ok(export.leases.iter().collect());
    }
    for resource in only {
        if !export.leases.iter().any(|l| &l.resource == resource) {
            return Err(format!(
                "--only {}: the file has no lease of that name",
                escape_control(resource)
            ));
        }
    }
    Ok(export
        .leases
        .iter()
        .filter(|l| only.contains(&l.resource))
        .collect())
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
