//! `streamward processes`: the fleet's members (docs/protocol.md, "Membership and
//! balancing"), each with its fair share, the leases it holds and those it stands by
//! for. Reads only.

use std::io::Write;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::{json, Value};

use crate::cli::common::lease_table::render_columns;
use crate::cli::common::settings::{OutputFormat, ReaderArgs, Settings};
use crate::model::text::{escape_control, relative_time, resource_names as names};
use crate::model::ProcessView;
use crate::store::{LeaseStore, MemberScope, MembershipStore};

#[derive(Debug, Args)]
pub struct ProcessesArgs {
    #[command(flatten)]
    pub common: ReaderArgs,
}

pub async fn list(settings: &Settings, out: &mut dyn Write) -> anyhow::Result<()> {
    let store = crate::cli::common::connect::connect(settings).await?;
    let processes = settings.mongo()?.processes();
    let members = store
        .list_members(MemberScope::All)
        .await
        .with_context(|| format!("listing the processes in {processes}"))?;
    let leases = store
        .list()
        .await
        .with_context(|| format!("listing leases in {}", settings.leases))?;
    let now = store
        .server_now()
        .await
        .context("reading the server's clock")?;
    let views = ProcessView::all(&members.items, &leases.items, now);
    match settings.output {
        OutputFormat::Table => {
            crate::cli::common::output::warn_malformed("process document", &members.malformed);
            if views.is_empty() && members.malformed.is_empty() {
                writeln!(
                    out,
                    "no processes in {processes} (listeners announce themselves only when run in a fleet)"
                )?;
                return Ok(());
            }
            write!(out, "{}", table(&views, now))?;
        }
        OutputFormat::Json => {
            // A document that cannot be read is listed as one, as `leases` does.
            let items: Vec<Value> = views
                .iter()
                .map(process_json)
                .chain(
                    members
                        .malformed
                        .iter()
                        .map(crate::ops::describe::malformed_json),
                )
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&items)?)?;
        }
    }
    Ok(())
}

pub fn table(views: &[ProcessView], now: DateTime<Utc>) -> String {
    let rows: Vec<[String; 8]> = views
        .iter()
        .map(|v| {
            [
                escape_control(&v.member.process),
                format!("{}:{}", escape_control(&v.member.host), v.member.pid),
                if v.live {
                    format!("live, expires {}", relative_time(v.member.expires_at, now))
                } else {
                    format!("expired {}", relative_time(v.member.expires_at, now))
                },
                relative_time(v.member.started_at, now),
                v.share.map_or_else(|| "-".into(), |s| s.to_string()),
                format!("{} {}", v.holds.len(), names(&v.holds)),
                names(&v.handing_over),
                names(&v.standby),
            ]
        })
        .collect();
    render_columns(
        [
            "PROCESS",
            "HOST:PID",
            "MEMBERSHIP",
            "JOINED",
            "SHARE",
            "HOLDS",
            "HANDING OVER",
            "STANDBY",
        ],
        &rows,
    )
}

fn process_json(view: &ProcessView) -> Value {
    json!({
        "process": view.member.process,
        "host": view.member.host,
        "pid": view.member.pid,
        "live": view.live,
        "startedAt": view.member.started_at.to_rfc3339(),
        "renewedAt": view.member.renewed_at.to_rfc3339(),
        "expiresAt": view.member.expires_at.to_rfc3339(),
        "share": view.share,
        "holds": view.holds,
        "handingOver": view.handing_over,
        "standby": view.standby,
        "listeners": view.member.listeners.iter().map(|l| json!({
            "resource": l.resource,
            "listenerId": l.listener,
        })).collect::<Vec<_>>(),
    })
}
