//! A sharded cluster's oplogs: `local` cannot be read through mongos, so each shard
//! named by `listShards` is read on a connection of its own, made from the options the
//! router was reached with (credentials, TLS, timeouts) and the shard's hosts.

use std::collections::HashMap;

use bson::{doc, Bson};
use mongodb::options::{ClientOptions, ServerAddress};
use mongodb::Client;

use super::errors::with_one_retry;
use super::MongoStore;
use crate::model::ShardOplog;
use crate::store::{StoreError, StoreResult};

const LIST_SHARDS_HINT: &str = "the clusterMonitor role, which grants listShards";

/// Clients to each shard, made on first use and kept for the store's life.
#[derive(Debug, Default)]
pub(super) struct ShardClients {
    by_hosts: tokio::sync::Mutex<HashMap<String, Client>>,
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
        let shards = self.list_shards().await?;
        let reads = shards.into_iter().map(|shard| async move {
            let window = match self.shard_client(&shard.hosts).await {
                Ok(client) => self.oplog_window_on(&client).await,
                Err(e) => Err(e),
            };
            ShardOplog {
                window: window.map_err(|e| match e {
                    StoreError::Unreachable(detail) => {
                        tracing::warn!(shard = %shard.name, %detail, "cannot reach a shard");
                        format!(
                            "cannot reach the shard: {}",
                            StoreError::unreachable_reason(&detail)
                        )
                    }
                    other => other.to_string(),
                }),
                name: shard.name,
                hosts: shard.hosts,
            }
        });
        Ok(futures_util::future::join_all(reads).await)
    }

    /// A client for the shard at `hosts`, from the router's options.
    pub(super) async fn shard_client(&self, hosts: &str) -> StoreResult<Client> {
        let mut clients = self.shard_clients.by_hosts.lock().await;
        if let Some(client) = clients.get(hosts) {
            return Ok(client.clone());
        }
        let options = shard_options(&self.client_options, hosts)?;
        let client = Client::with_options(options).map_err(|e| {
            StoreError::InvalidArgument(format!(
                "cannot connect to shard {hosts}: {}",
                super::redact_message(&e.to_string())
            ))
        })?;
        clients.insert(hosts.to_string(), client.clone());
        Ok(client)
    }

    /// Clients to every shard, for a read that must see each shard's oplog.
    pub(super) async fn shard_clients(&self) -> StoreResult<Vec<(String, Client)>> {
        let mut clients = Vec::new();
        for shard in self.list_shards().await? {
            let client = self.shard_client(&shard.hosts).await?;
            clients.push((shard.name, client));
        }
        Ok(clients)
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
