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
use crate::model::{entry_time, OplogWindow};

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
}
