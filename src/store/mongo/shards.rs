//! A sharded cluster's oplogs: `local` cannot be read through mongos, so each shard
//! named by `listShards` is read on a connection of its own, made from the options the
//! router was reached with (credentials, TLS, timeouts) and the shard's hosts.

use std::collections::HashMap;

use bson::{doc, Bson};
use mongodb::options::{ClientOptions, ServerAddress};
use mongodb::Client;

use super::errors::with_one_retry;
use super::MongoStore;
use crate::model::{OplogWindow, ShardOplog};
use crate::store::{StoreError, StoreResult};

const LIST_SHARDS_HINT: &str = "the clusterMonitor role, which grants listShards";

/// Clients to each shard by its `_id`, with the hosts they were made for.
#[derive(Debug, Default)]
pub(super) struct ShardClients {
    by_name: tokio::sync::Mutex<HashMap<String, (String, Client)>>,
}

/// One entry of `listShards`: its `_id` and `host` (`set/host:port,…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardEntry {
    pub name: String,
    pub hosts: String,
}

impl MongoStore {
    /// `listShards` on `admin`, through the router.
    pub(super) async fn list_shards(&self) -> StoreResult<Vec<ShardEntry>> {
        let action = "list the shards (listShards)";
        let admin = self.client.database("admin");
        let reply = with_one_retry(self.timeout(), action, || {
            std::future::IntoFuture::into_future(admin.run_command(doc! { "listShards": 1 }))
        })
        .await
        .map_err(|e| e.into_store_hinted(action, LIST_SHARDS_HINT))?;
        let malformed = |detail: String| StoreError::Malformed {
            what: "listShards reply".into(),
            detail,
        };
        let shards = reply
            .get_array("shards")
            .map_err(|e| malformed(format!("field shards: {e}")))?;
        shards
            .iter()
            .map(|shard| {
                let Bson::Document(shard) = shard else {
                    return Err(malformed("field shards: an entry is not a document".into()));
                };
                let text = |field: &str| {
                    shard
                        .get_str(field)
                        .map(crate::model::text::escape_control)
                        .map_err(|e| malformed(format!("field shards.{field}: {e}")))
                };
                Ok(ShardEntry {
                    name: text("_id")?,
                    hosts: text("host")?,
                })
            })
            .collect()
    }

    /// Every shard with its window, read concurrently; a shard that cannot be read is
    /// listed with the reason, and the others are still read.
    pub async fn shard_oplogs(&self) -> StoreResult<Vec<ShardOplog>> {
        Ok(self
            .shard_reads()
            .await?
            .into_iter()
            .map(|(shard, window)| ShardOplog {
                window: window.map_err(shard_error_text),
                name: shard.name,
                hosts: shard.hosts,
            })
            .collect())
    }

    /// Each shard and the result of reading its window, the error kept whole: a shard
    /// that refuses (a missing shard-local user or privilege) is not one out of reach.
    pub(super) async fn shard_reads(
        &self,
    ) -> StoreResult<Vec<(ShardEntry, StoreResult<OplogWindow>)>> {
        let shards = self.list_shards().await?;
        let reads = shards.into_iter().map(|shard| async move {
            let window = match self.shard_client(&shard).await {
                Ok(client) => self.oplog_window_on(&client).await,
                Err(e) => Err(e),
            };
            let window = window.map_err(|e| on_shard(&shard.name, e));
            (shard, window)
        });
        Ok(futures_util::future::join_all(reads).await)
    }

    /// A client for `shard`, from the router's options; made again when the shard's
    /// hosts changed (a reconfigured replica set), so no stale client stays behind.
    pub(super) async fn shard_client(&self, shard: &ShardEntry) -> StoreResult<Client> {
        let mut clients = self.shard_clients.by_name.lock().await;
        if let Some((hosts, client)) = clients.get(&shard.name) {
            if *hosts == shard.hosts {
                return Ok(client.clone());
            }
        }
        let options = shard_options(&self.client_options, &shard.hosts)?;
        let client = Client::with_options(options).map_err(|e| {
            StoreError::InvalidArgument(format!(
                "cannot connect to shard {}: {}",
                shard.hosts,
                super::redact_message(&e.to_string())
            ))
        })?;
        clients.insert(shard.name.clone(), (shard.hosts.clone(), client.clone()));
        Ok(client)
    }

    /// The client made for shard `name` by the last listing, if it was listed.
    pub(super) async fn cached_shard_client(&self, name: &str) -> Option<Client> {
        let clients = self.shard_clients.by_name.lock().await;
        clients.get(name).map(|(_, client)| client.clone())
    }

    /// Clients to every shard now listed, for a read that must see each shard's oplog;
    /// clients of shards no longer listed are dropped.
    pub(super) async fn shard_clients(&self) -> StoreResult<Vec<(String, Client)>> {
        let shards = self.list_shards().await?;
        self.shard_clients
            .by_name
            .lock()
            .await
            .retain(|name, _| shards.iter().any(|s| &s.name == name));
        let mut clients = Vec::new();
        for shard in shards {
            let client = self.shard_client(&shard).await?;
            clients.push((shard.name, client));
        }
        Ok(clients)
    }
}

/// What a shard's listing says of a failed read: the reason, not the wrapper.
pub(super) fn shard_error_text(error: StoreError) -> String {
    match error {
        StoreError::OplogUnknown(why) => why,
        other => other.to_string(),
    }
}

/// A failed read on shard `name`: out of reach becomes `OplogUnknown` in a few words
/// (it may come back; the driver's account goes to the log); a refusal keeps its kind
/// and names the shard; anything else is unchanged.
pub(super) fn on_shard(name: &str, error: StoreError) -> StoreError {
    match error {
        StoreError::Unreachable(detail) => {
            tracing::warn!(shard = %name, %detail, "cannot reach a shard");
            StoreError::OplogUnknown(format!(
                "cannot reach shard {name}: {}",
                StoreError::unreachable_reason(&detail)
            ))
        }
        StoreError::NotPermitted {
            action,
            detail,
            hint,
        } => StoreError::NotPermitted {
            action: format!("{action} on shard {name}"),
            detail,
            hint: format!("{hint}, as a shard-local user on that shard"),
        },
        other => other,
    }
}

/// The router's options with the shard's hosts and replica set name: same
/// credentials, TLS, timeouts and retry settings.
pub(super) fn shard_options(router: &ClientOptions, hosts: &str) -> StoreResult<ClientOptions> {
    let (set_name, list) = match hosts.split_once('/') {
        Some((set, list)) => (Some(set.to_string()), list),
        None => (None, hosts),
    };
    let addresses = list
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|host| {
            ServerAddress::parse(host).map_err(|e| StoreError::Malformed {
                what: "listShards reply".into(),
                detail: format!("shard host {host:?} cannot be read: {e}"),
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    if addresses.is_empty() {
        return Err(StoreError::Malformed {
            what: "listShards reply".into(),
            detail: format!("shard host {hosts:?} names no server"),
        });
    }
    let mut options = router.clone();
    options.hosts = addresses;
    options.repl_set_name = set_name;
    options.direct_connection = None;
    options.load_balanced = None;
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard out of reach may come back (the window is unknown for now); one that
    /// refuses does not, and says which shard and what to grant there.
    #[test]
    fn a_shards_refusal_stays_a_refusal_and_its_absence_is_unknown_for_now() {
        let gone = on_shard(
            "s1",
            StoreError::Unreachable("Server selection timeout: Connection refused".into()),
        );
        assert_eq!(
            shard_error_text(gone),
            "cannot reach shard s1: connection refused"
        );
        let refused = on_shard(
            "s1",
            StoreError::NotPermitted {
                action: "read the oplog (local.oplog.rs)".into(),
                detail: "not authorized".into(),
                hint: "the clusterMonitor role".into(),
            },
        );
        assert!(refused.oplog_unreadable());
        assert!(!matches!(refused, StoreError::OplogUnknown(_)));
        let text = refused.to_string();
        assert!(text.contains("on shard s1"), "{text}");
        assert!(text.contains("shard-local user"), "{text}");
    }

    #[tokio::test]
    async fn a_shard_is_reached_with_the_routers_credentials_and_tls() {
        let router = ClientOptions::parse(
            "mongodb://app:s3cret@router.example:27017/?tls=true&authSource=admin&appName=x",
        )
        .await
        .unwrap();
        let shard = shard_options(&router, "shardA/a1.example:27018,a2.example:27018").unwrap();
        assert_eq!(shard.repl_set_name.as_deref(), Some("shardA"));
        assert_eq!(
            shard.hosts,
            vec![
                ServerAddress::parse("a1.example:27018").unwrap(),
                ServerAddress::parse("a2.example:27018").unwrap()
            ]
        );
        assert_eq!(shard.credential, router.credential);
        assert_eq!(
            format!("{:?}", shard.tls),
            format!("{:?}", router.tls),
            "the same TLS settings"
        );
        assert_eq!(shard.app_name.as_deref(), Some("x"));

        let bare = shard_options(&router, "a1.example:27018").unwrap();
        assert_eq!(bare.repl_set_name, None);
        for bad in ["shardA/", "shardA/a1.example:notaport"] {
            let e = shard_options(&router, bad).unwrap_err();
            assert!(matches!(e, StoreError::Malformed { .. }), "{bad}: {e}");
        }
    }
}
