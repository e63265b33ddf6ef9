//! Plans, outcomes and audit records for people (text) and programs (JSON). Strings from
//! the database go through `escape_control` in text; JSON keeps them raw.

use std::fmt::Write;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::execute::Executed;
use super::plan::Plan;
use super::refusal::RefusalKind;
use super::resume::Direction;
use crate::model::lease_field as F;
use crate::model::text::{clip, clock_and_relative, escape_control, pad_to, CELL_MAX_CHARS};
use crate::model::{AuditRecord, ClusterTime, Lease, LeaseProtocol, PendingJudgment};
use crate::store::ResumeChange;

/// One lease field before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRow {
    pub field: &'static str,
    pub before: String,
    pub after: String,
    pub changed: bool,
}

fn fields(lease: &Lease, now: DateTime<Utc>) -> [(&'static str, String); 12] {
    let text = |s: &Option<String>| s.as_deref().map_or_else(|| "null".into(), escape_control);
    [
        (F::HOLDER, text(&lease.holder)),
        (F::EXPIRES_AT, clock_and_relative(lease.expires_at, now)),
        (F::VERSION, lease.version.to_string()),
        (F::KIND, lease.kind.to_string()),
        (
            F::RESUME_TOKEN,
            lease.resume_token.as_ref().map_or_else(
                || "null".into(),
                |t| match t.time_text() {
                    Some(time) => format!("{} ({time})", escape_control(&t.to_string())),
                    None => escape_control(&t.to_string()),
                },
            ),
        ),
        (
            F::RESUME_AT,
            lease
                .resume_at
                .map_or_else(|| "null".into(), |t| t.to_string()),
        ),
        (F::ACQUIRED_AT, clock_and_relative(lease.acquired_at, now)),
        (F::RENEWED_AT, clock_and_relative(lease.renewed_at, now)),
        (F::COMMITTED_AT, clock_and_relative(lease.committed_at, now)),
        (F::NOTE, text(&lease.note)),
        (
            F::INVALIDATED,
            lease.invalidated.as_ref().map_or_else(
                || "null".into(),
                |i| match i.at {
                    Some(at) => format!("{} at {at}", escape_control(&i.reason)),
                    None => escape_control(&i.reason),
                },
            ),
        ),
        (
            F::FAILURE,
            lease
                .failure
                .as_ref()
                .map_or_else(|| "null".into(), |f| f.summary()),
        ),
    ]
}

/// A failure in JSON (`leases --json` and every lease in a plan or audit record).
pub fn failure_json(failure: &crate::model::ChangeFailure) -> Value {
    let (size, limit) = match failure.cause {
        crate::model::FailureCause::TooLarge { size, limit } => (size, limit),
        crate::model::FailureCause::Handler | crate::model::FailureCause::ImageMissing { .. } => {
            (None, None)
        }
    };
    json!({
        "token": failure.token.as_ref().map(|t| t.to_string()),
        "at": time_json(failure.at),
        "ns": failure.namespace,
        "op": failure.operation,
        "key": failure.document_key,
        "error": failure.error,
        "cause": failure.cause.as_str(),
        "size": size,
        "limit": limit,
        "attempts": failure.attempts,
        "firstAt": failure.first_at.to_rfc3339(),
        "lastAt": failure.last_at.to_rfc3339(),
    })
}

/// Every field of the lease document, before and after, in the order the protocol
/// (docs/protocol.md) lists them; of a seed lease that stays one, without the
/// streamward fields it does not have (`kind` and the dates only streamward writes).
pub fn lease_diff(before: &Lease, after: &Lease, now: DateTime<Utc>) -> Vec<FieldRow> {
    let seed = before.protocol.is_seed() && after.protocol.is_seed();
    fields(before, now)
        .into_iter()
        .zip(fields(after, now))
        .map(|((field, before), (_, after))| FieldRow {
            field,
            changed: before != after,
            before,
            after,
        })
        .filter(|row| {
            !(seed
                && !row.changed
                && (row.field == F::KIND || LeaseProtocol::OWN_FIELDS.contains(&row.field)))
        })
        .collect()
}

fn diff_table(before: &Lease, after: &Lease, now: DateTime<Utc>) -> String {
    let mut rows = lease_diff(before, after, now);
    for row in &mut rows {
        row.before = clip(&row.before, CELL_MAX_CHARS);
        row.after = clip(&row.after, CELL_MAX_CHARS);
    }
    let width = rows
        .iter()
        .map(|r| r.before.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let mut out = format!("  {:<12} {}   after\n", "field", pad_to("before", width));
    for row in rows {
        let mark = if row.changed { "→" } else { " " };
        let after = if row.changed {
            row.after
        } else {
            "(unchanged)".into()
        };
        let _ = writeln!(
            out,
            "  {:<12} {} {mark} {after}",
            row.field,
            pad_to(&row.before, width)
        );
    }
    out
}

/// The dry-run text of a plan.
pub fn plan_text(plan: &Plan) -> String {
    let resource = plan
        .resource
        .as_deref()
        .map_or_else(|| "?".into(), escape_control);
    let mut out = match &plan.captured {
        Some(c) => format!(
            "{} {resource}: planned against version {} held by {}\n",
            plan.action,
            c.version,
            c.holder
                .as_deref()
                .map_or_else(|| "nobody".into(), escape_control)
        ),
        None => format!("{} {resource}\n", plan.action),
    };
    if let Some(refusal) = &plan.refusal {
        let _ = writeln!(out, "\nREFUSED: {}", escape_control(&refusal.reason));
        return out;
    }
    if let (Some(before), Some(after)) = (&plan.before, &plan.after) {
        out.push('\n');
        out.push_str(&diff_table(before, after, plan.planned_at));
        out.push_str("  (times are the server's at execution; shown relative to now)\n");
    }
    if !plan.effect.lines.is_empty() {
        out.push_str("\neffect:\n");
        for line in &plan.effect.lines {
            let _ = writeln!(out, "  - {}", escape_control(line));
        }
    }
    if !plan.warnings.is_empty() {
        out.push_str("\nwarnings:\n");
        for warning in &plan.warnings {
            let _ = writeln!(out, "  ! {}", escape_control(warning));
        }
    }
    if let Some(why) = &plan.confirmation {
        let _ = writeln!(
            out,
            "\nconfirmation: {why}; the console asks to type {resource}"
        );
    }
    out
}

/// The text of an applied action.
pub fn executed_text(done: &Executed) -> String {
    let mut text = format!(
        "applied: {} {}, version {} → {}, audit record {}\n",
        done.action,
        escape_control(&done.resource),
        done.before.version,
        done.after.version,
        escape_control(&done.audit_id)
    );
    if let Some(remark) = &done.remark {
        text.push_str(&format!("  note: {}\n", escape_control(remark)));
    }
    text
}

/// A cluster time in JSON: `{t, i, iso}`, or null.
pub fn time_json(time: Option<ClusterTime>) -> Value {
    time.map_or(
        Value::Null,
        |t| json!({ "t": t.secs, "i": t.inc, "iso": t.to_datetime().map(|d| d.to_rfc3339()) }),
    )
}

/// A document that could not be read, in a JSON listing: `status` says so.
pub fn malformed_json(document: &crate::store::MalformedDocument) -> Value {
    json!({
        "id": document.id,
        "status": "MALFORMED",
        "malformed": document.problem,
    })
}

/// A lease in JSON, under its document's field names (plans, audit records, `leases`).
pub fn lease_json(lease: &Lease) -> Value {
    let date = |d: Option<DateTime<Utc>>| d.map(|d| d.to_rfc3339());
    json!({
        "resource": lease.resource,
        (F::HOLDER): lease.holder,
        (F::EXPIRES_AT): date(lease.expires_at),
        (F::VERSION): lease.version,
        (F::KIND): lease.kind.as_str(),
        (F::RESUME_TOKEN): lease.resume_token.as_ref().map(|t| t.to_string()),
        (F::RESUME_AT): time_json(lease.resume_at),
        (F::ACQUIRED_AT): date(lease.acquired_at),
        (F::RENEWED_AT): date(lease.renewed_at),
        (F::COMMITTED_AT): date(lease.committed_at),
        (F::NOTE): lease.note,
        (F::INVALIDATED): lease.invalidated.as_ref().map(|i| json!({
            "at": time_json(i.at),
            "reason": i.reason,
        })),
        (F::FAILURE): lease.failure.as_ref().map(failure_json),
        // "seed" for a lease written by another implementation (`LeaseProtocol`).
        "protocol": lease.protocol.as_str(),
    })
}

fn refusal_kind(kind: RefusalKind) -> String {
    format!("{kind:?}")
}

pub fn plan_json(plan: &Plan) -> Value {
    let change = plan.change.as_ref().map(|c| {
        let seed = c.protocol.is_seed();
        let resume = match &c.resume {
            ResumeChange::Keep => Value::String("keep".into()),
            // A seed lease's token is removed, not nulled, and its resumeAt removed.
            ResumeChange::Set { token: None, .. } if seed => json!({
                (F::RESUME_TOKEN): "removed",
                (F::RESUME_AT): "removed",
            }),
            ResumeChange::Set { token, .. } if seed => json!({
                (F::RESUME_TOKEN): token.as_ref().map(|t| t.to_string()),
                (F::RESUME_AT): "removed",
            }),
            ResumeChange::Set { token, at } => json!({
                (F::RESUME_TOKEN): token.as_ref().map(|t| t.to_string()),
                (F::RESUME_AT): time_json(*at),
            }),
        };
        json!({
            "filter": { (F::RESOURCE): c.resource, (F::VERSION): c.expected_version },
            (F::HOLDER): c.holder,
            "expiresInSecs": c.expires_in.as_secs_f64(),
            // A seed lease's kind is not written.
            (F::KIND): (!seed).then(|| c.kind.as_str()),
            "protocol": c.protocol.as_str(),
            (F::VERSION): c.expected_version + 1,
            "resume": resume,
            (F::NOTE): c.note,
        })
    });
    let resume = plan.effect.resume.as_ref().map(|m| {
        json!({
            "direction": match m.direction { Direction::Replay => "replay", Direction::Skip => "skip" },
            "ns": m.on.as_ref().and_then(|c| c.namespace()).map(|(db, coll)| format!("{db}.{coll}")),
            "collectionUuid": match &m.on {
                Some(crate::model::WatchedCollection::Collection(uuid)) => Some(hex::encode(uuid)),
                _ => None,
            },
            "from": time_json(Some(m.from)),
            "to": time_json(Some(m.to)),
            "spanSecs": m.span.as_secs(),
            "counted": m.count.as_ref().map(|c| c.counted),
            "atLeast": m.count.as_ref().map(|c| c.at_least()),
            "text": m.describe(),
        })
    });
    json!({
        "action": plan.action.name(),
        "resource": plan.resource,
        "operator": plan.operator,
        "plannedAt": plan.planned_at.to_rfc3339(),
        "captured": plan.captured.as_ref().map(|c| json!({ "holder": c.holder, "version": c.version })),
        "before": plan.before.as_ref().map(lease_json),
        "after": plan.after.as_ref().map(lease_json),
        "change": change,
        "effect": {
            "fencesOut": plan.effect.fences_out,
            "resume": resume,
            "lines": plan.effect.lines,
            "steppedOver": plan.effect.stepped_over.iter().map(|c| json!({
                "token": c.token.to_string(),
                "op": c.operation,
                "key": c.key,
            })).collect::<Vec<_>>(),
        },
        "warnings": plan.warnings,
        "confirmation": plan.confirmation,
        "refusal": plan.refusal.as_ref().map(|r| json!({
            "kind": refusal_kind(r.kind),
            "reason": r.reason,
        })),
    })
}

pub fn executed_json(done: &Executed) -> Value {
    json!({
        "action": done.action.name(),
        "resource": done.resource,
        "auditId": done.audit_id,
        "operationTime": time_json(done.operation_time),
        "remark": done.remark,
        "before": lease_json(&done.before),
        "after": lease_json(&done.after),
    })
}

/// A record in JSON; a pending one with its judgment against the lease read now.
pub fn audit_json(record: &AuditRecord, judged: Option<&PendingJudgment>) -> Value {
    json!({
        "id": record.id,
        "at": record.at.to_rfc3339(),
        "operator": record.operator,
        "action": record.action,
        "resource": record.resource,
        "reason": record.reason,
        "state": record.state.as_str(),
        "finishedAt": record.finished_at.map(|t| t.to_rfc3339()),
        "outcome": record.outcome,
        "before": record.before.as_ref().map(lease_json),
        "intended": record.intended.as_ref().map(lease_json),
        "after": record.after.as_ref().map(lease_json),
        "steps": record.steps.iter().map(|s| json!({ "at": s.at.to_rfc3339(), "what": s.what })).collect::<Vec<_>>(),
        "pending": judged.map(|j| json!({ "verdict": j.verdict.as_str(), "recovery": j.recovery })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_table_with_a_huge_value_clips_it_instead_of_panicking() {
        let now = Utc::now();
        let mut before = Lease::vacant("r");
        before.holder = Some("h".repeat(70_000));
        let mut after = before.clone();
        after.note = Some("n".repeat(70_000));
        let table = diff_table(&before, &after, now);
        assert!(
            table
                .lines()
                .all(|l| l.chars().count() < 3 * CELL_MAX_CHARS),
            "{table}"
        );
        assert!(table.contains('…'));
    }
}
