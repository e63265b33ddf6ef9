//! `streamward checkpoints RESOURCE`: the committed resume points a resource's
//! listeners recorded, newest first, numbered as `rewind --to-checkpoint N` takes them.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use super::lease_table::render_columns;
use super::limits;
use super::settings::{OutputFormat, ReaderArgs, Settings};
use crate::model::text::{document_time, escape_control};
use crate::model::Checkpoint;
use crate::ops::{OpsError, Refusal, RefusalKind};
use crate::store::{CheckpointStore, CHECKPOINTS_KEPT};

#[derive(Debug, Args)]
pub struct CheckpointsArgs {
    /// The lease (resource) whose checkpoints to list.
    #[arg(value_parser = limits::name)]
    pub resource: String,
    /// How many, newest first.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=i64::from(CHECKPOINTS_KEPT) * 10))]
    pub limit: u32,
    #[command(flatten)]
    pub common: ReaderArgs,
}

pub async fn list(
    settings: &Settings,
    args: &CheckpointsArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let store = super::cluster::connect(settings).await?;
    let listing = store
        .checkpoints(&args.resource, args.limit)
        .await
        .with_context(|| format!("reading the checkpoints of {}", args.resource))?;
    match settings.output {
        OutputFormat::Table => {
            super::guarded::warn_malformed("checkpoint", &listing.malformed);
            if listing.items.is_empty() {
                writeln!(
                    out,
                    "no checkpoints of {} (listeners record one per minute by default)",
                    escape_control(&args.resource)
                )?;
                return Ok(());
            }
            write!(out, "{}", table(&listing.items))?;
        }
        OutputFormat::Json => {
            let shown: Vec<_> = listing
                .items
                .iter()
                .enumerate()
                .map(|(i, c)| checkpoint_json(i + 1, c))
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
        }
    }
    Ok(())
}

fn token_time_text(checkpoint: &Checkpoint) -> String {
    match (checkpoint.token.decode(), checkpoint.token.recorded_time()) {
        (Ok(decoded), _) => decoded.time.to_string(),
        (Err(_), Some(at)) => document_time(at),
        (Err(_), None) => "-".into(),
    }
}

fn table(checkpoints: &[Checkpoint]) -> String {
    let rows: Vec<[String; 6]> = checkpoints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            [
                (i + 1).to_string(),
                c.at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                token_time_text(c),
                c.version.to_string(),
                escape_control(&c.holder),
                escape_control(&c.token.to_string()),
            ]
        })
        .collect();
    render_columns(
        ["N", "RECORDED", "TOKEN TIME", "VER", "HOLDER", "TOKEN"],
        &rows,
    )
}

fn checkpoint_json(n: usize, checkpoint: &Checkpoint) -> serde_json::Value {
    json!({
        "n": n,
        "resource": checkpoint.resource,
        "recordedAt": checkpoint.at.to_rfc3339(),
        "tokenTime": checkpoint.token_time().and_then(|t| t.to_datetime()).map(|t| t.to_rfc3339()),
        "version": checkpoint.version,
        "holder": checkpoint.holder,
        "token": checkpoint.token.to_string(),
    })
}

/// Checkpoint `n` of `resource` (1 is the newest), or a refusal (exit 3) that says how
/// many there are.
pub async fn nth<S: CheckpointStore>(
    store: &S,
    resource: &str,
    n: u32,
) -> anyhow::Result<Checkpoint> {
    let listing = store
        .checkpoints(resource, n)
        .await
        .with_context(|| format!("reading the checkpoints of {resource}"))?;
    let count = listing.items.len();
    listing
        .items
        .into_iter()
        .nth(n.saturating_sub(1) as usize)
        .ok_or_else(|| {
            let shown = escape_control(resource);
            let had = match count {
                0 => "has no checkpoints".to_string(),
                1 => "has 1 checkpoint".to_string(),
                k => format!("has {k} checkpoints"),
            };
            OpsError::Refused(Refusal::new(
                RefusalKind::UnknownCheckpoint,
                format!(
                    "{shown} {had}, so there is no checkpoint {n} (`streamward checkpoints \
                     {shown}` lists them, 1 the newest)"
                ),
            ))
            .into()
        })
}

/// The line said before the plan of a rewind to a checkpoint.
pub fn describe(n: u32, checkpoint: &Checkpoint) -> String {
    format!(
        "checkpoint {n} of {}: recorded {} by {} at version {}, token time {}",
        escape_control(&checkpoint.resource),
        checkpoint.at.format("%Y-%m-%dT%H:%M:%SZ"),
        escape_control(&checkpoint.holder),
        checkpoint.version,
        token_time_text(checkpoint)
    )
}
