//! The capped-collection port: a capped collection read as an event store, in
//! insertion order, by a tailable await-data cursor (docs/capped.md).
//!
//! The stream's events are the entries (each an insert), their tokens the position
//! after them (`{_id: ObjectId}`, [`crate::model::entry_token`]). A stream:
//! - hands over what the cursor already holds without waiting, and waits up to
//!   `max_await` only when it holds nothing ("drain what is there, block only when
//!   nothing is");
//! - re-creates its cursor when the server closes it (an empty collection closes a
//!   tailable cursor at once: the stream then polls every `max_await`) and when its
//!   position was overwritten under it (`CappedPositionLost`), from the last entry it
//!   handed over;
//! - resumes after an entry in insertion order: it reads from [`APPEND_SKEW`] before
//!   the entry's ObjectId time and skips up to the entry itself, so an entry appended
//!   later with a slightly older `_id` (another appender's clock) is not missed;
//! - answers `HistoryLost` once the entry it resumes after has been overwritten and
//!   the oldest entry left is newer than it: what came after it may be gone.

use std::future::Future;
use std::time::Duration;

use bson::oid::ObjectId;
use bson::Document;

use super::ChangeStream;
use super::{FeedOptions, Namespace, StartPoint, StoreResult};
use crate::model::{entry_time, EntrySpan, EntryStart, OplogWindow};

/// How much older than the entry a stream resumes after an `_id` appended after it
/// may be and still be read: the clock skew allowed between appenders (ObjectIds are
/// made by the client, from its clock, in whole seconds).
pub const APPEND_SKEW: Duration = Duration::from_secs(10);

/// The oldest and newest entries a capped collection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CappedWindow {
    pub oldest: ObjectId,
    pub newest: ObjectId,
}

impl CappedWindow {
    /// As times, so lag, headroom and the statuses are measured as on the oplog.
    pub fn times(&self) -> OplogWindow {
        OplogWindow::new(entry_time(&self.oldest), entry_time(&self.newest))
    }
}

/// How full a capped collection is (its `collStats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CappedStats {
    /// Bytes of the entries it holds.
    pub size_bytes: u64,
    /// Its size limit in bytes (`maxSize`).
    pub max_bytes: u64,
    pub count: u64,
    /// Its limit in entries, when it has one (`max`).
    pub max_count: Option<u64>,
}

pub trait CappedFeed: Send + Sync {
    type Tail: ChangeStream + 'static;

    /// A tailable cursor on capped collection `ns` from `start`: after an entry (a
    /// token made by [`crate::model::entry_token`]), at a time (entries whose `_id`
    /// was made at or after it), or after the newest entry. `InvalidArgument` for a
    /// change stream's token, and when `ns` exists and is not capped.
    fn tail(
        &self,
        ns: &Namespace,
        start: StartPoint,
        options: FeedOptions,
    ) -> impl Future<Output = StoreResult<Self::Tail>> + Send;

    /// The oldest and newest entries of `ns`; `None` while it is empty (or missing).
    fn capped_window(
        &self,
        ns: &Namespace,
    ) -> impl Future<Output = StoreResult<Option<CappedWindow>>> + Send;

    /// Creates capped collection `ns` holding at most `max_bytes` of entries, or keeps
    /// it as it is when it exists. `InvalidArgument` when `ns` exists and is not capped.
    fn ensure_capped(
        &self,
        ns: &Namespace,
        max_bytes: u64,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Appends `entry` to capped collection `ns` (one insert), with an ObjectId `_id`
    /// made now by this store's clock unless it has one; returns the `_id`. The
    /// collection must exist capped ([`CappedFeed::ensure_capped`]): MongoDB would make
    /// a plain collection on a first insert, the sandbox refuses. `InvalidArgument`
    /// when the `_id` is not an ObjectId.
    fn append_entry(
        &self,
        ns: &Namespace,
        entry: Document,
    ) -> impl Future<Output = StoreResult<ObjectId>> + Send;

    /// How full `ns` is. `InvalidArgument` when it is not a capped collection.
    fn capped_stats(&self, ns: &Namespace)
        -> impl Future<Output = StoreResult<CappedStats>> + Send;

    /// How many entries of `ns` lie in `span` (by `_id`), counting at most `limit` (a
    /// result equal to `limit` means "at least"): what a move of a capped lease's
    /// position replays or skips. Entries already overwritten are not counted; a
    /// missing collection holds none.
    fn count_entries(
        &self,
        ns: &Namespace,
        span: EntrySpan,
        limit: u64,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// The entries of `ns` in `span` and their bytes (BSON sizes, as the collection's
    /// size counts them), summing at most `limit` entries: what a time-to-loss
    /// prediction needs (the history before a position, the bytes appended between
    /// two reads).
    fn entry_bytes(
        &self,
        ns: &Namespace,
        span: EntrySpan,
        limit: u64,
    ) -> impl Future<Output = StoreResult<EntryBytes>> + Send;
}

/// Where a tail's next cursor starts: decided from a start point the same way by
/// both stores ([`tail_position`]).
#[cfg(any(feature = "sandbox", feature = "mongo"))]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum TailPosition {
    /// After this entry, in insertion order.
    After(ObjectId),
    /// Entries whose `_id` is at or above this one (a start at a time).
    From(ObjectId),
    /// Every entry: nothing has been read yet and the start was "now" on an empty
    /// collection, so whatever is appended first is new.
    Everything,
}

/// Where a tail of `ns` from `start` begins; `newest` is the collection's newest entry,
/// read by the caller for a start at now. `InvalidArgument` for a change stream's token.
#[cfg(any(feature = "sandbox", feature = "mongo"))]
pub(crate) fn tail_position(
    ns: &Namespace,
    start: StartPoint,
    newest: Option<ObjectId>,
) -> super::StoreResult<TailPosition> {
    Ok(match start {
        StartPoint::After(token) => match crate::model::token_entry(&token) {
            Some(id) => TailPosition::After(id),
            None => {
                return Err(super::StoreError::InvalidArgument(format!(
                    "resume token {token} is not a position in capped collection {ns} \
                     ({{_id: ObjectId}}): rewind the lease to a time or an entry's _id, or \
                     reset it"
                )))
            }
        },
        StartPoint::At(at) => TailPosition::From(crate::model::first_id_of(at.secs)),
        StartPoint::Now => newest.map_or(TailPosition::Everything, TailPosition::After),
    })
}

/// A tail asked of a collection that exists and is not capped.
#[cfg(any(feature = "sandbox", feature = "mongo"))]
pub(crate) fn not_capped(ns: &Namespace) -> super::StoreError {
    super::StoreError::InvalidArgument(format!(
        "{ns} is not a capped collection: a capped source tails one (create it with \
         capped: true and a size), or configure the resource as a change stream"
    ))
}

/// The entry a tail resumes after is gone and `oldest` is newer: what followed it may be
/// gone too (MongoDB's code for a tailable cursor's lost position, CappedPositionLost).
#[cfg(any(feature = "sandbox", feature = "mongo"))]
pub(crate) fn position_overwritten(
    ns: &Namespace,
    after: ObjectId,
    oldest: ObjectId,
) -> super::StoreError {
    super::StoreError::HistoryLost {
        code: 136,
        message: format!(
            "entry {after} of {ns} has been overwritten and the oldest entry left ({oldest}) \
             is newer: entries after it may be gone"
        ),
    }
}

/// The entries of one span of a capped collection, by their BSON size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntryBytes {
    pub entries: u64,
    pub bytes: u64,
    /// The largest entry among them.
    pub largest: u64,
    /// The greatest `_id` among them (not the last appended: appenders' ids interleave).
    pub greatest: Option<ObjectId>,
    /// Every entry of the span was counted (not stopped at the limit).
    pub complete: bool,
}

/// An upper bound above every `_id`: a span that ends with it has no upper end.
pub(crate) const ABOVE_EVERY_ID: EntryStart = EntryStart::After(ObjectId::from_bytes([0xff; 12]));

/// The `_id` filter of the entries in `span`, as MongoDB's query language says it.
#[cfg(feature = "mongo")]
pub(crate) fn span_filter(span: &EntrySpan) -> bson::Document {
    let mut range = bson::Document::new();
    match span.from {
        EntryStart::Oldest => {}
        EntryStart::From(id) => {
            range.insert("$gte", id);
        }
        EntryStart::After(id) => {
            range.insert("$gt", id);
        }
    }
    match span.until {
        // Nothing is read before the oldest: an empty span.
        EntryStart::Oldest => {
            range.insert("$in", bson::Bson::Array(Vec::new()));
        }
        EntryStart::From(id) => {
            range.insert("$lt", id);
        }
        EntryStart::After(id) => {
            range.insert("$lte", id);
        }
    }
    if range.is_empty() {
        bson::Document::new()
    } else {
        bson::doc! { "_id": range }
    }
}
