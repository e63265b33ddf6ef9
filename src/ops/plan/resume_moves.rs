//! The actions that move a resume point: rewind, reset and undo. Each fences out the
//! holder and sets `resumeToken`/`resumeAt`; they differ in their target and guards.

use std::time::Duration;

use super::guards::{
    fence_effect, holder_warning, refuse_bulk, refuse_unaccepted_skip, UNCOUNTED_SKIP,
};
use super::{change, seed, Decision, PlanEffect};
use crate::model::text::{escape_control, group_digits, short_duration};
use crate::model::{AuditRecord, AuditState, Invalidation, Lease, PendingVerdict, ResumePoint};
use crate::model::{ClusterTime, OplogWindow};
use crate::ops::facts::PlanFacts;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::request::{ActionKind, ActionRequest, ResetTarget, RewindTarget};
use crate::ops::resume::{
    describe_point, movement, point_of, start_known, start_of, Direction, ResumeMove,
};
use crate::ops::target::{counted_on, resume_target};
use crate::store::ResumeChange;

fn resume_move(
    lease: &Lease,
    new: &ResumePoint,
    facts: &PlanFacts,
    warnings: &mut Vec<String>,
) -> Option<ResumeMove> {
    if !start_known(lease, &lease.resume_point(), facts.window.as_ref()) {
        warnings.push(match facts.capped {
            Some(_) => "the current resume token is not an entry's _id: what is replayed or \
                        skipped cannot be told"
                .into(),
            None => "the current resume token cannot be decoded: what is replayed or skipped \
                     cannot be told"
                .into(),
        });
        return None;
    }
    let moved = movement(lease, new, facts.window.as_ref())?;
    let (direction, from, to) = (moved.direction, moved.from, moved.to);
    let on = counted_on(lease);
    let count = facts.changes.clone().filter(|c| {
        c.range.from == from
            && c.range.to == to
            && c.range.entries == moved.entries
            && Some(&c.range.on) == on.as_ref()
    });
    match &count {
        Some(c) if c.at_least() => warnings.push(format!(
            "counted at least {} changes: the count stops there",
            group_digits(c.limit)
        )),
        Some(_) => {}
        None if on.is_none() => warnings.push(
            "the lease does not say which collection it watches: the changes cannot be counted"
                .into(),
        ),
        None if facts.capped.is_some() => {
            warnings.push("the entries were not counted (the count failed)".into())
        }
        None => warnings.push("the changes were not counted (no access to the oplog?)".into()),
    }
    // From a LOST point the range starts before the oldest entry: a count over it reads
    // only what is still there, which is not the number of changes passed over.
    let count = count.filter(|_| !starts_before_the_window(from, facts.window.as_ref()));
    Some(ResumeMove {
        direction,
        on,
        from,
        to,
        span: to.saturating_since(from),
        count,
        entries: moved.entries,
    })
}

fn starts_before_the_window(from: ClusterTime, window: Option<&OplogWindow>) -> bool {
    window.is_some_and(|w| from < w.first)
}

/// What a move replays or skips, for people. Changes before the oldest oplog entry are
/// gone: they are said to be uncountable, never "0 changes", and what is still in the
/// oplog is counted on its own.
pub(super) fn describe_move(m: &ResumeMove, facts: &PlanFacts) -> String {
    let Some(first) = facts
        .window
        .map(|w| w.first)
        .filter(|first| m.from < *first)
    else {
        return m.describe();
    };
    let verb = match m.direction {
        Direction::Replay => "replayed",
        Direction::Skip => "skipped",
    };
    let on =
        m.on.as_ref()
            .map(|c| format!(" on {}", escape_control(&c.to_string())))
            .unwrap_or_default();
    if let Some(capped) = &facts.capped {
        // The entries still held were counted by `_id`: what is gone is not among them.
        let gone = format!(
            "the entries from {} up to the oldest one {} holds were overwritten: they cannot be \
             counted, nor {verb} (they are gone)",
            m.from,
            escape_control(&capped.ns.to_string())
        );
        return format!("{gone}; {}", m.describe());
    }
    let gone = format!(
        "the changes{on} from {} up to the oldest oplog entry ({first}) fell off the oplog: they cannot be counted, nor {verb} (they are gone)",
        m.from
    );
    if m.to < first {
        return format!("{gone}; no change still in the oplog is {verb}");
    }
    let still = ResumeMove {
        from: first,
        span: m.to.saturating_since(first),
        count: facts
            .changes
            .clone()
            .filter(|c| c.range.to == m.to && Some(&c.range.on) == m.on.as_ref()),
        ..m.clone()
    };
    format!("{gone}; {}", still.describe())
}

/// The shared shape of rewind, reset and undo: fence out, set the resume point.
pub(super) fn move_resume(
    request: &ActionRequest,
    lease: &Lease,
    facts: &PlanFacts,
    note: String,
) -> Result<(Decision, Option<ResumeMove>), Refusal> {
    refuse_bulk(lease, request.kind())?;
    let Some(target) = resume_target(request, lease, facts)? else {
        return Err(Refusal::new(
            RefusalKind::ConflictingOptions,
            format!("{} does not move a resume point", request.kind()),
        ));
    };
    let (token, at) = match lease.protocol.is_seed() {
        true => seed::seed_resume(target, facts)?,
        false => target,
    };
    let mut effect = PlanEffect::default();
    let mut warnings: Vec<String> = holder_warning(lease, facts.now).into_iter().collect();
    fence_effect(lease, facts.now, &mut effect);
    let new_point = point_of(&token, at);
    let moved = match (facts.window, &facts.capped) {
        (Some(_), _) => resume_move(lease, &new_point, facts, &mut warnings),
        (None, Some(capped)) => {
            warnings.push(format!(
                "{}: the new position is not checked against any, and the listener reads \
                 whatever is appended after it",
                capped.describe()
            ));
            None
        }
        (None, None) => {
            warnings.push(format!(
                "{}, so the new resume point is not checked against it: if it has already \
                 fallen off the oplog, the listener stops LOST (history lost) and waits on its \
                 lease for another rewind",
                facts.window_unread()
            ));
            None
        }
    };
    effect.lines.push(match (&new_point, &facts.capped) {
        (ResumePoint::Token(t), Some(_)) => match crate::model::token_entry(t) {
            Some(id) => format!(
                "the next holder resumes after entry {id} (at {})",
                crate::ops::facts::entry_clock(&id)
            ),
            None => format!("the next holder resumes after token {t}"),
        },
        (ResumePoint::Token(t), None) => format!("the next holder resumes after token {t}"),
        (ResumePoint::At(t), Some(_)) => format!(
            "the next holder starts at the entries whose _id was made at or after {t} \
             (whole seconds)"
        ),
        (ResumePoint::At(t), None) => format!("the next holder starts at {t} (inclusive)"),
        (ResumePoint::Oldest, Some(capped)) => format!(
            "the next holder starts from the oldest entry capped collection {} holds",
            escape_control(&capped.ns.to_string())
        ),
        (ResumePoint::Oldest, None) => "the next holder starts from the oldest oplog entry".into(),
    });
    match &moved {
        Some(m) => effect.lines.push(describe_move(m, facts)),
        None if facts.window.is_none() && facts.capped.is_some() => {}
        None if facts.window.is_none() => effect
            .lines
            .push("what is replayed cannot be counted without the oplog window".into()),
        None => effect
            .lines
            .push("the resume point does not move: nothing is replayed or skipped".into()),
    }
    if let Some(window) = &facts.window {
        if lease
            .resume_point()
            .time()
            .is_some_and(|t| t < window.first)
        {
            warnings.push(match &facts.capped {
                Some(capped) => format!(
                    "the current resume point is LOST: entries of {} before {} were \
                     overwritten and cannot be replayed; a rebuild of derived data may be needed",
                    escape_control(&capped.ns.to_string()),
                    window.first
                ),
                None => format!(
                    "the current resume point is LOST: changes before {} fell off the oplog and cannot be replayed; a rebuild of derived data may be needed",
                    window.first
                ),
            });
        }
    }
    if let Some(invalidated) = &lease.invalidated {
        closed_stream_notes(invalidated, &new_point, facts, &mut effect, &mut warnings);
    }
    effect.resume = moved.clone();
    let (holder, expires_in) = match lease.protocol.is_seed() {
        true => seed::restart_after_move(lease, &(token.clone(), at), facts, &mut effect.lines),
        false => (None, Duration::ZERO),
    };
    let mut c = change(lease, holder, expires_in);
    c.resume = ResumeChange::Set { token, at };
    c.note = note;
    Ok((
        Decision {
            change: c,
            effect,
            warnings,
            confirmation: Some("moves the resume point".into()),
        },
        moved,
    ))
}

/// On an INVALIDATED lease: the record goes, and a new point at or before the change
/// that closed the stream meets it again.
fn closed_stream_notes(
    invalidated: &Invalidation,
    new_point: &ResumePoint,
    facts: &PlanFacts,
    effect: &mut PlanEffect,
    warnings: &mut Vec<String>,
) {
    let reason = escape_control(&invalidated.reason);
    effect.lines.push(format!(
        "clears the INVALIDATED record ({reason}): the listener waiting on the lease starts again"
    ));
    let (Some(at), Some(after)) = (invalidated.at, invalidated.resume_after()) else {
        return;
    };
    if start_of(new_point, facts.window.as_ref()).is_some_and(|start| start < after) {
        warnings.push(format!(
            "the stream was closed at {at} ({reason}) and the new resume point is not past it: \
             the listener meets it again and stops INVALIDATED; --to {}:{} starts right after it",
            after.secs, after.inc
        ));
    }
}

/// A forward move on an INVALIDATED lease that ends right after the change that closed
/// the stream passes over nothing the listener could still process: it committed every
/// change before that one, and could not go past it.
fn only_past_the_closed_stream(lease: &Lease, moved: Option<&ResumeMove>) -> bool {
    let after = lease
        .invalidated
        .as_ref()
        .and_then(Invalidation::resume_after);
    matches!((moved, after), (Some(m), Some(after)) if m.direction == Direction::Skip && m.to < after)
}

fn skipped_in_window(moved: Option<&ResumeMove>, window: Option<&OplogWindow>) -> bool {
    match (moved, window) {
        (Some(m), Some(w)) => m.direction == Direction::Skip && m.to >= w.first,
        _ => false,
    }
}

pub(super) fn rewind(
    request: &ActionRequest,
    lease: &Lease,
    to: &RewindTarget,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let note = match to {
        RewindTarget::Time(spec) => {
            format!("rewind to {} by {}", spec.cluster_time(), facts.operator)
        }
        RewindTarget::By(by) => format!("rewind by {} by {}", short_duration(*by), facts.operator),
        RewindTarget::Token(_) => format!("rewind to a token by {}", facts.operator),
        RewindTarget::Checkpoint(which) => {
            match super::super::target::checkpoint_named(which, lease, facts) {
                Ok(c) => format!(
                    "rewind to checkpoint {} (recorded {} by {} at version {}) by {}",
                    c.id,
                    c.at.format("%Y-%m-%dT%H:%M:%SZ"),
                    c.holder,
                    c.version,
                    facts.operator
                ),
                Err(refusal) => return Err(refusal),
            }
        }
    };
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    if only_past_the_closed_stream(lease, moved.as_ref()) {
        decision.effect.lines.push(
            "starts right after the change that closed the stream: the listener committed \
             everything before it, so nothing it could process is skipped"
                .into(),
        );
        return Ok(decision);
    }
    // Without the window the move is not described, but its direction can still be
    // told from the two points' times: forward is a skip, not a rewind.
    let forward_unchecked = facts.window.is_none()
        && match &decision.change.resume {
            ResumeChange::Set { token, at } => movement(lease, &point_of(token, *at), None)
                .is_some_and(|m| m.direction == Direction::Skip),
            ResumeChange::Keep => false,
        };
    if forward_unchecked {
        return Err(Refusal::new(
            RefusalKind::WouldSkip,
            "the target is after the current resume point: that skips changes, it does not \
             replay them; a rewind goes back",
        ));
    }
    if skipped_in_window(moved.as_ref(), facts.window.as_ref()) {
        let what = moved.map(|m| describe_move(&m, facts)).unwrap_or_default();
        return Err(Refusal::new(
            RefusalKind::WouldSkip,
            format!(
                "the target is after the current resume point, so nothing is replayed and {what}: \
                 use reset --to now --accept-skip to skip on purpose"
            ),
        ));
    }
    Ok(decision)
}

/// A move forward to a recorded point whose skip the operator accepted (`leases import
/// --accept-skip`): the rewind's move, without its refusal to skip.
pub(super) fn restore_forward(
    request: &ActionRequest,
    lease: &Lease,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let note = format!("restore of a recorded resume point by {}", facts.operator);
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    let what = moved
        .as_ref()
        .filter(|m| m.direction == Direction::Skip)
        .map(|m| describe_move(m, facts))
        .unwrap_or_else(|| "changes after the current resume point are skipped".into());
    decision.warnings.push(format!(
        "moves forward, skipping on purpose (accepted): {what}; the skipped changes are never \
         processed by this listener"
    ));
    Ok(decision)
}

pub(super) fn reset(
    request: &ActionRequest,
    lease: &Lease,
    to: ResetTarget,
    accept_skip: bool,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let note = match to {
        ResetTarget::Oldest => format!("reset to oldest by {}", facts.operator),
        ResetTarget::Now => format!("reset to now by {}", facts.operator),
    };
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    match to {
        ResetTarget::Now => {
            let what = moved
                .as_ref()
                .filter(|m| m.direction == Direction::Skip)
                .map(|m| describe_move(m, facts))
                .unwrap_or_else(|| UNCOUNTED_SKIP.into());
            refuse_unaccepted_skip(to, accept_skip, &what)?;
            // The effect above says what is skipped; this says it is for good.
            decision.warnings.push(
                "skipping on purpose (accepted): the skipped changes are never processed by \
                 this listener; data derived from them may need a rebuild"
                    .into(),
            );
        }
        ResetTarget::Oldest => {
            if let (Some(window), Some(capped)) = (&facts.window, &facts.capped) {
                decision.warnings.push(format!(
                    "the oldest entry is the next capped collection {} overwrites: starting \
                     there the lease has no headroom, stays AT RISK until its listener catches \
                     up, and is LOST again if the collection rolls past it first (it holds {} \
                     of entries); if skipping is acceptable, reset to now instead",
                    escape_control(&capped.ns.to_string()),
                    short_duration(window.length())
                ));
            } else if let Some(window) = &facts.window {
                decision.warnings.push(format!(
                    "the oldest entry is the next the oplog drops: starting there the lease has \
                     no headroom, stays AT RISK until its listener catches up, and is LOST again \
                     if the oplog rolls past it first (the window is {}); if skipping is \
                     acceptable, reset to now instead",
                    short_duration(window.length())
                ));
            }
        }
    }
    Ok(decision)
}

pub(super) fn undo(
    request: &ActionRequest,
    lease: &Lease,
    audit_id: &str,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    if let Some(record) = &facts.audit {
        refuse_unapplied(record, lease, audit_id, facts.now)?;
        refuse_unmoved(record)?;
    }
    let note = format!("undo {audit_id} by {}", facts.operator);
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    if let Some(record) = &facts.audit {
        decision.effect.lines.insert(
            0,
            format!(
                "restores the resume point {} recorded before {} by {} at {}",
                record
                    .before
                    .as_ref()
                    .map(|b| describe_point(&b.resume_point()))
                    .unwrap_or_default(),
                record.action,
                record.operator,
                record.at.to_rfc3339()
            ),
        );
    }
    if moved.is_some_and(|m| m.direction == Direction::Skip) {
        decision.warnings.push(
            "undo moves the resume point forward: the changes in between are not processed (again)"
                .into(),
        );
    }
    Ok(decision)
}

/// Undo restores a resume point; an action that left it where it was (a takeover, an
/// abort-bulk) has none to give back. Restoring the recorded one anyway would move the
/// lease back over everything processed since: a rewind nobody asked for.
///
/// Takeover and abort-bulk keep the resume point by definition; their record's `after`
/// may still show a later token, committed by the holder between the plan's read and
/// the swap (the swap is on the version only). Any other action counts as moving it
/// unless its record's before and after points are equal.
fn refuse_unmoved(record: &AuditRecord) -> Result<(), Refusal> {
    let Some(before) = &record.before else {
        return Ok(());
    };
    let point = before.resume_point();
    let keeps_it = [ActionKind::Takeover, ActionKind::AbortBulk]
        .iter()
        .any(|kind| record.action == kind.name());
    let unchanged = record
        .after
        .as_ref()
        .is_some_and(|after| after.resume_point() == point);
    if !keeps_it && !unchanged {
        return Ok(());
    }
    Err(Refusal::new(
        RefusalKind::NothingToRestore,
        format!(
            "nothing to undo: {} did not move the resume point (it stayed {}); undo only restores resume points",
            escape_control(&record.action),
            describe_point(&point)
        ),
    ))
}

/// Only an action that changed the lease can be undone: one recorded as applied, or a
/// pending one the lease reads back as applied.
fn refuse_unapplied(
    record: &AuditRecord,
    lease: &Lease,
    audit_id: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), Refusal> {
    let id = escape_control(audit_id);
    match record.state {
        AuditState::Applied => Ok(()),
        AuditState::Pending => match PendingVerdict::of(record, Some(lease), now) {
            PendingVerdict::Applied => Ok(()),
            verdict => Err(Refusal::new(
                RefusalKind::NotApplied,
                format!(
                    "audit record {id} is pending: {}",
                    escape_control(&verdict.recovery(record, Some(lease)))
                ),
            )),
        },
        AuditState::NotApplied => Err(Refusal::new(
            RefusalKind::NotApplied,
            format!("audit record {id} was not applied: there is nothing to undo"),
        )),
        AuditState::Failed => Err(Refusal::new(
            RefusalKind::NotApplied,
            format!(
                "audit record {id} failed part-way ({}): recover with the action its outcome names, not undo",
                escape_control(&record.outcome)
            ),
        )),
    }
}
