//! The sandbox's data, behind one lock: collections, the change log, leases, audit.

use std::collections::{BTreeMap, HashMap};

use bson::{Bson, Document};
use chrono::{DateTime, Utc};

use super::change_log::ChangeLog;
use super::history::HistoryEntry;
use crate::model::{AuditRecord, Lease, ResumeToken, TokenKind};
use crate::store::{ChangeEvent, Namespace, OperationType};

pub struct State {
    pub collections: HashMap<Namespace, BTreeMap<String, Document>>,
    pub log: ChangeLog,
    pub leases: BTreeMap<String, Lease>,
    pub audit: Vec<AuditRecord>,
    pub history: Option<Vec<HistoryEntry>>,
}

impl State {
    pub fn new(log_capacity: usize, record_history: bool) -> Self {
        Self {
            collections: HashMap::new(),
            log: ChangeLog::new(log_capacity),
            leases: BTreeMap::new(),
            audit: Vec::new(),
            history: record_history.then(Vec::new),
        }
    }

    pub fn record(&mut self, entry: impl FnOnce() -> HistoryEntry) {
        if let Some(history) = self.history.as_mut() {
            history.push(entry());
        }
    }

    /// Writes a whole document (or deletes it, with `None`) and logs the change: an
    /// insert, a `replace` of an existing document (as MongoDB logs a replacement), or
    /// a delete.
    pub fn write(
        &mut self,
        ns: &Namespace,
        id: &Bson,
        document: Option<Document>,
        now: DateTime<Utc>,
    ) {
        self.change(ns, id, document, now, OperationType::Replace);
    }

    /// Writes the result of a field-level update (`$set`, a pipeline) and logs it as
    /// an insert (upserted) or an `update`, as MongoDB does.
    pub fn update(&mut self, ns: &Namespace, id: &Bson, document: Document, now: DateTime<Utc>) {
        self.change(ns, id, Some(document), now, OperationType::Update);
    }

    fn change(
        &mut self,
        ns: &Namespace,
        id: &Bson,
        document: Option<Document>,
        now: DateTime<Utc>,
        on_existing: OperationType,
    ) {
        let key = id_key(id);
        let collection = self.collections.entry(ns.clone()).or_default();
        let previous = match &document {
            Some(doc) => collection.insert(key, doc.clone()),
            None => collection.remove(&key),
        };
        // A write that leaves the document byte for byte as it was is no change: a
        // real server writes no oplog entry for it and no stream sees it.
        if let (Some(before), Some(after)) = (&previous, &document) {
            if bson::to_vec(before).ok() == bson::to_vec(after).ok() {
                return;
            }
        }
        let existed = previous.is_some();
        let operation = match (&document, existed) {
            (None, _) => OperationType::Delete,
            (Some(_), false) => OperationType::Insert,
            (Some(_), true) => on_existing,
        };
        if operation == OperationType::Delete && !existed {
            return;
        }
        let wall_secs = u32::try_from(now.timestamp()).unwrap_or(u32::MAX);
        let time = self.log.next_time(wall_secs);
        let seq = self.log.end();
        self.record(|| HistoryEntry::Changed {
            ns: ns.clone(),
            time,
        });
        self.log.append(ChangeEvent {
            token: ResumeToken::encode(time, TokenKind::Event, seq),
            cluster_time: time,
            operation,
            ns: ns.clone(),
            document_key: bson::doc! {"_id": id.clone()},
            full_document: document,
        });
    }

    pub fn document(&self, ns: &Namespace, id: &Bson) -> Option<&Document> {
        self.collections.get(ns).and_then(|c| c.get(&id_key(id)))
    }
}

/// A total order over `_id` values good enough for sorting: strings as themselves,
/// everything else by its relaxed extended JSON.
pub fn id_key(id: &Bson) -> String {
    match id {
        Bson::String(s) => s.clone(),
        other => other.clone().into_relaxed_extjson().to_string(),
    }
}
