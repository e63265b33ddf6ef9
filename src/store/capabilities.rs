//! What a store may offer beyond the listener's port: capped collections to tail and
//! measure, and checkpoints. Each is asked for where it is used (a capped source, a
//! commit worth a checkpoint, a plan that measures a capped lease), so a store written
//! for the listener alone implements neither and answers [`NotOffered`].

use bson::oid::ObjectId;
use bson::Document;

use super::{
    CappedFeed, CappedStats, CappedWindow, ChangeBatch, ChangeStream, CheckpointStore, EntryBytes,
    FeedOptions, Listing, Namespace, StartPoint, StoreResult, Tenure,
};
use crate::model::{Checkpoint, EntrySpan, ResumeToken};

/// The optional ports of a store. A store that offers one returns itself (or a part of
/// itself); one that does not names [`NotOffered`] and returns `None`:
///
/// ```ignore
/// impl Capabilities for MyStore {
///     type Capped = NotOffered;
///     type Checkpoints = NotOffered;
///     fn capped_feed(&self) -> Option<&NotOffered> { None }
///     fn checkpoint_store(&self) -> Option<&NotOffered> { None }
/// }
/// ```
pub trait Capabilities: Send + Sync {
    type Capped: CappedFeed;
    type Checkpoints: CheckpointStore;

    /// Capped collections, when this store has them. Without them a capped source is
    /// refused when its listener opens it, and a capped lease cannot be measured.
    fn capped_feed(&self) -> Option<&Self::Capped>;

    /// Checkpoints, when this store keeps them. Without them a listener records none
    /// and a rewind has none to go back to.
    fn checkpoint_store(&self) -> Option<&Self::Checkpoints>;
}

/// A port a store does not offer: a type with no value, so none of its methods can
/// ever be called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOffered {}

impl ChangeStream for NotOffered {
    async fn next_batch(&mut self) -> StoreResult<ChangeBatch> {
        match *self {}
    }
}

impl CappedFeed for NotOffered {
    type Tail = NotOffered;

    async fn tail(&self, _: &Namespace, _: StartPoint, _: FeedOptions) -> StoreResult<Self::Tail> {
        match *self {}
    }

    async fn capped_window(&self, _: &Namespace) -> StoreResult<Option<CappedWindow>> {
        match *self {}
    }

    async fn ensure_capped(&self, _: &Namespace, _: u64) -> StoreResult<()> {
        match *self {}
    }

    async fn append_entry(&self, _: &Namespace, _: Document) -> StoreResult<ObjectId> {
        match *self {}
    }

    async fn capped_stats(&self, _: &Namespace) -> StoreResult<CappedStats> {
        match *self {}
    }

    async fn count_entries(&self, _: &Namespace, _: EntrySpan, _: u64) -> StoreResult<u64> {
        match *self {}
    }

    async fn entry_bytes(&self, _: &Namespace, _: EntrySpan, _: u64) -> StoreResult<EntryBytes> {
        match *self {}
    }
}

impl CheckpointStore for NotOffered {
    async fn record_checkpoint(&self, _: &Tenure, _: &ResumeToken, _: u32) -> StoreResult<()> {
        match *self {}
    }

    async fn checkpoints(&self, _: &str, _: u32) -> StoreResult<Listing<Checkpoint>> {
        match *self {}
    }
}

/// Why there are no checkpoints to show or go back to on a store that keeps none.
pub const NO_CHECKPOINTS: &str =
    "this store keeps no checkpoints (its Capabilities::checkpoint_store is None)";

/// Why a capped collection cannot be read on a store that offers none.
pub(crate) fn no_capped_feed(ns: &Namespace) -> String {
    format!(
        "{ns} is read as a capped collection, and this store offers no capped collections \
         (its Capabilities::capped_feed is None)"
    )
}
