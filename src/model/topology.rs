//! What streamward is attached to, and what follows from it: the kind of deployment
//! (from the server's `hello` and the host names) and whether its oplog can be read.

use std::fmt;

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

/// The deployment and its oplog, with what follows from them for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub deployment: Deployment,
    pub oplog: OplogAccess,
}

impl Topology {
    /// Everything streamward shows and checks works.
    pub fn is_complete(&self) -> bool {
        matches!(self.deployment, Deployment::ReplicaSet { .. })
            && self.oplog == OplogAccess::Readable
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
            (Deployment::Sharded, _) => format!(
                "through mongos the oplog is per shard and streamward does not read the shards' \
                 oplogs: {no_window}"
            ),
            (Deployment::CosmosDb, _) => format!(
                "Cosmos DB has no oplog: {no_window}; its change streams resume by token only \
                 and carry no deletes"
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
        let rs = |oplog| Topology {
            deployment: Deployment::ReplicaSet { name: "rs0".into() },
            oplog,
        };
        assert!(rs(OplogAccess::Readable).is_complete());
        let denied = rs(OplogAccess::NotReadable(
            "not permitted to read local.oplog.rs".into(),
        ));
        assert!(!denied.is_complete());
        let all = [
            rs(OplogAccess::Readable),
            denied,
            Topology {
                deployment: Deployment::Sharded,
                oplog: OplogAccess::NotReadable("code 20".into()),
            },
            Topology {
                deployment: Deployment::CosmosDb,
                oplog: OplogAccess::NotReadable("no oplog".into()),
            },
            Topology {
                deployment: Deployment::Standalone,
                oplog: OplogAccess::NotReadable("no oplog".into()),
            },
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
            .starts_with("sharded cluster (mongos): through mongos"));
        assert!(all[3].to_string().contains("resume by token only"));
    }
}
