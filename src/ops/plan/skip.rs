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
    if moved.is_none() && facts.window.is_some() {
        // Same cluster time as the point it resumes from: the move is within one
        // oplog entry (a transaction's changes share its time), not "no move".
        decision
            .effect
            .lines
            .retain(|l| !l.starts_with("the resume point does not move"));
        decision.effect.lines.push(
            "only this change is skipped: it has the same cluster time as the change the \
             lease resumes after (both are in one oplog entry, as a transaction's changes are)"
                .into(),
        );
    }
    if let Some(transaction) = facts.skipped_entry.as_ref().and_then(Transaction::of) {
        decision.warnings.push(transaction.describe());
    }
    decision.effect.lines.push(
        "keeps the change in the skipped collection beside the audit log (what the lease \
         recorded, and its oplog entry while the oplog holds it), under this action's audit \
         record id; undo puts the resume point back before it"
            .into(),
    );
    Ok(decision)
}

/// The multi-document transaction an oplog entry holds (`applyOps` with a session).
#[derive(Debug, Clone, PartialEq)]
struct Transaction {
    lsid: String,
    txn_number: i64,
    /// The operations in this entry, and how many of them are on each namespace.
    operations: usize,
    /// A transaction written over several entries (this is one of them).
    partial: bool,
}

impl Transaction {
    fn of(entry: &bson::Document) -> Option<Self> {
        let operations = entry.get_document("o").ok()?.get_array("applyOps").ok()?;
        let lsid = entry.get_document("lsid").ok()?;
        let txn_number = match entry.get("txnNumber")? {
            bson::Bson::Int64(n) => *n,
            bson::Bson::Int32(n) => i64::from(*n),
            _ => return None,
        };
        let lsid = match lsid.get("id") {
            Some(bson::Bson::Binary(id)) => id
                .bytes
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
            Some(other) => other.to_string(),
            None => return None,
        };
        let partial = entry
            .get_document("o")
            .ok()
            .is_some_and(|o| o.get_bool("partialTxn").unwrap_or(false))
            || entry
                .get_document("prevOpTime")
                .ok()
                .and_then(|p| p.get_timestamp("ts").ok())
                .is_some_and(|ts| ts.time != 0 || ts.increment != 0);
        Some(Self {
            lsid,
            txn_number,
            operations: operations.len(),
            partial,
        })
    }

    fn describe(&self) -> String {
        let count = match (self.operations, self.partial) {
            (n, true) => format!("at least {n} changes (it spans several oplog entries)"),
            (1, false) => "1 change".to_string(),
            (n, false) => format!("{n} changes"),
        };
        format!(
            "the change belongs to a multi-document transaction (lsid {}, txnNumber {}) of \
             {count}: only this one is skipped, the others are handled, so derived data may \
             hold part of the transaction",
            self.lsid, self.txn_number
        )
    }
}
