//! Checks and effect lines shared by several actions.

use chrono::{DateTime, Utc};

use super::super::refusal::{Refusal, RefusalKind};
use super::super::request::{ActionKind, ResetTarget};
use super::PlanEffect;
use crate::model::text::short_duration;
use crate::model::{Lease, LockKind};

// The three rules below need nothing read from a store: `plan` applies them, and so
// does `refuse_before_reading`, for a caller that checks before it connects.

/// Read-only mode refuses every action that writes, named `action` (an [`ActionKind`],
/// or another writer's name such as the fold of increments').
pub fn refuse_read_only(read_only: bool, action: impl std::fmt::Display) -> Result<(), Refusal> {
    if read_only {
        return Err(Refusal::new(
            RefusalKind::ReadOnly,
            format!(
                "read-only mode: {action} is not allowed (drop --read-only / read_only = false to act)"
            ),
        ));
    }
    Ok(())
}

pub(super) fn refuse_undefined_rebuild(name: &str, defined: bool) -> Result<(), Refusal> {
    if !defined {
        return Err(Refusal::new(
            RefusalKind::NoRebuildDefinition,
            format!(
                "no rebuild named {name:?} is defined: add [rebuilds.{name}] with resource, db, collection and pipeline to the config file"
            ),
        ));
    }
    Ok(())
}

/// `reset --to now` skips; `what` says what (the counted move, when known).
pub(super) fn refuse_unaccepted_skip(
    to: ResetTarget,
    accept_skip: bool,
    what: &str,
) -> Result<(), Refusal> {
    if to == ResetTarget::Now && !accept_skip {
        return Err(Refusal::new(
            RefusalKind::SkipNotAccepted,
            format!("reset --to now skips what the listener has not processed ({what}): accept the skip to go on (--accept-skip; ctrl-s in the console)"),
        ));
    }
    Ok(())
}

/// What `reset --to now` skips when the lease and the oplog have not been read.
pub(super) const UNCOUNTED_SKIP: &str = "unprocessed changes are skipped";

/// How many times `action` bumps the fencing version, each write one step: a rebuild
/// twice (it takes the lease bulk, and gives it back after the run), every other
/// action once.
fn versions_written(action: ActionKind) -> i64 {
    match action {
        ActionKind::Rebuild => 2,
        ActionKind::Takeover
        | ActionKind::Rewind
        | ActionKind::Reset
        | ActionKind::Skip
        | ActionKind::AbortBulk
        | ActionKind::Undo => 1,
    }
}

/// The one rule for the top of the version range: every action bumps the fencing
/// version, and past `i64::MAX` the bump would wrap to a negative version (or, on the
/// server, turn the field into a double that no reader accepts). A fencing version must
/// never go backwards, so an action whose last write would pass `i64::MAX` is refused
/// and nothing is written; a rebuild is refused before it runs, not at its give-back.
pub(super) fn refuse_exhausted_version(lease: &Lease, action: ActionKind) -> Result<(), Refusal> {
    let writes = versions_written(action);
    if lease.version.checked_add(writes).is_some() {
        return Ok(());
    }
    let moves = match writes {
        1 => "one step".to_string(),
        2 => "two steps (it takes the lease bulk, then gives it back)".to_string(),
        n => format!("{n} steps"),
    };
    Err(Refusal::new(
        RefusalKind::VersionExhausted,
        format!(
            "the fencing version of {:?} is {} and {action} moves it {moves}: past {}, the \
             largest an int64 holds, where it would wrap, and a fencing version must never \
             go back, so nothing is written. A version this large was not reached by listeners (one step per \
             change of holder): find what wrote it (streamward audit), then stop every \
             listener of the resource and run it under a new resource name",
            lease.resource,
            lease.version,
            i64::MAX
        ),
    ))
}

/// A seed lease's `kind` is ignored by its listeners (a leftover of an earlier
/// streamward's write): it locks nothing, so it refuses nothing.
pub(super) fn refuse_bulk(lease: &Lease, action: ActionKind) -> Result<(), Refusal> {
    if lease.kind == LockKind::Bulk && !lease.protocol.is_seed() {
        return Err(Refusal::new(
            RefusalKind::BulkHeld,
            format!(
                "{} is held for a rebuild (kind bulk, holder {}): a {action} would not let listeners back in. \
                 Re-run the rebuild, or give the lease back with abort-bulk {}",
                lease.resource,
                lease.holder.as_deref().unwrap_or("none"),
                lease.resource
            ),
        ));
    }
    Ok(())
}

/// "holder X renewed 3s ago: it looks alive", or why there is no live holder. The
/// latest sign of life is named by its field (a commit is not a renewal), so the
/// warning reads the same as the field shown next to it, on the same clock.
pub(super) fn holder_warning(lease: &Lease, now: DateTime<Utc>) -> Option<String> {
    let ago = |at: DateTime<Utc>| short_duration((now - at).to_std().unwrap_or_default());
    match (lease.live_holder(now), &lease.holder) {
        (Some(holder), _) => {
            let last_sign = [
                (lease.renewed_at, "renewed"),
                (lease.committed_at, "committed"),
                (lease.acquired_at, "acquired it"),
            ]
            .into_iter()
            .filter_map(|(at, what)| Some((at?, what)))
            // The first of equal times wins: renewed, then committed.
            .reduce(|latest, sign| if sign.0 > latest.0 { sign } else { latest });
            Some(match last_sign {
                Some((at, what)) => {
                    format!("holder {holder} {what} {} ago: it looks alive", ago(at))
                }
                None => format!("holder {holder} holds an unexpired lease: it may be alive"),
            })
        }
        (None, Some(holder)) => lease
            .expires_at
            .map(|at| format!("holder {holder} expired {} ago", ago(at))),
        (None, None) => None,
    }
}

pub(super) fn fence_effect(
    lease: &Lease,
    now: DateTime<Utc>,
    effect: &mut PlanEffect,
) -> Option<String> {
    let live = lease.live_holder(now).map(str::to_string);
    // A seed listener is not fenced by the version: what stops it (or not) is said
    // by the seed rules (`seed`).
    if let (Some(holder), false) = (&live, lease.protocol.is_seed()) {
        effect.lines.push(format!(
            "fences out {holder}: its next commit (and any lease-fenced write) is rejected and it stops"
        ));
    }
    effect.fences_out = live.clone();
    live.map(|h| format!("fences out the live holder {h}"))
}
