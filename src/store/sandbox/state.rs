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

    /// Writes (or deletes, with `None`) one document and logs the change, as MongoDB
    /// does: an insert, or for an existing document an update or a replacement as
    /// `how` says, and nothing at all when the document stays byte for byte the same
    /// (MongoDB writes no oplog entry for a write that modifies nothing).
    pub fn write(
        &mut self,
        ns: &Namespace,
        id: &Bson,
        document: Option<Document>,
        how: WriteKind,
        now: DateTime<Utc>,
    ) {
        let key = id_key(id);
        let collection = self.collections.entry(ns.clone()).or_default();
        let previous = match &document {
            Some(doc) => collection.insert(key, doc.clone()),
            None => collection.remove(&key),
        };
        let operation = match (&document, &previous) {
            (None, None) => return,
            (None, Some(_)) => OperationType::Delete,
            (Some(_), None) => OperationType::Insert,
            (Some(new), Some(old)) if same_bytes(new, old) => return,
            (Some(_), Some(_)) => match how {
                WriteKind::Replace => OperationType::Replace,
                WriteKind::Update => OperationType::Update,
            },
        };
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

/// How a write changes an existing document, which decides the change MongoDB logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A whole new document (`replaceOne`): a `replace` event.
    Replace,
    /// Fields set in place (`updateOne` with `$set`): an `update` event.
    Update,
}

fn same_bytes(a: &Document, b: &Document) -> bool {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    a.to_writer(&mut x).is_ok() && b.to_writer(&mut y).is_ok() && x == y
}

/// A total order over `_id` values good enough for sorting: strings as themselves,
/// everything else by its relaxed extended JSON.
pub fn id_key(id: &Bson) -> String {
    match id {
        Bson::String(s) => s.clone(),
        other => other.clone().into_relaxed_extjson().to_string(),
    }
}
