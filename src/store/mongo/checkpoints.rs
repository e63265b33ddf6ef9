//! Checkpoints on MongoDB: `<db>.checkpoints`, one document per checkpoint,
//! `{resource, at, resumeToken, tokenTime?, version, listenerId}`, indexed as listed
//! (resource, then newest first by version and time); the oldest beyond the number kept
//! are deleted when one is recorded.

use std::future::IntoFuture;

use bson::{doc, oid::ObjectId, Bson, Document};
use futures_util::TryStreamExt;

use super::codec::{
    date, integer, malformed, opt_date, opt_document, opt_string, read_each, required_date,
};
use super::errors::{bounded, with_one_retry};
use super::MongoStore;
use crate::model::{Checkpoint, ResumeToken};
use crate::store::{CheckpointStore, Listing, StoreError, StoreResult, Tenure};

const WHAT: &str = "checkpoint";

/// Newest first: by fencing version, which only grows per lease (a late checkpoint of
/// an ex-holder sorts below its successor's, whatever the clocks say), then by time;
/// exactly the index's keys (Azure Cosmos DB sorts only on an index that matches).
fn newest_first() -> Document {
    doc! { "version": -1, "at": -1 }
}

impl MongoStore {
    /// `{resource: 1, version: -1, at: -1}`, what the listing sorts by, asked for once
    /// per store within the operation timeout: a refusal or no reply is logged and the
    /// checkpoints go on unindexed.
    async fn ensure_checkpoint_index(&self) {
        self.checkpoint_index
            .get_or_init(|| async {
                let index = mongodb::IndexModel::builder()
                    .keys(doc! { "resource": 1, "version": -1, "at": -1 })
                    .build();
                let checkpoints = self.collection(&self.settings.checkpoints());
                let action = "index the checkpoints by resource";
                let made = bounded(
                    self.timeout(),
                    action,
                    checkpoints.create_index(index).into_future(),
                )
                .await;
                if let Err(error) = made {
                    tracing::warn!(
                        error = %error.into_store(action),
                        "the checkpoints stay unindexed; reads scan the collection"
                    );
                }
            })
            .await;
    }

    /// Deletes the checkpoints of `resource` beyond the newest `kept`.
    async fn trim_checkpoints(&self, resource: &str, kept: u32) -> StoreResult<()> {
        let action = format!("trim the checkpoints of lease {resource}");
        let checkpoints = self.collection(&self.settings.checkpoints());
        let filter = doc! { "resource": resource };
        let older: Vec<Document> = with_one_retry(self.timeout(), &action, || async {
            checkpoints
                .find(filter.clone())
                .sort(newest_first())
                .skip(u64::from(kept.max(1)))
                .limit(1_000)
                .projection(doc! { "_id": 1 })
                .await?
                .try_collect()
                .await
        })
        .await
        .map_err(|e| e.into_store(&action))?;
        let ids: Vec<Bson> = older.iter().filter_map(|d| d.get("_id").cloned()).collect();
        if !ids.is_empty() {
            with_one_retry(self.timeout(), &action, || {
                checkpoints
                    .delete_many(doc! { "_id": { "$in": ids.clone() } })
                    .into_future()
            })
            .await
            .map_err(|e| e.into_store(&action))?;
        }
        Ok(())
    }
}

impl CheckpointStore for MongoStore {
    /// An upsert of a new `_id` (`at` set by the server's clock, `$currentDate`),
    /// majority, retried once: the same `_id` makes a retry harmless. Then the ones
    /// beyond `kept` are deleted; a failed trim is logged, the checkpoint stands.
    async fn record_checkpoint(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        kept: u32,
    ) -> StoreResult<()> {
        self.ensure_checkpoint_index().await;
        let action = format!("record a checkpoint of lease {}", tenure.resource);
        let checkpoints = self.collection(&self.settings.checkpoints());
        let id = ObjectId::new();
        let mut fields = doc! {
            "resource": &tenure.resource,
            "resumeToken": token.as_document().clone(),
            "version": tenure.version,
            "listenerId": &tenure.listener,
        };
        if let Some(at) = token.recorded_time() {
            fields.insert("tokenTime", date(at));
        }
        let update = doc! { "$set": fields, "$currentDate": { "at": true } };
        with_one_retry(self.write_timeout(), &action, || {
            checkpoints
                .update_one(doc! { "_id": id }, update.clone())
                .upsert(true)
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| e.into_store(&action))?;
        if let Err(error) = self.trim_checkpoints(&tenure.resource, kept).await {
            tracing::warn!(%error, "older checkpoints stay until the next one is recorded");
        }
        Ok(())
    }

    async fn checkpoints(&self, resource: &str, limit: u32) -> StoreResult<Listing<Checkpoint>> {
        let action = format!("read the checkpoints of lease {resource}");
        let checkpoints = self.collection(&self.settings.checkpoints());
        let documents: Vec<Document> = with_one_retry(self.timeout(), &action, || async {
            checkpoints
                .find(doc! { "resource": resource })
                .sort(newest_first())
                .limit(i64::from(limit))
                .await?
                .try_collect()
                .await
        })
        .await
        .map_err(|e| e.into_store(&action))?;
        Ok(read_each(&documents, checkpoint_from_document))
    }
}

pub(super) fn checkpoint_from_document(document: &Document) -> Result<Checkpoint, StoreError> {
    let required = |field: &str| malformed(WHAT, field, "missing");
    let token =
        opt_document(WHAT, document, "resumeToken")?.ok_or_else(|| required("resumeToken"))?;
    let version = document
        .get("version")
        .ok_or_else(|| required("version"))
        .and_then(|v| integer(WHAT, v, "version"))?;
    let id = match document.get("_id") {
        Some(Bson::ObjectId(id)) => id.to_hex(),
        Some(other) => {
            return Err(malformed(
                WHAT,
                "_id",
                format!("expected an ObjectId, found {other}"),
            ))
        }
        None => return Err(required("_id")),
    };
    Ok(Checkpoint {
        id,
        resource: opt_string(WHAT, document, "resource")?.ok_or_else(|| required("resource"))?,
        at: required_date(WHAT, document, "at")?,
        token: ResumeToken::from_document(token.clone()).with_recorded_time(opt_date(
            WHAT,
            document,
            "tokenTime",
        )?),
        version,
        holder: opt_string(WHAT, document, "listenerId")?.ok_or_else(|| required("listenerId"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_checkpoint_reads_back_and_a_malformed_one_names_its_field() {
        let at = Utc.with_ymd_and_hms(2026, 11, 24, 3, 0, 0).unwrap();
        let document = doc! {
            "_id": ObjectId::new(), "resource": "shop.orders", "at": date(at),
            "resumeToken": { "_data": "826B04ED14000000462B042C0100" },
            "version": 7_i64, "listenerId": "app-1/42",
        };
        let checkpoint = checkpoint_from_document(&document).unwrap();
        assert_eq!(checkpoint.resource, "shop.orders");
        assert_eq!(checkpoint.at, at);
        assert_eq!(checkpoint.version, 7);
        assert_eq!(checkpoint.holder, "app-1/42");
        assert!(checkpoint.token.time().is_some());

        for (field, bad) in [
            ("resumeToken", Bson::String("x".into())),
            ("at", Bson::String("noon".into())),
            ("version", Bson::String("seven".into())),
        ] {
            let mut wrong = document.clone();
            wrong.insert(field, bad);
            let error = checkpoint_from_document(&wrong).unwrap_err().to_string();
            assert!(error.contains(field), "{field}: {error}");
        }
        let mut missing = document.clone();
        missing.remove("listenerId");
        let error = checkpoint_from_document(&missing).unwrap_err().to_string();
        assert!(error.contains("listenerId"), "{error}");
    }
}
