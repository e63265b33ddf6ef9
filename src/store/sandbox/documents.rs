//! Documents, fenced and plain, with every write logged as a change.

use bson::{doc, Bson, Document};

use super::history::HistoryEntry;
use super::state::id_key;
use super::{count, SandboxStore};
use crate::store::{
    DocumentStore, Namespace, StoreResult, WriteFence, WriteOutcome, LEASE_FENCE_FIELD,
    SOURCE_VERSION_FIELD,
};

/// Recounts `counts` from `members`: value → number of members holding it.
fn recount(members: &Document) -> Document {
    let mut counts = Document::new();
    for (_, entry) in members {
        if let Some(value) = entry.as_document().and_then(|e| e.get_str("value").ok()) {
            let current = counts.get_i64(value).unwrap_or(0);
            counts.insert(value, current + 1);
        }
    }
    counts
}

fn stored_i64(document: Option<&Document>, field: &str) -> Option<i64> {
    document.and_then(|d| match d.get(field) {
        Some(Bson::Int64(v)) => Some(*v),
        Some(Bson::Int32(v)) => Some(i64::from(*v)),
        _ => None,
    })
}

/// The fence values a document carries, keyed as `FencedWrite` entries key them.
fn fences_of(document: &Document) -> Vec<(String, i64)> {
    let Some(id) = document.get("_id") else {
        return Vec::new();
    };
    let id = id_key(id);
    let mut fences: Vec<(String, i64)> = [LEASE_FENCE_FIELD, SOURCE_VERSION_FIELD]
        .iter()
        .filter_map(|field| stored_i64(Some(document), field))
        .map(|v| (id.clone(), v))
        .collect();
    if let Ok(members) = document.get_document("members") {
        for (member, entry) in members {
            if let Some(v) = entry.as_document().and_then(|e| stored_i64(Some(e), "v")) {
                fences.push((format!("{id}/{member}"), v));
            }
        }
    }
    fences
}

impl SandboxStore {
    fn write_one(&self, ns: &Namespace, id: &Bson, document: Option<Document>) {
        let now = self.inner.clock.now();
        let mut state = self.lock();
        state.write(ns, id, document, now);
        let end = state.log.end();
        drop(state);
        self.publish_log_end(end);
    }
}

impl DocumentStore for SandboxStore {
    async fn fenced_upsert(
        &self,
        ns: &Namespace,
        id: &Bson,
        fence: &WriteFence,
        fields: Document,
    ) -> StoreResult<WriteOutcome> {
        count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let existing = state.document(ns, id);
        let (field, value, admitted) = match fence {
            WriteFence::Lease(fence) => {
                let stored = stored_i64(existing, LEASE_FENCE_FIELD);
                (
                    LEASE_FENCE_FIELD,
                    fence.version,
                    stored.is_none_or(|s| s <= fence.version),
                )
            }
            WriteFence::SourceVersion(version) => {
                let stored = stored_i64(existing, SOURCE_VERSION_FIELD);
                (
                    SOURCE_VERSION_FIELD,
                    *version,
                    stored.is_none_or(|s| s < *version),
                )
            }
        };
        if !admitted {
            return Ok(WriteOutcome::Stale);
        }
        let stored = stored_i64(existing, field);
        let mut document = existing
            .cloned()
            .unwrap_or_else(|| doc! {"_id": id.clone()});
        document.extend(fields);
        document.insert(field, value);
        let (lease_fence, source_version) = match fence {
            WriteFence::Lease(f) => (Some(f.version), None),
            WriteFence::SourceVersion(v) => (None, Some(*v)),
        };
        state.record(|| HistoryEntry::FencedWrite {
            ns: ns.clone(),
            id: id_key(id),
            lease_fence,
            source_version,
            stored,
        });
        state.write(ns, id, Some(document), now);
        let end = state.log.end();
        drop(state);
        self.publish_log_end(end);
        Ok(WriteOutcome::Applied)
    }

    async fn fenced_member_upsert(
        &self,
        ns: &Namespace,
        id: &str,
        member: &str,
        version: i64,
        value: Option<&str>,
    ) -> StoreResult<WriteOutcome> {
        count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let key = Bson::String(id.to_string());
        let mut state = self.lock();
        let mut document = state
            .document(ns, &key)
            .cloned()
            .unwrap_or_else(|| doc! {"_id": id});
        let mut members = document
            .get_document("members")
            .cloned()
            .unwrap_or_default();
        let stored = members
            .get_document(member)
            .ok()
            .and_then(|m| stored_i64(Some(m), "v"));
        if stored.is_some_and(|s| s >= version) {
            return Ok(WriteOutcome::Stale);
        }
        members.insert(member, doc! {"v": version, "value": value});
        document.insert("counts", recount(&members));
        document.insert("members", members);
        state.record(|| HistoryEntry::FencedWrite {
            ns: ns.clone(),
            id: format!("{id}/{member}"),
            lease_fence: None,
            source_version: Some(version),
            stored,
        });
        state.write(ns, &key, Some(document), now);
        let end = state.log.end();
        drop(state);
        self.publish_log_end(end);
        Ok(WriteOutcome::Applied)
    }

    async fn find_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<Option<Document>> {
        count(&self.inner.calls.documents);
        Ok(self.lock().document(ns, id).cloned())
    }

    async fn find_all(&self, ns: &Namespace) -> StoreResult<Vec<Document>> {
        count(&self.inner.calls.documents);
        Ok(self
            .lock()
            .collections
            .get(ns)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn put(&self, ns: &Namespace, document: Document) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        let id = document.get("_id").cloned().ok_or_else(|| {
            crate::store::StoreError::InvalidArgument(format!(
                "a document written to {ns} needs an _id"
            ))
        })?;
        self.write_one(ns, &id, Some(document));
        Ok(())
    }

    async fn replace_all(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        if documents.iter().any(|d| !d.contains_key("_id")) {
            return Err(crate::store::StoreError::InvalidArgument(format!(
                "every document written to {ns} needs an _id; nothing was written"
            )));
        }
        let now = self.inner.clock.now();
        let mut state = self.lock();
        if state.history.is_some() {
            let fences = documents.iter().flat_map(fences_of).collect();
            state.record(|| HistoryEntry::Replaced {
                ns: ns.clone(),
                fences,
            });
        }
        let mut stale: Vec<Bson> = state
            .collections
            .get(ns)
            .map(|c| c.values().filter_map(|d| d.get("_id").cloned()).collect())
            .unwrap_or_default();
        for document in documents {
            let Some(id) = document.get("_id").cloned() else {
                continue;
            };
            stale.retain(|old| old != &id);
            state.write(ns, &id, Some(document), now);
        }
        for id in stale {
            state.write(ns, &id, None, now);
        }
        let end = state.log.end();
        drop(state);
        self.publish_log_end(end);
        Ok(())
    }

    async fn drop_collection(&self, ns: &Namespace) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        state.drop_collection(ns, now);
        let end = state.log.end();
        drop(state);
        self.publish_log_end(end);
        Ok(())
    }

    async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        if let Some(refusal) = crate::store::documents::refuse_rename(from, to) {
            return Err(refusal);
        }
        let now = self.inner.clock.now();
        let mut state = self.lock();
        state.rename_collection(from, to, drop_target, now)?;
        let end = state.log.end();
        drop(state);
        self.publish_log_end(end);
        Ok(())
    }

    async fn drop_database(&self, db: &str) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        state.drop_database(db, now);
        let end = state.log.end();
        drop(state);
        self.publish_log_end(end);
        Ok(())
    }
}
