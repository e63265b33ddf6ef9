//! `streamward audit`: the newest audit records, each pending one judged against the
//! lease as it is now.

use std::io::Write;

use anyhow::Context;
use clap::Args;

use crate::cli::common::lease_table::render_columns;
use crate::cli::common::limits;
use crate::cli::common::output::{print_json, warn_malformed};
use crate::cli::common::settings::{OutputFormat, ReaderArgs, Settings};
use std::collections::BTreeMap;

use crate::model::text::escape_control;
use crate::model::{AuditRecord, AuditState, Lease, PendingJudgment};
use crate::ops::json::{AuditJson, ListedJson, MalformedJson};
use crate::store::{AuditLog, LeaseStore};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// How many records, newest first (1 to 10,000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=limits::AUDIT_LIMIT_MAX))]
    pub limit: u64,
    #[command(flatten)]
    pub common: ReaderArgs,
}

/// `audit`: the most recent records, newest first. A pending record (an action that
/// has not said how it ended) is judged against its lease read now, with what to do.
pub async fn run_audit<S: AuditLog + LeaseStore>(
    store: &S,
    limit: usize,
    output: OutputFormat,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let listing = store
        .audit_log(limit)
        .await
        .context("reading the audit log")?;
    let records = listing.items;
    let judged = judge_pending(store, &records).await?;
    match output {
        OutputFormat::Json => print_json(
            out,
            records
                .iter()
                .zip(&judged)
                .map(|(r, j)| ListedJson::Read(AuditJson::of(r, j.as_ref())))
                .chain(
                    listing
                        .malformed
                        .iter()
                        .map(|m| ListedJson::Malformed(MalformedJson::of(m))),
                )
                .collect::<Vec<_>>(),
        ),
        OutputFormat::Table => {
            warn_malformed("audit record", &listing.malformed);
            if records.is_empty() {
                writeln!(out, "no audit records")?;
                return Ok(());
            }
            let version = |l: &Option<crate::model::Lease>| {
                l.as_ref()
                    .map_or_else(|| "-".into(), |l| l.version.to_string())
            };
            let rows: Vec<[String; 9]> = records
                .iter()
                .map(|r| {
                    [
                        escape_control(&r.id),
                        r.at.format("%Y-%m-%d %H:%M:%S").to_string(),
                        escape_control(&r.operator),
                        escape_control(&r.action),
                        escape_control(&r.resource),
                        r.state.as_str().to_uppercase(),
                        match (&r.after, &r.intended) {
                            // Not known yet: what it means to make, in brackets.
                            (None, Some(intended)) => {
                                format!("{} → ({})", version(&r.before), intended.version)
                            }
                            _ => format!("{} → {}", version(&r.before), version(&r.after)),
                        },
                        escape_control(&r.outcome),
                        r.reason
                            .as_deref()
                            .map_or_else(|| "-".into(), escape_control),
                    ]
                })
                .collect();
            write!(
                out,
                "{}",
                render_columns(
                    [
                        "ID", "AT", "OPERATOR", "ACTION", "RESOURCE", "STATE", "VERSION",
                        "OUTCOME", "REASON"
                    ],
                    &rows
                )
            )?;
            for (record, judgment) in records.iter().zip(&judged) {
                if let Some(judgment) = judgment {
                    writeln!(
                        out,
                        "pending {}: {} on {} by {} — {}",
                        escape_control(&record.id),
                        escape_control(&record.action),
                        escape_control(&record.resource),
                        escape_control(&record.operator),
                        escape_control(&judgment.recovery)
                    )?;
                }
            }
            Ok(())
        }
    }
}

/// Each pending record judged against its lease, read once per resource. A record
/// that concerns no lease (a fold of increments) is judged without reading one.
async fn judge_pending<S: LeaseStore>(
    store: &S,
    records: &[AuditRecord],
) -> anyhow::Result<Vec<Option<PendingJudgment>>> {
    let mut leases: BTreeMap<&str, Option<Lease>> = BTreeMap::new();
    let pending: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| r.state == AuditState::Pending && r.concerns_lease())
        .collect();
    // Whether a bulk lease has run out is the server's clock's call.
    let at = if pending.is_empty() {
        chrono::Utc::now()
    } else {
        store
            .server_now()
            .await
            .context("reading the server's clock to judge pending audit records")?
    };
    for record in pending {
        if !leases.contains_key(record.resource.as_str()) {
            let lease = store.get(&record.resource).await.with_context(|| {
                format!(
                    "reading lease {} to judge pending audit record {}",
                    escape_control(&record.resource),
                    escape_control(&record.id)
                )
            })?;
            leases.insert(&record.resource, lease);
        }
    }
    Ok(records
        .iter()
        .map(|r| {
            let now = leases.get(r.resource.as_str()).and_then(Option::as_ref);
            r.judge_pending(now, at)
        })
        .collect())
}

pub async fn audit(
    settings: &Settings,
    args: &AuditArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let store = crate::cli::common::connect::connect(settings).await?;
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    run_audit(&store, limit, settings.output, out).await
}
