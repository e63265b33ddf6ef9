//! A store written for the listener alone: leases, a change feed, the skipped-change log
//! and the audit log, and neither optional capability (`NotOffered`). A listener runs
//! on it; it records no checkpoints where the same settings on a store that keeps them
//! do; a capped source is refused with why, and so are an operator's plan for a capped
//! lease and a rewind to a checkpoint (it gets the operator's port too).

mod support;

use std::time::Duration;

use bson::{doc, Document};
use chrono::{DateTime, Utc};
use streamward::engine::{
    CommitPolicy, ListenerConfig, ListenerHandle, ListenerState, NoopHandler,
};
use streamward::model::{
    AuditRecord, ChangeFailure, Checkpoint, ClusterTime, Invalidation, Lease, OplogWindow,
    Partition, ResumeToken, SourceKind, WatchTarget, WatchedCollection,
};
use streamward::store::sandbox::{SandboxLeaseWatch, SandboxStore, SandboxStream};
use streamward::store::{
    read_capped_windows, AcquireOutcome, AcquireRequest, AuditFinish, AuditIntent, AuditLog,
    Capabilities, ChangeFeed, CheckpointStore, DocumentStore, FeedOptions, LeaseScope, LeaseStore,
    Listing, Namespace, NotOffered, OperatorChange, OperatorStore, SkippedChange, SkippedLog,
    StartPoint, StoreResult, SwapOutcome, Tenure, TenureWrite,
};

const RESOURCE: &str = "orders";
const PATIENCE: Duration = Duration::from_secs(30);

/// The sandbox behind the listener's ports only: every method passes through, and the
/// capabilities are not offered.
#[derive(Clone)]
struct ListenerOnly(SandboxStore);

impl LeaseStore for ListenerOnly {
    type Watch = SandboxLeaseWatch;

    async fn acquire(&self, request: &AcquireRequest) -> StoreResult<AcquireOutcome> {
        self.0.acquire(request).await
    }
    async fn commit(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        self.0.commit(tenure, token, lease).await
    }
    async fn renew(&self, tenure: &Tenure, lease: Duration) -> StoreResult<TenureWrite> {
        self.0.renew(tenure, lease).await
    }
    async fn record_invalidation(
        &self,
        tenure: &Tenure,
        invalidation: &Invalidation,
    ) -> StoreResult<TenureWrite> {
        self.0.record_invalidation(tenure, invalidation).await
    }
    async fn commit_past_failure(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        self.0.commit_past_failure(tenure, token, lease).await
    }
    async fn record_failure(
        &self,
        tenure: &Tenure,
        failure: &ChangeFailure,
    ) -> StoreResult<TenureWrite> {
        self.0.record_failure(tenure, failure).await
    }
    async fn release(&self, tenure: &Tenure) -> StoreResult<TenureWrite> {
        self.0.release(tenure).await
    }
    async fn get(&self, resource: &str) -> StoreResult<Option<Lease>> {
        self.0.get(resource).await
    }
    async fn list(&self) -> StoreResult<Listing<Lease>> {
        self.0.list().await
    }
    async fn watch(&self, scope: LeaseScope) -> StoreResult<Self::Watch> {
        self.0.watch(scope).await
    }
    async fn server_now(&self) -> StoreResult<DateTime<Utc>> {
        self.0.server_now().await
    }
}

impl ChangeFeed for ListenerOnly {
    type Stream = SandboxStream;

    async fn open_partition(
        &self,
        ns: &Namespace,
        partition: Option<Partition>,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<Self::Stream> {
        self.0.open_partition(ns, partition, start, options).await
    }
    async fn oplog_window(&self) -> StoreResult<OplogWindow> {
        self.0.oplog_window().await
    }
    async fn cluster_time(&self) -> StoreResult<ClusterTime> {
        self.0.cluster_time().await
    }
    async fn oplog_entry(&self, at: ClusterTime) -> StoreResult<Option<Document>> {
        self.0.oplog_entry(at).await
    }
}

impl SkippedLog for ListenerOnly {
    async fn keep_skipped(&self, skipped: &SkippedChange) -> StoreResult<()> {
        self.0.keep_skipped(skipped).await
    }
    async fn skipped_changes(
        &self,
        resource: &str,
        limit: usize,
    ) -> StoreResult<Vec<SkippedChange>> {
        self.0.skipped_changes(resource, limit).await
    }
}

impl AuditLog for ListenerOnly {
    async fn begin_audit(&self, intent: &AuditIntent) -> StoreResult<String> {
        self.0.begin_audit(intent).await
    }
    async fn audit_step(
        &self,
        id: &str,
        what: &str,
        after: Option<&Lease>,
        intends: Option<&Lease>,
    ) -> StoreResult<()> {
        self.0.audit_step(id, what, after, intends).await
    }
    async fn finish_audit(&self, id: &str, finish: &AuditFinish) -> StoreResult<()> {
        self.0.finish_audit(id, finish).await
    }
    async fn audit_log(&self, limit: usize) -> StoreResult<Listing<AuditRecord>> {
        self.0.audit_log(limit).await
    }
    async fn audit_record(&self, id: &str) -> StoreResult<Option<AuditRecord>> {
        self.0.audit_record(id).await
    }
}

impl OperatorStore for ListenerOnly {
    async fn operator_swap(&self, change: &OperatorChange) -> StoreResult<SwapOutcome> {
        self.0.operator_swap(change).await
    }
    async fn count_changes(
        &self,
        on: &WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> StoreResult<u64> {
        self.0.count_changes(on, from, to, limit).await
    }
    async fn token_at(&self, at: ClusterTime) -> StoreResult<ResumeToken> {
        self.0.token_at(at).await
    }
}

impl Capabilities for ListenerOnly {
    type Capped = NotOffered;
    type Checkpoints = NotOffered;

    fn capped_feed(&self) -> Option<&NotOffered> {
        None
    }
    fn checkpoint_store(&self) -> Option<&NotOffered> {
        None
    }
}

fn config(watch: Namespace, listener: &str) -> ListenerConfig {
    let mut config = support::sandbox::config(RESOURCE, listener, watch);
    config.checkpoint_every = Some(Duration::ZERO);
    config.commit = CommitPolicy::Strict;
    config
}

async fn checkpoints(store: &SandboxStore) -> Vec<Checkpoint> {
    store.checkpoints(RESOURCE, 100).await.expect("read").items
}

/// Runs a listener with a checkpoint at every commit on `store`, writes five
/// documents, and waits until they are committed; the sandbox behind it is returned
/// to be read.
async fn five_commits<S: streamward::store::Store>(store: S, sandbox: &SandboxStore) {
    let watch = Namespace::new("shop", "orders");
    let listener = ListenerHandle::spawn(store, config(watch.clone(), "only"), NoopHandler);
    for i in 0..5 {
        sandbox.put(&watch, doc! {"_id": i}).await.expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::wait::eventually(PATIENCE, "five events committed", || {
        let status = listener.snapshot();
        status.events >= 5 && status.commits >= 1
    })
    .await;
    // Checkpoints are written on their own task: give one time to land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = listener.snapshot();
    listener.stop().await;
    assert_eq!(status.last_error, None, "the listener ran clean");
}

#[tokio::test(start_paused = true)]
async fn a_listener_runs_on_a_store_without_capabilities_and_records_no_checkpoint() {
    // The control: the same settings on the sandbox itself record checkpoints.
    let sandbox = support::sandbox::sandbox(10_000);
    five_commits(sandbox.clone(), &sandbox).await;
    assert!(
        !checkpoints(&sandbox).await.is_empty(),
        "a store that keeps checkpoints gets them"
    );

    let sandbox = support::sandbox::sandbox(10_000);
    five_commits(ListenerOnly(sandbox.clone()), &sandbox).await;
    let lease = sandbox.get(RESOURCE).await.expect("read").expect("lease");
    assert!(lease.resume_token.is_some(), "the listener committed");
    assert_eq!(checkpoints(&sandbox).await, Vec::new(), "none recorded");
}

#[tokio::test(start_paused = true)]
async fn a_capped_source_on_a_store_without_capped_collections_is_refused_with_why() {
    let sandbox = support::sandbox::sandbox(100);
    let events = Namespace::new("shop", "events");
    sandbox.create_capped(&events, 4096).expect("create capped");
    let mut config = config(events.clone(), "tail");
    config.source = SourceKind::Capped;
    let listener = ListenerHandle::spawn(ListenerOnly(sandbox.clone()), config, NoopHandler);
    support::wait::eventually(PATIENCE, "refused", || {
        listener.snapshot().state == ListenerState::Refused
    })
    .await;
    let why = listener.snapshot().last_error.unwrap_or_default();
    assert!(
        why.contains("shop.events") && why.contains("offers no capped collections"),
        "{why}"
    );
    listener.stop().await;

    // What the views read of a capped lease on it says the same, and reads nothing.
    let mut lease = Lease::vacant(RESOURCE);
    lease.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "events".into(),
        pipeline: String::new(),
        source: SourceKind::Capped,
    });
    let reading = read_capped_windows(&ListenerOnly(sandbox), &[lease]).await;
    assert!(reading.entries.is_empty());
    let unread = reading
        .unread
        .get("shop.events")
        .cloned()
        .unwrap_or_default();
    assert!(unread.contains("offers no capped collections"), "{unread}");
}

#[tokio::test(start_paused = true)]
async fn an_operator_is_told_the_store_has_no_capped_collections_or_checkpoints() {
    use streamward::ops::{self, ActionRequest, CheckpointRef, GatherOptions, RewindTarget};
    let sandbox = support::sandbox::sandbox(100);
    let mut capped = Lease::vacant("events");
    capped.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "events".into(),
        pipeline: String::new(),
        source: SourceKind::Capped,
    });
    sandbox.put_lease_by_hand(capped);
    sandbox.put_lease_by_hand(Lease::vacant(RESOURCE));
    let store = ListenerOnly(sandbox);
    let options = GatherOptions::new("oncall@test");

    let rewind_capped = ActionRequest::Rewind {
        resource: "events".into(),
        to: RewindTarget::Checkpoint(CheckpointRef::Newest(1)),
    };
    let why = ops::gather(&store, &rewind_capped, &options)
        .await
        .expect_err("a capped lease cannot be measured")
        .to_string();
    assert!(why.contains("offers no capped collections"), "{why}");

    let rewind = ActionRequest::Rewind {
        resource: RESOURCE.into(),
        to: RewindTarget::Checkpoint(CheckpointRef::Newest(1)),
    };
    let why = ops::gather(&store, &rewind, &options)
        .await
        .expect_err("no checkpoints to go back to")
        .to_string();
    assert!(why.contains("keeps no checkpoints"), "{why}");
}
