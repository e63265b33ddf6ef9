//! `streamward checkpoints RESOURCE`: the committed resume points a resource's
//! listeners recorded, newest first, numbered and named as `rewind --to-checkpoint`
//! takes them.

use std::io::Write;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::cli::common::lease_table::render_columns;
use crate::cli::common::limits;
use crate::cli::common::settings::{OutputFormat, ReaderArgs, Settings};
use crate::model::text::escape_control;
use crate::model::Checkpoint;
use crate::ops::json::Rfc3339;
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
    let store = crate::cli::common::connect::connect(settings).await?;
    let listing = store
        .checkpoints(&args.resource, args.limit)
        .await
        .with_context(|| format!("reading the checkpoints of {}", args.resource))?;
    match settings.output {
        OutputFormat::Table => {
            crate::cli::common::output::warn_malformed("checkpoint", &listing.malformed);
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
                .map(|(i, c)| CheckpointJson::of(i + 1, c))
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
        }
    }
    Ok(())
}

fn token_time_text(checkpoint: &Checkpoint) -> String {
    checkpoint.token.time_text().unwrap_or_else(|| "-".into())
}

fn table(checkpoints: &[Checkpoint]) -> String {
    let rows: Vec<[String; 7]> = checkpoints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            [
                (i + 1).to_string(),
                c.at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                token_time_text(c),
                c.version.to_string(),
                escape_control(&c.holder),
                c.id.clone(),
                escape_control(&c.token.to_string()),
            ]
        })
        .collect();
    render_columns(
        [
            "N",
            "RECORDED",
            "TOKEN TIME",
            "VER",
            "HOLDER",
            "ID",
            "TOKEN",
        ],
        &rows,
    )
}

/// A checkpoint in `checkpoints --output json`, numbered as `rewind --to-checkpoint`
/// takes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct CheckpointJson<'a> {
    n: usize,
    resource: &'a str,
    #[serde(rename = "recordedAt")]
    recorded_at: Rfc3339,
    id: &'a str,
    #[serde(rename = "tokenTime")]
    token_time: Option<String>,
    version: i64,
    holder: &'a str,
    token: String,
}

impl<'a> CheckpointJson<'a> {
    fn of(n: usize, checkpoint: &'a Checkpoint) -> Self {
        Self {
            n,
            resource: &checkpoint.resource,
            recorded_at: Rfc3339(checkpoint.at),
            id: &checkpoint.id,
            token_time: checkpoint.token.time_text(),
            version: checkpoint.version,
            holder: &checkpoint.holder,
            token: checkpoint.token.to_string(),
        }
    }
}
