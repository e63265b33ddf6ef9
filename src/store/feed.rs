//! The change-feed port: change streams and the oplog window.

use std::fmt;
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

/// What closed a change stream for good: the change the server's `invalidate` event
/// follows on a collection stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidationCause {
    /// The watched collection was dropped (also by `dropDatabase`).
    Dropped(Namespace),
    /// The watched collection was renamed to `to`.
    Renamed { from: Namespace, to: Namespace },
    /// `from` was renamed onto the watched collection `to`, replacing it:
    /// `renameCollection` with `dropTarget`, or an aggregation's `$out`.
    Replaced { from: Namespace, to: Namespace },
    /// The watched collection's database was dropped.
    DatabaseDropped(String),
    /// The stream was resumed from its own invalidate notification (server code 260):
    /// what closed it is no longer known.
    ResumedFromInvalidate,
    /// An `invalidate` that no drop or rename of the watched collection preceded.
    Unknown,
}

impl InvalidationCause {
    /// Whether a change of kind `operation` on `ns` (renamed `to`, for a rename) closes
    /// a stream on `watched`, and why. Collection streams see `drop` of their own
    /// collection, `rename` away from it or onto it, then `invalidate`; `dropDatabase`
    /// closes them too where the server sends it.
    pub fn of_change(
        watched: &Namespace,
        operation: &str,
        ns: &Namespace,
        to: Option<&Namespace>,
    ) -> Option<Self> {
        match (operation, to) {
            ("drop", _) if ns == watched => Some(Self::Dropped(ns.clone())),
            ("rename", Some(to)) if ns == watched => Some(Self::Renamed {
                from: ns.clone(),
                to: to.clone(),
            }),
            ("rename", Some(to)) if to == watched => Some(Self::Replaced {
                from: ns.clone(),
                to: to.clone(),
            }),
            ("dropDatabase", _) if ns.db == watched.db => {
                Some(Self::DatabaseDropped(ns.db.clone()))
            }
            _ => None,
        }
    }
}

impl fmt::Display for InvalidationCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dropped(ns) => write!(f, "{ns} was dropped"),
            Self::Renamed { from, to } => write!(f, "{from} was renamed to {to}"),
            Self::Replaced { from, to } => write!(
                f,
                "{to} was replaced: {from} was renamed onto it ($out, or renameCollection with dropTarget)"
            ),
            Self::DatabaseDropped(db) => write!(f, "database {db} was dropped"),
            Self::ResumedFromInvalidate => f.write_str(
                "the stored resume token is the invalidate notification of a closed change stream",
            ),
            Self::Unknown => f.write_str("the server closed the change stream (invalidate)"),
        }
    }
}

pub trait ChangeStream: Send {
    /// At most `batch_size` events; waits up to `max_await` for the first one.
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
}
