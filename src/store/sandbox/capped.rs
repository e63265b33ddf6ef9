//! Capped collections in the sandbox, tailed as MongoDB's are (the port's contract is
//! in `crate::store::capped`; tests/capped.rs holds both stores to it). Entries are
//! kept in insertion order and bounded by bytes; the oldest fall off as new ones come.

use std::collections::{HashMap, VecDeque};

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use tokio::time::Instant;

use super::{count, SandboxStore};
use crate::model::{object_id_at, EntrySpan};
use crate::store::{
    CappedFeed, CappedStats, CappedWindow, ChangeBatch, ChangeEvent, ChangeStream, FeedOptions,
    Namespace, OperationType, StartPoint, StoreError, StoreResult,
};

struct Entry {
    seq: u64,
    id: ObjectId,
    document: Document,
    bytes: usize,
}

/// One capped collection.
pub(super) struct CappedLog {
    max_bytes: usize,
    entries: VecDeque<Entry>,
    bytes: usize,
    /// The sequence number the next entry gets.
    next_seq: u64,
}

impl CappedLog {
    fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            entries: VecDeque::new(),
            bytes: 0,
            next_seq: 0,
        }
    }

    fn first_seq(&self) -> u64 {
        self.entries.front().map_or(self.next_seq, |e| e.seq)
    }

    fn seq_of(&self, id: ObjectId) -> Option<u64> {
        self.entries.iter().find(|e| e.id == id).map(|e| e.seq)
    }

    fn push(&mut self, id: ObjectId, document: Document) {
        // MongoDB counts an entry's BSON size against the collection's size (collStats
        // `size`, `$bsonSize`), nothing more.
        let bytes = bson::to_vec(&document).map_or(0, |b| b.len());
        self.entries.push_back(Entry {
            seq: self.next_seq,
            id,
            document,
            bytes,
        });
        self.next_seq += 1;
        self.bytes += bytes;
        while self.bytes > self.max_bytes && self.entries.len() > 1 {
            if let Some(dropped) = self.entries.pop_front() {
                self.bytes -= dropped.bytes;
            }
        }
    }
}

/// The sandbox's capped collections and the ObjectIds it makes for their entries.
#[derive(Default)]
pub(super) struct CappedCollections {
    logs: HashMap<Namespace, CappedLog>,
    counter: u32,
    /// Entries appended to any of them, ever: what waiting tails watch.
    pub(super) appended: u64,
}

impl CappedCollections {
    /// Whether `ns` is one of them.
    pub(super) fn holds(&self, ns: &Namespace) -> bool {
        self.logs.contains_key(ns)
    }
}

/// The five "random" bytes of the sandbox's ObjectIds: one source, so its ids grow
/// with insertion order, as one appender's do.
const SANDBOX_SOURCE: [u8; 5] = *b"sbox\0";

impl SandboxStore {
    /// Creates capped collection `ns` holding at most `max_bytes` of entries (kept as
    /// it is if it exists). `InvalidArgument` when a plain collection has that name.
    pub fn create_capped(&self, ns: &Namespace, max_bytes: usize) -> StoreResult<()> {
        let mut state = self.lock();
        if state.collections.contains_key(ns) {
            return Err(StoreError::InvalidArgument(format!(
                "{ns} exists and is not capped"
            )));
        }
        state
            .capped
            .logs
            .entry(ns.clone())
            .or_insert_with(|| CappedLog::new(max_bytes.max(1)));
        Ok(())
    }

    /// Appends `document` to capped collection `ns`, with an `_id` made now by the
    /// sandbox's clock unless it has one; returns the `_id`. `InvalidArgument` when
    /// `ns` is not a capped collection or the `_id` is not an ObjectId.
    pub fn append(&self, ns: &Namespace, mut document: Document) -> StoreResult<ObjectId> {
        let now = self.inner.clock.now();
        let mut state = self.lock();
        let capped = &mut state.capped;
        let id = match document.get("_id") {
            Some(Bson::ObjectId(id)) => *id,
            Some(other) => {
                return Err(StoreError::InvalidArgument(format!(
                    "an entry's _id must be an ObjectId, found {other}"
                )))
            }
            None => {
                capped.counter = capped.counter.wrapping_add(1) & 0x00FF_FFFF;
                let id = object_id_at(now, SANDBOX_SOURCE, capped.counter);
                document.insert("_id", id);
                id
            }
        };
        let log = capped.logs.get_mut(ns).ok_or_else(|| {
            StoreError::InvalidArgument(format!("{ns} is not a capped collection"))
        })?;
        log.push(id, document);
        capped.appended += 1;
        // Published under the lock, so the count never goes back.
        self.inner.capped_end.publish(capped.appended);
        Ok(id)
    }
}

use crate::store::capped::TailPosition as Position;

/// An open tail: the next sequence number to read and what it passes over.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    next_seq: u64,
    /// Entries at or below (`Gt`) or below (`Gte`) this `_id` are passed over.
    skip_below: Option<(ObjectId, bool)>,
}

pub struct SandboxTail {
    store: SandboxStore,
    ns: Namespace,
    options: FeedOptions,
    position: Position,
    cursor: Option<Cursor>,
}

impl CappedFeed for SandboxStore {
    type Tail = SandboxTail;

    async fn tail(
        &self,
        ns: &Namespace,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<SandboxTail> {
        count(&self.inner.calls.open);
        let state = self.lock();
        if state.collections.contains_key(ns) {
            return Err(crate::store::capped::not_capped(ns));
        }
        let newest = state
            .capped
            .logs
            .get(ns)
            .and_then(|log| log.entries.back())
            .map(|newest| newest.id);
        let position = crate::store::capped::tail_position(ns, start, newest)?;
        drop(state);
        Ok(SandboxTail {
            store: self.clone(),
            ns: ns.clone(),
            options,
            position,
            cursor: None,
        })
    }

    async fn capped_window(&self, ns: &Namespace) -> StoreResult<Option<CappedWindow>> {
        let state = self.lock();
        let Some(log) = state.capped.logs.get(ns) else {
            return Ok(None);
        };
        Ok(log
            .entries
            .front()
            .zip(log.entries.back())
            .map(|(oldest, newest)| CappedWindow {
                oldest: oldest.id,
                newest: newest.id,
            }))
    }

    async fn ensure_capped(&self, ns: &Namespace, max_bytes: u64) -> StoreResult<()> {
        self.create_capped(ns, usize::try_from(max_bytes).unwrap_or(usize::MAX))
    }

    async fn append_entry(&self, ns: &Namespace, entry: Document) -> StoreResult<ObjectId> {
        self.write_fault(ns)?;
        SandboxStore::append(self, ns, entry)
    }

    async fn capped_stats(&self, ns: &Namespace) -> StoreResult<CappedStats> {
        let state = self.lock();
        let log = state.capped.logs.get(ns).ok_or_else(|| {
            StoreError::InvalidArgument(format!("{ns} is not a capped collection"))
        })?;
        Ok(CappedStats {
            size_bytes: log.bytes as u64,
            max_bytes: log.max_bytes as u64,
            count: log.entries.len() as u64,
            max_count: None,
        })
    }

    async fn count_entries(&self, ns: &Namespace, span: EntrySpan, limit: u64) -> StoreResult<u64> {
        let state = self.lock();
        let Some(log) = state.capped.logs.get(ns) else {
            return Ok(0);
        };
        let held = log.entries.iter().filter(|e| span.holds(&e.id)).count() as u64;
        Ok(held.min(limit.max(1)))
    }

    async fn entry_bytes(
        &self,
        ns: &Namespace,
        span: EntrySpan,
        limit: u64,
    ) -> StoreResult<crate::store::EntryBytes> {
        let state = self.lock();
        let mut counted = crate::store::EntryBytes {
            complete: true,
            ..Default::default()
        };
        let Some(log) = state.capped.logs.get(ns) else {
            return Ok(counted);
        };
        for entry in log.entries.iter().filter(|e| span.holds(&e.id)) {
            if counted.entries == limit.max(1) {
                counted.complete = false;
                break;
            }
            counted.entries += 1;
            counted.bytes += entry.bytes as u64;
            counted.largest = counted.largest.max(entry.bytes as u64);
            counted.greatest = counted.greatest.max(Some(entry.id));
        }
        Ok(counted)
    }
}

impl SandboxTail {
    /// Opens the cursor from the position, as the MongoDB store does; `None` while the
    /// collection is empty or missing (a tailable cursor there is closed at once).
    fn open_cursor(&self, log: Option<&CappedLog>) -> StoreResult<Option<Cursor>> {
        let Some(log) = log.filter(|log| !log.entries.is_empty()) else {
            return Ok(None);
        };
        let first_seq = log.first_seq();
        let cursor = match self.position {
            Position::Everything => Cursor {
                next_seq: first_seq,
                skip_below: None,
            },
            Position::From(from) => Cursor {
                next_seq: first_seq,
                skip_below: Some((from, false)),
            },
            Position::After(after) => match log.seq_of(after) {
                Some(seq) => Cursor {
                    next_seq: seq + 1,
                    skip_below: None,
                },
                None => match log.entries.front() {
                    Some(oldest) if oldest.id > after => {
                        return Err(crate::store::capped::position_overwritten(
                            &self.ns, after, oldest.id,
                        ))
                    }
                    _ => Cursor {
                        next_seq: first_seq,
                        skip_below: Some((after, true)),
                    },
                },
            },
        };
        Ok(Some(cursor))
    }

    /// What is there now, at most `batch_size` entries.
    fn read(&mut self) -> StoreResult<Vec<ChangeEvent>> {
        let state = self.store.lock();
        let log = state.capped.logs.get(&self.ns);
        if let (Some(cursor), Some(log)) = (self.cursor, log) {
            if cursor.next_seq < log.first_seq() {
                // Overwritten under the cursor (CappedPositionLost): open it again.
                self.cursor = None;
            }
        }
        if self.cursor.is_none() {
            self.cursor = self.open_cursor(log)?;
        }
        let (Some(cursor), Some(log)) = (self.cursor.as_mut(), log) else {
            return Ok(Vec::new());
        };
        let limit = self.options.batch_size.max(1) as usize;
        let mut events = Vec::new();
        let start = usize::try_from(cursor.next_seq - log.first_seq()).unwrap_or(usize::MAX);
        for entry in log.entries.iter().skip(start) {
            if events.len() == limit {
                break;
            }
            cursor.next_seq = entry.seq + 1;
            let passed = cursor.skip_below.is_some_and(|(bound, inclusive)| {
                entry.id < bound || (inclusive && entry.id == bound)
            });
            if passed {
                continue;
            }
            self.position = Position::After(entry.id);
            events.push(ChangeEvent {
                token: crate::model::entry_token(entry.id),
                cluster_time: None,
                operation: OperationType::Insert,
                ns: self.ns.clone(),
                document_key: doc! { "_id": entry.id },
                full_document: Some(entry.document.clone()),
                details: Default::default(),
            });
        }
        Ok(events)
    }
}

impl ChangeStream for SandboxTail {
    async fn next_batch(&mut self) -> StoreResult<ChangeBatch> {
        count(&self.store.inner.calls.next_batch);
        let deadline = Instant::now() + self.options.max_await;
        loop {
            let seen = self.store.lock().capped.appended;
            let events = self.read()?;
            if !events.is_empty() || Instant::now() >= deadline {
                let resume_token = events.last().map(|event| event.token.clone());
                return Ok(ChangeBatch {
                    events,
                    resume_token,
                    cluster_time: None,
                    // Entries of a capped collection are never part of a transaction.
                    at_end: false,
                });
            }
            tokio::select! {
                biased;
                () = self.store.inner.capped_end.grown_past(seen) => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}
