//! Takeover: release to any standby, hand to one listener, or hold as the operator.

use std::time::Duration;

use super::guards::{fence_effect, holder_warning, refuse_bulk};
use super::{change, Decision, PlanEffect};
use crate::model::text::{escape_control, short_duration};
use crate::model::{unclaimed_explanation, Lease};
use crate::ops::facts::PlanFacts;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::request::ActionKind;

pub(super) fn takeover(
    lease: &Lease,
    to: Option<&str>,
    hold: Option<Duration>,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    refuse_bulk(lease, ActionKind::Takeover)?;
    let mut effect = PlanEffect::default();
    let mut warnings: Vec<String> = holder_warning(lease, facts.now).into_iter().collect();
    let mut confirmation = fence_effect(lease, facts.now, &mut effect);
    // Releasing or holding a lease nobody takes changes nothing for its processing;
    // handing it to a named listener is the one takeover that can help.
    let unclaimed = facts.thresholds.unclaimed_for(lease, facts.now);
    if let (None, Some(unclaimed)) = (to, unclaimed) {
        warnings.push(unclaimed_explanation(
            &escape_control(&lease.resource),
            unclaimed,
        ));
    }
    // Who picks the lease up after a release or a hold: a standby, if one is waiting.
    let taker = if unclaimed.is_some() {
        "a standby takes it over if one is waiting, but none took it when it was last free"
    } else {
        "any standby takes it over"
    };
    let mut c = match (to, hold) {
        (Some(_), Some(_)) => {
            return Err(Refusal::new(
                RefusalKind::ConflictingOptions,
                "takeover takes either --to LISTENER or --hold DURATION, not both",
            ))
        }
        _ if lease.protocol.is_seed() => {
            let expires_in = super::seed::takeover_lines(
                lease,
                to,
                hold,
                facts,
                &mut effect.lines,
                &mut warnings,
            );
            // A plain release does not stop a seed holder: it takes the lease back.
            if to.is_none() && hold.is_none() {
                effect.fences_out = None;
                confirmation = lease.live_holder(facts.now).map(|h| {
                    format!(
                        "releases the lease of the live holder {} (it takes it back)",
                        escape_control(h)
                    )
                });
            }
            let holder = match (to, hold) {
                (Some(listener), _) => Some(listener.to_string()),
                (None, Some(_)) => Some(facts.operator.clone()),
                (None, None) => None,
            };
            change(lease, holder, expires_in)
        }
        (None, None) => {
            effect
                .lines
                .push(format!("releases the lease now: {taker}"));
            change(lease, None, Duration::ZERO)
        }
        (Some(listener), None) => {
            if lease.live_holder(facts.now) == Some(listener) {
                warnings.push(format!(
                    "{listener} already holds it: this only starts a new tenure for it"
                ));
            }
            effect.lines.push(format!(
                "hands the lease to {listener} for {}: it claims it at once if it is standing by",
                short_duration(facts.handover_lease)
            ));
            change(lease, Some(listener.to_string()), facts.handover_lease)
        }
        (None, Some(hold)) => {
            effect.lines.push(format!(
                "{} holds it for {}: processing pauses until then, after which {taker}",
                facts.operator,
                short_duration(hold)
            ));
            change(lease, Some(facts.operator.clone()), hold)
        }
    };
    if let Some(window) = &facts.window {
        if lease
            .resume_point()
            .time()
            .is_some_and(|t| t < window.first)
        {
            warnings.push(
                "the resume point has fallen off the oplog (LOST): the next holder stops with history lost; rewind or reset instead".into(),
            );
        }
    }
    if let Some(invalidated) = &lease.invalidated {
        warnings.push(format!(
            "the change stream was closed (INVALIDATED: {}): a takeover keeps the resume point, \
             so the next holder meets it again; instead {}",
            escape_control(&invalidated.reason),
            invalidated.recovery(&escape_control(&lease.resource))
        ));
    }
    c.note = match (to, hold) {
        (Some(listener), _) => format!("takeover to {listener} by {}", facts.operator),
        (_, Some(hold)) => format!("hold {} by {}", short_duration(hold), facts.operator),
        _ => format!("takeover by {}", facts.operator),
    };
    Ok(Decision {
        change: c,
        effect,
        warnings,
        confirmation,
    })
}
