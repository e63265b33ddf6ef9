//! What streamward is attached to, and what follows from it: the kind of deployment
//! (from the server's `hello` and the host names) and whether its oplog can be read.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::OplogWindow;

/// How far a replica set member's last applied write is behind the primary's, as far as
/// `replSetGetStatus` tells. One answer for every view (`oplog`, both consoles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberLag {
    /// Behind the primary by this much (zero for the primary itself).
    Behind(Duration),
    /// The member cannot be reached (`health: 0`): it has no lag to show. The server
    /// reports its optime at the epoch, which read as a lag of decades.
    Unreachable,
    /// Reachable, but there is no optime to compare: an arbiter (it holds no oplog), a
    /// member in initial sync, or no primary to compare with.
    Unknown,
}

impl MemberLag {
    /// From the member's health and the wall times of its last applied write and the
    /// primary's. A time at the epoch is the server's way of saying it has none.
    pub fn of(
        healthy: bool,
        applied: Option<DateTime<Utc>>,
        primary_applied: Option<DateTime<Utc>>,
    ) -> MemberLag {
        let known = |at: Option<DateTime<Utc>>| at.filter(|at| at.timestamp_millis() != 0);
        if !healthy {
            return MemberLag::Unreachable;
        }
        match (known(primary_applied), known(applied)) {
            (Some(primary), Some(member)) => {
                MemberLag::Behind((primary - member).to_std().unwrap_or_default())
            }
            _ => MemberLag::Unknown,
        }
    }

    /// The lag, when there is one to show.
    pub fn behind(self) -> Option<Duration> {
        match self {
            MemberLag::Behind(lag) => Some(lag),
            MemberLag::Unreachable | MemberLag::Unknown => None,
        }
    }
}

/// A table cell: the lag, `unreachable`, or `-`.
impl fmt::Display for MemberLag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberLag::Behind(lag) => f.write_str(&super::text::short_duration(*lag)),
            MemberLag::Unreachable => f.write_str("unreachable"),
            MemberLag::Unknown => f.write_str("-"),
        }
    }
}

/// The kind of deployment a connection reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deployment {
    /// A replica set (`hello.setName`): one oplog for the whole set.
    ReplicaSet { name: String },
    /// A sharded cluster reached through `mongos` (`hello.msg == "isdbgrid"`): every
    /// shard has its own oplog, and `local` cannot be read through the router.
    Sharded,
    /// Azure Cosmos DB for MongoDB, told by its host names (`*.cosmos.azure.com`, as the
    /// MongoDB drivers tell it): no oplog; change streams with restrictions.
    CosmosDb,
    /// A single `mongod` outside a replica set: no oplog, no change streams.
    Standalone,
}

/// Host names that are Azure Cosmos DB's (request units or vCore); compared without case.
const COSMOS_HOST_SUFFIXES: [&str; 1] = [".cosmos.azure.com"];

impl Deployment {
    /// From `hello`'s `msg` and `setName` and the hosts the connection string names.
    /// The host names win: Cosmos DB answers `hello` like a replica set.
    pub fn detect(msg: Option<&str>, set_name: Option<&str>, hosts: &[String]) -> Deployment {
        let cosmos = hosts.iter().any(|host| {
            let name = host
                .split(':')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            COSMOS_HOST_SUFFIXES
                .iter()
                .any(|suffix| name.ends_with(suffix))
        });
        if cosmos {
            Deployment::CosmosDb
        } else if msg == Some("isdbgrid") {
            Deployment::Sharded
        } else if let Some(name) = set_name {
            Deployment::ReplicaSet {
                name: name.to_string(),
            }
        } else {
            Deployment::Standalone
        }
    }
}

impl fmt::Display for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Deployment::ReplicaSet { name } => write!(f, "replica set {name}"),
            Deployment::Sharded => f.write_str("sharded cluster (mongos)"),
            Deployment::CosmosDb => f.write_str("Azure Cosmos DB"),
            Deployment::Standalone => f.write_str("standalone server"),
        }
    }
}

/// Whether the oplog (`local.oplog.rs`) can be read through this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OplogAccess {
    Readable,
    /// Why not, in words (a missing privilege, the router, no oplog at all).
    NotReadable(String),
}

/// One shard of a sharded cluster and its own oplog window, read on a direct
/// connection to the shard (`listShards` names it and its hosts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOplog {
    /// The shard's `_id` in `listShards`.
    pub name: String,
    /// `listShards`' `host`: `set/host:port,…`.
    pub hosts: String,
    /// The window, or why it could not be read (unreachable, not permitted, …).
    pub window: Result<OplogWindow, String>,
}

/// How far a shard's newest oplog entry may trail the newest shard's before it is
/// pointed out as quiet. Shard primaries write a no-op every `periodicNoopIntervalSecs`
/// (10 s by default) so that a quiet shard does not hold change streams back; three
/// intervals behind means that is not happening.
pub const QUIET_SHARD_AFTER: Duration = Duration::from_secs(30);

/// The shards' oplogs taken together: a resume point is only safe where every shard
/// still holds its history.
#[derive(Debug, Clone, Copy)]
pub struct ShardWindows<'a>(pub &'a [ShardOplog]);

impl<'a> ShardWindows<'a> {
    /// The history every shard still covers: from the latest of the shards' first
    /// entries to the earliest of their last ones (a change stream through mongos
    /// returns nothing newer than its slowest shard). Unknown, with the reason, when
    /// there are no shards or any shard's window could not be read.
    pub fn covered(&self) -> Result<OplogWindow, String> {
        let mut covered: Option<OplogWindow> = None;
        for shard in self.0 {
            let window = shard
                .window
                .as_ref()
                .map_err(|why| format!("shard {} ({}): {why}", shard.name, shard.hosts))?;
            covered = Some(match covered {
                None => *window,
                Some(c) => OplogWindow::new(c.first.max(window.first), c.last.min(window.last)),
            });
        }
        covered.ok_or_else(|| "listShards named no shards".to_string())
    }

    /// The shard whose oldest entry is the newest: it decides how far back is safe.
    pub fn limiting(&self) -> Option<&'a ShardOplog> {
        self.readable()
            .max_by_key(|(_, window)| window.first)
            .map(|(shard, _)| shard)
    }

    /// Shards whose newest entry trails the newest shard's by more than
    /// [`QUIET_SHARD_AFTER`], with how far: each holds back every change stream
    /// opened through mongos.
    pub fn quiet(&self) -> Vec<(&'a ShardOplog, Duration)> {
        let Some(newest) = self.readable().map(|(_, w)| w.last).max() else {
            return Vec::new();
        };
        self.readable()
            .map(|(shard, window)| (shard, newest.saturating_since(window.last)))
            .filter(|(_, behind)| *behind > QUIET_SHARD_AFTER)
            .collect()
    }

    /// What to say of one shard beside its window, one note each: why it could not
    /// be read, that it limits the window, that it is quiet (and holds change streams
    /// back). Empty when there is nothing to say.
    pub fn notes(&self, shard: &ShardOplog) -> Vec<String> {
        if let Err(why) = &shard.window {
            return vec![format!("not read: {why}")];
        }
        let mut notes = Vec::new();
        if self.0.len() > 1 && self.limiting().is_some_and(|l| l.name == shard.name) {
            notes.push("limits the window (latest oldest entry)".to_string());
        }
        if let Some((_, behind)) = self.quiet().into_iter().find(|(q, _)| q.name == shard.name) {
            notes.push(format!(
                "quiet: {}s behind the newest shard; streams through mongos wait for it",
                behind.as_secs()
            ));
        }
        notes
    }

    fn readable(&self) -> impl Iterator<Item = (&'a ShardOplog, &'a OplogWindow)> + 'a {
        self.0
            .iter()
            .filter_map(|shard| shard.window.as_ref().ok().map(|w| (shard, w)))
    }
}

/// The deployment and its oplog, with what follows from them for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub deployment: Deployment,
    pub oplog: OplogAccess,
    /// Through mongos: each shard and its window (empty for any other deployment).
    pub shards: Vec<ShardOplog>,
}

impl Topology {
    /// A topology with no shards.
    pub fn new(deployment: Deployment, oplog: OplogAccess) -> Topology {
        Topology {
            deployment,
            oplog,
            shards: Vec::new(),
        }
    }

    /// Everything streamward shows and checks works.
    pub fn is_complete(&self) -> bool {
        matches!(
            self.deployment,
            Deployment::ReplicaSet { .. } | Deployment::Sharded
        ) && self.oplog == OplogAccess::Readable
    }

    pub fn shard_windows(&self) -> ShardWindows<'_> {
        ShardWindows(&self.shards)
    }

    /// What follows, in one line.
    pub fn consequence(&self) -> String {
        let no_window = "the oplog window, headroom and history status are unknown (lag is the \
                         token's age by the server's clock); resets are refused, and a rewind \
                         or undo to a named point goes unchecked against the window";
        match (&self.deployment, &self.oplog) {
            (Deployment::ReplicaSet { .. }, OplogAccess::Readable) => {
                "the oplog is readable: window, lag, headroom and every guarded action".into()
            }
            (Deployment::ReplicaSet { .. }, OplogAccess::NotReadable(why)) => {
                format!("the oplog cannot be read ({why}): {no_window}")
            }
            (Deployment::Sharded, OplogAccess::Readable) => {
                let limiting = self
                    .shard_windows()
                    .limiting()
                    .map(|shard| format!("; shard {} has the latest oldest entry", shard.name))
                    .unwrap_or_default();
                format!(
                    "the oplog is per shard ({} read directly): the window is what every shard \
                     still holds{limiting}",
                    self.shards.len()
                )
            }
            (Deployment::Sharded, OplogAccess::NotReadable(why)) => {
                format!("the oplog is per shard and could not be read ({why}): {no_window}")
            }
            (Deployment::CosmosDb, _) => format!(
                "Cosmos DB has no oplog: {no_window}; a request-unit account's change streams \
                 resume by token only and carry no deletes (docs/cosmos.md)"
            ),
            (Deployment::Standalone, _) => "a standalone server has no oplog and no change \
                 streams: listeners need a replica set (a single-member one will do)"
                .into(),
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.deployment, self.consequence())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(names: &[&str]) -> Vec<String> {
        names.iter().map(|h| h.to_string()).collect()
    }

    #[test]
    fn hello_and_host_names_tell_the_deployment() {
        let local = hosts(&["127.0.0.1:27017"]);
        assert_eq!(
            Deployment::detect(None, Some("rs0"), &local),
            Deployment::ReplicaSet { name: "rs0".into() }
        );
        assert_eq!(
            Deployment::detect(Some("isdbgrid"), None, &local),
            Deployment::Sharded
        );
        assert_eq!(
            Deployment::detect(None, None, &local),
            Deployment::Standalone
        );
        // Cosmos DB answers hello like a replica set; its host names tell it.
        for host in [
            "shop.mongo.cosmos.azure.com:10255",
            "SHOP.MONGO.COSMOS.AZURE.COM:10255",
            "c.shop.mongocluster.cosmos.azure.com",
        ] {
            assert_eq!(
                Deployment::detect(None, Some("globaldb"), &hosts(&[host])),
                Deployment::CosmosDb,
                "{host}"
            );
        }
        // A name that merely contains the suffix elsewhere is not Cosmos DB.
        assert_eq!(
            Deployment::detect(None, Some("rs0"), &hosts(&["cosmos.azure.com.example.org"])),
            Deployment::ReplicaSet { name: "rs0".into() }
        );
    }

    #[test]
    fn each_topology_says_what_follows_in_one_line() {
        let rs = |oplog| Topology::new(Deployment::ReplicaSet { name: "rs0".into() }, oplog);
        assert!(rs(OplogAccess::Readable).is_complete());
        let denied = rs(OplogAccess::NotReadable(
            "not permitted to read local.oplog.rs".into(),
        ));
        assert!(!denied.is_complete());
        let all = [
            rs(OplogAccess::Readable),
            denied,
            Topology::new(
                Deployment::Sharded,
                OplogAccess::NotReadable("code 20".into()),
            ),
            Topology::new(
                Deployment::CosmosDb,
                OplogAccess::NotReadable("no oplog".into()),
            ),
            Topology::new(
                Deployment::Standalone,
                OplogAccess::NotReadable("no oplog".into()),
            ),
        ];
        for topology in &all {
            let line = topology.to_string();
            assert!(!line.contains('\n'), "{line}");
        }
        assert_eq!(
            all[1].to_string(),
            "replica set rs0: the oplog cannot be read (not permitted to read local.oplog.rs): \
             the oplog window, headroom and history status are unknown (lag is the token's age \
             by the server's clock); resets are refused, and a rewind or undo to a named point \
             goes unchecked against the window"
        );
        assert!(all[2]
            .to_string()
            .starts_with("sharded cluster (mongos): the oplog is per shard and could not be read"));
        assert!(all[3].to_string().contains("resume by token only"));
    }

    fn at(seconds: u32) -> crate::model::ClusterTime {
        crate::model::ClusterTime::new(seconds, 1)
    }

    fn shard(name: &str, window: Result<(u32, u32), &str>) -> ShardOplog {
        ShardOplog {
            name: name.into(),
            hosts: format!("{name}/127.0.0.1:1"),
            window: window
                .map(|(first, last)| OplogWindow::new(at(first), at(last)))
                .map_err(str::to_string),
        }
    }

    #[test]
    fn the_shards_window_is_what_every_shard_still_holds() {
        let shards = [
            shard("a", Ok((100, 500))),
            shard("b", Ok((300, 495))),
            shard("c", Ok((200, 510))),
        ];
        let windows = ShardWindows(&shards);
        // Latest first entry, earliest last entry.
        assert_eq!(windows.covered(), Ok(OplogWindow::new(at(300), at(495))));
        assert_eq!(windows.limiting().map(|s| s.name.as_str()), Some("b"));
        assert!(windows.quiet().is_empty(), "15 s behind is not quiet");
        assert!(windows.notes(&shards[0]).is_empty());
        assert_eq!(
            windows.notes(&shards[1]),
            ["limits the window (latest oldest entry)"]
        );

        let quiet = [shard("a", Ok((100, 500))), shard("b", Ok((300, 460)))];
        let quiet = ShardWindows(&quiet).quiet();
        assert_eq!(quiet.len(), 1);
        assert_eq!(quiet[0].0.name, "b");
        assert_eq!(quiet[0].1, Duration::from_secs(40));
        let two = [shard("a", Ok((100, 500))), shard("b", Ok((300, 460)))];
        assert_eq!(
            ShardWindows(&two).notes(&two[1]),
            [
                "limits the window (latest oldest entry)",
                "quiet: 40s behind the newest shard; streams through mongos wait for it"
            ]
        );
    }

    #[test]
    fn one_unreadable_shard_makes_the_window_unknown_and_says_which() {
        let shards = [
            shard("a", Ok((100, 500))),
            shard("b", Err("cannot reach the database: connection refused")),
        ];
        let windows = ShardWindows(&shards);
        let why = windows.covered().unwrap_err();
        assert!(
            why.starts_with("shard b (b/127.0.0.1:1): cannot reach"),
            "{why}"
        );
        // The readable shard is still shown and still limits.
        assert_eq!(windows.limiting().map(|s| s.name.as_str()), Some("a"));
        assert!(windows.notes(&shards[1])[0].starts_with("not read: cannot reach"));
        assert_eq!(
            ShardWindows(&[]).covered().unwrap_err(),
            "listShards named no shards"
        );
    }

    #[test]
    fn a_readable_sharded_cluster_names_its_limiting_shard() {
        let topology = Topology {
            deployment: Deployment::Sharded,
            oplog: OplogAccess::Readable,
            shards: vec![shard("a", Ok((100, 500))), shard("b", Ok((300, 495)))],
        };
        assert!(topology.is_complete());
        assert_eq!(
            topology.consequence(),
            "the oplog is per shard (2 read directly): the window is what every shard still \
             holds; shard b has the latest oldest entry"
        );
    }
}
