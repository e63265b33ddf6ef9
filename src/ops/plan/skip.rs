//! `skip`: step over exactly one change — the one the lease records as failing, or the
//! one `--to-token` names — so its listeners resume right after it. Planned as a move
//! of the resume point (fencing the holder, typed confirmation, undo), refused when it
//! would pass over anything but that one change.

use super::resume_moves::{describe_move, move_resume};
use super::Decision;
use crate::model::text::escape_control;
use crate::model::{Lease, ResumeToken};
use crate::ops::describe::failure_summary;
use crate::ops::facts::PlanFacts;
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::request::ActionRequest;
use crate::ops::resume::Direction;
use crate::ops::target::skipped_token;

pub(super) fn skip(
    request: &ActionRequest,
    lease: &Lease,
    to_token: Option<&ResumeToken>,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let token = skipped_token(lease, to_token)?;
    let resource = escape_control(&lease.resource);
    let failure = lease.failure.as_ref().filter(|f| {
        f.token
            .as_ref()
            .is_some_and(|t| t.as_document() == token.as_document())
    });
    let note = format!("skip of one change by {}", facts.operator);
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    match &moved {
        Some(m) if m.direction != Direction::Skip => {
            return Err(Refusal::new(
                RefusalKind::NotOneChange,
                format!(
                    "{resource} already resumes after that change (it was processed): there \
                     is nothing to skip; rewind goes back"
                ),
            ))
        }
        Some(m) if m.count.as_ref().is_some_and(|c| c.counted > 1) => {
            return Err(Refusal::new(
                RefusalKind::NotOneChange,
                format!(
                    "more than the one change lies between where {resource} resumes and that \
                     change ({}): skip steps over exactly one; `leases import --accept-skip` \
                     or reset --to now --accept-skip skip more, knowingly",
                    describe_move(m, facts)
                ),
            ))
        }
        Some(_) => {}
        // Nothing counted and nothing recorded: that it is one change cannot be told.
        None if failure.is_none() => {
            return Err(Refusal::new(
                RefusalKind::NotOneChange,
                format!(
                    "the changes before that token cannot be counted (no oplog window), so it \
                     cannot be told that only one is skipped; skip without the oplog steps \
                     over only the change {resource} records as failing"
                ),
            ))
        }
        None => {}
    }
    decision.effect.lines.insert(
        0,
        match failure {
            Some(f) => format!("steps over one change: {}", failure_summary(f)),
            None => format!("steps over the change with token {token}"),
        },
    );
    decision.effect.lines.push(
        "keeps the change in the skipped collection beside the audit log (what the lease \
         recorded, and its oplog entry while the oplog holds it), under this action's audit \
         record id; undo puts the resume point back before it"
            .into(),
    );
    Ok(decision)
}
