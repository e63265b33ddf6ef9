//! The oplog's own figures for the time-to-loss prediction ([`crate::model::LossInputs`]):
//! size, maximum, entries and bytes written (`$collStats` on `local.oplog.rs`), the
//! checkpoint interval (`getParameter syncdelay`) and the minimum retention period
//! (`serverStatus`), and the bytes of history before a resume point.
//!
//! Privileges, checked on a real 6.0.5 with authentication: `clusterMonitor` may do all
//! of it (the `collStats` command, the `$collStats` stage, an aggregation on the oplog,
//! `getParameter`); `readAnyDatabase` none of it (code 13: it does not cover `local`).
//! `$collStats` is used rather than the `collStats` command, which 6.2 deprecates.

use bson::{doc, Bson, Document};
use mongodb::Client;

use super::codec::integer;
use super::errors::{with_one_retry, NAMESPACE_NOT_FOUND};
use super::shards::on_shard;
use super::MongoStore;
use crate::model::{ClusterTime, HistoryBefore, OplogStats};
use crate::store::{OplogPart, StoreError, StoreResult};

const STATS_HINT: &str =
    "the clusterMonitor role (collStats and read on local.oplog.rs; readAnyDatabase does not cover local)";
/// WiredTiger's key of an oplog entry: its timestamp as a 64-bit record id, packed in 9
/// bytes for any value of 2^56 or more (every timestamp after mid-1970). Its cursor
/// statistics count keys and values together; the values are the entries' BSON, what
/// the oplog's size counts (seen on a real 6.0.5: size = key-and-value bytes − 9 × inserts
/// on a fresh server).
const KEY_BYTES: u64 = 9;

/// The widest span searched back from a resume point for its entry (a day): an oplog
/// with nothing but no-ops that long before the point has nothing to resume from there.
const MAX_ENTRY_SEARCH_SPAN: u32 = 100_000;

impl MongoStore {
    /// Size, maximum, entry count and bytes written of the oplog, with the checkpoint
    /// interval and minimum retention period when the server says them (`None` when it
    /// does not, or this user may not ask). Errors: `NotPermitted` naming clusterMonitor;
    /// `OplogUnknown` through mongos (each shard has its own oplog) or on a server
    /// without one.
    pub async fn oplog_stats(&self) -> StoreResult<OplogStats> {
        self.oplog_kept()?;
        if self.router {
            return Err(StoreError::OplogUnknown(
                "through mongos each shard has its own oplog: read its statistics on the shard"
                    .into(),
            ));
        }
        self.oplog_stats_on(&self.client).await
    }

    pub(super) async fn oplog_stats_on(&self, client: &Client) -> StoreResult<OplogStats> {
        let action = "read the oplog's statistics ($collStats on local.oplog.rs)";
        let pipeline = vec![doc! { "$collStats": { "storageStats": {} } }];
        let replies = self
            .aggregate_oplog(client, pipeline, action)
            .await
            .map_err(|e| match e.into_store_hinted(action, STATS_HINT) {
                StoreError::Command {
                    code: NAMESPACE_NOT_FOUND,
                    ..
                } => StoreError::OplogUnknown(
                    "the server has no local.oplog.rs: it is not a replica set member".into(),
                ),
                other => other,
            })?;
        let reply = replies.first().ok_or_else(|| StoreError::Malformed {
            what: "$collStats reply".into(),
            detail: "no document".into(),
        })?;
        let mut stats = stats_from_reply(reply)?;
        stats.checkpoint_interval = self.checkpoint_interval(client).await;
        stats.min_retention = self.min_retention(client).await;
        Ok(stats)
    }

    /// `getParameter syncdelay`: how often the server takes a checkpoint.
    async fn checkpoint_interval(&self, client: &Client) -> Option<std::time::Duration> {
        let action = "read the checkpoint interval (getParameter syncdelay)";
        let admin = client.database("admin");
        let command = doc! { "getParameter": 1, "syncdelay": 1 };
        let reply = with_one_retry(self.timeout(), action, || {
            std::future::IntoFuture::into_future(admin.run_command(command.clone()))
        })
        .await;
        match reply {
            Ok(reply) => checkpoint_interval_from_reply(&reply),
            Err(e) => {
                tracing::debug!(error = %e.into_store(action), "checkpoint interval unknown");
                None
            }
        }
    }

    /// `serverStatus` (its `oplogTruncation` section): the minimum retention period.
    async fn min_retention(&self, client: &Client) -> Option<std::time::Duration> {
        let action = "read the oplog's minimum retention (serverStatus)";
        let admin = client.database("admin");
        // Only the one section is wanted: leave out the large ones.
        let command = doc! {
            "serverStatus": 1, "oplogTruncation": 1, "wiredTiger": 0, "metrics": 0, "locks": 0,
            "tcmalloc": 0, "repl": 0, "opcounters": 0, "network": 0, "connections": 0,
        };
        let reply = with_one_retry(self.timeout(), action, || {
            std::future::IntoFuture::into_future(admin.run_command(command.clone()))
        })
        .await;
        match reply {
            Ok(reply) => min_retention_from_reply(&reply),
            Err(e) => {
                tracing::debug!(error = %e.into_store(action), "minimum retention unknown");
                None
            }
        }
    }

    /// The bytes of retained history before the resume point `at`: the entries older
    /// than its entry (the last non-no-op entry at or before it), counting at most
    /// `limit` entries from the oldest (then a lower bound, `complete: false`). Two
    /// aggregations on a `ts` range of `local.oplog.rs`, bounded by `maxTimeMS`; only
    /// sums cross the network. Read the oplog's statistics *before* this: history the
    /// server drops in between then makes the prediction err early, not late.
    pub async fn oplog_history_before(
        &self,
        at: ClusterTime,
        limit: u32,
    ) -> StoreResult<HistoryBefore> {
        self.oplog_kept()?;
        if self.router {
            return Err(StoreError::OplogUnknown(
                "through mongos each shard has its own oplog: count its history on the shard"
                    .into(),
            ));
        }
        self.oplog_history_before_on(&self.client, at, limit).await
    }

    pub(super) async fn oplog_history_before_on(
        &self,
        client: &Client,
        at: ClusterTime,
        limit: u32,
    ) -> StoreResult<HistoryBefore> {
        let limit = i64::from(limit.max(1));
        let bytes = doc! { "$sum": { "$bsonSize": "$$ROOT" } };
        let counted = self
            .sum_oplog(
                client,
                vec![
                    doc! { "$match": { "ts": { "$lte": bson::Timestamp::from(at) } } },
                    doc! { "$limit": limit },
                    doc! { "$group": {
                        "_id": null,
                        "bytes": bytes.clone(),
                        "n": { "$sum": 1 },
                        "entry": { "$max": { "$cond": [{ "$ne": ["$op", "n"] }, "$ts", null] } },
                        "last": { "$max": "$ts" },
                    } },
                ],
            )
            .await?;
        let Some(counted) = counted else {
            // Nothing at or before it.
            return Ok(HistoryBefore {
                older_bytes: 0,
                entry: None,
                complete: true,
            });
        };
        let total = unsigned(&counted, "bytes")?;
        let complete = unsigned(&counted, "n")? < limit as u64;
        let (Some(Bson::Timestamp(entry)), Some(Bson::Timestamp(last))) =
            (counted.get("entry"), counted.get("last"))
        else {
            // Only no-ops: nothing to resume from there.
            return Ok(HistoryBefore {
                older_bytes: 0,
                entry: None,
                complete,
            });
        };
        // What is at or after its entry among those counted.
        let tail = self
            .sum_oplog(
                client,
                vec![
                    doc! { "$match": { "ts": { "$gte": *entry, "$lte": *last } } },
                    doc! { "$group": { "_id": null, "bytes": bytes, "first": { "$min": "$ts" } } },
                ],
            )
            .await?;
        match tail {
            Some(tail) if tail.get("first") == Some(&Bson::Timestamp(*entry)) => {
                Ok(HistoryBefore {
                    older_bytes: total.saturating_sub(unsigned(&tail, "bytes")?),
                    entry: Some(ClusterTime::from(*entry)),
                    complete,
                })
            }
            // Its entry went between the two reads: nothing of it is left.
            _ => Ok(HistoryBefore {
                older_bytes: 0,
                entry: None,
                complete: true,
            }),
        }
    }

    /// The bytes before the resume point `at` counted from the newest end: the entries
    /// after it (at most `limit`), and back from it to its entry (the last non-no-op at
    /// or before it), taken off `size_before`, the oplog's size read before this. For a
    /// point near the present (most leases) that is a short count where counting from
    /// the oldest entry would read the whole oplog. Writes made meanwhile are counted
    /// after the point but not in `size_before`, so the figure errs early (fewer bytes
    /// before it). `None` when more than `limit` entries follow the point.
    async fn oplog_history_from_the_end_on(
        &self,
        client: &Client,
        at: ClusterTime,
        size_before: u64,
        limit: u32,
    ) -> StoreResult<Option<HistoryBefore>> {
        let limit = i64::from(limit.max(1));
        let bytes = doc! { "$sum": { "$bsonSize": "$$ROOT" } };
        let at_ts = bson::Timestamp::from(at);
        let after = self
            .sum_oplog(
                client,
                vec![
                    doc! { "$match": { "ts": { "$gt": at_ts } } },
                    doc! { "$limit": limit },
                    doc! { "$group": { "_id": null, "bytes": bytes.clone(), "n": { "$sum": 1 } } },
                ],
            )
            .await?;
        let (after_bytes, counted) = match &after {
            Some(after) => (unsigned(after, "bytes")?, unsigned(after, "n")?),
            None => (0, 0),
        };
        if counted >= limit as u64 {
            return Ok(None);
        }
        // Back from the point to its entry: only no-ops lie between, so a short span
        // finds it on any oplog written to; widened (×10) where writes are rare.
        let mut span: u32 = 10;
        loop {
            let from = bson::Timestamp {
                time: at.secs.saturating_sub(span),
                increment: 0,
            };
            let found = self
                .sum_oplog(
                    client,
                    vec![
                        doc! { "$match": { "ts": { "$gte": from, "$lte": at_ts } } },
                        doc! { "$group": {
                            "_id": null,
                            "entry": { "$max": { "$cond": [{ "$ne": ["$op", "n"] }, "$ts", null] } },
                        } },
                    ],
                )
                .await?;
            if let Some(Bson::Timestamp(entry)) = found.as_ref().and_then(|f| f.get("entry")) {
                let between = self
                    .sum_oplog(
                        client,
                        vec![
                            doc! { "$match": { "ts": { "$gte": *entry, "$lte": at_ts } } },
                            doc! { "$group": { "_id": null, "bytes": bytes.clone() } },
                        ],
                    )
                    .await?
                    .map(|b| unsigned(&b, "bytes"))
                    .transpose()?
                    .unwrap_or(0);
                return Ok(Some(HistoryBefore {
                    older_bytes: size_before.saturating_sub(after_bytes + between),
                    entry: Some(ClusterTime::from(*entry)),
                    complete: true,
                }));
            }
            if from.time == 0 || span >= MAX_ENTRY_SEARCH_SPAN {
                // Nothing to resume from at or before it in the oplog.
                return Ok(Some(HistoryBefore {
                    older_bytes: 0,
                    entry: None,
                    complete: true,
                }));
            }
            span = span.saturating_mul(10);
        }
    }

    /// The bytes before `at` for the time to loss: counted from the newest end first
    /// (short for a point near the present), else from the oldest entry
    /// ([`MongoStore::oplog_history_before_on`]), each counting at most `limit` entries.
    pub(super) async fn oplog_history_for_loss_on(
        &self,
        client: &Client,
        at: ClusterTime,
        size_before: u64,
        limit: u32,
    ) -> StoreResult<HistoryBefore> {
        match self
            .oplog_history_from_the_end_on(client, at, size_before, limit)
            .await?
        {
            Some(history) => Ok(history),
            None => self.oplog_history_before_on(client, at, limit).await,
        }
    }

    /// One aggregation on `local.oplog.rs` ending in a `$group`: its document, if any.
    async fn sum_oplog(
        &self,
        client: &Client,
        pipeline: Vec<Document>,
    ) -> StoreResult<Option<Document>> {
        let action = "sum the oplog's history (local.oplog.rs)";
        let replies = self
            .aggregate_oplog(client, pipeline, action)
            .await
            .map_err(|e| e.into_store_hinted(action, STATS_HINT))?;
        Ok(replies.into_iter().next())
    }
}

impl crate::store::OplogFigures for MongoStore {
    /// A replica set's oplog; through a mongos every shard's, read concurrently on the
    /// shards' own clients.
    async fn oplog_parts(&self) -> StoreResult<Vec<OplogPart>> {
        self.oplog_kept()?;
        if !self.router {
            let stats = self.oplog_stats_on(&self.client).await?;
            let window = self.oplog_window_on(&self.client).await?;
            return Ok(vec![OplogPart {
                shard: None,
                window,
                stats,
            }]);
        }
        let reads = self
            .shard_clients()
            .await?
            .into_iter()
            .map(|(name, client)| async move {
                let read = async {
                    let stats = self.oplog_stats_on(&client).await?;
                    let window = self.oplog_window_on(&client).await?;
                    Ok::<_, StoreError>((stats, window))
                };
                match read.await {
                    Ok((stats, window)) => Ok(OplogPart {
                        shard: Some(name),
                        window,
                        stats,
                    }),
                    Err(e) => Err(on_shard(&name, e)),
                }
            });
        futures_util::future::join_all(reads)
            .await
            .into_iter()
            .collect()
    }

    async fn oplog_history_before(
        &self,
        shard: Option<&str>,
        at: ClusterTime,
        size_before: u64,
        limit: u32,
    ) -> StoreResult<HistoryBefore> {
        self.oplog_kept()?;
        match shard {
            None if self.router => Err(StoreError::OplogUnknown(
                "through mongos each shard has its own oplog: count its history on the shard"
                    .into(),
            )),
            None => {
                self.oplog_history_for_loss_on(&self.client, at, size_before, limit)
                    .await
            }
            Some(name) => {
                let client = self.cached_shard_client(name).await.ok_or_else(|| {
                    StoreError::OplogUnknown(format!("shard {name} is no longer listed"))
                })?;
                self.oplog_history_for_loss_on(&client, at, size_before, limit)
                    .await
                    .map_err(|e| on_shard(name, e))
            }
        }
    }

    async fn changes_after(
        &self,
        target: &crate::model::WatchedCollection,
        after: ClusterTime,
        limit: u32,
    ) -> StoreResult<u64> {
        let (mut count, shown) = super::feed::changes_on(target);
        count
            .filter
            .insert("ts", doc! { "$gt": bson::Timestamp::from(after) });
        self.count_oplog(
            count,
            u64::from(limit),
            &format!("count the changes left on {shown} in the oplog"),
        )
        .await
    }
}

fn unsigned(document: &Document, field: &str) -> StoreResult<u64> {
    let value = document.get(field).ok_or_else(|| StoreError::Malformed {
        what: "oplog statistics".into(),
        detail: format!("field {field}: missing"),
    })?;
    Ok(u64::try_from(integer("oplog statistics", value, field)?).unwrap_or(0))
}

/// Size, maximum, count and bytes written from a `$collStats` reply's `storageStats`.
fn stats_from_reply(reply: &Document) -> StoreResult<OplogStats> {
    let malformed = |detail: String| StoreError::Malformed {
        what: "$collStats reply".into(),
        detail,
    };
    let storage = reply
        .get_document("storageStats")
        .map_err(|e| malformed(format!("field storageStats: {e}")))?;
    if !storage.get_bool("capped").unwrap_or(false) || storage.get("maxSize").is_none() {
        return Err(malformed(
            "local.oplog.rs is not capped by size (no maxSize)".into(),
        ));
    }
    let cursor = storage
        .get_document("wiredTiger")
        .and_then(|wt| wt.get_document("cursor"))
        .ok();
    let written = cursor.and_then(|cursor| {
        let field = |name: &str| {
            cursor
                .get(name)
                .and_then(|v| integer("WiredTiger statistics", v, name).ok())
                .and_then(|v| u64::try_from(v).ok())
        };
        let bytes = field("insert key and value bytes")?;
        let inserts = field("insert calls")?;
        Some(bytes.saturating_sub(inserts.saturating_mul(KEY_BYTES)))
    });
    Ok(OplogStats {
        size_bytes: unsigned(storage, "size")?,
        max_bytes: unsigned(storage, "maxSize")?,
        entries: unsigned(storage, "count")?,
        written_bytes: written,
        checkpoint_interval: None,
        min_retention: None,
        largest_entry_bytes: None,
        truncation_bytes: None,
    })
}

/// `syncdelay` in seconds; zero (checkpoints off) or anything odd says nothing.
fn checkpoint_interval_from_reply(reply: &Document) -> Option<std::time::Duration> {
    let secs = match reply.get("syncdelay")? {
        Bson::Double(s) => *s,
        Bson::Int32(s) => f64::from(*s),
        Bson::Int64(s) => *s as f64,
        _ => return None,
    };
    (secs.is_finite() && secs > 0.0)
        .then(|| std::time::Duration::try_from_secs_f64(secs).ok())
        .flatten()
}

/// `oplogTruncation.oplogMinRetentionHours`; the section without the field means none
/// is configured (the server lists it only when set); no section: unknown.
fn min_retention_from_reply(reply: &Document) -> Option<std::time::Duration> {
    let section = reply.get_document("oplogTruncation").ok()?;
    let hours = match section.get("oplogMinRetentionHours") {
        None => 0.0,
        Some(Bson::Double(h)) => *h,
        Some(Bson::Int32(h)) => f64::from(*h),
        Some(Bson::Int64(h)) => *h as f64,
        Some(_) => return None,
    };
    if !hours.is_finite() || hours < 0.0 {
        return None;
    }
    std::time::Duration::try_from_secs_f64(hours * 3600.0).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As a real 6.0.5 answered for a 1 MiB oplog (trimmed).
    fn coll_stats(cursor: Document) -> Document {
        doc! {
            "ns": "local.oplog.rs",
            "storageStats": {
                "size": 4078, "count": 20, "avgObjSize": 203, "storageSize": 36864,
                "capped": true, "max": 0, "maxSize": 1048576,
                "wiredTiger": { "cursor": cursor },
            },
        }
    }

    #[test]
    fn stats_come_from_collstats_with_the_keys_taken_off_the_bytes_written() {
        let reply = coll_stats(doc! {
            "insert calls": 20_i64, "insert key and value bytes": 4258_i64, "remove calls": 0_i64,
        });
        let stats = stats_from_reply(&reply).unwrap();
        assert_eq!(stats.size_bytes, 4078);
        assert_eq!(stats.max_bytes, 1_048_576);
        assert_eq!(stats.entries, 20);
        assert_eq!(
            stats.written_bytes,
            Some(4078),
            "nothing truncated yet: all of it"
        );

        let without = coll_stats(doc! { "insert calls": 20_i64 });
        assert_eq!(stats_from_reply(&without).unwrap().written_bytes, None);
    }

    #[test]
    fn an_oplog_without_a_maximum_is_malformed() {
        let mut reply = coll_stats(doc! {});
        let storage = reply.get_document_mut("storageStats").unwrap();
        storage.remove("maxSize");
        let e = stats_from_reply(&reply).unwrap_err();
        assert!(e.to_string().contains("no maxSize"), "{e}");
        let e = stats_from_reply(&doc! { "ns": "local.oplog.rs" }).unwrap_err();
        assert!(matches!(e, StoreError::Malformed { .. }), "{e}");
    }

    #[test]
    fn checkpoint_interval_and_minimum_retention() {
        let secs = std::time::Duration::from_secs;
        assert_eq!(
            checkpoint_interval_from_reply(&doc! { "syncdelay": 60.0, "ok": 1.0 }),
            Some(secs(60))
        );
        assert_eq!(
            checkpoint_interval_from_reply(&doc! { "syncdelay": 0.0 }),
            None
        );
        assert_eq!(checkpoint_interval_from_reply(&doc! { "ok": 1.0 }), None);

        let status = |section: Document| doc! { "oplogTruncation": section };
        assert_eq!(
            min_retention_from_reply(&status(doc! { "truncateCount": 31_i64 })),
            Some(secs(0)),
            "listed only when set"
        );
        assert_eq!(
            min_retention_from_reply(&status(doc! { "oplogMinRetentionHours": 1.5 })),
            Some(secs(5400))
        );
        assert_eq!(min_retention_from_reply(&doc! { "ok": 1.0 }), None);
        assert_eq!(
            min_retention_from_reply(&status(doc! { "oplogMinRetentionHours": -1.0 })),
            None
        );
    }
}
