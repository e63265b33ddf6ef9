//! Pure planning: from a request and the facts read, the exact lease change, what it
//! means, and any reason to refuse. No I/O, no clock: everything comes from `PlanFacts`.
//! One module per family of actions; the checks they share are in `guards`.

mod bulk;
mod guards;

pub use guards::refuse_read_only;
mod resume_moves;
mod seed;
mod skip;
mod takeover;

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::facts::PlanFacts;
use super::refusal::{Refusal, RefusalKind};
use super::request::{ActionKind, ActionRequest};
use super::resume::ResumeMove;
use crate::model::text::escape_control;
use crate::model::{Lease, LockKind};
use crate::store::{OperatorChange, ResumeChange};

/// The (holder, version) the plan was made against: execute swaps only if the lease
/// still has this version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub holder: Option<String>,
    pub version: i64,
}

/// What the action means, beyond the lease fields.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanEffect {
    /// The live holder this action fences out.
    pub fences_out: Option<String>,
    pub resume: Option<ResumeMove>,
    /// One line each, for people.
    pub lines: Vec<String>,
    /// `skip --whole-transaction`: the changes stepped over, in order, each kept in the
    /// skipped collection when executed (a plain skip keeps its one change by the
    /// token it resumes after, and leaves this empty).
    pub stepped_over: Vec<crate::ops::transaction::SteppedChange>,
}

/// The outcome of planning: shown as the preview, executed as is.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub request: ActionRequest,
    pub action: ActionKind,
    /// The affected resource (`None` when the request names no known one).
    pub resource: Option<String>,
    pub operator: String,
    pub captured: Option<Captured>,
    pub before: Option<Lease>,
    /// The lease as the write will leave it; times are relative to `planned_at` (the
    /// server sets them from its own clock when it executes). For a rebuild: the
    /// lease while the rebuild runs.
    pub after: Option<Lease>,
    /// What execute sends: a compare-and-swap on `captured.version`, version + 1.
    pub change: Option<OperatorChange>,
    pub effect: PlanEffect,
    pub warnings: Vec<String>,
    /// Why the console must make the operator type the resource name (fences out a live
    /// holder, or moves a resume point); `None`: Cancel/OK is enough.
    pub confirmation: Option<String>,
    pub refusal: Option<Refusal>,
    /// The server's clock when the facts were read.
    pub planned_at: DateTime<Utc>,
}

impl Plan {
    pub fn is_refused(&self) -> bool {
        self.refusal.is_some()
    }

    /// The text the operator types to confirm, when one is needed.
    pub fn confirm_text(&self) -> Option<&str> {
        self.confirmation.as_ref().and(self.resource.as_deref())
    }

    /// Whether `typed` confirms this plan: nothing to type, or the resource name as
    /// stored or as the console shows it (control and direction characters escaped,
    /// which a terminal cannot type as they are).
    pub fn confirmed_by(&self, typed: &str) -> bool {
        self.confirm_text()
            .is_none_or(|name| typed == name || typed == escape_control(name))
    }
}

/// What a decided action changes.
pub(super) struct Decision {
    pub(super) change: OperatorChange,
    pub(super) effect: PlanEffect,
    pub(super) warnings: Vec<String>,
    pub(super) confirmation: Option<String>,
}

/// Plans `request` against `facts`. Never fails: a plan that must not run carries a
/// `refusal` and no `change`.
pub fn plan(request: &ActionRequest, facts: &PlanFacts) -> Plan {
    plan_deciding(request, facts, decide)
}

/// A move back to a recorded resume point (`leases import`): planned as the rewind
/// (`RewindTarget::Token` or `Time`) or reset to the oldest entry it is, by the same
/// rules, except that with `accept_skip` a move forward is allowed, with a warning that
/// says what is skipped, instead of refused as a rewind refuses it.
pub fn plan_restore(request: &ActionRequest, facts: &PlanFacts, accept_skip: bool) -> Plan {
    plan_deciding(request, facts, |request, facts, resource| {
        match (
            decide(request, facts, resource),
            request,
            facts.lease.as_ref(),
        ) {
            (Err(refusal), ActionRequest::Rewind { .. }, Some(lease))
                if accept_skip && refusal.kind == RefusalKind::WouldSkip =>
            {
                resume_moves::restore_forward(request, lease, facts)
            }
            (decided, _, _) => decided,
        }
    })
}

fn plan_deciding(
    request: &ActionRequest,
    facts: &PlanFacts,
    decide: impl FnOnce(&ActionRequest, &PlanFacts, Option<&str>) -> Result<Decision, Refusal>,
) -> Plan {
    let resource = affected_resource(request, facts);
    let lease = facts.lease.as_ref();
    let mut plan = Plan {
        request: request.clone(),
        action: request.kind(),
        resource: resource.clone(),
        operator: facts.operator.clone(),
        captured: lease.map(|l| Captured {
            holder: l.holder.clone(),
            version: l.version,
        }),
        before: facts.lease.clone(),
        after: None,
        change: None,
        effect: PlanEffect::default(),
        warnings: Vec::new(),
        confirmation: None,
        refusal: None,
        planned_at: facts.now,
    };
    let decided = guards::refuse_read_only(facts.read_only, request.kind())
        .and_then(|()| decide(request, facts, resource.as_deref()));
    match decided {
        Ok(decision) => {
            plan.after = lease.map(|l| predict_after(l, &decision.change, facts.now));
            plan.change = Some(decision.change);
            plan.effect = decision.effect;
            plan.warnings = decision.warnings;
            plan.confirmation = decision.confirmation;
        }
        Err(refusal) => plan.refusal = Some(refusal),
    }
    plan
}

/// The refusals that need nothing read from a store — read-only mode, a rebuild with no
/// definition (`rebuild_defined` is false), `reset --to now` without `--accept-skip` —
/// by the same rules [`plan`] applies, so a caller can refuse before it connects. `Ok`
/// says nothing about the other guards: those need the lease.
pub fn refuse_before_reading(
    request: &ActionRequest,
    read_only: bool,
    rebuild_defined: bool,
) -> Result<(), Refusal> {
    guards::refuse_read_only(read_only, request.kind())?;
    match request {
        ActionRequest::Rebuild { name } => guards::refuse_undefined_rebuild(name, rebuild_defined),
        ActionRequest::Reset {
            to, accept_skip, ..
        } => guards::refuse_unaccepted_skip(*to, *accept_skip, guards::UNCOUNTED_SKIP),
        _ => Ok(()),
    }
}

fn affected_resource(request: &ActionRequest, facts: &PlanFacts) -> Option<String> {
    match request {
        ActionRequest::Undo { .. } => facts.audit.as_ref().map(|r| r.resource.clone()),
        ActionRequest::Rebuild { .. } => facts.rebuild.as_ref().map(|r| r.resource.clone()),
        other => other.named_resource().map(str::to_string),
    }
}

fn decide(
    request: &ActionRequest,
    facts: &PlanFacts,
    resource: Option<&str>,
) -> Result<Decision, Refusal> {
    // What names the resource must exist before the lease can be looked at.
    match request {
        ActionRequest::Undo { audit_id } => match &facts.audit {
            None => {
                return Err(Refusal::new(
                    RefusalKind::UnknownAuditRecord,
                    format!("there is no audit record {audit_id:?} (streamward audit lists them)"),
                ))
            }
            Some(record) if !record.concerns_lease() => return Err(unleased_undo()),
            Some(_) => {}
        },
        ActionRequest::Rebuild { name } => {
            guards::refuse_undefined_rebuild(name, facts.rebuild.is_some())?
        }
        _ => {}
    }
    let resource = resource.unwrap_or_default();
    let Some(lease) = facts.lease.as_ref() else {
        return Err(Refusal::new(
            RefusalKind::UnknownResource,
            format!(
                "there is no lease {resource:?}: actions change existing leases only (streamward leases lists them)"
            ),
        ));
    };
    guards::refuse_exhausted_version(lease, request.kind())?;
    match request {
        ActionRequest::Takeover { to, hold, .. } => {
            takeover::takeover(lease, to.as_deref(), *hold, facts)
        }
        ActionRequest::Rewind { to, .. } => resume_moves::rewind(request, lease, to, facts),
        ActionRequest::Reset {
            to, accept_skip, ..
        } => resume_moves::reset(request, lease, *to, *accept_skip, facts),
        ActionRequest::Skip { to_token, .. } => {
            skip::skip(request, lease, to_token.as_ref(), facts)
        }
        ActionRequest::SkipTransaction { to_token, .. } => {
            skip::skip_transaction(request, lease, to_token.as_ref(), facts)
        }
        ActionRequest::Rebuild { name } => bulk::rebuild(lease, name, facts),
        ActionRequest::AbortBulk { .. } => bulk::abort_bulk(lease, facts),
        ActionRequest::Undo { audit_id } => resume_moves::undo(request, lease, audit_id, facts),
    }
}

/// Undo restores a lease's resume point; a record that concerns no lease (a fold of
/// increments) has none.
fn unleased_undo() -> Refusal {
    Refusal::new(
        RefusalKind::NothingToRestore,
        "a fold of increments has no resume point to restore: run `streamward increments fold` again",
    )
}

pub(super) fn change(
    lease: &Lease,
    holder: Option<String>,
    expires_in: Duration,
) -> OperatorChange {
    OperatorChange {
        resource: lease.resource.clone(),
        expected_version: lease.version,
        holder,
        expires_in,
        kind: LockKind::Update,
        resume: ResumeChange::Keep,
        note: String::new(),
        protocol: lease.protocol,
    }
}

/// The lease as the store will leave it, with `now` for the server's `$$NOW`.
pub fn predict_after(lease: &Lease, change: &OperatorChange, now: DateTime<Utc>) -> Lease {
    change.applied_to(lease, now)
}

#[cfg(test)]
mod capped_tests;
#[cfg(test)]
mod json_tests;
#[cfg(test)]
mod seed_tests;
#[cfg(test)]
mod skip_tests;
#[cfg(test)]
mod tests;
