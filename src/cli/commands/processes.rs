//! `streamward processes`: the fleet's members (docs/protocol.md, "Membership and
//! balancing"), each with its fair share, the leases it holds and those it stands by
//! for. Reads only.

use std::io::Write;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;
use serde::Serialize;

use crate::cli::common::lease_table::render_columns;
use crate::cli::common::settings::{OutputFormat, ReaderArgs, Settings};
use crate::model::text::{escape_control, relative_time, resource_names as names};
use crate::model::ProcessView;
use crate::ops::json::{ListedJson, MalformedJson, Rfc3339};
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
            let items: Vec<_> = views
                .iter()
                .map(|v| ListedJson::Read(ProcessJson::of(v)))
                .chain(
                    members
                        .malformed
                        .iter()
                        .map(|m| ListedJson::Malformed(MalformedJson::of(m))),
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

/// A process in `processes --output json`: its membership, share and leases.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ProcessJson<'a> {
    process: &'a str,
    host: &'a str,
    pid: u32,
    live: bool,
    #[serde(rename = "startedAt")]
    started_at: Rfc3339,
    #[serde(rename = "renewedAt")]
    renewed_at: Rfc3339,
    #[serde(rename = "expiresAt")]
    expires_at: Rfc3339,
    share: Option<u32>,
    holds: &'a [String],
    #[serde(rename = "handingOver")]
    handing_over: &'a [String],
    standby: &'a [String],
    listeners: Vec<ListenerJson<'a>>,
}

impl<'a> ProcessJson<'a> {
    fn of(view: &'a ProcessView) -> Self {
        let member = &view.member;
        Self {
            process: &member.process,
            host: &member.host,
            pid: member.pid,
            live: view.live,
            started_at: Rfc3339(member.started_at),
            renewed_at: Rfc3339(member.renewed_at),
            expires_at: Rfc3339(member.expires_at),
            share: view.share,
            holds: &view.holds,
            handing_over: &view.handing_over,
            standby: &view.standby,
            listeners: member
                .listeners
                .iter()
                .map(|l| ListenerJson {
                    resource: &l.resource,
                    listener_id: &l.listener,
                })
                .collect(),
        }
    }
}

/// A listener a process runs, and the resource it listens for.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ListenerJson<'a> {
    resource: &'a str,
    #[serde(rename = "listenerId")]
    listener_id: &'a str,
}
