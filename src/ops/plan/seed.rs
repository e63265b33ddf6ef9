//! Actions on a seed lease: one written by another implementation of the lease
//! algorithm ([`crate::model::LeaseProtocol`]). Its listener reads `resumeToken` only
//! (null stops it for good; missing means the oldest oplog entry), commits filtered on
//! `_id` and `listenerId` only (a version bump does not stop it), takes back its own
//! expired lease, and keeps its open change stream while its refresh succeeds. So an
//! action that moves its resume point writes a real token (or removes the field), and
//! holds the lease long enough for the holder's refresh to fail, which is what stops its
//! stream; when the hold ends, the first listener to ask starts from the new token.
//! docs/runbook.md, "Seed leases", says the same for operators.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::text::{escape_control, short_duration};
use crate::model::Lease;
use crate::ops::facts::PlanFacts;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::resume::NewResume;

/// A seed listener's default lease (it refreshes at half of it, every 2m30s).
pub(crate) const SEED_DEFAULT_LEASE: Duration = Duration::from_secs(5 * 60);

/// How long an operator holds a seed lease so its holder's next refresh fails: the
/// operator's `--hold`, else the larger of the seed default lease and twice the time
/// the lease has left. The holder's lease length is not stored; what is left of it is
/// at least the lease minus the refresh period, so with a refresh at half the lease
/// (the seed default) or more often, twice what is left covers a whole refresh period.
pub(crate) fn restart_hold(lease: &Lease, now: DateTime<Utc>, asked: Option<Duration>) -> Duration {
    asked.unwrap_or_else(|| {
        let left = lease
            .expires_at
            .and_then(|at| (at - now).to_std().ok())
            .unwrap_or_default();
        let twice = Duration::from_secs(left.saturating_mul(2).as_secs_f64().ceil() as u64);
        SEED_DEFAULT_LEASE.max(twice)
    })
}

/// Why the hold lasts that long, for the plan.
fn hold_reason(facts: &PlanFacts) -> &'static str {
    match facts.restart_hold {
        Some(_) => "as asked (--hold)",
        None => {
            "the larger of 5m (a seed listener's default lease) and twice what its lease \
             has left; --hold sets another"
        }
    }
}

/// The resume fields a move of a seed lease writes: a token, or none (the field
/// removed: the oldest oplog entry). A time becomes the token that stands for it, read
/// before planning; without one the move is refused, never written as a null token.
pub(super) fn seed_resume(target: NewResume, facts: &PlanFacts) -> Result<NewResume, Refusal> {
    match target {
        (Some(token), _) => Ok((Some(token), None)),
        (None, None) => Ok((None, None)),
        (None, Some(at)) => match &facts.token_for_time {
            Some(Ok((time, token))) if *time == at => Ok((Some(token.clone()), None)),
            Some(Err(why)) => Err(Refusal::new(
                RefusalKind::SeedLease,
                format!(
                    "this is a seed lease, whose listener reads only resumeToken, and {at} could \
                     not be turned into a resume token ({}): rewind --to-token TOKEN instead",
                    escape_control(why)
                ),
            )),
            _ => Err(Refusal::new(
                RefusalKind::SeedLease,
                format!(
                    "this is a seed lease, whose listener reads only resumeToken, and no resume \
                     token for {at} was read: rewind --to-token TOKEN instead"
                ),
            )),
        },
    }
}

/// The lines a seed lease's resume move adds, and the holder and expiry of its write:
/// held by the operator when a listener may hold its stream open, else released.
pub(super) fn restart_after_move(
    lease: &Lease,
    target: &NewResume,
    facts: &PlanFacts,
    lines: &mut Vec<String>,
) -> (Option<String>, Duration) {
    let resource = escape_control(&lease.resource);
    lines.push(match target {
        (Some(_), _) => format!(
            "{resource} is a seed lease (written by another implementation): its listener \
             reads only resumeToken, so the new point is written as a token, and resumeAt is \
             not written"
        ),
        _ => format!(
            "{resource} is a seed lease (written by another implementation): resumeToken is \
             removed, which its listener reads as \"start at the oldest oplog entry\" (a null \
             one would stop it for good)"
        ),
    });
    if let Some((at, _)) = facts.token_for_time.as_ref().and_then(|t| t.as_ref().ok()) {
        lines.push(format!(
            "{at} is written as the resume token a change stream started at {at} reports: \
             changes at or after {at} are replayed"
        ));
    }
    match &lease.holder {
        // An operator's own hold: no listener has a stream open on it.
        Some(holder) if *holder == facts.operator => {
            let hold = restart_hold(lease, facts.now, facts.restart_hold);
            lines.push(format!(
                "{} holds it again for {} ({}): no listener holds it now; when the hold                  ends the first listener to ask starts from the new resume point",
                escape_control(holder),
                short_duration(hold),
                hold_reason(facts)
            ));
            (Some(facts.operator.clone()), hold)
        }
        Some(holder) => {
            let hold = restart_hold(lease, facts.now, facts.restart_hold);
            lines.push(hold_line(
                &escape_control(holder),
                hold,
                facts,
                "starts from the new resume point",
            ));
            (Some(facts.operator.clone()), hold)
        }
        None => {
            lines.push(
                "releases it (no listener holds it, so none has a stream open): the first \
                 listener to ask takes it and starts from the new resume point"
                    .into(),
            );
            (None, Duration::ZERO)
        }
    }
}

/// "OP holds it for H (why): X's next refresh fails and it stops its stream; then …".
fn hold_line(holder: &str, hold: Duration, facts: &PlanFacts, then: &str) -> String {
    format!(
        "{} holds the lease for {} ({}), until {}: {holder} is not fenced by the version \
         (a seed listener commits on _id and listenerId only), but its next refresh finds \
         the lease held by another and fails, and it stops its change stream; when the hold \
         ends the first listener to ask takes the lease and {then}",
        facts.operator,
        short_duration(hold),
        hold_reason(facts),
        crate::model::Moment::NowPlus(hold)
            .at(facts.now)
            .format("%H:%M:%SZ")
    )
}

/// What a takeover of a seed lease does to its holder, line by line; the hold of
/// `--to` (the handed-to listener keeps it that long, so the old holder's refresh
/// fails before it could take the lease back).
pub(super) fn takeover_lines(
    lease: &Lease,
    to: Option<&str>,
    hold: Option<Duration>,
    facts: &PlanFacts,
    lines: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Duration {
    let resource = escape_control(&lease.resource);
    // An operator's own hold is no listener: nobody has a stream open on it.
    let holder = lease
        .holder
        .as_deref()
        .filter(|h| *h != facts.operator)
        .map(escape_control);
    let default_hold = restart_hold(lease, facts.now, None);
    lines.push(format!(
        "{resource} is a seed lease (written by another implementation): its listener is not \
         fenced by the version, takes back an expired lease that names it, and keeps its open \
         change stream while its refresh succeeds"
    ));
    match (to, hold, &holder) {
        (None, None, Some(holder)) => {
            lines.push(format!(
                "releases the lease now: {holder}'s next refresh takes it back (unless another \
                 listener asks first) and it goes on from its open stream: processing does \
                 not stop or restart"
            ));
            warnings.push(format!(
                "a plain takeover does not stop {holder}: to stop it, --hold {} (longer than \
                 its refresh period) or --to LISTENER",
                short_duration(default_hold)
            ));
            Duration::ZERO
        }
        (None, None, None) => {
            lines.push(
                "releases the lease now: the first listener to ask takes it and starts from \
                 the resume point"
                    .into(),
            );
            Duration::ZERO
        }
        (None, Some(hold), holder) => {
            if let Some(holder) = holder {
                lines.push(hold_line(
                    holder,
                    hold,
                    &PlanFacts {
                        restart_hold: Some(hold),
                        ..facts.clone()
                    },
                    "starts from the resume point",
                ));
                if hold < default_hold {
                    warnings.push(format!(
                        "{} may be shorter than {holder}'s refresh period: if it does not try \
                         to refresh within it, it takes the lease back afterwards and goes on \
                         from its open stream, and nothing pauses ({} is sure for a seed \
                         listener's defaults)",
                        short_duration(hold),
                        short_duration(default_hold)
                    ));
                }
            } else {
                lines.push(format!(
                    "{} holds it for {}: no listener can take it until then",
                    facts.operator,
                    short_duration(hold)
                ));
            }
            hold
        }
        (Some(listener), _, holder) => {
            let hold = facts.handover_lease.max(default_hold);
            let listener = escape_control(listener);
            let stops = holder
                .as_ref()
                .filter(|h| **h != listener)
                .map(|h| {
                    format!(
                        "{h}'s next refresh finds it held by {listener} and fails, and {h} stops \
                         its change stream; "
                    )
                })
                .unwrap_or_default();
            lines.push(format!(
                "hands the lease to {listener} for {} ({}): {stops}{listener} takes it at its \
                 next try and starts from the resume point; if it does not, the first listener \
                 to ask after that takes it",
                short_duration(hold),
                "long enough for the old holder's refresh to fail"
            ));
            hold
        }
    }
}
