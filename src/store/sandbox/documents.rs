//! Documents, fenced and plain, with every write logged as a change.

use std::cmp::Ordering;
use std::sync::MutexGuard;

use bson::{doc, Bson, Document};
use chrono::{DateTime, Utc};

use super::history::HistoryEntry;
use super::state::{id_key, State, WriteKind};
use super::{count, SandboxStore};
use crate::store::documents::id_to_write;
use crate::store::{
    DocumentStore, Namespace, StoreResult, WriteFence, WriteOutcome, LEASE_FENCE_FIELD,
    SOURCE_VERSION_FIELD,
};

/// Recounts `counts` from `members`: value → number of members holding it, as the
/// int32 that MongoDB's `$size` gives.
fn recount(members: &Document) -> Document {
    let mut counts = Document::new();
    for (_, entry) in members {
        if let Some(value) = entry.as_document().and_then(|e| e.get_str("value").ok()) {
            let current = counts.get_i32(value).unwrap_or(0);
            counts.insert(value, current.saturating_add(1));
        }
    }
    counts
}

/// A stored fence as MongoDB compares it with a version.
enum StoredFence {
    Missing,
    Null,
    /// A number of any type (int32, int64, double), compared by value.
    Number(Ordering),
    /// Anything else: no number is ever below it.
    Other,
}

fn stored_fence(value: Option<&Bson>, version: i64) -> StoredFence {
    match value {
        None => StoredFence::Missing,
        Some(Bson::Null) => StoredFence::Null,
        Some(Bson::Int32(v)) => StoredFence::Number(i64::from(*v).cmp(&version)),
        Some(Bson::Int64(v)) => StoredFence::Number(v.cmp(&version)),
        // A NaN sorts below every number in MongoDB.
        Some(Bson::Double(v)) => {
            StoredFence::Number(v.partial_cmp(&(version as f64)).unwrap_or(Ordering::Less))
        }
        Some(_) => StoredFence::Other,
    }
}

/// Whether a fenced upsert's filter (`{field: {$lte|$lt: version}}` or the field
/// missing) admits the stored fence: a null or non-number matches neither.
fn filter_admits(stored: StoredFence, equal_ok: bool) -> bool {
    match stored {
        StoredFence::Missing => true,
        StoredFence::Number(order) => order.is_lt() || (equal_ok && order.is_eq()),
        StoredFence::Null | StoredFence::Other => false,
    }
}

/// Whether a member upsert's pipeline (`$lt: [stored, version]` in BSON order) admits
/// it: missing and null sort below every number, other types above.
fn pipeline_admits(stored: StoredFence) -> bool {
    match stored {
        StoredFence::Missing | StoredFence::Null => true,
        StoredFence::Number(order) => order.is_lt(),
        StoredFence::Other => false,
    }
}

/// MongoDB's order of `_id` values: by type (numbers, strings, documents, …), then
/// by value within a type; numbers of different types by value.
pub(super) fn id_order(a: &Bson, b: &Bson) -> Ordering {
    fn rank(value: &Bson) -> u8 {
        match value {
            Bson::MinKey => 0,
            Bson::Null | Bson::Undefined => 1,
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 2,
            Bson::Symbol(_) | Bson::String(_) => 3,
            Bson::Document(_) => 4,
            Bson::Array(_) => 5,
            Bson::Binary(_) => 6,
            Bson::ObjectId(_) => 7,
            Bson::Boolean(_) => 8,
            Bson::DateTime(_) => 9,
            Bson::Timestamp(_) => 10,
            Bson::RegularExpression(_) => 11,
            Bson::MaxKey => 13,
            _ => 12,
        }
    }
    fn number(value: &Bson) -> Option<f64> {
        match value {
            Bson::Int32(v) => Some(f64::from(*v)),
            Bson::Int64(v) => Some(*v as f64),
            Bson::Double(v) => Some(*v),
            _ => None,
        }
    }
    rank(a).cmp(&rank(b)).then_with(|| match (a, b) {
        (Bson::Int64(x), Bson::Int64(y)) => x.cmp(y),
        (Bson::String(x), Bson::String(y)) => x.cmp(y),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.cmp(y),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            _ => id_key(a).cmp(&id_key(b)),
        },
    })
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
    /// Writes `document` (`None`: deletes it) as `kind` under the held lock `state`,
    /// then releases it and tells the change feed where the log ends now.
    pub(super) fn write_under(
        &self,
        mut state: MutexGuard<'_, State>,
        write: (&Namespace, &Bson, Option<Document>),
        kind: WriteKind,
        now: DateTime<Utc>,
    ) {
        let (ns, id, document) = write;
        state.write(ns, id, document, kind, now);
        self.publish_after(state);
    }

    fn write_one(&self, ns: &Namespace, id: &Bson, document: Option<Document>) {
        let now = self.inner.clock.now();
        let state = self.lock();
        self.write_under(state, (ns, id, document), WriteKind::Replace, now);
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
        if fields.contains_key("_id") {
            return Err(crate::store::StoreError::InvalidArgument(
                "fenced_upsert: fields must not contain _id (it is the id argument)".into(),
            ));
        }
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let existing = state.document(ns, id);
        // Stored `_fence` ≤ the lease version, or stored `_v` < the source version.
        let (field, value, equal_ok) = match fence {
            WriteFence::Lease(fence) => (LEASE_FENCE_FIELD, fence.version, true),
            WriteFence::SourceVersion(version) => (SOURCE_VERSION_FIELD, *version, false),
        };
        let admitted = filter_admits(
            stored_fence(existing.and_then(|d| d.get(field)), value),
            equal_ok,
        );
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
        self.write_under(state, (ns, id, Some(document)), WriteKind::Update, now);
        Ok(WriteOutcome::Applied)
    }

    async fn find_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<Option<Document>> {
        count(&self.inner.calls.documents);
        Ok(self.lock().document(ns, id).cloned())
    }

    async fn find_all(&self, ns: &Namespace) -> StoreResult<Vec<Document>> {
        count(&self.inner.calls.documents);
        let mut documents: Vec<Document> = self
            .lock()
            .collections
            .get(ns)
            .map(|c| c.documents.values().cloned().collect())
            .unwrap_or_default();
        documents.sort_by(|a, b| {
            id_order(
                a.get("_id").unwrap_or(&Bson::Null),
                b.get("_id").unwrap_or(&Bson::Null),
            )
        });
        Ok(documents)
    }

    async fn put(&self, ns: &Namespace, document: Document) -> StoreResult<()> {
        self.write_fault(ns)?;
        count(&self.inner.calls.documents);
        let id = id_to_write(ns, &document)?;
        self.write_one(ns, &id, Some(document));
        Ok(())
    }

    async fn put_together(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        self.write_fault(ns)?;
        count(&self.inner.calls.documents);
        let writes = documents
            .into_iter()
            .map(|document| Ok((id_to_write(ns, &document)?, document)))
            .collect::<StoreResult<Vec<_>>>()?;
        let now = self.inner.clock.now();
        let mut state = self.lock();
        state.in_transaction(|state| {
            for (id, document) in writes {
                state.write(ns, &id, Some(document), WriteKind::Replace, now);
            }
        });
        self.publish_after(state);
        Ok(())
    }

    async fn delete_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<bool> {
        self.write_fault(ns)?;
        count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        if state.document(ns, id).is_none() {
            return Ok(false);
        }
        state.write(ns, id, None, WriteKind::Replace, now);
        self.publish_after(state);
        Ok(true)
    }

    async fn delete_where(&self, ns: &Namespace, field: &str, value: &Bson) -> StoreResult<u64> {
        self.write_fault(ns)?;
        count(&self.inner.calls.documents);
        if let Some(refusal) = crate::store::documents::refuse_delete_where(field, value) {
            return Err(refusal);
        }
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let mut matching: Vec<Bson> = state
            .collections
            .get(ns)
            .map(|c| {
                c.documents
                    .values()
                    .filter(|d| d.get(field).is_some_and(|v| id_order(v, value).is_eq()))
                    .filter_map(|d| d.get("_id").cloned())
                    .collect()
            })
            .unwrap_or_default();
        // One `delete` entry per document, in `_id` order, as the server logs a deleteMany.
        matching.sort_by(id_order);
        for id in &matching {
            state.write(ns, id, None, WriteKind::Replace, now);
        }
        if !matching.is_empty() {
            self.publish_after(state);
        }
        Ok(matching.len() as u64)
    }

    async fn replace_all(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        self.write_fault(ns)?;
        count(&self.inner.calls.documents);
        for document in &documents {
            id_to_write(ns, document)?;
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
            .map(|c| {
                c.documents
                    .values()
                    .filter_map(|d| d.get("_id").cloned())
                    .collect()
            })
            .unwrap_or_default();
        for document in documents {
            let Some(id) = document.get("_id").cloned() else {
                continue;
            };
            stale.retain(|old| old != &id);
            state.write(ns, &id, Some(document), WriteKind::Replace, now);
        }
        for id in stale {
            state.write(ns, &id, None, WriteKind::Replace, now);
        }
        self.publish_after(state);
        Ok(())
    }

    async fn drop_collection(&self, ns: &Namespace) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        state.drop_collection(ns, now);
        self.publish_after(state);
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
        self.publish_after(state);
        Ok(())
    }

    async fn drop_database(&self, db: &str) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        state.drop_database(db, now);
        self.publish_after(state);
        Ok(())
    }
}

impl SandboxStore {
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
        let stored_member = members.get_document(member).ok();
        if !pipeline_admits(stored_fence(
            stored_member.and_then(|m| m.get("v")),
            version,
        )) {
            return Ok(WriteOutcome::Stale);
        }
        let stored = stored_member.and_then(|m| stored_i64(Some(m), "v"));
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
        state.write(ns, &key, Some(document), WriteKind::Update, now);
        self.publish_after(state);
        Ok(WriteOutcome::Applied)
    }
}
