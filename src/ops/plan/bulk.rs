//! The bulk lock: a rebuild takes it, abort-bulk gives it back without rebuilding.

use std::time::Duration;

use super::guards::{fence_effect, holder_warning};
use super::{change, Decision, PlanEffect};
use crate::model::{Lease, LockKind, StreamProfile};
use crate::ops::facts::PlanFacts;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::resume::describe_point;

/// A seed listener knows no `kind`: it would take a bulk lease like any expired one.
fn refuse_seed(lease: &Lease, what: &str) -> Result<(), Refusal> {
    if lease.protocol.is_seed() {
        return Err(Refusal::new(
            RefusalKind::SeedLease,
            format!(
                "{} is a seed lease (written by another implementation), whose listeners know                  no bulk lock and would take it back during the run: {what}",
                crate::model::text::escape_control(&lease.resource)
            ),
        ));
    }
    Ok(())
}

pub(super) fn rebuild(lease: &Lease, name: &str, facts: &PlanFacts) -> Result<Decision, Refusal> {
    refuse_seed(
        lease,
        "stop them first, or rebuild under a lease streamward's listeners hold",
    )?;
    if facts.profile == StreamProfile::CosmosDb {
        return Err(Refusal::new(
            RefusalKind::NotOnThisDeployment,
            "a rebuild hands its listeners back the cluster time of its bulk swap to replay \
             from, and Azure Cosmos DB has no cluster time and no start at a time; there, \
             recompute with the listeners stopped, then move their resume point with \
             `rewind --to-token` to a token committed before (docs/cosmos.md)",
        ));
    }
    let target = facts.rebuild.as_ref().ok_or_else(|| {
        Refusal::new(
            RefusalKind::NoRebuildDefinition,
            format!("no rebuild named {name:?}"),
        )
    })?;
    let mut warnings = Vec::new();
    if lease.kind == LockKind::Bulk {
        if let Some(holder) = lease.live_holder(facts.now) {
            return Err(Refusal::new(
                RefusalKind::RebuildRunning,
                format!(
                    "{} is already held for a rebuild by {holder}, which looks alive: wait for it, or abort-bulk {} first",
                    lease.resource, lease.resource
                ),
            ));
        }
        warnings.push(format!(
            "{} is STUCK BULK (left by {}): this rebuild recovers it",
            lease.resource,
            lease.holder.as_deref().unwrap_or("an earlier rebuild")
        ));
    } else if let Some(w) = holder_warning(lease, facts.now) {
        warnings.push(w);
    }
    let mut effect = PlanEffect::default();
    fence_effect(lease, facts.now, &mut effect);
    effect.lines.push(format!(
        "takes {} with kind bulk for {} (renewed while working): incremental listeners stay out",
        lease.resource, facts.operator
    ));
    effect.lines.push(format!("runs {}", target.description));
    effect.lines.push(
        "then sets kind update, resumeToken null, resumeAt = T0 (the cluster time of the bulk write) and releases: \
         listeners replay from T0, and replays of what the rebuild already saw change nothing"
            .into(),
    );
    effect.lines.push(
        "if it fails or is cancelled the lease stays bulk (STUCK BULK): re-run it or abort-bulk"
            .into(),
    );
    if lease.invalidated.is_some() {
        effect.lines.push(
            "T0 is after the change that closed the stream: giving the lease back clears the \
             INVALIDATED record, and listeners go on from T0"
                .into(),
        );
    }
    let mut c = change(lease, Some(facts.operator.clone()), facts.bulk_lease);
    c.kind = LockKind::Bulk;
    c.note = format!("rebuild {name} by {}", facts.operator);
    Ok(Decision {
        change: c,
        effect,
        warnings,
        confirmation: Some("moves the resume point (to the rebuild's start)".into()),
    })
}

pub(super) fn abort_bulk(lease: &Lease, facts: &PlanFacts) -> Result<Decision, Refusal> {
    refuse_seed(
        lease,
        "there is no rebuild to abort (a `kind` left on it locks nothing for them)",
    )?;
    if lease.kind != LockKind::Bulk {
        return Err(Refusal::new(
            RefusalKind::NotBulk,
            format!(
                "{} is not bulk (kind {}): there is no rebuild to abort",
                lease.resource, lease.kind
            ),
        ));
    }
    let mut effect = PlanEffect::default();
    let mut warnings: Vec<String> = holder_warning(lease, facts.now).into_iter().collect();
    let confirmation = fence_effect(lease, facts.now, &mut effect);
    if confirmation.is_some() {
        warnings.push("a rebuild may still be running: it will fail to give the lease back".into());
    }
    effect.lines.push(format!(
        "gives the lease back (kind update, released) without rebuilding; listeners resume from {}",
        describe_point(&lease.resume_point())
    ));
    warnings.push(
        "the aggregate may be inconsistent after abort-bulk: nothing was rebuilt; run the rebuild again to make it exact".into(),
    );
    let mut c = change(lease, None, Duration::ZERO);
    c.note = format!("abort-bulk by {}", facts.operator);
    Ok(Decision {
        change: c,
        effect,
        warnings,
        confirmation,
    })
}
