//! Which kind of change streams the database offers: MongoDB's, or the restricted ones
//! of Azure Cosmos DB for MongoDB (request-unit accounts). docs/cosmos.md says what
//! follows from the second, and where each behaviour is documented by Microsoft.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::Deployment;

/// Host names of vCore clusters, which are Cosmos DB deployments with MongoDB's
/// change streams; compared without case.
const VCORE_HOST_SUFFIX: &str = ".mongocluster.cosmos.azure.com";

/// How change streams are opened, read and resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StreamProfile {
    /// MongoDB's change streams: every event has `operationType` and `clusterTime`, the
    /// oplog bounds history, and a stream may start at a time.
    #[default]
    MongoDb,
    /// Azure Cosmos DB for MongoDB: no oplog; every change stream must be
    /// `[{$match: {operationType: {$in: [insert, update, replace]}}}, {$project: {_id,
    /// fullDocument, ns, documentKey}}]` with `fullDocument: "updateLookup"`; events
    /// carry only those four fields; no deletes; resumed by token only.
    CosmosDb,
}

/// A profile name that is not one of [`StreamProfile::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown profile {0:?}: expected \"mongodb\" or \"cosmos\" (Azure Cosmos DB for MongoDB)")]
pub struct UnknownProfile(pub String);

impl StreamProfile {
    /// The names the configuration takes, in the order of the variants.
    pub const NAMES: [&'static str; 2] = ["mongodb", "cosmos"];

    pub fn as_str(self) -> &'static str {
        match self {
            StreamProfile::MongoDb => "mongodb",
            StreamProfile::CosmosDb => "cosmos",
        }
    }

    /// The profile a deployment needs: Cosmos DB for a Cosmos DB deployment (told by
    /// its host names), MongoDB's for everything else.
    pub fn of(deployment: &Deployment) -> Self {
        match deployment {
            Deployment::CosmosDb => StreamProfile::CosmosDb,
            _ => StreamProfile::MongoDb,
        }
    }

    /// The profile for a connection to `hosts` when none is configured: Cosmos DB
    /// when the host names are those of a Cosmos DB request-unit account
    /// (`*.cosmos.azure.com`, as [`Deployment::detect`] tells them), else MongoDB's.
    /// A vCore cluster (`*.mongocluster.cosmos.azure.com`) is a Cosmos DB deployment
    /// too, but Microsoft documents its change streams (a preview) as MongoDB's: a
    /// plain `watch()` whose events carry `operationType`; it gets MongoDB's profile.
    pub fn detect(hosts: &[String]) -> Self {
        // The host names decide before anything `hello` says (Cosmos DB answers it
        // like a replica set), so no server reply is needed to tell.
        let vcore = hosts.iter().any(|host| {
            let name = host.split(':').next().unwrap_or_default();
            name.to_ascii_lowercase().ends_with(VCORE_HOST_SUFFIX)
        });
        if vcore {
            return StreamProfile::MongoDb;
        }
        Self::of(&Deployment::detect(None, None, hosts))
    }
}

impl fmt::Display for StreamProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StreamProfile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mongodb" => Ok(StreamProfile::MongoDb),
            "cosmos" => Ok(StreamProfile::CosmosDb),
            other => Err(UnknownProfile(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_alike() {
        for name in StreamProfile::NAMES {
            let profile: StreamProfile = name.parse().unwrap();
            assert_eq!(profile.to_string(), name);
        }
        let error = "Cosmos".parse::<StreamProfile>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown profile \"Cosmos\": expected \"mongodb\" or \"cosmos\" (Azure Cosmos DB for MongoDB)"
        );
    }

    #[test]
    fn cosmos_host_names_make_the_cosmos_profile() {
        let hosts = |h: &str| vec![h.to_string()];
        assert_eq!(
            StreamProfile::detect(&hosts("shop.mongo.cosmos.azure.com:10255")),
            StreamProfile::CosmosDb
        );
        assert_eq!(
            StreamProfile::detect(&hosts("c.shop.MongoCluster.cosmos.azure.com")),
            StreamProfile::MongoDb,
            "a vCore cluster streams as MongoDB does"
        );
        assert_eq!(
            StreamProfile::detect(&hosts("127.0.0.1:27017")),
            StreamProfile::MongoDb
        );
        assert_eq!(
            StreamProfile::of(&Deployment::Sharded),
            StreamProfile::MongoDb
        );
    }
}
