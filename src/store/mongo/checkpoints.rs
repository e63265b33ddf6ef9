//! Checkpoints on MongoDB: `<db>.checkpoints`, one document per checkpoint,
//! `{resource, at, resumeToken, tokenTime?, version, listenerId}`, indexed by resource
//! and time; the oldest beyond the number kept are deleted when one is recorded.

use std::future::IntoFuture;

use bson::{doc, oid::ObjectId, Bson, Document};
use futures_util::TryStreamExt;

use super::codec::{
    date, integer, malformed, opt_date, opt_document, opt_string, read_each, required_date,
};
use super::errors::with_one_retry;
use super::MongoStore;
use crate::model::{Checkpoint, ResumeToken};
use crate::store::{CheckpointStore, Listing, StoreError, StoreResult, Tenure};

const WHAT: &str = "checkpoint";

impl MongoStore {
    /// `{resource: 1, at: -1}`, asked for once per store: a missing privilege or any
    /// other refusal is logged and the checkpoints go on unindexed.
    async fn ensure_checkpoint_index(&self) {
        self.checkpoint_index
            .get_or_init(|| async {
                let index = mongodb::IndexModel::builder()
                    .keys(doc! { "resource": 1, "at": -1 })
                    .build();
                let made = self
                    .collection(&self.settings.checkpoints())
                    .create_index(index)
                    .await;
                if let Err(error) = made {
                    tracing::warn!(
                        error = %super::redact_message(&error.to_string()),
                        "cannot index the checkpoints by resource; they stay readable, reads \
                         scan the collection"
                    );
                }
            })
            .await;
    }
}

impl CheckpointStore for MongoStore {
    /// One upsert of a new `_id` with `at: $$NOW` (the server's clock; retried once, the
    /// same `_id` makes a retry harmless), then the ones beyond `kept` are deleted.
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
            "at": "$$NOW",
            "resumeToken": token.as_document().clone(),
            "version": tenure.version,
            "listenerId": &tenure.listener,
        };
        if let Some(at) = token.recorded_time() {
            fields.insert("tokenTime", date(at));
        }
        let update = vec![doc! { "$set": fields }];
        with_one_retry(self.timeout(), &action, || {
            checkpoints
                .update_one(doc! { "_id": id }, update.clone())
                .upsert(true)
                .into_future()
        })
        .await
        .map_err(|e| e.into_store(&action))?;

        // The newest `kept` stay; what is older goes (a few at a time: one per interval
        // is recorded).
        let action = format!("trim the checkpoints of lease {}", tenure.resource);
        let filter = doc! { "resource": &tenure.resource };
        let older: Vec<Document> = with_one_retry(self.timeout(), &action, || async {
            checkpoints
                .find(filter.clone())
                .sort(doc! { "at": -1, "_id": -1 })
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

    async fn checkpoints(&self, resource: &str, limit: u32) -> StoreResult<Listing<Checkpoint>> {
        let action = format!("read the checkpoints of lease {resource}");
        let checkpoints = self.collection(&self.settings.checkpoints());
        let documents: Vec<Document> = with_one_retry(self.timeout(), &action, || async {
            checkpoints
                .find(doc! { "resource": resource })
                .sort(doc! { "at": -1, "_id": -1 })
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
    Ok(Checkpoint {
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
        assert!(checkpoint.token_time().is_some());

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
