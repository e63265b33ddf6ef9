//! How one listener behaves.

use std::time::Duration;

use crate::model::{LockKind, Partition, SourceKind, WatchTarget};
use crate::store::{Namespace, PostImage, PreImage};

/// How a listener commits what its handler went through (docs/protocol.md, "Group
/// commits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPolicy {
    /// What was handled is committed in the background: the commit stays in flight
    /// while the next batch is handled, at most one is in flight, and each covers
    /// everything handled since the one before. One is sent once `every` has passed
    /// since the last, and sooner when the stream is caught up (a read came back
    /// empty), the lease is due for a refresh, a failing change was passed, or the
    /// tenure ends. A crash redelivers what was handled since the last commit that
    /// landed: safe for handlers whose writes are fenced or idempotent.
    Group { every: Duration },
    /// Each batch is committed before the next is handed: at `batch_size` 1, one
    /// commit per change, and a crash redelivers at most the batch being handled. For
    /// handlers that are not idempotent; one majority write per batch bounds the rate.
    Strict,
}

impl Default for CommitPolicy {
    fn default() -> Self {
        Self::Group {
            every: Duration::from_secs(1),
        }
    }
}

/// Where a listener without any resume point starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bootstrap {
    /// From the oldest oplog entry, so nothing written before the first listener is missed.
    /// Refuses to start where the oplog cannot be read, and on Azure Cosmos DB (no oplog,
    /// and no documented way for one change stream to start at the beginning of a
    /// collection: docs/cosmos.md).
    #[default]
    Oldest,
    /// From now: changes made before the first commit are skipped. Only when configured.
    Now,
}

#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// The lease `_id`: the resource this listener owns exclusively.
    pub resource: String,
    /// This process's identity as a holder; unique per listener instance.
    pub listener_id: String,
    /// The namespace whose changes are handled.
    pub watch: Namespace,
    /// Its change stream (default), or its entries when it is a capped collection
    /// used as an event store (docs/capped.md).
    pub source: SourceKind,
    pub kind: LockKind,
    /// How long a lease lasts without a refresh or commit.
    pub lease: Duration,
    /// The holder refreshes after this share of the lease has passed.
    pub refresh_fraction: f64,
    /// The most changes one handler call gets: with `read_ahead`, a batch is what the
    /// stream already has, up to this many.
    pub batch_size: u32,
    /// How long one read waits for changes before the loop looks at its timers.
    pub max_batch_wait: Duration,
    /// An idle holder commits the post-batch token this often.
    pub heartbeat: Duration,
    /// Rotation: after holding this long, finish the batch, commit and release.
    pub max_tenure: Option<Duration>,
    pub bootstrap: Bootstrap,
    /// Pause after a store error or failed batch before trying again; a change the
    /// handler fails on is retried after this, doubled per attempt, at most a minute.
    pub retry_backoff: Duration,
    /// After this many attempts on one change (by every listener of the lease), the
    /// holder steps over it by itself: kept in the skipped collection with an audit
    /// record naming this listener, as `streamward skip` does. `None` (the default):
    /// it keeps failing until fixed or skipped by an operator.
    pub skip_after: Option<u32>,
    /// Read on while a batch is handled and committed, so reads overlap them, and
    /// hand each batch what the stream already has (default; on MongoDB a task of the
    /// stream's own reads ahead, bounded in bytes: `FeedOptions::read_ahead`). Under
    /// [`CommitPolicy::Strict`] the next batch reaches the handler only after the
    /// current commit landed; a tenure that ends drops what was read ahead.
    /// Off, every read waits for the previous commit: one command at a time, in a
    /// fixed order (what scripted-server tests that pin the command sequence need).
    pub read_ahead: bool,
    /// Where a resume token cannot tell its own time (Azure Cosmos DB's), the field of
    /// the changed documents that does: a BSON date, e.g. `updatedAt` (a dotted path
    /// reaches into embedded documents). Each commit records the newest such time of
    /// what it committed beside the token (the lease's `tokenTime`), which is what lag
    /// and token time are then measured from. `None`: those are unknown, and shown so.
    /// Unused where tokens tell their time (MongoDB).
    pub document_time_field: Option<String>,
    /// After a commit, record it as a checkpoint when the last one is at least this
    /// old (the first commit of a tenure always is): at most one extra write per
    /// interval, never one per batch. `None`: no checkpoints.
    pub checkpoint_every: Option<Duration>,
    /// Checkpoints kept per resource; older ones are deleted as new ones are recorded.
    pub checkpoints_kept: u32,
    /// One partition of a partitioned resource (docs/protocol.md, "Partitions"): then
    /// `resource` is the partition's lease id, as [`ListenerConfig::partitioned`] sets it.
    pub partition: Option<Partition>,
    /// The document after an update the handler gets (`fullDocument`): looked up when
    /// read (default), as the update left it where the collection keeps post-images,
    /// or none.
    pub full_document: PostImage,
    /// The document before an update, replacement or delete (`fullDocumentBeforeChange`,
    /// MongoDB 6.0+ where the collection keeps pre-images); off by default.
    pub full_document_before_change: PreImage,
    /// Hand the handler data-definition events too (`showExpandedEvents`).
    pub expanded_events: bool,
    /// The most changes of one transaction held back, waiting for its end, and handed
    /// at once. A batch never commits inside a transaction; a transaction with more
    /// changes than this is handed in parts of at most this many and committed after
    /// its last part (docs/protocol.md, "Transactions").
    pub max_transaction_changes: usize,
    /// Group commits (default) or one commit per batch before the next is handed.
    pub commit: CommitPolicy,
}

impl ListenerConfig {
    pub fn new(
        resource: impl Into<String>,
        listener_id: impl Into<String>,
        watch: Namespace,
    ) -> Self {
        Self {
            resource: resource.into(),
            listener_id: listener_id.into(),
            watch,
            source: SourceKind::ChangeStream,
            kind: LockKind::Update,
            lease: Duration::from_secs(10),
            refresh_fraction: 1.0 / 3.0,
            batch_size: 1000,
            max_batch_wait: Duration::from_millis(500),
            heartbeat: Duration::from_secs(5),
            max_tenure: None,
            bootstrap: Bootstrap::Oldest,
            retry_backoff: Duration::from_secs(1),
            skip_after: None,
            read_ahead: true,
            full_document: PostImage::default(),
            full_document_before_change: PreImage::default(),
            expanded_events: false,
            max_transaction_changes: 1000,
            document_time_field: None,
            checkpoint_every: Some(Duration::from_secs(60)),
            checkpoints_kept: crate::store::CHECKPOINTS_KEPT,
            partition: None,
            commit: CommitPolicy::default(),
        }
    }

    /// This listener reads `partition` of its resource: its lease becomes the
    /// partition's (`resource#index/count`) and its stream keeps that partition's keys.
    pub fn partitioned(mut self, partition: Partition) -> Self {
        self.resource = partition.lease_id(&self.resource);
        self.partition = Some(partition);
        self
    }

    pub fn refresh_interval(&self) -> Duration {
        self.lease.mul_f64(self.refresh_fraction.clamp(0.05, 0.9))
    }

    /// Reads never wait past the next refresh, so a quiet stream cannot starve it.
    pub fn read_wait(&self) -> Duration {
        self.max_batch_wait
            .min(self.refresh_interval())
            .min(self.heartbeat)
    }

    pub fn watch_target(&self) -> WatchTarget {
        WatchTarget {
            db: self.watch.db.clone(),
            coll: self.watch.coll.clone(),
            pipeline: self
                .partition
                .map(Partition::pipeline_text)
                .unwrap_or_default(),
            source: self.source,
        }
    }
}
