//! `skip`: step over exactly one change — the one the lease records as failing, or the
//! one `--to-token` names — so its listeners resume right after it. Planned as a move
//! of the resume point (fencing the holder, typed confirmation, undo), refused when it
//! would pass over anything but that one change.

use super::resume_moves::{describe_move, move_resume};
use super::Decision;
use crate::model::text::escape_control;
use crate::model::{Lease, ResumeToken};
use crate::ops::facts::PlanFacts;
use crate::ops::facts::{ChangeCount, ChangeRange};
use crate::ops::refusal::{Refusal, RefusalKind};
use crate::ops::request::ActionRequest;
use crate::ops::resume::Direction;
use crate::ops::target::{skipped_token, transaction_end, whole_transaction};
use crate::ops::transaction::{self, TransactionId, LISTED_MAX};

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
            Some(f) => format!("steps over one change: {}", f.summary()),
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
    if let Some(transaction) = facts
        .skipped_entry
        .as_ref()
        .and_then(|s| s.entry.as_ref())
        .and_then(Transaction::of)
    {
        decision.warnings.push(transaction.describe(&resource));
    }
    decision.effect.lines.push(
        "keeps the change in the skipped collection beside the audit log (what the lease \
         recorded, and its oplog entry while the oplog holds it), under this action's audit \
         record id; undo puts the resume point back before it"
            .into(),
    );
    Ok(decision)
}

/// The multi-document transaction an oplog entry holds (`applyOps` with a session), as
/// a plain skip's plan names it.
#[derive(Debug, Clone, PartialEq)]
struct Transaction {
    id: TransactionId,
    /// The operations in this entry.
    operations: usize,
    /// A transaction written over several entries (this is one of them).
    partial: bool,
}

impl Transaction {
    fn of(entry: &bson::Document) -> Option<Self> {
        let operations = transaction::operations(entry);
        if operations.is_empty() {
            return None;
        }
        Some(Self {
            id: TransactionId::of(entry)?,
            operations: operations.len(),
            partial: transaction::spans_entries(entry),
        })
    }

    fn describe(&self, resource: &str) -> String {
        let count = match (self.operations, self.partial) {
            (n, true) => format!("at least {n} changes (it spans several oplog entries)"),
            (1, false) => "1 change".to_string(),
            (n, false) => format!("{n} changes"),
        };
        format!(
            "the change belongs to a multi-document transaction ({}) of {count}: only this \
             one is skipped, the others are handled, so derived data may hold part of the \
             transaction; skip {resource} --whole-transaction steps over all of its changes \
             on the lease's collection",
            self.id
        )
    }
}

/// `skip --whole-transaction`: every change of the transaction the named change belongs
/// to that the lease has yet to handle, and nothing else; the lease resumes after the
/// last of them.
pub(super) fn skip_transaction(
    request: &ActionRequest,
    lease: &Lease,
    to_token: Option<&ResumeToken>,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let token = skipped_token(lease, to_token)?;
    let txn = whole_transaction(lease, facts)?;
    transaction_end(lease, &token, facts)?;
    let resource = escape_control(&lease.resource);
    let ns = lease
        .watch
        .as_ref()
        .map(|w| escape_control(&format!("{}.{}", w.db, w.coll)))
        .unwrap_or_default();
    let n = txn.stepped.len();
    let note = format!(
        "skip of {} of transaction ({}) by {}",
        changes(n),
        txn.id,
        facts.operator
    );
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    if moved
        .as_ref()
        .is_some_and(|m| m.direction != Direction::Skip)
    {
        return Err(Refusal::new(
            RefusalKind::NotOneChange,
            format!(
                "{resource} already resumes after the transaction's changes: there is \
                 nothing to skip; rewind goes back"
            ),
        ));
    }
    // Inside a transaction the oplog's count covers all its operations on the
    // collection; what the lease's stream returned is what is passed over.
    let described = moved.as_ref().map(|m| describe_move(m, facts));
    decision.effect.lines.retain(|l| {
        !l.starts_with("the resume point does not move") && Some(l) != described.as_ref()
    });
    if let Some(m) = decision.effect.resume.as_mut() {
        if let Some(on) = m.on.clone() {
            m.count = Some(ChangeCount {
                range: ChangeRange {
                    on,
                    from: m.from,
                    to: m.to,
                    entries: None,
                },
                counted: n as u64,
                limit: u64::MAX,
            });
        }
    }
    let mut lines = vec![format!(
        "steps over {} on {ns} of the multi-document transaction ({}) committed at {}, \
         in the order its listener would handle them:",
        changes(n),
        txn.id,
        txn.at
    )];
    for (i, change) in txn.stepped.iter().enumerate().take(LISTED_MAX) {
        let failing = lease
            .failure
            .as_ref()
            .filter(|f| f.names(&change.token, change.token.time()))
            .map(|f| {
                format!(
                    " — the failing one: {} attempt{} ({}): {}",
                    f.attempts,
                    if f.attempts == 1 { "" } else { "s" },
                    f.cause.as_str(),
                    escape_control(&f.error)
                )
            })
            .unwrap_or_default();
        lines.push(format!(
            "{}. {} {ns} {}{failing}",
            i + 1,
            escape_control(&change.operation),
            escape_control(&change.key)
        ));
    }
    if n > LISTED_MAX {
        lines.push(format!(
            "… and {} more (each is kept in the skipped collection)",
            n - LISTED_MAX
        ));
    }
    decision.effect.lines.splice(0..0, lines);
    if !txn.elsewhere.is_empty() {
        let total: usize = txn.elsewhere.values().sum();
        let places = txn
            .elsewhere
            .iter()
            .map(|(on, k)| format!("{k} on {on}"))
            .collect::<Vec<_>>()
            .join(", ");
        decision.effect.lines.push(match total {
            1 => format!(
                "the transaction's other change ({places}) is not {resource}'s: it is not \
                 skipped"
            ),
            n => format!(
                "the transaction's {n} other changes ({places}) are not {resource}'s: they \
                 are not skipped"
            ),
        });
    }
    if txn.entries > 1 {
        decision.effect.lines.push(format!(
            "the transaction was written over {} oplog entries; its changes all have its \
             commit's cluster time",
            txn.entries
        ));
    }
    if txn.handled() > 0 {
        decision.warnings.push(format!(
            "the first {} of its {} changes on {ns} were handled before: they stay handled \
             (neither this skip nor its undo takes them back), so derived data may hold \
             part of the transaction",
            txn.handled(),
            txn.on_lease
        ));
    }
    decision.effect.lines.push(
        "keeps each change stepped over in the skipped collection beside the audit log, \
         one record per change (its token and oplog entry; for the failing one, what the \
         lease recorded), under this action's audit record id; undo puts the resume point \
         back before the first of them"
            .into(),
    );
    decision.effect.stepped_over = txn.stepped.clone();
    Ok(decision)
}

fn changes(n: usize) -> String {
    match n {
        1 => "1 change".into(),
        n => format!("{n} changes"),
    }
}
