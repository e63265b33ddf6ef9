//! Plans and outcomes for people, as text; strings from the database go through
//! `escape_control`. Their JSON for programs is [`super::json`]'s, which keeps them raw.

use std::fmt::Write;

use super::execute::Executed;
use super::plan::Plan;
use crate::model::lease_field as F;
use crate::model::text::{clip, clock_and_relative, escape_control, pad_to, CELL_MAX_CHARS};
use crate::model::{Lease, LeaseProtocol};
use chrono::{DateTime, Utc};

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
