//! The resume point a request moves a lease to, checked against the oplog window, and
//! the range of changes that move passes over (what [`super::gather`] counts).

use super::facts::{ChangeRange, PlanFacts};
use super::refusal::{Refusal, RefusalKind};
use super::request::{ActionKind, ActionRequest, CheckpointRef, ResetTarget, RewindTarget};
use super::resume::{movement, point_of, NewResume};
use crate::model::text::short_duration;
use crate::model::{Checkpoint, ClusterTime, Lease, OplogWindow, ResumeToken, StreamProfile};
use crate::store::Namespace;

/// `time` inside `window`, or refused as outside it; not checked where the window is
/// unknown (the plan says so).
fn in_window(time: ClusterTime, what: &str, window: Option<&OplogWindow>) -> Result<(), Refusal> {
    let Some(window) = window else {
        return Ok(());
    };
    if time < window.first || time > window.last {
        Err(Refusal::new(
            RefusalKind::OutsideWindow,
            format!(
                "{what} {time} is outside the oplog window ({} to {})",
                window.first, window.last
            ),
        ))
    } else {
        Ok(())
    }
}

/// The checkpoint `which` names among the facts' (the lease's, newest first).
pub(crate) fn checkpoint_named<'a>(
    which: &CheckpointRef,
    lease: &Lease,
    facts: &'a PlanFacts,
) -> Result<&'a Checkpoint, Refusal> {
    which.find(&facts.checkpoints).ok_or_else(|| {
        let resource = crate::model::text::escape_control(&lease.resource);
        let had = match facts.checkpoints.len() {
            0 => "has no checkpoints".to_string(),
            1 => "has 1 checkpoint".to_string(),
            k => format!("has {k} checkpoints"),
        };
        Refusal::new(
            RefusalKind::UnknownCheckpoint,
            format!(
                "{resource} {had}, so there is no checkpoint {which} (`streamward checkpoints \
                 {resource}` lists them, 1 the newest)"
            ),
        )
    })
}

/// The resume fields of a move to `token`, its time checked against the window (a
/// Cosmos DB token tells no time, and there is no window to check).
fn token_target(
    token: &ResumeToken,
    what: &str,
    facts: &PlanFacts,
) -> Result<Option<NewResume>, Refusal> {
    if facts.profile == StreamProfile::CosmosDb && token.time().is_none() {
        return Ok(Some((Some(token.clone()), None)));
    }
    let Some(time) = token.time() else {
        return Err(Refusal::new(
            RefusalKind::UndecodableToken,
            format!(
                "resume token {token} cannot be decoded, so it cannot be checked against the \
                 oplog window"
            ),
        ));
    };
    in_window(time, what, facts.window.as_ref())?;
    Ok(Some((Some(token.clone()), None)))
}

pub(crate) fn require_window(
    facts: &PlanFacts,
    action: ActionKind,
) -> Result<OplogWindow, Refusal> {
    facts.window.ok_or_else(|| {
        Refusal::new(
            RefusalKind::NoOplogAccess,
            format!(
                "the oplog window cannot be read, so a {action} cannot be checked against it \
                 (`streamward oplog` says why): grant the clusterMonitor role (or read on the \
                 local database; through a mongos, on every shard); what works without it is \
                 a rewind to a named point, unchecked: `rewind RESOURCE --to TIME` or \
                 `--to-token TOKEN`"
            ),
        )
    })
}

/// The new resume fields a resume-moving request sets, checked against the window.
/// Where the oplog cannot be read, a rewind or an undo to a point it names (a time, a
/// token, or a duration back from a decodable token) goes unchecked (the plan warns);
/// a reset, which needs the window's ends, is refused. `Ok(None)` for requests that
/// keep the resume point.
pub(crate) fn resume_target(
    request: &ActionRequest,
    lease: &Lease,
    facts: &PlanFacts,
) -> Result<Option<NewResume>, Refusal> {
    match request {
        ActionRequest::Rewind { to, .. } => {
            let window = facts.window.as_ref();
            if facts.profile == StreamProfile::CosmosDb
                && matches!(to, RewindTarget::Time(_) | RewindTarget::By(_))
            {
                return Err(Refusal::new(
                    RefusalKind::NotOnThisDeployment,
                    "an Azure Cosmos DB change stream starts at now or after a token, never \
                     at a time, so a listener could not open from it: rewind --to-token \
                     TOKEN (a token committed before: the audit records keep the one before \
                     each action; docs/cosmos.md)",
                ));
            }
            match to {
                RewindTarget::Time(spec) => {
                    let time = spec.cluster_time();
                    in_window(time, "the target", window)?;
                    Ok(Some((None, Some(time))))
                }
                RewindTarget::By(by) => {
                    let base = match (lease.resume_point().time(), window) {
                        (Some(time), _) => time,
                        (None, Some(window)) => window.last,
                        // Back from nothing known: a time or a token still works.
                        (None, None) => {
                            return Err(Refusal::new(
                                RefusalKind::NoOplogAccess,
                                "the oplog window cannot be read and the resume point has no \
                                 time, so there is nothing to go back from: rewind --to TIME or \
                                 --to-token works without the window",
                            ))
                        }
                    };
                    let secs = u32::try_from(by.as_secs()).unwrap_or(u32::MAX);
                    let time = ClusterTime::new(base.secs.saturating_sub(secs), base.inc);
                    in_window(
                        time,
                        &format!("{} back from {base},", short_duration(*by)),
                        window,
                    )?;
                    Ok(Some((None, Some(time))))
                }
                RewindTarget::Token(token) => token_target(token, "the token's time", facts),
                RewindTarget::Checkpoint(which) => {
                    let checkpoint = checkpoint_named(which, lease, facts)?;
                    token_target(
                        &checkpoint.token,
                        &format!("checkpoint {which}'s token time"),
                        facts,
                    )
                }
            }
        }
        ActionRequest::Reset { to, .. } => {
            let window = require_window(facts, ActionKind::Reset)?;
            Ok(Some(match to {
                ResetTarget::Oldest => (None, None),
                ResetTarget::Now => (None, Some(window.last)),
            }))
        }
        ActionRequest::Undo { .. } => {
            let window = facts.window.as_ref();
            let before = facts.audit.as_ref().and_then(|r| r.before.as_ref());
            let Some(before) = before.filter(|b| b.resume_token.is_some() || b.resume_at.is_some())
            else {
                return Err(Refusal::new(
                    RefusalKind::NothingToRestore,
                    "that audit record has no prior resume point to restore (the lease had neither a token nor resumeAt): \
                     use reset --to oldest or rewind instead",
                ));
            };
            match before.resume_point().time() {
                Some(time) => in_window(time, "the resume point recorded before that action,", window)?,
                None => {
                    return Err(Refusal::new(
                        RefusalKind::UndecodableToken,
                        "the resume token recorded before that action cannot be decoded, so it cannot be checked against the oplog window",
                    ))
                }
            }
            Ok(Some((before.resume_token.clone(), before.resume_at)))
        }
        _ => Ok(None),
    }
}

/// The changes a resume-moving request replays or skips: what [`super::gather`] counts.
/// `None` for other requests, or when either end is unknown.
pub fn affected_range(request: &ActionRequest, facts: &PlanFacts) -> Option<ChangeRange> {
    // Counting reads the oplog: nothing to count where it cannot be read.
    facts.window?;
    let lease = facts.lease.as_ref()?;
    let (token, at) = resume_target(request, lease, facts).ok()??;
    let watch = lease.watch.as_ref()?;
    let (_, from, to) = movement(lease, &point_of(&token, at), facts.window.as_ref())?;
    Some(ChangeRange {
        ns: Namespace::new(watch.db.clone(), watch.coll.clone()),
        from,
        to,
    })
}
