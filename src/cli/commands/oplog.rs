//! `streamward oplog`: what the cluster is (topology, members and their lag) and its
//! oplog window, as a table or JSON.

use std::io::Write;

use anyhow::Context;
use serde_json::{json, Value};

use crate::cli::common::connect::connect;
use crate::cli::common::exit::OplogUnknown;
use crate::cli::common::lease_table::render_columns;
use crate::cli::common::output::say;
use crate::cli::common::settings::{OutputFormat, Settings};
use crate::model::text::{escape_control, short_duration};
use crate::model::{ClusterTime, Deployment, OplogAccess, OplogWindow, Topology};
use crate::ops::describe;
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
            let value = json!({
                "topology": topology_json(&topology),
                "first": describe::time_json(window.map(|w| w.first)),
                "last": describe::time_json(window.map(|w| w.last)),
                "lengthSecs": window.map(|w| w.length().as_secs()),
                "clusterTime": describe::time_json(cluster_time),
                "members": members.iter().map(|m| json!({
                    "name": m.name,
                    "state": member_state(&m.state),
                    "healthy": m.healthy,
                    "optime": describe::time_json(m.optime),
                    "lagSecs": m.lag.behind().map(|d| d.as_secs()),
                })).collect::<Vec<_>>(),
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        }
    }
    // What is known is shown; the window itself, what this command is for, is not.
    if let OplogAccess::NotReadable(why) = &topology.oplog {
        return Err(OplogUnknown(format!("the oplog window cannot be read: {why}")).into());
    }
    Ok(())
}

/// The topology in JSON: what it is, whether the oplog can be read (and why not), and
/// what follows.
fn topology_json(topology: &Topology) -> Value {
    let deployment = match &topology.deployment {
        Deployment::ReplicaSet { name } => json!({ "kind": "replicaSet", "setName": name }),
        Deployment::Sharded => json!({ "kind": "sharded" }),
        Deployment::CosmosDb => json!({ "kind": "cosmosDb" }),
        Deployment::Standalone => json!({ "kind": "standalone" }),
    };
    let (readable, reason) = match &topology.oplog {
        OplogAccess::Readable => (true, None),
        OplogAccess::NotReadable(why) => (false, Some(why.as_str())),
    };
    let windows = topology.shard_windows();
    let shards: Vec<Value> = topology
        .shards
        .iter()
        .map(|shard| {
            let window = shard.window.as_ref().ok();
            json!({
                "name": shard.name,
                "hosts": shard.hosts,
                "first": describe::time_json(window.map(|w| w.first)),
                "last": describe::time_json(window.map(|w| w.last)),
                "lengthSecs": window.map(|w| w.length().as_secs()),
                "error": shard.window.as_ref().err(),
                "limiting": windows.limiting().is_some_and(|l| l.name == shard.name),
                "quietSecs": windows
                    .quiet()
                    .into_iter()
                    .find(|(q, _)| q.name == shard.name)
                    .map(|(_, behind)| behind.as_secs()),
            })
        })
        .collect();
    json!({
        "deployment": deployment,
        "oplogReadable": readable,
        "reason": reason,
        "consequence": topology.consequence(),
        "shards": shards,
    })
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
