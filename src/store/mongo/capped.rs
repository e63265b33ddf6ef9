//! `CappedFeed` on MongoDB: tailable await-data cursors on capped collections
//! (docs/capped.md; the port's contract is in `crate::store::capped`).
//!
//! What the server does, as seen on a real 6.0.5 (tests/capped_live.rs): a tailable
//! `find` on an empty (or missing) collection comes back with cursor id 0; on a
//! collection with entries but none matching it stays open and later returns entries
//! appended after; a `getMore` whose position was overwritten fails with
//! CappedPositionLost (136); a tailable cursor always scans in insertion order, from
//! the oldest entry, whatever the filter (COLLSCAN).

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use futures_util::{FutureExt, StreamExt};
use mongodb::options::CursorType;
use mongodb::{Collection, Cursor};
use tokio::time::Instant;

use super::errors::{code_of, is_duplicate_key, with_one_retry, CallError};
use super::MongoStore;
use crate::model::{entry_time, entry_token, first_id_of, EntrySpan};
use crate::store::{
    CappedFeed, CappedStats, CappedWindow, ChangeBatch, ChangeEvent, ChangeStream, FeedOptions,
    Namespace, OperationType, StartPoint, StoreError, StoreResult, APPEND_SKEW,
};

const CAPPED_POSITION_LOST: i32 = 136;
/// How long a seek may go without any entry (skipped ones included) before it is taken
/// to have passed the end: a scan that finds entries returns them at once.
const SEEK_PATIENCE: Duration = Duration::from_secs(2);
/// The server no longer knows the cursor (killed, or timed out on the server).
const CURSOR_NOT_FOUND: i32 = 43;
const TAIL_HINT: &str = "find on the capped collection (the built-in read role has it)";

use crate::store::capped::TailPosition as Position;

impl MongoStore {
    fn tail_collection(&self, ns: &Namespace) -> Collection<Document> {
        self.client.database(&ns.db).collection(&ns.coll)
    }

    /// The entry at one end of `ns` (`natural` 1 the oldest, -1 the newest), `_id` only.
    async fn capped_edge(&self, ns: &Namespace, natural: i32) -> StoreResult<Option<ObjectId>> {
        let action = format!(
            "read the {} entry of {ns}",
            if natural > 0 { "oldest" } else { "newest" }
        );
        let collection = self.tail_collection(ns);
        let entry = with_one_retry(self.timeout(), &action, || {
            std::future::IntoFuture::into_future(
                collection
                    .find_one(doc! {})
                    .sort(doc! { "$natural": natural })
                    .projection(doc! { "_id": 1 }),
            )
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, TAIL_HINT))?;
        entry.map(|entry| entry_id(ns, &entry)).transpose()
    }

    async fn holds_entry(&self, ns: &Namespace, id: ObjectId) -> StoreResult<bool> {
        let action = format!("look for entry {id} in {ns}");
        let collection = self.tail_collection(ns);
        let entry = with_one_retry(self.timeout(), &action, || {
            std::future::IntoFuture::into_future(
                collection
                    .find_one(doc! { "_id": id })
                    .projection(doc! { "_id": 1 }),
            )
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, TAIL_HINT))?;
        Ok(entry.is_some())
    }

    /// `listCollections` for `ns`: whether it is capped; `None` when it does not exist.
    async fn is_capped(&self, ns: &Namespace) -> StoreResult<Option<bool>> {
        use futures_util::TryStreamExt;
        let action = format!("read the options of {ns}");
        let database = self.client.database(&ns.db);
        let specs: Vec<mongodb::results::CollectionSpecification> =
            with_one_retry(self.timeout(), &action, || async {
                database
                    .list_collections()
                    .filter(doc! { "name": &ns.coll })
                    .await?
                    .try_collect()
                    .await
            })
            .await
            .map_err(|e| {
                e.into_store_hinted(
                    &action,
                    "listCollections on the database (the built-in read role has it)",
                )
            })?;
        Ok(specs
            .first()
            .map(|spec| spec.options.capped.unwrap_or(false)))
    }
}

fn entry_id(ns: &Namespace, entry: &Document) -> StoreResult<ObjectId> {
    match entry.get("_id") {
        Some(Bson::ObjectId(id)) => Ok(*id),
        other => Err(StoreError::Malformed {
            what: format!("entry of capped collection {ns}"),
            detail: format!(
                "_id is {}, not an ObjectId: a capped source orders and resumes by ObjectId \
                 _ids (docs/capped.md)",
                other.map_or_else(|| "missing".to_string(), |v| format!("{v}"))
            ),
        }),
    }
}

impl CappedFeed for MongoStore {
    type Tail = MongoTail;

    async fn tail(
        &self,
        ns: &Namespace,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<MongoTail> {
        if self.is_capped(ns).await? == Some(false) {
            return Err(crate::store::capped::not_capped(ns));
        }
        let newest = match start {
            StartPoint::Now => self.capped_edge(ns, -1).await?,
            _ => None,
        };
        let position = crate::store::capped::tail_position(ns, start, newest)?;
        Ok(MongoTail {
            store: self.clone(),
            ns: ns.clone(),
            options,
            position,
            cursor: None,
            seeking: None,
            seek_quiet_since: None,
            action: format!("tail capped collection {ns}"),
        })
    }

    async fn capped_window(&self, ns: &Namespace) -> StoreResult<Option<CappedWindow>> {
        let Some(oldest) = self.capped_edge(ns, 1).await? else {
            return Ok(None);
        };
        let newest = self.capped_edge(ns, -1).await?.unwrap_or(oldest);
        Ok(Some(CappedWindow { oldest, newest }))
    }

    async fn ensure_capped(&self, ns: &Namespace, max_bytes: u64) -> StoreResult<()> {
        const NAMESPACE_EXISTS: i32 = 48;
        let action = format!("create capped collection {ns}");
        let database = self.client.database(&ns.db);
        let created = super::errors::bounded(self.timeout(), &action, async {
            database
                .create_collection(&ns.coll)
                .capped(true)
                .size(max_bytes.max(1))
                .await
        })
        .await;
        match created {
            Ok(()) => Ok(()),
            Err(CallError::Driver(e)) if code_of(&e) == Some(NAMESPACE_EXISTS) => {
                match self.is_capped(ns).await? {
                    Some(false) => Err(StoreError::InvalidArgument(format!(
                        "{ns} exists and is not capped"
                    ))),
                    _ => Ok(()),
                }
            }
            Err(e) => Err(e.into_store_hinted(
                &action,
                "createCollection on the database (readWrite has it)",
            )),
        }
    }

    /// `insert` of one entry, majority. The `_id` is made here when missing, so one
    /// retry is safe: a duplicate `_id` on the retry means the first attempt landed.
    async fn append_entry(&self, ns: &Namespace, mut entry: Document) -> StoreResult<ObjectId> {
        let id = match entry.get("_id") {
            Some(Bson::ObjectId(id)) => *id,
            Some(other) => {
                return Err(StoreError::InvalidArgument(format!(
                    "an entry's _id must be an ObjectId, found {other}"
                )))
            }
            None => {
                let id = ObjectId::new();
                entry.insert("_id", id);
                id
            }
        };
        let action = format!("append to capped collection {ns}");
        let collection = self.tail_collection(ns);
        let mut attempts = 0;
        let inserted = with_one_retry(self.write_timeout(), &action, || {
            attempts += 1;
            std::future::IntoFuture::into_future(
                collection
                    .insert_one(entry.clone())
                    .write_concern(self.majority()),
            )
        })
        .await;
        match inserted {
            Ok(_) => Ok(id),
            Err(CallError::Driver(e)) if attempts > 1 && is_duplicate_key(&e) => Ok(id),
            Err(e) => Err(e.into_store_hinted(
                &action,
                &format!(
                    "insert on the capped collection (readWrite on the {} database)",
                    ns.db
                ),
            )),
        }
    }

    async fn capped_stats(&self, ns: &Namespace) -> StoreResult<CappedStats> {
        let action = format!("read the size of {ns} (collStats)");
        let database = self.client.database(&ns.db);
        let reply = with_one_retry(self.timeout(), &action, || {
            std::future::IntoFuture::into_future(
                database.run_command(doc! { "collStats": &ns.coll }),
            )
        })
        .await
        .map_err(|e| {
            e.into_store_hinted(
                &action,
                "collStats on the collection (clusterMonitor, or dbAdmin on its database)",
            )
        })?;
        if !matches!(reply.get("capped"), Some(Bson::Boolean(true))) {
            return Err(StoreError::InvalidArgument(format!(
                "{ns} is not a capped collection"
            )));
        }
        let number = |field: &str| -> StoreResult<Option<u64>> {
            match reply.get(field) {
                None => Ok(None),
                Some(value) => super::codec::integer("collStats reply", value, field)
                    .map(|n| Some(u64::try_from(n).unwrap_or(0))),
            }
        };
        Ok(CappedStats {
            size_bytes: number("size")?.unwrap_or(0),
            max_bytes: number("maxSize")?.unwrap_or(0),
            count: number("count")?.unwrap_or(0),
            max_count: number("max")?.filter(|&max| max > 0),
        })
    }

    async fn count_entries(&self, ns: &Namespace, span: EntrySpan, limit: u64) -> StoreResult<u64> {
        let action = format!("count the entries of {ns}");
        let collection = self.tail_collection(ns);
        let filter = crate::store::capped::span_filter(&span);
        let limit = limit.max(1);
        let counted = with_one_retry(self.timeout(), &action, || {
            std::future::IntoFuture::into_future(
                collection.count_documents(filter.clone()).limit(limit),
            )
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, TAIL_HINT))?;
        Ok(counted.min(limit))
    }

    async fn entry_bytes(
        &self,
        ns: &Namespace,
        span: EntrySpan,
        limit: u64,
    ) -> StoreResult<crate::store::EntryBytes> {
        use futures_util::TryStreamExt;
        let action = format!("sum the entries' sizes in {ns}");
        let collection = self.tail_collection(ns);
        let limit = limit.max(1);
        // One more than the limit tells a span of exactly `limit` from a longer one.
        let pipeline = vec![
            doc! { "$match": crate::store::capped::span_filter(&span) },
            doc! { "$limit": i64::try_from(limit + 1).unwrap_or(i64::MAX) },
            doc! { "$group": {
                "_id": null,
                "entries": { "$sum": 1 },
                "bytes": { "$sum": { "$bsonSize": "$$ROOT" } },
                "largest": { "$max": { "$bsonSize": "$$ROOT" } },
                "greatest": { "$max": "$_id" },
            } },
        ];
        let replies: Vec<Document> = with_one_retry(self.timeout(), &action, || async {
            collection
                .aggregate(pipeline.clone())
                .max_time(self.timeout())
                .await?
                .try_collect()
                .await
        })
        .await
        .map_err(|e| e.into_store_hinted(&action, TAIL_HINT))?;
        let Some(reply) = replies.first() else {
            return Ok(crate::store::EntryBytes {
                complete: true,
                ..Default::default()
            });
        };
        let number = |field: &str| -> StoreResult<u64> {
            let value = reply.get(field).ok_or_else(|| StoreError::Malformed {
                what: "entry sizes".into(),
                detail: format!("field {field}: missing"),
            })?;
            super::codec::integer("entry sizes", value, field)
                .map(|n| u64::try_from(n).unwrap_or(0))
        };
        let entries = number("entries")?;
        Ok(crate::store::EntryBytes {
            entries: entries.min(limit),
            bytes: number("bytes")?,
            largest: number("largest")?,
            greatest: match reply.get("greatest") {
                Some(Bson::ObjectId(id)) => Some(*id),
                _ => None,
            },
            complete: entries <= limit,
        })
    }
}

/// A capped collection followed by [`CappedFeed::tail`].
pub struct MongoTail {
    store: MongoStore,
    ns: Namespace,
    options: FeedOptions,
    /// Where a new cursor starts: after the last entry handed over.
    position: Position,
    cursor: Option<Cursor<Document>>,
    /// Entries are skipped up to and including this one: the cursor reads from a
    /// little before the entry the stream resumes after (see [`APPEND_SKEW`]).
    seeking: Option<ObjectId>,
    /// While seeking: since when no entry at all has come. Past [`SEEK_PATIENCE`] the
    /// scan has reached the end without the entry (overwritten since the cursor opened).
    seek_quiet_since: Option<Instant>,
    action: String,
}

impl std::fmt::Debug for MongoTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoTail")
            .field("ns", &self.ns)
            .field("position", &self.position)
            .finish()
    }
}

/// What one step of reading gave.
enum Step {
    Entry(Document),
    /// Nothing came within the wait (or nothing was ready, when not waiting).
    Nothing,
    /// The server closed the cursor (an empty collection, or killed).
    Closed,
    /// The cursor's position was overwritten (CappedPositionLost).
    Overwritten,
}

impl MongoTail {
    /// The filter and seek of a new cursor from the stream's position; `HistoryLost`
    /// when the entry it resumes after is gone and the oldest entry is newer.
    async fn open_cursor(&mut self) -> StoreResult<()> {
        let (filter, seeking) = match self.position {
            // Every other start is an `_id` range, which holds ObjectIds only; this
            // one leaves other `_id`s out too, so no start hands them over.
            Position::Everything => (doc! { "_id": { "$type": "objectId" } }, None),
            Position::From(from) => (doc! { "_id": { "$gte": from } }, None),
            Position::After(after) => {
                if self.store.holds_entry(&self.ns, after).await? {
                    let skew = u32::try_from(APPEND_SKEW.as_secs()).unwrap_or(u32::MAX);
                    let from = first_id_of(entry_time(&after).secs.saturating_sub(skew));
                    (doc! { "_id": { "$gte": from } }, Some(after))
                } else {
                    match self.store.capped_edge(&self.ns, 1).await? {
                        Some(oldest) if oldest > after => {
                            return Err(crate::store::capped::position_overwritten(
                                &self.ns, after, oldest,
                            ))
                        }
                        // Not an entry (an operator's position), or the collection was
                        // emptied: whatever is above it comes after it.
                        _ => (doc! { "_id": { "$gt": after } }, None),
                    }
                }
            }
        };
        let collection = self.store.tail_collection(&self.ns);
        let batch_size = self.options.batch_size.max(1);
        let cursor = with_one_retry(self.store.timeout(), &self.action, || {
            std::future::IntoFuture::into_future(
                collection
                    .find(filter.clone())
                    .cursor_type(CursorType::TailableAwait)
                    .max_await_time(self.options.max_await)
                    .batch_size(batch_size),
            )
        })
        .await
        .map_err(|e| e.into_store_hinted(&self.action, TAIL_HINT))?;
        self.cursor = Some(cursor);
        self.seeking = seeking;
        self.seek_quiet_since = None;
        Ok(())
    }

    /// One entry from the cursor: waiting up to `wait`, or only taking what is ready
    /// when `wait` is `None`. A read not answered in time goes on in the cursor and is
    /// taken up by the next step. (The driver repeats empty getMores of an idle
    /// tailable cursor by itself, so a silent server cannot be told from an idle
    /// collection here; the lease writes, bounded by the operation timeout, notice it.)
    async fn step(&mut self, wait: Option<Duration>) -> StoreResult<Step> {
        let Some(cursor) = self.cursor.as_mut() else {
            return Ok(Step::Closed);
        };
        let next = match wait {
            Some(wait) => tokio::time::timeout(wait, cursor.next()).await.ok(),
            None => cursor.next().now_or_never(),
        };
        let Some(next) = next else {
            return Ok(Step::Nothing);
        };
        match next {
            Some(Ok(entry)) => Ok(Step::Entry(entry)),
            None => {
                self.cursor = None;
                Ok(Step::Closed)
            }
            Some(Err(e)) if code_of(&e) == Some(CAPPED_POSITION_LOST) => {
                self.cursor = None;
                Ok(Step::Overwritten)
            }
            Some(Err(e)) if code_of(&e) == Some(CURSOR_NOT_FOUND) => {
                tracing::info!(ns = %self.ns, "the tailable cursor was killed; opening another");
                self.cursor = None;
                Ok(Step::Closed)
            }
            Some(Err(e)) => {
                self.cursor = None;
                Err(CallError::Driver(e).into_store_hinted(&self.action, TAIL_HINT))
            }
        }
    }
}

impl ChangeStream for MongoTail {
    /// Up to `batch_size` entries: the first waited for up to `max_await`, the rest
    /// only as far as the cursor already holds them.
    ///
    /// A tail always waits on the server; it never polls ([`super::read_pace`]). The
    /// driver repeats an empty getMore of a tailable cursor by itself and keeps the one
    /// in flight, with its pooled connection, inside the cursor until the cursor is
    /// read again: a poll cut short here would hold a connection through its pause.
    async fn next_batch(&mut self) -> StoreResult<ChangeBatch> {
        let deadline = Instant::now() + self.options.max_await;
        self.read_batch(deadline).await
    }
}

impl MongoTail {
    async fn read_batch(&mut self, deadline: Instant) -> StoreResult<ChangeBatch> {
        let mut events: Vec<ChangeEvent> = Vec::new();
        let mut reopened = false;
        while events.len() < self.options.batch_size.max(1) as usize {
            if self.cursor.is_none() {
                if reopened {
                    // Closed again at once (an empty collection): poll, don't spin.
                    if events.is_empty() {
                        tokio::time::sleep_until(deadline).await;
                    }
                    break;
                }
                self.open_cursor().await?;
                reopened = true;
            }
            let wait = events
                .is_empty()
                .then(|| deadline.saturating_duration_since(Instant::now()));
            match self.step(wait).await? {
                Step::Entry(entry) => {
                    let id = entry_id(&self.ns, &entry)?;
                    if let Some(seeking) = self.seeking {
                        if id == seeking {
                            self.seeking = None;
                        }
                        self.seek_quiet_since = None;
                        continue;
                    }
                    self.position = Position::After(id);
                    events.push(ChangeEvent {
                        token: entry_token(id),
                        cluster_time: None,
                        operation: OperationType::Insert,
                        ns: self.ns.clone(),
                        document_key: doc! { "_id": id },
                        full_document: Some(entry),
                        details: Default::default(),
                    });
                }
                Step::Nothing => {
                    if self.seeking.is_some() {
                        let quiet = *self.seek_quiet_since.get_or_insert_with(Instant::now);
                        if quiet.elapsed() >= SEEK_PATIENCE.max(self.options.max_await * 4) {
                            // The scan reached the end without the entry it resumes
                            // after: overwritten since the cursor opened. The next
                            // open tells a lost position from one still readable.
                            self.cursor = None;
                            self.seeking = None;
                        }
                    }
                    break;
                }
                Step::Closed | Step::Overwritten => {
                    if !events.is_empty() {
                        break;
                    }
                }
            }
        }
        let resume_token = events.last().map(|event| event.token.clone());
        // A capped collection is read by `find`, not a change stream: no lag is known.
        Ok(ChangeBatch {
            events,
            resume_token,
            cluster_time: None,
            // Entries of a capped collection are never part of a transaction.
            at_end: false,
        })
    }
}
