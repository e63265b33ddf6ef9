//! `DocumentStore` on MongoDB: the two fenced-write patterns (docs/protocol.md §5) and the
//! application's plain writes.

use std::future::IntoFuture;

use bson::{doc, Bson, Document};

use super::errors::{is_duplicate_key, with_one_retry, CallError};
use super::MongoStore;
use crate::store::documents::id_to_write;
use crate::store::{
    DocumentStore, Namespace, StoreError, StoreResult, WriteFence, WriteOutcome, LEASE_FENCE_FIELD,
    SOURCE_VERSION_FIELD,
};

/// Filter and `$set` of a fenced upsert: the fence in the filter, the fence value
/// stored with the fields.
pub(super) fn fenced_upsert_command(
    id: &Bson,
    fence: &WriteFence,
    fields: Document,
) -> (Document, Document) {
    let (field, value, admits) = match fence {
        // Stored `_fence` ≤ the lease version: the same holder may write again.
        WriteFence::Lease(fence) => (LEASE_FENCE_FIELD, fence.version, "$lte"),
        // Stored `_v` < the source version: a replay of the same change is refused.
        WriteFence::SourceVersion(version) => (SOURCE_VERSION_FIELD, *version, "$lt"),
    };
    let filter = doc! {
        "_id": id.clone(),
        "$or": [
            { field: { admits: value } },
            { field: { "$exists": false } },
        ],
    };
    let mut set = fields;
    set.insert(field, value);
    (filter, doc! { "$set": set })
}

/// Temporary field holding the fence's decision between the pipeline's stages.
const ADMITTED: &str = "__streamwardAdmitted";

/// Filter and pipeline of a member upsert. The filter is `_id` alone: MongoDB refuses
/// `$expr` in an upsert's query (code 224), so the per-member source-version fence is
/// decided inside the pipeline, which leaves the document unchanged when it refuses
/// (the caller reads "modified nothing" as stale). `members.<member>` is set and
/// `counts` recomputed in the same write. `$getField`/`$setField` with `$literal` keep
/// member names containing `.` or `$` safe.
pub(super) fn member_upsert_command(
    id: &str,
    member: &str,
    version: i64,
    value: Option<&str>,
) -> (Document, Vec<Document>) {
    let stored_member =
        doc! { "$getField": { "field": { "$literal": member }, "input": "$members" } };
    let filter = doc! { "_id": id };
    // A missing member (or document) reads as null, which sorts below any number.
    let admitted = doc! { "$set": { ADMITTED:
        { "$lt": [ { "$getField": { "field": "v", "input": stored_member } }, version ] },
    } };
    let value = value
        .map(|v| Bson::String(v.to_string()))
        .unwrap_or(Bson::Null);
    let set_member = doc! { "$set": { "members": { "$cond": [
        format!("${ADMITTED}"),
        { "$setField": {
            "field": { "$literal": member },
            "input": { "$ifNull": ["$members", {}] },
            "value": { "$literal": { "v": version, "value": value } },
        } },
        "$members",
    ] } } };
    let held_values = doc! { "$filter": {
        "input": { "$map": {
            "input": { "$objectToArray": "$members" },
            "as": "m",
            "in": "$$m.v.value",
        } },
        "as": "value",
        "cond": { "$eq": [{ "$type": "$$value" }, "string"] },
    } };
    let counted = doc! { "$arrayToObject": { "$map": {
        "input": { "$setUnion": [held_values.clone()] },
        "as": "key",
        "in": {
            "k": "$$key",
            "v": { "$size": { "$filter": {
                "input": held_values,
                "as": "held",
                "cond": { "$eq": ["$$held", "$$key"] },
            } } },
        },
    } } };
    // Recounted only when admitted: a refused write leaves the document exactly as it
    // was (`counts` included, however it got there), so "modified nothing" means stale.
    let recount = doc! { "$set": { "counts": { "$cond": [
        format!("${ADMITTED}"),
        counted,
        "$counts",
    ] } } };
    (
        filter,
        vec![admitted, set_member, recount, doc! { "$unset": ADMITTED }],
    )
}

/// Where a fenced write's fence is evaluated, which decides how a refusal shows.
#[derive(Clone, Copy)]
enum FenceIn {
    /// In the filter: a refusal matches nothing.
    Filter,
    /// In the pipeline: a refusal matches the document and leaves it unchanged.
    Pipeline,
}

impl FenceIn {
    fn refused(self, matched: u64, modified: u64) -> bool {
        match self {
            FenceIn::Filter => matched == 0,
            FenceIn::Pipeline => modified == 0,
        }
    }
}

impl MongoStore {
    pub(super) fn document_error(
        &self,
        error: CallError,
        action: &str,
        ns: &Namespace,
    ) -> StoreError {
        error.into_store_hinted(action, &format!("readWrite on the {} database", ns.db))
    }

    /// A fenced upsert: 11000, or nothing `changed` and nothing upserted, is stale.
    async fn fenced(
        &self,
        ns: &Namespace,
        filter: Document,
        update: mongodb::options::UpdateModifications,
        fence_in: FenceIn,
        action: &str,
    ) -> StoreResult<WriteOutcome> {
        let collection = self.collection(ns);
        let result = with_one_retry(self.write_timeout(), action, || {
            collection
                .update_one(filter.clone(), update.clone())
                .upsert(true)
                .write_concern(self.majority())
                .into_future()
        })
        .await;
        match result {
            Ok(r)
                if r.upserted_id.is_none()
                    && fence_in.refused(r.matched_count, r.modified_count) =>
            {
                Ok(WriteOutcome::Stale)
            }
            Ok(_) => Ok(WriteOutcome::Applied),
            Err(CallError::Driver(e)) if is_duplicate_key(&e) => Ok(WriteOutcome::Stale),
            Err(e) => Err(self.document_error(e, action, ns)),
        }
    }
}

impl DocumentStore for MongoStore {
    async fn fenced_upsert(
        &self,
        ns: &Namespace,
        id: &Bson,
        fence: &WriteFence,
        fields: Document,
    ) -> StoreResult<WriteOutcome> {
        if fields.contains_key("_id") {
            return Err(StoreError::InvalidArgument(
                "fenced_upsert: fields must not contain _id (it is the id argument)".into(),
            ));
        }
        let (filter, update) = fenced_upsert_command(id, fence, fields);
        let action = format!("fenced write to {ns}");
        self.fenced(ns, filter, update.into(), FenceIn::Filter, &action)
            .await
    }

    async fn find_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<Option<Document>> {
        let action = format!("read from {ns}");
        let collection = self.collection(ns);
        with_one_retry(self.timeout(), &action, || {
            collection
                .find_one(doc! { "_id": id.clone() })
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))
    }

    async fn find_all(&self, ns: &Namespace) -> StoreResult<Vec<Document>> {
        let action = format!("read all of {ns}");
        self.read_all(self.collection(ns), &action)
            .await
            .map_err(|e| self.document_error(e, &action, ns))
    }

    async fn put(&self, ns: &Namespace, document: Document) -> StoreResult<()> {
        let id = id_to_write(ns, &document)?;
        let action = format!("write to {ns}");
        let collection = self.collection(ns);
        // Replacing by `_id` with the same document is idempotent, so one retry is safe.
        with_one_retry(self.write_timeout(), &action, || {
            collection
                .replace_one(doc! { "_id": id.clone() }, document.clone())
                .upsert(true)
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))?;
        Ok(())
    }

    /// One transaction committed with majority write concern. Replacing by `_id` is
    /// idempotent, so the whole transaction is retried once after a network or
    /// not-primary error, as `put` is.
    async fn put_together(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        let writes = documents
            .into_iter()
            .map(|document| Ok((id_to_write(ns, &document)?, document)))
            .collect::<StoreResult<Vec<_>>>()?;
        let action = format!("transaction writing {} documents to {ns}", writes.len());
        let collection = self.collection(ns);
        let writes = &writes;
        with_one_retry(self.write_timeout(), &action, || {
            let collection = collection.clone();
            async move {
                let mut session = self.client().start_session().await?;
                session
                    .start_transaction()
                    .write_concern(self.majority())
                    .await?;
                for (id, document) in writes {
                    collection
                        .replace_one(doc! { "_id": id.clone() }, document.clone())
                        .upsert(true)
                        .session(&mut session)
                        .await?;
                }
                session.commit_transaction().await
            }
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))
    }

    /// `deleteOne` by `_id`, majority. Deleting again deletes nothing, so one retry is
    /// safe; a retry after a reply that was lost says the document was not there.
    async fn delete_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<bool> {
        let action = format!("delete from {ns}");
        let collection = self.collection(ns);
        let result = with_one_retry(self.write_timeout(), &action, || {
            collection
                .delete_one(doc! { "_id": id.clone() })
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))?;
        Ok(result.deleted_count > 0)
    }

    /// `deleteMany({field: value})`, majority; retried once like `delete_one` (the count
    /// then leaves out what the first attempt deleted).
    async fn delete_where(&self, ns: &Namespace, field: &str, value: &Bson) -> StoreResult<u64> {
        if let Some(refusal) = crate::store::documents::refuse_delete_where(field, value) {
            return Err(refusal);
        }
        let action = format!("delete from {ns} where {field} is {value}");
        let collection = self.collection(ns);
        let result = with_one_retry(self.write_timeout(), &action, || {
            collection
                .delete_many(doc! { field: value.clone() })
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))?;
        Ok(result.deleted_count)
    }

    /// Not atomic: every document is replaced by `_id` (upsert), then the documents
    /// not among them are deleted. Each step is idempotent, so each is retried once,
    /// and a late source-versioned write from a fenced-out listener landing in between
    /// is overwritten rather than colliding with an insert. A failure leaves the
    /// lease bulk (STUCK BULK) until the rebuild is rerun.
    async fn replace_all(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        let ids = documents
            .iter()
            .map(|document| id_to_write(ns, document))
            .collect::<StoreResult<Vec<Bson>>>()?;
        for document in documents {
            self.put(ns, document).await?;
        }
        let action = format!("replace all of {ns}");
        let collection = self.collection(ns);
        with_one_retry(self.write_timeout(), &action, || {
            collection
                .delete_many(doc! { "_id": { "$nin": ids.clone() } })
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))?;
        Ok(())
    }

    /// `drop`, majority; the driver reads "namespace not found" as done, so the single
    /// retry is safe.
    async fn drop_collection(&self, ns: &Namespace) -> StoreResult<()> {
        let action = format!("drop {ns}");
        let collection = self.collection(ns);
        with_one_retry(self.write_timeout(), &action, || {
            collection
                .drop()
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))
    }

    /// `renameCollection` on `admin`, majority. Not retried: a rename that was applied
    /// before its reply was lost fails the second time ("source namespace does not exist").
    async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StoreResult<()> {
        if let Some(refusal) = crate::store::documents::refuse_rename(from, to) {
            return Err(refusal);
        }
        let action = format!("rename {from} to {to}");
        let admin = self.client.database("admin");
        let command = doc! {
            "renameCollection": from.to_string(),
            "to": to.to_string(),
            "dropTarget": drop_target,
            "writeConcern": { "w": "majority", "wtimeout": super::lease_write::millis(self.timeout()) },
        };
        super::errors::bounded(self.write_timeout(), &action, async {
            admin.run_command(command).await
        })
        .await
        .map_err(|e| self.document_error(e, &action, from))?;
        Ok(())
    }

    /// `dropDatabase`, majority; idempotent, so retried once.
    async fn drop_database(&self, db: &str) -> StoreResult<()> {
        let action = format!("drop database {db}");
        let database = self.client.database(db);
        with_one_retry(self.write_timeout(), &action, || {
            database.drop().write_concern(self.majority()).into_future()
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, &format!("dropDatabase on the {db} database")))
    }
}

impl MongoStore {
    /// The demo's tag aggregate (`crate::demo`'s `FencedMemberWrites`): sets
    /// `members.<member> = {v: version, value}` in document `id` if the stored
    /// member's `v` is below `version` (source-version fence per member), and
    /// recomputes `counts` (value → number of members holding it) in the same write.
    pub async fn fenced_member_upsert(
        &self,
        ns: &Namespace,
        id: &str,
        member: &str,
        version: i64,
        value: Option<&str>,
    ) -> StoreResult<WriteOutcome> {
        let (filter, pipeline) = member_upsert_command(id, member, version, value);
        let action = format!("fenced member write to {ns}");
        self.fenced(ns, filter, pipeline.into(), FenceIn::Pipeline, &action)
            .await
    }
}

impl MongoStore {
    /// Runs an aggregation `pipeline` on `ns` for its side effect (a rebuild whose last
    /// stage is `$merge` or `$out`), with write concern majority, bounded by `limit`
    /// (`maxTimeMS`; the client waits that plus the write-concern wait). Returns nothing: the output goes
    /// where the last stage says.
    pub async fn run_merge_pipeline(
        &self,
        ns: &Namespace,
        pipeline: Vec<Document>,
        limit: std::time::Duration,
    ) -> StoreResult<()> {
        use futures_util::TryStreamExt;
        let writes = pipeline
            .last()
            .is_some_and(|stage| stage.contains_key("$merge") || stage.contains_key("$out"));
        if !writes {
            return Err(StoreError::InvalidArgument(format!(
                "the rebuild pipeline on {ns} must end with a $merge (or $out) stage"
            )));
        }
        let action = format!("run the rebuild pipeline on {ns}");
        let collection = self.collection(ns);
        // Not retried: a pipeline that merged part of its output before the network
        // dropped is rerun by the operator, who sees the failure. The client waits
        // past the server's own limits (maxTimeMS, then the majority's wtimeout), so
        // the server's answer arrives rather than a guess.
        let _: Vec<Document> = super::errors::bounded(limit + self.write_timeout(), &action, async {
            collection
                .aggregate(pipeline)
                .max_time(limit)
                .write_concern(self.majority())
                .await?
                .try_collect()
                .await
        })
        .await
        .map_err(|e| {
            e.into_store_hinted(
                &action,
                &format!(
                    "find on the rebuild's sources and insert, update, remove on its output (docs/permissions.md); source {ns}"
                ),
            )
        })?;
        Ok(())
    }
}
