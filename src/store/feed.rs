//! The change-feed port: change streams and the oplog window.

use std::future::Future;
use std::time::Duration;

use bson::Document;

use super::{Namespace, StoreResult};
use crate::model::{ClusterTime, OplogWindow, ResumeToken};

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
}

impl Default for FeedOptions {
    fn default() -> Self {
        Self {
            batch_size: 1,
            max_await: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperationType {
    Insert,
    Update,
    Replace,
    Delete,
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
}

/// One change event, as a handler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeEvent {
    pub token: ResumeToken,
    pub cluster_time: ClusterTime,
    pub operation: OperationType,
    pub ns: Namespace,
    pub document_key: Document,
    /// The post-image (`fullDocument: updateLookup`); `None` for deletes.
    pub full_document: Option<Document>,
}

/// What one round trip returned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChangeBatch {
    pub events: Vec<ChangeEvent>,
    /// Resume here to continue after this batch: the last event's token, or the
    /// post-batch (high-water-mark) token when the batch is empty.
    pub resume_token: Option<ResumeToken>,
}

pub trait ChangeStream: Send {
    /// At most `batch_size` events; waits up to `max_await` for the first one.
    /// `HistoryLost` when the stream's position has fallen off the history.
    fn next_batch(&mut self) -> impl Future<Output = StoreResult<ChangeBatch>> + Send;
}

pub trait ChangeFeed: Send + Sync {
    type Stream: ChangeStream + 'static;

    fn open(
        &self,
        ns: &Namespace,
        start: StartPoint,
        options: FeedOptions,
    ) -> impl Future<Output = StoreResult<Self::Stream>> + Send;

    /// First (`op != "n"`) and last oplog entry. `NotPermitted` without access to the oplog.
    fn oplog_window(&self) -> impl Future<Output = StoreResult<OplogWindow>> + Send;

    /// The latest cluster time the server reports.
    fn cluster_time(&self) -> impl Future<Output = StoreResult<ClusterTime>> + Send;

    /// How many history entries on `ns` have a time in `from..=to`, counting at most
    /// `limit` (a result equal to `limit` means "at least"). What a rewind replays or a
    /// reset skips. Entries that fell off the history are not counted.
    /// `NotPermitted` without access to the oplog.
    fn count_changes(
        &self,
        ns: &Namespace,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
}
