//! The multi-document transaction a skipped change belongs to, for `skip
//! --whole-transaction`: its oplog entries (an `applyOps` entry with `lsid` and
//! `txnNumber`, or several chained by `prevOpTime`, the last one the commit), its
//! operations on the lease's namespace and elsewhere, and — from the lease's own change
//! stream, opened at its resume point — the changes of it not yet handled, each with
//! the resume token the server gives it. Reads only.
//!
//! Every change of a transaction has its commit's cluster time in a change stream, and
//! one cluster time names one oplog entry on a replica set: what the stream returns at
//! that time on the lease's namespace is the transaction's, and each is matched to the
//! oplog's operations by its document key as well.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::{Bson, Document};

use crate::model::text::{clip, escape_control};
use crate::model::{ClusterTime, Lease, OplogWindow, Partition, ResumePoint, ResumeToken};
use crate::store::{ChangeEvent, ChangeFeed, ChangeStream, FeedOptions, Namespace, StartPoint};

/// How many oplog entries one transaction may be read back over, at most.
const ENTRIES_MAX: usize = 1_000;
/// How many of its changes a plan lists, at most (the count is always whole).
pub const LISTED_MAX: usize = 50;
/// Empty reads of the stream before the changes it must return count as missing.
const EMPTY_READS_MAX: usize = 3;

/// A transaction as one of its oplog entries names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionId {
    /// The session id's UUID as hex (or as the server wrote it, when not binary).
    pub lsid: String,
    pub txn_number: i64,
}

/// One change of a transaction, as the lease's stream returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct SteppedChange {
    /// Resuming after it steps over it.
    pub token: ResumeToken,
    /// `insert`, `update`, … as the event says.
    pub operation: String,
    /// Its document key as relaxed extended JSON, clipped.
    pub key: String,
    /// The oplog entry that holds it, kept with it when skipped: the `applyOps` entry's
    /// fields (`ts`, `lsid`, `txnNumber`, …) with this change's operation alone in it.
    /// The whole entry, kept once per change, grows with the square of the
    /// transaction: 1,500 inserts in one transaction made 1,500 copies of a 200 KB
    /// entry.
    pub entry: Document,
}

/// What `skip --whole-transaction` steps over.
#[derive(Debug, Clone, PartialEq)]
pub struct TransactionChanges {
    pub id: TransactionId,
    /// Its commit's cluster time: the time each of its changes has in a stream.
    pub at: ClusterTime,
    /// How many oplog entries hold it.
    pub entries: usize,
    /// How many of its changes are the lease's (its namespace, its partition).
    pub on_lease: usize,
    /// Its other changes, by where they are ("shop.payments", or "shop.orders, other
    /// partitions"): not the lease's, never touched by its skip.
    pub elsewhere: BTreeMap<String, usize>,
    /// Its changes the lease's stream returns after the resume point, in order: what
    /// is stepped over (the rest of `on_lease` was handled before).
    pub stepped: Vec<SteppedChange>,
    /// A change of something else the stream returns after the resume point and before
    /// the transaction's: the skip would pass over it too.
    pub before: Option<String>,
}

impl TransactionChanges {
    /// Its changes on the lease handled before the skip (the lease resumes after them).
    pub fn handled(&self) -> usize {
        self.on_lease.saturating_sub(self.stepped.len())
    }
}

/// Why a transaction's changes cannot be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransactionMiss {
    /// The change's oplog entry is no multi-document transaction.
    NotATransaction,
    /// The oplog cannot be read (a missing privilege, a mongos).
    OplogUnreadable(String),
    /// An entry is gone, or the stream and the oplog disagree.
    Unresolved(String),
}

impl TransactionId {
    /// The transaction `entry` holds (`applyOps` with a session, or its commit);
    /// `None` for anything else (a retryable write has a session too, and no
    /// `applyOps`).
    pub fn of(entry: &Document) -> Option<Self> {
        let o = entry.get_document("o").ok()?;
        if o.get_array("applyOps").is_err() && !o.contains_key("commitTransaction") {
            return None;
        }
        let lsid = match entry.get_document("lsid").ok()?.get("id")? {
            Bson::Binary(id) => id.bytes.iter().map(|b| format!("{b:02x}")).collect(),
            other => other.to_string(),
        };
        let txn_number = match entry.get("txnNumber")? {
            Bson::Int64(n) => *n,
            Bson::Int32(n) => i64::from(*n),
            _ => return None,
        };
        Some(Self { lsid, txn_number })
    }
}

impl std::fmt::Display for TransactionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lsid {}, txnNumber {}",
            escape_control(&self.lsid),
            self.txn_number
        )
    }
}

/// The `applyOps` operations of `entry` (none for a commit entry).
pub fn operations(entry: &Document) -> Vec<&Document> {
    entry
        .get_document("o")
        .ok()
        .and_then(|o| o.get_array("applyOps").ok())
        .map(|ops| ops.iter().filter_map(Bson::as_document).collect())
        .unwrap_or_default()
}

/// Whether `entry` is one of several of its transaction (`partialTxn`, or a link to an
/// earlier one).
pub fn spans_entries(entry: &Document) -> bool {
    entry
        .get_document("o")
        .is_ok_and(|o| o.get_bool("partialTxn").unwrap_or(false))
        || previous(entry).is_some()
}

/// The earlier entry of the same transaction `entry` links to (`prevOpTime`).
fn previous(entry: &Document) -> Option<ClusterTime> {
    entry
        .get_document("prevOpTime")
        .ok()
        .and_then(|p| p.get_timestamp("ts").ok())
        .filter(|ts| ts.time != 0 || ts.increment != 0)
        .map(ClusterTime::from)
}

/// An operation's document `_id`: of the document inserted or deleted (`o`), of the
/// one updated (`o2`).
fn operation_id(operation: &Document) -> Option<&Bson> {
    match operation.get_str("op").ok()? {
        "u" => operation.get_document("o2").ok()?.get("_id"),
        _ => operation.get_document("o").ok()?.get("_id"),
    }
}

/// The transaction of the change `token` names, whose oplog entry is `entry`, as the
/// lease sees it: read back over its oplog entries, and its changes after the lease's
/// resume point read from the lease's stream.
pub async fn resolve<S: ChangeFeed>(
    store: &S,
    lease: &Lease,
    entry: &Document,
    window: Option<&OplogWindow>,
) -> Result<TransactionChanges, TransactionMiss> {
    let id = TransactionId::of(entry).ok_or(TransactionMiss::NotATransaction)?;
    let at = entry
        .get_timestamp("ts")
        .map(ClusterTime::from)
        .map_err(|_| TransactionMiss::Unresolved("its oplog entry has no ts".into()))?;
    let entries = chain(store, entry, &id).await?;
    let Some(watch) = lease.watch.as_ref() else {
        return Err(TransactionMiss::Unresolved(format!(
            "{} does not say which collection it watches, so its changes cannot be told",
            escape_control(&lease.resource)
        )));
    };
    let ns = Namespace::new(watch.db.clone(), watch.coll.clone());
    let partition = Partition::parse_lease_id(&lease.resource).map(|(_, p)| p);
    // The lease's operations, in order, each with the entry that holds it.
    let mut mine: Vec<(&Document, &Document)> = Vec::new();
    let mut elsewhere: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &entries {
        for operation in operations(entry) {
            let on = operation.get_str("ns").unwrap_or("?");
            let ours = on == ns.to_string()
                && partition.is_none_or(|p| {
                    operation_id(operation).is_some_and(|id| {
                        p.holds_key(&bson::doc! { "_id": id.clone() })
                            .unwrap_or(false)
                    })
                });
            match (ours, on == ns.to_string()) {
                (true, _) => mine.push((operation, entry)),
                (false, true) => {
                    *elsewhere
                        .entry(format!("{}, other partitions", escape_control(on)))
                        .or_default() += 1
                }
                (false, false) => *elsewhere.entry(escape_control(on)).or_default() += 1,
            }
        }
    }
    let (stepped, before) = read_stream(store, lease, &ns, partition, at, &mine, window).await?;
    Ok(TransactionChanges {
        id,
        at,
        entries: entries.len(),
        on_lease: mine.len(),
        elsewhere,
        stepped,
        before,
    })
}

/// The transaction's entries, oldest first, from `last` back along `prevOpTime`;
/// a commit entry (of a prepared transaction) holds no operations and is left out.
async fn chain<S: ChangeFeed>(
    store: &S,
    last: &Document,
    id: &TransactionId,
) -> Result<Vec<Document>, TransactionMiss> {
    let mut entries = vec![last.clone()];
    let mut link = previous(last);
    while let Some(at) = link {
        if entries.len() >= ENTRIES_MAX {
            return Err(TransactionMiss::Unresolved(format!(
                "the transaction ({id}) spans more than {ENTRIES_MAX} oplog entries"
            )));
        }
        let entry = match store.oplog_entry(at).await {
            Ok(Some(entry)) => entry,
            Ok(None) => {
                return Err(TransactionMiss::Unresolved(format!(
                    "its oplog entry at {at} is gone (the oplog rolled past it), so its \
                     changes cannot all be told"
                )))
            }
            Err(e) if e.oplog_unreadable() => {
                return Err(TransactionMiss::OplogUnreadable(e.to_string()))
            }
            Err(e) => {
                return Err(TransactionMiss::Unresolved(format!(
                    "reading its oplog entry at {at} failed: {e}"
                )))
            }
        };
        if TransactionId::of(&entry).as_ref() != Some(id) {
            return Err(TransactionMiss::Unresolved(format!(
                "the oplog entry at {at}, which the transaction ({id}) links back to, is of \
                 another session or transaction"
            )));
        }
        link = previous(&entry);
        entries.push(entry);
    }
    entries.reverse();
    entries.retain(|e| !operations(e).is_empty());
    Ok(entries)
}

/// Reads the lease's stream from its resume point: the changes of the transaction
/// (cluster time `at`) it returns, matched against `mine` (their tail: those before
/// were handled), and the first change of something else before them, if any.
async fn read_stream<S: ChangeFeed>(
    store: &S,
    lease: &Lease,
    ns: &Namespace,
    partition: Option<Partition>,
    at: ClusterTime,
    mine: &[(&Document, &Document)],
    window: Option<&OplogWindow>,
) -> Result<(Vec<SteppedChange>, Option<String>), TransactionMiss> {
    let start = match lease.resume_point() {
        ResumePoint::Token(token) => StartPoint::After(token),
        ResumePoint::At(time) => StartPoint::At(time),
        ResumePoint::Oldest => match window {
            Some(w) => StartPoint::At(w.first),
            None => {
                return Err(TransactionMiss::OplogUnreadable(
                    "the lease starts from the oldest entry, which is not known without the \
                     oplog window"
                        .into(),
                ))
            }
        },
    };
    let options = FeedOptions {
        batch_size: 100,
        max_await: Duration::from_millis(500),
        ..Default::default()
    };
    let unresolved = |e: crate::store::StoreError| {
        TransactionMiss::Unresolved(format!(
            "{}'s change stream could not be read from its resume point: {e}",
            escape_control(&lease.resource)
        ))
    };
    let mut stream = store
        .open_partition(ns, partition, start, options)
        .await
        .map_err(unresolved)?;
    let mut seen: Vec<ChangeEvent> = Vec::new();
    let mut empty = 0;
    'read: while seen.len() < mine.len() {
        let batch = stream.next_batch().await.map_err(unresolved)?;
        // The server has read past the transaction: nothing more of it comes.
        let past = batch
            .resume_token
            .as_ref()
            .and_then(ResumeToken::time)
            .is_some_and(|time| time > at);
        if batch.events.is_empty() {
            empty += 1;
            if empty >= EMPTY_READS_MAX {
                break;
            }
        }
        for event in batch.events {
            match event.cluster_time {
                Some(time) if time == at => seen.push(event),
                Some(time) if time > at => break 'read,
                Some(time) => {
                    return Ok((
                        Vec::new(),
                        Some(format!(
                            "{} {} {} at {time}",
                            event.operation.name(),
                            escape_control(&event.ns.to_string()),
                            key_json(&event.document_key)
                        )),
                    ))
                }
                None => {
                    return Err(TransactionMiss::Unresolved(
                        "the change stream's events carry no cluster time".into(),
                    ))
                }
            }
            if seen.len() == mine.len() {
                break 'read;
            }
        }
        if past {
            break;
        }
    }
    // The stream returns the lease's changes of the transaction from its resume point:
    // the last `seen.len()` of them, each the oplog's operation on the same document.
    let Some(handled) = mine.len().checked_sub(seen.len()) else {
        return Err(TransactionMiss::Unresolved(format!(
            "the stream returned {} changes at {at}, the transaction holds {} on {}",
            seen.len(),
            mine.len(),
            escape_control(&ns.to_string())
        )));
    };
    let mut stepped = Vec::with_capacity(seen.len());
    for (event, (operation, entry)) in seen.into_iter().zip(&mine[handled..]) {
        if event.document_key.get("_id") != operation_id(operation) {
            return Err(TransactionMiss::Unresolved(format!(
                "the stream's change {} {} at {at} is not the transaction's operation on that \
                 document in the oplog (the changes read back disagree)",
                event.operation.name(),
                key_json(&event.document_key)
            )));
        }
        stepped.push(SteppedChange {
            token: event.token,
            operation: event.operation.name().to_string(),
            key: key_json(&event.document_key),
            entry: entry_of_one(entry, operation),
        });
    }
    Ok((stepped, None))
}

/// `entry` (an `applyOps` oplog entry) holding `operation` alone of its operations.
fn entry_of_one(entry: &Document, operation: &Document) -> Document {
    entry
        .iter()
        .map(|(field, value)| match (field.as_str(), value) {
            ("o", Bson::Document(o)) => {
                let mut o: Document = o
                    .iter()
                    .filter(|(field, _)| field.as_str() != "applyOps")
                    .map(|(field, value)| (field.clone(), value.clone()))
                    .collect();
                o.insert("applyOps", vec![Bson::Document(operation.clone())]);
                (field.clone(), Bson::Document(o))
            }
            _ => (field.clone(), value.clone()),
        })
        .collect()
}

fn key_json(key: &Document) -> String {
    clip(
        &Bson::Document(key.clone())
            .into_relaxed_extjson()
            .to_string(),
        crate::model::FAILURE_KEY_MAX_CHARS,
    )
}

#[cfg(test)]
mod tests {
    use bson::{doc, Timestamp};

    use super::*;

    #[test]
    fn a_stepped_change_keeps_its_entry_with_its_own_operation_alone() {
        let op = |id: i32| doc! {"op": "i", "ns": "shop.orders", "o": {"_id": id}};
        let entry = doc! {
            "op": "c",
            "ns": "admin.$cmd",
            "o": {"applyOps": [op(1), op(2), op(3)], "partialTxn": true},
            "ts": Timestamp { time: 5, increment: 1 },
            "lsid": {"id": 7},
            "txnNumber": 1_i64,
        };
        let kept = entry_of_one(&entry, &op(2));
        assert_eq!(
            kept,
            doc! {
                "op": "c",
                "ns": "admin.$cmd",
                "o": {"partialTxn": true, "applyOps": [op(2)]},
                "ts": Timestamp { time: 5, increment: 1 },
                "lsid": {"id": 7},
                "txnNumber": 1_i64,
            }
        );
        assert_eq!(TransactionId::of(&kept), TransactionId::of(&entry));
    }
}
