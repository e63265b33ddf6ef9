//! The sandbox's data, behind one lock: collections, the change log, leases, audit.

use std::collections::{BTreeMap, HashMap};

use bson::{Bson, Document};
use chrono::{DateTime, Utc};

use super::change_log::ChangeLog;
use super::history::HistoryEntry;
use crate::model::{AuditRecord, Lease, ResumeToken, TokenKind};
use crate::store::{ChangeEvent, Namespace, OperationType, StoreError};

pub struct State {
    pub collections: HashMap<Namespace, BTreeMap<String, Document>>,
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
        // The token's sequence: the change's place in its transaction, where the
        // server keeps its `txnOpIndex`; else the log's position.
        let seq = match self.open_transaction {
            Some(_) => {
                self.txn_ops += 1;
                self.txn_ops - 1
            }
            None => self.log.end(),
        };
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
                token: ResumeToken::encode(time, TokenKind::Event, seq),
                cluster_time: Some(time),
                operation,
                ns: ns.clone(),
                document_key: bson::doc! {"_id": id.clone()},
                full_document,
                details: crate::store::EventDetails {
                    update_description,
                    transaction: self.open_transaction.clone(),
                    wall_time: Some(now),
                    ..Default::default()
                },
            },
        );
    }

    /// Logs a command on a collection (`drop`, `rename` with its `to`) or a database
    /// (`dropDatabase`, `coll` empty), as an oplog holds it: an entry with a cluster time
    /// of its own that change streams read, and that no handler ever sees.
    fn log_command(
        &mut self,
        operation: &str,
        ns: Namespace,
        to: Option<Namespace>,
        now: DateTime<Utc>,
    ) {
        let wall_secs = u32::try_from(now.timestamp()).unwrap_or(u32::MAX);
        let time = self.log.next_time(wall_secs);
        let seq = self.log.end();
        self.log.append_entry(
            time,
            ChangeEvent {
                token: ResumeToken::encode(time, TokenKind::Event, seq),
                cluster_time: Some(time),
                operation: OperationType::Other(operation.to_string()),
                ns,
                document_key: Document::new(),
                full_document: None,
                details: crate::store::EventDetails {
                    wall_time: Some(now),
                    ..Default::default()
                },
            },
            to,
        );
    }

    /// Drops a collection: a `drop` entry, unless it does not exist (a real server logs
    /// nothing then either).
    pub fn drop_collection(&mut self, ns: &Namespace, now: DateTime<Utc>) {
        if self.collections.remove(ns).is_some() {
            self.log_command("drop", ns.clone(), None, now);
        }
    }

    /// Renames a collection within its database: one `rename` entry, also when it
    /// replaces `to` (`drop_target`), as a real server logs it. Errors carry the real
    /// server's codes: 26 without a source, 48 when `to` exists and may not be dropped.
    pub fn rename_collection(
        &mut self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let Some(documents) = self.collections.remove(from) else {
            return Err(StoreError::Command {
                code: 26,
                message: format!("rename {from} to {to}: source namespace {from} does not exist"),
            });
        };
        if self.collections.contains_key(to) && !drop_target {
            self.collections.insert(from.clone(), documents);
            return Err(StoreError::Command {
                code: 48,
                message: format!("rename {from} to {to}: target namespace exists"),
            });
        }
        self.collections.insert(to.clone(), documents);
        self.log_command("rename", from.clone(), Some(to.clone()), now);
        Ok(())
    }

    /// Drops every collection of `db` (a `drop` entry each, by name), then a
    /// `dropDatabase` entry; nothing for a database without collections.
    pub fn drop_database(&mut self, db: &str, now: DateTime<Utc>) {
        let mut names: Vec<Namespace> = self
            .collections
            .keys()
            .filter(|ns| ns.db == db)
            .cloned()
            .collect();
        if names.is_empty() {
            return;
        }
        names.sort();
        for ns in &names {
            self.drop_collection(ns, now);
        }
        self.log_command("dropDatabase", Namespace::new(db, ""), None, now);
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
