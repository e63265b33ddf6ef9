//! The change-feed port: change streams and the oplog window.

use std::future::Future;
use std::time::Duration;

use bson::Document;

use super::{Namespace, StoreResult};
use crate::model::{ClusterTime, OplogWindow, Partition, ResumeToken, StreamProfile};

/// Where a stream opens: `resumeAfter`, `startAtOperationTime` (inclusive), or now.
#[derive(Debug, Clone, PartialEq)]
pub enum StartPoint {
    After(ResumeToken),
    At(ClusterTime),
    Now,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeedOptions {
    /// Most events handed over per batch.
    pub batch_size: u32,
    /// How long one `next_batch` waits for a first event before returning empty.
    pub max_await: Duration,
    /// The document after each change (`fullDocument`).
    pub post_image: PostImage,
    /// The document before each change (`fullDocumentBeforeChange`).
    pub pre_image: PreImage,
    /// Ask for the events of data definition too (`showExpandedEvents`: create,
    /// createIndexes, dropIndexes, modify, shardCollection, …; MongoDB 6.0+). They reach
    /// a handler as [`OperationType::Other`].
    pub expanded_events: bool,
    /// Read on while what was read is handled, and hand each batch what has arrived
    /// (after waiting for a first event), up to `batch_size` events. On MongoDB a task
    /// of the stream's own reads ahead, in the server's own batches, bounded in bytes
    /// (`READ_AHEAD_BYTES`); off, a batch is read when asked, one command at a time,
    /// with `batch_size` as the server's batch size. The sandbox always hands what is
    /// there.
    pub read_ahead: bool,
}

impl Default for FeedOptions {
    fn default() -> Self {
        Self {
            batch_size: 1,
            max_await: Duration::from_secs(1),
            post_image: PostImage::default(),
            pre_image: PreImage::default(),
            expanded_events: false,
            read_ahead: false,
        }
    }
}

/// What a stream asks for as the document after an update (`fullDocument`); inserts
/// and replacements always carry theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PostImage {
    /// None for an update.
    Off,
    /// The document as it is when the change is read, which is not always as the
    /// update left it (two updates in a row can deliver the same document twice).
    #[default]
    UpdateLookup,
    /// The document as the update left it, where the collection keeps post-images
    /// (`changeStreamPreAndPostImages`, MongoDB 6.0+); none otherwise.
    WhenAvailable,
    /// As `WhenAvailable`, and a change without one cannot be read: the listener
    /// records it as a failing change ([`super::StoreError::UnreadableChange`]).
    Required,
}

/// What a stream asks for as the document before an update, replacement or delete
/// (`fullDocumentBeforeChange`, MongoDB 6.0+, kept only where the collection has
/// `changeStreamPreAndPostImages` enabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreImage {
    #[default]
    Off,
    WhenAvailable,
    /// A change without one cannot be read: the listener records it as a failing
    /// change ([`super::StoreError::UnreadableChange`]).
    Required,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationType {
    Insert,
    Update,
    Replace,
    Delete,
    /// Azure Cosmos DB (the `cosmos` profile): an insert, an update or a replace, the
    /// server does not say which (its events carry no `operationType`).
    /// `full_document` is the document as it is when the change is read (`updateLookup`);
    /// `None` if it was gone by then. Deletes are never seen there (docs/cosmos.md).
    Upsert,
    Other(String),
}

impl OperationType {
    pub fn parse(name: &str) -> Self {
        match name {
            "insert" => OperationType::Insert,
            "update" => OperationType::Update,
            "replace" => OperationType::Replace,
            "delete" => OperationType::Delete,
            other => OperationType::Other(other.to_string()),
        }
    }

    /// The name the server gives it (`upsert` for Azure Cosmos DB's unnamed changes).
    pub fn name(&self) -> &str {
        match self {
            OperationType::Insert => "insert",
            OperationType::Update => "update",
            OperationType::Replace => "replace",
            OperationType::Delete => "delete",
            OperationType::Upsert => "upsert",
            OperationType::Other(name) => name,
        }
    }
}

/// One change event, as a handler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEvent {
    /// Where to resume after this change. On Azure Cosmos DB every event of one server
    /// batch (page) carries the same token, which resumes after the whole page.
    pub token: ResumeToken,
    /// The change's place in the cluster's history; `None` on Azure Cosmos DB, whose
    /// events carry no `clusterTime` (there is no oplog to place them in).
    pub cluster_time: Option<ClusterTime>,
    pub operation: OperationType,
    pub ns: Namespace,
    pub document_key: Document,
    /// The post-image (`fullDocument: updateLookup`); `None` for deletes (and for a
    /// document deleted before its change was read).
    pub full_document: Option<Document>,
    /// What else the server sent: what an update changed, the transaction, the wall
    /// clock, the collection's UUID, the whole event ([`ChangeEvent::raw`]).
    pub details: super::EventDetails,
}

impl ChangeEvent {
    /// The UUID of the collection the change is on: `collectionUUID` where the server
    /// sent it, else the one its resume token carries.
    pub fn collection_uuid(&self) -> Option<[u8; 16]> {
        self.details
            .collection_uuid
            .or_else(|| self.token.collection_uuid())
    }
}

/// What one round trip returned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChangeBatch {
    pub events: Vec<ChangeEvent>,
    /// Resume here to continue after this batch: the last event's token, or the
    /// post-batch (high-water-mark) token when the batch is empty.
    pub resume_token: Option<ResumeToken>,
    /// The cluster time the server's reply carried (`$clusterTime`), where the store
    /// learns it with the batch: how far the stream is behind is measured against it.
    pub cluster_time: Option<ClusterTime>,
    /// The stream had nothing more to hand when this batch ended (a read came back
    /// empty, or the history's end was reached). Such a batch never ends inside a
    /// transaction: a transaction's changes enter the history together, at its
    /// commit. `false` when not known (the batch filled up).
    pub at_end: bool,
}

impl ChangeBatch {
    /// Where the stream is once this batch is handled: the time of its last change, or
    /// of its post-batch token when it is empty.
    pub fn reached(&self) -> Option<ClusterTime> {
        match self.events.last() {
            Some(last) => last.cluster_time.or_else(|| last.token.time()),
            None => self.resume_token.as_ref().and_then(ResumeToken::time),
        }
    }
}

pub trait ChangeStream: Send {
    /// At most `batch_size` events; waits up to `max_await` for the first one. Under
    /// the Cosmos DB profile a batch holds whole server pages instead (every event of a
    /// page carries the page's token, and resuming from it skips the rest of the page),
    /// so it may hold more, and it ends only where a page does.
    /// `HistoryLost` when the stream's position has fallen off the history.
    /// `Invalidated` once the server has closed the stream for good: the changes
    /// before the drop or rename come first, in their own batch; the drop or rename
    /// itself is never an event (it is the error's cause), and neither its token nor
    /// the invalidate token is ever a batch's `resume_token`. A closed stream keeps
    /// answering `Invalidated`, at once.
    fn next_batch(&mut self) -> impl Future<Output = StoreResult<ChangeBatch>> + Send;
}

pub trait ChangeFeed: Send + Sync {
    type Stream: ChangeStream + 'static;

    /// The kind of change streams this store offers. What a listener may ask of them
    /// follows from it: under [`StreamProfile::CosmosDb`] there is no oplog (no oldest
    /// entry, no window) and a stream opens at now or after a token, never at a time.
    fn profile(&self) -> StreamProfile {
        StreamProfile::MongoDb
    }

    /// The whole stream of `ns` from `start`.
    fn open(
        &self,
        ns: &Namespace,
        start: StartPoint,
        options: FeedOptions,
    ) -> impl Future<Output = StoreResult<Self::Stream>> + Send {
        self.open_partition(ns, None, start, options)
    }

    /// The stream of `ns` from `start`, keeping only the changes of `partition`'s
    /// document keys and every change that is not about one document (a drop, rename
    /// or invalidate reaches every partition): docs/protocol.md, "Partitions". `None`
    /// opens the whole stream.
    fn open_partition(
        &self,
        ns: &Namespace,
        partition: Option<Partition>,
        start: StartPoint,
        options: FeedOptions,
    ) -> impl Future<Output = StoreResult<Self::Stream>> + Send;

    /// First (`op != "n"`) and last oplog entry. `NotPermitted` without access to the oplog.
    fn oplog_window(&self) -> impl Future<Output = StoreResult<OplogWindow>> + Send;

    /// The latest cluster time the server reports.
    fn cluster_time(&self) -> impl Future<Output = StoreResult<ClusterTime>> + Send;

    /// The oplog entry at cluster time `at` (through a mongos, the first shard's that
    /// has one); `None` when none is there any more. `NotPermitted` without access to
    /// the oplog.
    fn oplog_entry(
        &self,
        at: ClusterTime,
    ) -> impl Future<Output = StoreResult<Option<bson::Document>>> + Send;
}
