//! `streamward oplog`: what the cluster is (topology, members and their lag) and its
//! oplog window, as a table or JSON.

use std::io::Write;

use anyhow::Context;
use serde::Serialize;

use crate::cli::common::connect::connect;
use crate::cli::common::exit::OplogUnknown;
use crate::cli::common::lease_table::render_columns;
use crate::cli::common::output::say;
use crate::cli::common::settings::{OutputFormat, Settings};
use crate::model::text::{escape_control, short_duration};
use crate::model::{ClusterTime, Deployment, OplogAccess, OplogWindow, Topology};
use crate::ops::json::ClusterTimeJson;
use crate::store::mongo::{MemberState, ReplicaMember};
use crate::store::{ChangeFeed, StoreError};

pub async fn oplog(settings: &Settings, out: &mut dyn Write) -> anyhow::Result<()> {
    let store = connect(settings).await?;
    let (topology, window) = store
        .topology()
        .await
        .context("reading what the cluster is")?;
    let replica_set = matches!(topology.deployment, Deployment::ReplicaSet { .. });
    let cluster_time = match store.cluster_time().await {
        Ok(time) => Some(time),
        // A standalone server keeps no cluster time; say what it is instead of failing.
        Err(_) if !replica_set => None,
        Err(e) => return Err(e).context("reading the cluster time"),
    };
    let members = if replica_set {
        match store.members().await {
            Ok(members) => members,
            Err(e @ StoreError::NotPermitted { .. }) => {
                say(format_args!("note: {e}; replica set members are not shown"));
                Vec::new()
            }
            Err(e) => return Err(e).context("reading the replica set status"),
        }
    } else {
        Vec::new()
    };
    match settings.output {
        OutputFormat::Table => write!(
            out,
            "{}",
            render_oplog(&topology, window.as_ref(), cluster_time, &members)
        )?,
        OutputFormat::Json => {
            let shown = OplogJson {
                topology: TopologyJson::of(&topology),
                first: ClusterTimeJson::of_optional(window.map(|w| w.first)),
                last: ClusterTimeJson::of_optional(window.map(|w| w.last)),
                length_secs: window.map(|w| w.length().as_secs()),
                cluster_time: ClusterTimeJson::of_optional(cluster_time),
                members: members.iter().map(MemberJson::of).collect(),
            };
            writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
        }
    }
    // What is known is shown; the window itself, what this command is for, is not.
    if let OplogAccess::NotReadable(why) = &topology.oplog {
        return Err(OplogUnknown(format!("the oplog window cannot be read: {why}")).into());
    }
    Ok(())
}

/// `oplog --output json`: what the cluster is, its oplog window and its members.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct OplogJson<'a> {
    topology: TopologyJson<'a>,
    first: Option<ClusterTimeJson>,
    last: Option<ClusterTimeJson>,
    #[serde(rename = "lengthSecs")]
    length_secs: Option<u64>,
    #[serde(rename = "clusterTime")]
    cluster_time: Option<ClusterTimeJson>,
    members: Vec<MemberJson<'a>>,
}

/// A replica set member and how far behind the primary it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct MemberJson<'a> {
    name: &'a str,
    state: String,
    healthy: bool,
    optime: Option<ClusterTimeJson>,
    #[serde(rename = "lagSecs")]
    lag_secs: Option<u64>,
}

impl<'a> MemberJson<'a> {
    fn of(member: &'a ReplicaMember) -> Self {
        Self {
            name: &member.name,
            state: member_state(&member.state),
            healthy: member.healthy,
            optime: ClusterTimeJson::of_optional(member.optime),
            lag_secs: member.lag.behind().map(|d| d.as_secs()),
        }
    }
}

/// The topology: what it is, whether the oplog can be read (and why not), and what
/// follows.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct TopologyJson<'a> {
    deployment: DeploymentJson<'a>,
    #[serde(rename = "oplogReadable")]
    oplog_readable: bool,
    reason: Option<&'a str>,
    consequence: String,
    shards: Vec<ShardJson<'a>>,
}

impl<'a> TopologyJson<'a> {
    fn of(topology: &'a Topology) -> Self {
        let (oplog_readable, reason) = match &topology.oplog {
            OplogAccess::Readable => (true, None),
            OplogAccess::NotReadable(why) => (false, Some(why.as_str())),
        };
        let windows = topology.shard_windows();
        let shards = topology
            .shards
            .iter()
            .map(|shard| {
                let window = shard.window.as_ref().ok();
                ShardJson {
                    name: &shard.name,
                    hosts: &shard.hosts,
                    first: ClusterTimeJson::of_optional(window.map(|w| w.first)),
                    last: ClusterTimeJson::of_optional(window.map(|w| w.last)),
                    length_secs: window.map(|w| w.length().as_secs()),
                    error: shard.window.as_ref().err().map(String::as_str),
                    limiting: windows.limiting().is_some_and(|l| l.name == shard.name),
                    quiet_secs: windows
                        .quiet()
                        .into_iter()
                        .find(|(q, _)| q.name == shard.name)
                        .map(|(_, behind)| behind.as_secs()),
                }
            })
            .collect();
        Self {
            deployment: DeploymentJson::of(&topology.deployment),
            oplog_readable,
            reason,
            consequence: topology.consequence(),
            shards,
        }
    }
}

/// `{"kind": "replicaSet", "setName"}`, `{"kind": "sharded"}`, ….
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum DeploymentJson<'a> {
    ReplicaSet {
        #[serde(rename = "setName")]
        set_name: &'a str,
    },
    Sharded,
    CosmosDb,
    Standalone,
}

impl<'a> DeploymentJson<'a> {
    fn of(deployment: &'a Deployment) -> Self {
        match deployment {
            Deployment::ReplicaSet { name } => DeploymentJson::ReplicaSet { set_name: name },
            Deployment::Sharded => DeploymentJson::Sharded,
            Deployment::CosmosDb => DeploymentJson::CosmosDb,
            Deployment::Standalone => DeploymentJson::Standalone,
        }
    }
}

/// One shard's oplog window, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ShardJson<'a> {
    name: &'a str,
    hosts: &'a str,
    first: Option<ClusterTimeJson>,
    last: Option<ClusterTimeJson>,
    #[serde(rename = "lengthSecs")]
    length_secs: Option<u64>,
    error: Option<&'a str>,
    limiting: bool,
    #[serde(rename = "quietSecs")]
    quiet_secs: Option<u64>,
}

fn member_state(state: &MemberState) -> String {
    escape_control(state.as_str())
}

pub fn render_oplog(
    topology: &Topology,
    window: Option<&OplogWindow>,
    cluster_time: Option<ClusterTime>,
    members: &[ReplicaMember],
) -> String {
    let mut out = format!("topology      {}\n", topology.deployment);
    if !topology.is_complete() || !topology.shards.is_empty() {
        out.push_str(&format!("              {}\n", topology.consequence()));
    }
    match window {
        Some(window) => out.push_str(&format!(
            "oplog window  {}\nfirst         {}\nlast          {}\n",
            short_duration(window.length()),
            window.first,
            window.last,
        )),
        None => out.push_str("oplog window  unknown\n"),
    }
    if let Some(time) = cluster_time {
        out.push_str(&format!("cluster time  {time}\n"));
    }
    if !topology.shards.is_empty() {
        let shards = topology.shard_windows();
        let rows: Vec<[String; 6]> = topology
            .shards
            .iter()
            .map(|shard| {
                let (first, last, length) = match &shard.window {
                    Ok(w) => (
                        w.first.to_string(),
                        w.last.to_string(),
                        short_duration(w.length()),
                    ),
                    Err(_) => ("-".into(), "-".into(), "-".into()),
                };
                [
                    escape_control(&shard.name),
                    escape_control(&shard.hosts),
                    length,
                    first,
                    last,
                    escape_control(&shards.notes(shard).join("; ")),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&render_columns(
            ["SHARD", "HOSTS", "WINDOW", "FIRST", "LAST", "NOTE"],
            &rows,
        ));
    }
    if !members.is_empty() {
        let rows: Vec<[String; 4]> = members
            .iter()
            .map(|m| {
                [
                    escape_control(&m.name),
                    member_state(&m.state),
                    if m.healthy { "yes" } else { "no" }.to_string(),
                    m.lag.to_string(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&render_columns(
            ["MEMBER", "STATE", "HEALTHY", "LAG"],
            &rows,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unreachable member has no lag: the LAG column says it is unreachable, and
    /// a member with no optime to compare (an arbiter) shows none.
    #[test]
    fn the_oplog_view_says_a_member_is_unreachable_instead_of_a_lag() {
        let topology = Topology::new(
            Deployment::ReplicaSet { name: "rs0".into() },
            OplogAccess::Readable,
        );
        let reply = bson::doc! { "members": [
            { "name": "a:1", "health": 1.0, "stateStr": "PRIMARY",
              "optime": { "ts": bson::Timestamp { time: 1_795_000_000, increment: 1 }, "t": 1_i64 },
              "optimeDate": bson::DateTime::from_millis(1_795_000_000_000) },
            { "name": "c:3", "health": 0.0, "stateStr": "(not reachable/healthy)",
              "optime": { "ts": bson::Timestamp { time: 0, increment: 0 }, "t": -1_i64 },
              "optimeDate": bson::DateTime::from_millis(0) },
        ] };
        let members = crate::store::mongo::parse_members(&reply).expect("parses");
        let out = render_oplog(&topology, None, None, &members);
        let row = |name: &str| {
            out.lines()
                .find(|l| l.starts_with(name))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(row("a:1").last().copied(), Some("0s"), "{out}");
        assert_eq!(row("c:3").last().copied(), Some("unreachable"), "{out}");
    }
}
