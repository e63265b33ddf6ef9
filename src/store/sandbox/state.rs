//! The sandbox's data, behind one lock: collections, the change log, leases, audit.

use std::collections::{BTreeMap, HashMap};

use bson::{Bson, Document};
use chrono::{DateTime, Utc};

use super::catalog::Collection;
use super::change_log::ChangeLog;
use super::history::HistoryEntry;
use crate::model::ClusterTime;
use crate::model::{AuditRecord, Lease, ResumeToken, TokenKind};
use crate::store::{ChangeEvent, Namespace, OperationType};

pub struct State {
    pub collections: HashMap<Namespace, Collection>,
    /// How many collections have been created: the next one's UUID.
    pub(super) collections_created: u64,
    pub log: ChangeLog,
    pub leases: BTreeMap<String, Lease>,
    pub audit: Vec<AuditRecord>,
    /// The changes operators stepped over, oldest first.
    pub skipped: Vec<crate::store::SkippedChange>,
    /// Per resource, its checkpoints, newest first.
    pub checkpoints: HashMap<String, Vec<crate::model::Checkpoint>>,
    /// The last checkpoint id given.
    pub next_checkpoint: u64,
    pub history: Option<Vec<HistoryEntry>>,
    /// The processes' membership documents, by process id.
    pub members: BTreeMap<String, crate::model::Member>,
    pub capped: super::capped::CappedCollections,
    /// The transaction the writes being made belong to ([`State::in_transaction`]).
    open_transaction: Option<crate::store::TransactionId>,
    /// The last transaction number given.
    last_txn_number: i64,
    /// Changes logged so far by the open transaction: the next one's place in it.
    txn_ops: u64,
}

/// The sandbox's one logical session (`lsid.id`), in which its transactions run.
const SESSION_ID: [u8; 16] = *b"sandbox-session!";

impl State {
    pub fn new(log: ChangeLog, record_history: bool) -> Self {
        Self {
            collections: HashMap::new(),
            collections_created: 0,
            log,
            leases: BTreeMap::new(),
            audit: Vec::new(),
            skipped: Vec::new(),
            checkpoints: HashMap::new(),
            next_checkpoint: 0,
            history: record_history.then(Vec::new),
            members: BTreeMap::new(),
            capped: Default::default(),
            open_transaction: None,
            last_txn_number: 0,
            txn_ops: 0,
        }
    }

    /// Makes the writes `writes` makes one transaction, as MongoDB logs a multi-document
    /// transaction: its changes one after another, nothing between them, each carrying
    /// the transaction's identity. Unlike MongoDB, where they share the commit's cluster
    /// time, each has a cluster time of its own (this log's times are strictly
    /// increasing); what groups them is the identity, as it must be from 8.0 on.
    pub fn in_transaction<T>(&mut self, writes: impl FnOnce(&mut Self) -> T) -> T {
        self.last_txn_number += 1;
        self.txn_ops = 0;
        self.open_transaction = Some(crate::store::TransactionId {
            session: SESSION_ID.to_vec(),
            txn_number: self.last_txn_number,
        });
        let written = writes(self);
        self.open_transaction = None;
        written
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
        // A write into a new collection creates it first (a delete into one does not).
        if document.is_some() {
            self.ensure_collection(ns, now);
        }
        let Some(collection) = self.collections.get_mut(ns) else {
            return;
        };
        let previous = match &document {
            Some(doc) => collection.documents.insert(key, doc.clone()),
            None => collection.documents.remove(&key),
        };
        let uuid = collection.uuid;
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
        let (time, token, transaction) = self.next_change(now);
        self.record(|| HistoryEntry::Changed {
            ns: ns.clone(),
            time,
        });
        // As an oplog holds it: an insert or replacement keeps its document, an update
        // does not (a reader looks the document up when it reads, as `updateLookup`
        // does), so a log of updates to a growing document does not keep every copy.
        let update_description = match (&operation, &previous, &document) {
            (OperationType::Update, Some(old), Some(new)) => Some(describe_update(old, new)),
            _ => None,
        };
        let full_document = match operation {
            OperationType::Update => None,
            _ => document,
        };
        self.log.append(
            time,
            ChangeEvent {
                token,
                cluster_time: Some(time),
                operation,
                ns: ns.clone(),
                document_key: bson::doc! {"_id": id.clone()},
                full_document,
                details: crate::store::EventDetails {
                    update_description,
                    transaction,
                    wall_time: Some(now),
                    // Sent only to a stream with expanded events (`SandboxStream`).
                    collection_uuid: Some(uuid),
                    ..Default::default()
                },
            },
        );
    }

    /// The next change's cluster time and token, and its transaction if one is open.
    /// The token's sequence is the change's place in its transaction, where the
    /// server keeps its `txnOpIndex`; else the log's position.
    pub(super) fn next_change(
        &mut self,
        now: DateTime<Utc>,
    ) -> (
        ClusterTime,
        ResumeToken,
        Option<crate::store::TransactionId>,
    ) {
        let wall_secs = u32::try_from(now.timestamp()).unwrap_or(u32::MAX);
        let time = self.log.next_time(wall_secs);
        let seq = match self.open_transaction {
            Some(_) => {
                self.txn_ops += 1;
                self.txn_ops - 1
            }
            None => self.log.end(),
        };
        let token = ResumeToken::encode(time, TokenKind::Event, seq);
        (time, token, self.open_transaction.clone())
    }

    pub fn document(&self, ns: &Namespace, id: &Bson) -> Option<&Document> {
        self.collections
            .get(ns)
            .and_then(|c| c.documents.get(&id_key(id)))
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

/// What an update changed, as the sandbox can tell from the document before and after:
/// top-level fields only (MongoDB names a path inside a sub-document, `a.b`, where the
/// update reached into it; the sandbox names `a` with its whole new value).
fn describe_update(old: &Document, new: &Document) -> crate::store::UpdateDescription {
    let updated: Document = new
        .iter()
        .filter(|(key, value)| old.get(key.as_str()) != Some(value))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let removed: Vec<String> = old
        .keys()
        .filter(|key| !new.contains_key(key.as_str()))
        .cloned()
        .collect();
    crate::store::UpdateDescription::new(updated, &removed)
}
