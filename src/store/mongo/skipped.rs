//! The changes operators stepped over, in the `skipped` collection beside the audit
//! log, one document per change (`_id`: the skip's audit record id and the change's
//! token: `skip --whole-transaction` keeps several under one audit record), and the
//! oplog read that keeps the change itself.

use std::future::IntoFuture;

use bson::{doc, Bson, Document};
use futures_util::TryStreamExt;

use super::codec::{date, failure_from_document, failure_to_document, malformed, opt_date};
use super::errors::with_one_retry;
use super::MongoStore;
use crate::model::{ClusterTime, ResumeToken};
use crate::store::{SkippedChange, StoreResult};

impl MongoStore {
    fn skipped(&self) -> mongodb::Collection<Document> {
        self.client
            .database(&self.settings.leases.db)
            .collection("skipped")
    }

    /// [`crate::store::OperatorStore::oplog_entry`]: a `find` on `local.oplog.rs` by
    /// `ts` (on each shard through a router, the first that has it).
    pub(super) async fn read_oplog_entry(&self, at: ClusterTime) -> StoreResult<Option<Document>> {
        self.oplog_kept()?;
        let action = format!("read the oplog entry at {at} (local.oplog.rs)");
        let pipeline = vec![
            doc! { "$match": { "ts": bson::Timestamp::from(at) } },
            doc! { "$limit": 1 },
        ];
        let clients = match self.router {
            false => vec![(String::new(), self.client.clone())],
            true => self.shard_clients().await?,
        };
        for (shard, client) in clients {
            let found = self
                .aggregate_oplog(&client, pipeline.clone(), &action)
                .await
                .map_err(|e| e.into_store_hinted(&action, super::feed::OPLOG_HINT));
            let found = match (found, shard.is_empty()) {
                (Ok(found), _) => found,
                (Err(e), true) => return Err(e),
                (Err(e), false) => return Err(super::shards::on_shard(&shard, e)),
            };
            if let Some(entry) = found.into_iter().next() {
                return Ok(Some(entry));
            }
        }
        Ok(None)
    }

    pub(super) async fn write_skipped(&self, skipped: &SkippedChange) -> StoreResult<()> {
        let action = format!("keep the change skipped on {}", skipped.resource);
        let collection = self.skipped();
        let document = skipped_to_document(skipped);
        let filter = doc! { "_id": skipped_id(skipped) };
        with_one_retry(self.write_timeout(), &action, || {
            collection
                .replace_one(filter.clone(), document.clone())
                .upsert(true)
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, &self.operator_hint()))?;
        Ok(())
    }

    pub(super) async fn read_skipped(
        &self,
        resource: &str,
        limit: usize,
    ) -> StoreResult<Vec<SkippedChange>> {
        let action = format!("read the changes skipped on {resource}");
        let collection = self.skipped();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let found: Vec<Document> = with_one_retry(self.timeout(), &action, || async {
            collection
                .find(doc! { "resource": resource })
                .sort(doc! { "at": -1, "_id.token": -1 })
                .limit(limit)
                .await?
                .try_collect()
                .await
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, &self.operator_hint()))?;
        found.iter().map(skipped_from_document).collect()
    }
}

/// `{auditId, token}`: one document per change an action stepped over.
fn skipped_id(skipped: &SkippedChange) -> Document {
    doc! {
        "auditId": &skipped.audit_id,
        "token": skipped.token.as_document().clone(),
    }
}

fn skipped_to_document(skipped: &SkippedChange) -> Document {
    let opt = |value: Option<Bson>| value.unwrap_or(Bson::Null);
    doc! {
        "_id": skipped_id(skipped),
        "resource": &skipped.resource,
        "operator": &skipped.operator,
        "at": date(skipped.at),
        "token": skipped.token.as_document().clone(),
        "failure": opt(skipped.failure.as_ref().map(|f| Bson::Document(failure_to_document(f)))),
        "entry": opt(skipped.entry.clone().map(Bson::Document)),
        "entryMissing": opt(skipped.entry_missing.clone().map(Bson::String)),
    }
}

fn skipped_from_document(document: &Document) -> StoreResult<SkippedChange> {
    const WHAT: &str = "skipped change";
    let text = |field: &str| -> StoreResult<String> {
        match document.get(field) {
            Some(Bson::String(s)) => Ok(s.clone()),
            _ => Err(malformed(WHAT, field, "expected a string")),
        }
    };
    let optional_document = |field: &str| -> StoreResult<Option<&Document>> {
        match document.get(field) {
            None | Some(Bson::Null) => Ok(None),
            Some(Bson::Document(d)) => Ok(Some(d)),
            Some(_) => Err(malformed(WHAT, field, "expected a document")),
        }
    };
    let audit_id = match document.get("_id") {
        Some(Bson::Document(id)) => match id.get("auditId") {
            Some(Bson::String(s)) => s.clone(),
            _ => return Err(malformed(WHAT, "_id.auditId", "expected a string")),
        },
        // Written before a skip could keep several changes: the audit id alone.
        _ => text("_id")?,
    };
    Ok(SkippedChange {
        audit_id,
        resource: text("resource")?,
        operator: text("operator")?,
        at: opt_date(WHAT, document, "at")?.ok_or_else(|| malformed(WHAT, "at", "missing"))?,
        token: optional_document("token")?
            .map(|t| ResumeToken::from_document(t.clone()))
            .ok_or_else(|| malformed(WHAT, "token", "missing"))?,
        failure: optional_document("failure")?
            .map(|f| failure_from_document(WHAT, f))
            .transpose()?,
        entry: optional_document("entry")?.cloned(),
        entry_missing: match document.get("entryMissing") {
            None | Some(Bson::Null) => None,
            Some(Bson::String(s)) => Some(s.clone()),
            Some(_) => return Err(malformed(WHAT, "entryMissing", "expected a string")),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_skipped_change_round_trips_and_a_bad_one_is_named() {
        let skipped = SkippedChange {
            audit_id: "6b0ab9e688f39c293630070a".into(),
            resource: "pet-aggregates".into(),
            operator: "ann@host".into(),
            at: Utc.with_ymd_and_hms(2026, 11, 28, 11, 0, 0).unwrap(),
            token: ResumeToken::from_document(doc! { "_data": "826B0AB9C0" }),
            failure: None,
            entry: Some(doc! { "op": "i", "ns": "zoo.animals", "o": { "_id": 1 } }),
            entry_missing: None,
        };
        let document = skipped_to_document(&skipped);
        assert_eq!(skipped_from_document(&document).unwrap(), skipped);
        let mut bad = document;
        bad.insert("token", 5);
        let error = skipped_from_document(&bad).unwrap_err().to_string();
        assert!(error.contains("token"), "{error}");
    }
}
