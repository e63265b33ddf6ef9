//! Capped-collection resources: a listener tails a capped collection in insertion
//! order with the same leases, fencing and commits as a change stream, its position
//! the last entry's `_id` — on the sandbox and on a real replica set, which is the
//! judge (the sandbox must behave as it does).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Document};
use futures_util::TryStreamExt;
use streamward::engine::{
    Handler, HandlerError, ListenerConfig, ListenerExit, ListenerHandle, ListenerState,
};
use streamward::model::{
    entry_token, first_id_of, object_id_at, token_entry, Fence, HealthThresholds, LeaseHealth,
    LeaseStatus, SourceKind,
};
use streamward::store::{CappedFeed, ChangeEvent, DocumentStore, Namespace, Store};
use support::live::{live, LiveDb};

const RESOURCE: &str = "events";
const PATIENCE: Duration = Duration::from_secs(30);

/// Creates capped collection `ns` holding at most `bytes`.
async fn create(store: &impl CappedFeed, ns: &Namespace, bytes: u64) {
    store.ensure_capped(ns, bytes).await.expect("create capped");
}

async fn append(store: &impl CappedFeed, ns: &Namespace, entry: Document) -> ObjectId {
    store.append_entry(ns, entry).await.expect("append")
}

/// Records the `n` of every entry it is handed.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<i64>>>);

impl Seen {
    fn all(&self) -> Vec<i64> {
        self.0.lock().expect("lock").clone()
    }
    fn len(&self) -> usize {
        self.0.lock().expect("lock").len()
    }
}

impl Handler for Seen {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        let mut seen = self.0.lock().expect("lock");
        for event in events {
            let n = event
                .full_document
                .as_ref()
                .and_then(|d| d.get_i64("n").ok())
                .ok_or_else(|| HandlerError::Failed(format!("no n in {event:?}")))?;
            seen.push(n);
        }
        Ok(())
    }
}

fn config(watch: Namespace, listener: &str) -> ListenerConfig {
    let mut config = support::sandbox::config(RESOURCE, listener, watch);
    config.source = SourceKind::Capped;
    config.batch_size = 4;
    config.max_batch_wait = Duration::from_millis(200);
    config.checkpoint_every = None;
    config
}

async fn append_range(
    store: &impl CappedFeed,
    ns: &Namespace,
    range: std::ops::Range<i64>,
) -> ObjectId {
    let mut last = None;
    for n in range {
        last = Some(append(store, ns, doc! { "n": n }).await);
    }
    last.expect("at least one")
}

/// Every entry once, in insertion order, across a stop and a restart; the lease says
/// it is a capped source and its token names the last entry.
async fn follows_in_order_across_restarts<S: Store + CappedFeed>(store: S, ns: Namespace) {
    create(&store, &ns, 1 << 20).await;
    append_range(&store, &ns, 0..30).await;
    let seen = Seen::default();
    let first = ListenerHandle::spawn(store.clone(), config(ns.clone(), "first"), seen.clone());
    support::wait::eventually(PATIENCE, "30 entries", || seen.len() >= 30).await;
    first.stop().await;
    append_range(&store, &ns, 30..45).await;
    let second = ListenerHandle::spawn(store.clone(), config(ns.clone(), "second"), seen.clone());
    support::wait::eventually(PATIENCE, "45 entries", || seen.len() >= 45).await;
    let last = append_range(&store, &ns, 45..50).await;
    support::wait::eventually(PATIENCE, "50 entries", || seen.len() >= 50).await;
    support::wait::eventually(PATIENCE, "the last entry committed", || {
        second.snapshot().commits > 0
    })
    .await;
    second.stop().await;
    assert_eq!(
        seen.all(),
        (0..50).collect::<Vec<_>>(),
        "each once, in order"
    );
    let lease = store.get(RESOURCE).await.expect("read").expect("lease");
    assert_eq!(lease.watch.expect("watch").source, SourceKind::Capped);
    let token = lease.resume_token.expect("committed");
    assert_eq!(
        token_entry(&token),
        Some(last),
        "the position is the last entry's _id"
    );
}

/// A tailable cursor on an empty collection is closed at once: the listener polls
/// until entries come, and misses none of them.
async fn waits_on_an_empty_collection<S: Store + CappedFeed>(store: S, ns: Namespace) {
    create(&store, &ns, 1 << 20).await;
    let seen = Seen::default();
    let listener = ListenerHandle::spawn(store.clone(), config(ns.clone(), "early"), seen.clone());
    support::wait::eventually(PATIENCE, "streaming", || {
        support::sandbox::state(&listener) == ListenerState::Streaming
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    append_range(&store, &ns, 0..5).await;
    support::wait::eventually(PATIENCE, "5 entries", || seen.len() >= 5).await;
    listener.stop().await;
    assert_eq!(seen.all(), (0..5).collect::<Vec<_>>());
}

/// Resuming after an entry goes on in insertion order: an entry appended after it
/// with an older `_id` (another appender's slower clock, within the allowed skew) is
/// still handed over, which an `_id > position` query alone would skip.
async fn an_older_id_appended_later_is_not_missed<S: Store + CappedFeed>(store: S, ns: Namespace) {
    create(&store, &ns, 1 << 20).await;
    let now = chrono::Utc::now();
    let at = |secs: i64, counter: u32| {
        object_id_at(now + chrono::TimeDelta::seconds(secs), [7; 5], counter)
    };
    append(&store, &ns, doc! { "_id": at(0, 1), "n": 0_i64 }).await;
    append(&store, &ns, doc! { "_id": at(0, 2), "n": 1_i64 }).await;
    let seen = Seen::default();
    let first = ListenerHandle::spawn(store.clone(), config(ns.clone(), "first"), seen.clone());
    support::wait::eventually(PATIENCE, "2 entries", || seen.len() >= 2).await;
    first.stop().await;
    // Appended after the position, with an _id 5 s older than it.
    append(&store, &ns, doc! { "_id": at(-5, 3), "n": 2_i64 }).await;
    append(&store, &ns, doc! { "_id": at(1, 4), "n": 3_i64 }).await;
    let second = ListenerHandle::spawn(store.clone(), config(ns.clone(), "second"), seen.clone());
    support::wait::eventually(PATIENCE, "4 entries", || seen.len() >= 4).await;
    second.stop().await;
    assert_eq!(seen.all(), vec![0, 1, 2, 3]);
}

/// A position whose entry was overwritten while no listener ran is lost: the next
/// holder stops and waits for an operator, naming the capped collection, and the
/// lease's health against the collection's window says LOST.
async fn an_overwritten_position_is_lost<S: Store + CappedFeed>(store: S, ns: Namespace) {
    create(&store, &ns, 4096).await;
    append_range(&store, &ns, 0..3).await;
    let seen = Seen::default();
    let first = ListenerHandle::spawn(store.clone(), config(ns.clone(), "first"), seen.clone());
    support::wait::eventually(PATIENCE, "3 entries", || seen.len() >= 3).await;
    support::wait::eventually(PATIENCE, "committed", || first.snapshot().commits > 0).await;
    first.stop().await;
    for n in 3..200 {
        append(&store, &ns, doc! { "n": n, "pad": "x".repeat(60) }).await;
    }
    let window = store
        .capped_window(&ns)
        .await
        .expect("window")
        .expect("entries");
    let lease = store.get(RESOURCE).await.expect("read").expect("lease");
    let position = lease
        .resume_token
        .as_ref()
        .and_then(token_entry)
        .expect("position");
    assert!(
        window.oldest > position,
        "rolled over: {window:?} vs {position}"
    );
    let second = ListenerHandle::spawn(store.clone(), config(ns.clone(), "second"), seen.clone());
    support::wait::eventually(PATIENCE, "LOST", || {
        support::sandbox::state(&second) == ListenerState::HistoryLost
    })
    .await;
    let error = second.snapshot().last_error.unwrap_or_default();
    assert!(error.contains("capped collection"), "{error}");
    assert_eq!(
        seen.len(),
        3,
        "nothing after the lost position was handed over"
    );
    second.stop().await;
    // Made older than the oldest entry by at least a second, so the window's times
    // (whole seconds) see it too.
    let mut lease = lease;
    lease.resume_token = Some(entry_token(first_id_of(
        streamward::model::entry_time(&window.oldest).secs - 1,
    )));
    let health = LeaseHealth::assess(
        &lease,
        Some(&window.times()),
        chrono::Utc::now(),
        &HealthThresholds::default(),
    );
    assert_eq!(health.status, LeaseStatus::Lost);
}

/// A collection that is not capped cannot be tailed: the listener refuses, saying so.
/// (That `ensure_capped` does not make it capped is the store contract's
/// `capped::a_plain_collection_is_neither_made_capped_nor_tailed`.)
async fn a_plain_collection_is_refused<S: Store + CappedFeed + DocumentStore>(
    store: S,
    ns: Namespace,
) {
    store.put(&ns, doc! { "_id": 1 }).await.expect("write");
    let listener =
        ListenerHandle::spawn(store.clone(), config(ns.clone(), "only"), Seen::default());
    let exit = tokio::time::timeout(PATIENCE, listener.join())
        .await
        .expect("exits");
    match exit {
        Some(ListenerExit::Refused(reason)) => {
            assert!(reason.contains("not a capped collection"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn sandbox_ns() -> Namespace {
    Namespace::new("app", "events")
}

#[tokio::test(start_paused = true)]
async fn sandbox_follows_in_order_across_restarts() {
    follows_in_order_across_restarts(support::sandbox::sandbox(10_000), sandbox_ns()).await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_waits_on_an_empty_collection() {
    waits_on_an_empty_collection(support::sandbox::sandbox(10_000), sandbox_ns()).await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_an_older_id_appended_later_is_not_missed() {
    an_older_id_appended_later_is_not_missed(support::sandbox::sandbox(10_000), sandbox_ns()).await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_an_overwritten_position_is_lost() {
    an_overwritten_position_is_lost(support::sandbox::sandbox(10_000), sandbox_ns()).await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_a_plain_collection_is_refused() {
    a_plain_collection_is_refused(support::sandbox::sandbox(10_000), sandbox_ns()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn live_follows_in_order_across_restarts() {
    live("capped_follows", |db: LiveDb| async move {
        let ns = db.ns("events");
        follows_in_order_across_restarts(db.store, ns).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn live_waits_on_an_empty_collection() {
    live("capped_empty", |db: LiveDb| async move {
        let ns = db.ns("events");
        waits_on_an_empty_collection(db.store, ns).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn live_an_older_id_appended_later_is_not_missed() {
    live("capped_older_id", |db: LiveDb| async move {
        let ns = db.ns("events");
        an_older_id_appended_later_is_not_missed(db.store, ns).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn live_an_overwritten_position_is_lost() {
    live("capped_lost", |db: LiveDb| async move {
        let ns = db.ns("events");
        an_overwritten_position_is_lost(db.store, ns).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn live_a_plain_collection_is_refused() {
    live("capped_plain", |db: LiveDb| async move {
        let ns = db.ns("events");
        a_plain_collection_is_refused(db.store, ns).await;
    })
    .await;
}

/// A cursor killed on the server (an operator's killCursors, or a server restart) is
/// re-created from the last entry handed over: nothing missed, nothing twice.
#[tokio::test(flavor = "multi_thread")]
async fn live_a_killed_cursor_is_recreated() {
    live("capped_killed", |db: LiveDb| async move {
        let ns = db.ns("events");
        let store = db.store.clone();
        create(&store, &ns, 1 << 20).await;
        append_range(&store, &ns, 0..10).await;
        let seen = Seen::default();
        let listener =
            ListenerHandle::spawn(store.clone(), config(ns.clone(), "only"), seen.clone());
        support::wait::eventually(PATIENCE, "10 entries", || seen.len() >= 10).await;
        let admin = store.client().database("admin");
        let mut killed = 0;
        let ops: Vec<Document> = admin
            .aggregate(vec![
                doc! { "$currentOp": { "idleCursors": true, "allUsers": true } },
                doc! { "$match": { "cursor.tailable": true, "ns": ns.to_string() } },
            ])
            .await
            .expect("currentOp")
            .try_collect()
            .await
            .expect("currentOp");
        for op in &ops {
            if let Ok(cursor) = op.get_document("cursor") {
                if let Ok(id) = cursor.get_i64("cursorId") {
                    store
                        .client()
                        .database(&ns.db)
                        .run_command(doc! { "killCursors": &ns.coll, "cursors": [id] })
                        .await
                        .expect("killCursors");
                    killed += 1;
                }
            }
        }
        assert!(killed > 0, "found the tailable cursor: {ops:?}");
        append_range(&store, &ns, 10..20).await;
        support::wait::eventually(PATIENCE, "20 entries", || seen.len() >= 20).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        listener.stop().await;
        assert_eq!(
            seen.all(),
            (0..20).collect::<Vec<_>>(),
            "each once, in order"
        );
    })
    .await;
}

/// A resume scans from APPEND_SKEW before the entry it resumes after: on a collection
/// of 20,000 entries appended within a few seconds that is all of them, more than one
/// read's wait; the listener still goes on after exactly the right entry. Then an idle
/// tail stays open past the operation timeout without an error.
#[tokio::test(flavor = "multi_thread")]
async fn live_resumes_after_a_long_seek_and_idles_without_error() {
    live("capped_long_seek", |db: LiveDb| async move {
        let ns = db.ns("events");
        let store = db.store.clone();
        create(&store, &ns, 16 << 20).await;
        let collection = store
            .client()
            .database(&ns.db)
            .collection::<Document>(&ns.coll);
        for chunk in 0..4_i64 {
            let entries: Vec<Document> = (chunk * 5000..(chunk + 1) * 5000)
                .map(|n| doc! { "n": n, "pad": "x".repeat(100) })
                .collect();
            collection.insert_many(entries).await.expect("insert");
        }
        let seen = Seen::default();
        let mut first_config = config(ns.clone(), "first");
        first_config.batch_size = 1000;
        let first = ListenerHandle::spawn(store.clone(), first_config, seen.clone());
        support::wait::eventually(PATIENCE, "20,000 entries", || seen.len() >= 20_000).await;
        first.stop().await;
        let mut second_config = config(ns.clone(), "second");
        second_config.max_batch_wait = Duration::from_millis(50);
        let second = ListenerHandle::spawn(store.clone(), second_config, seen.clone());
        support::wait::eventually(PATIENCE, "streaming", || {
            support::sandbox::state(&second) == ListenerState::Streaming
        })
        .await;
        append(&store, &ns, doc! { "n": 20_000_i64 }).await;
        support::wait::eventually(PATIENCE, "the new entry", || seen.len() >= 20_001).await;
        tokio::time::sleep(Duration::from_secs(12)).await;
        let snapshot = second.snapshot();
        assert_eq!(snapshot.state, ListenerState::Streaming);
        assert_eq!(snapshot.last_error, None, "idle for 12 s");
        append(&store, &ns, doc! { "n": 20_001_i64 }).await;
        support::wait::eventually(PATIENCE, "one more", || seen.len() >= 20_002).await;
        second.stop().await;
        assert_eq!(
            seen.all(),
            (0..20_002).collect::<Vec<_>>(),
            "each once, in order"
        );
    })
    .await;
}

/// Only ObjectId `_id`s are entries: one with another `_id` is passed over, whichever
/// way the tail started, and the listener goes on without an error.
#[tokio::test(flavor = "multi_thread")]
async fn live_an_entry_without_an_object_id_is_passed_over() {
    live("capped_foreign_id", |db: LiveDb| async move {
        let ns = db.ns("events");
        let store = db.store.clone();
        create(&store, &ns, 1 << 20).await;
        let seen = Seen::default();
        let mut started_now = config(ns.clone(), "now");
        started_now.bootstrap = streamward::engine::Bootstrap::Now;
        let listener = ListenerHandle::spawn(store.clone(), started_now, seen.clone());
        support::wait::eventually(PATIENCE, "streaming", || {
            support::sandbox::state(&listener) == ListenerState::Streaming
        })
        .await;
        // Another writer's entry: the port refuses an `_id` that is not an ObjectId.
        store
            .client()
            .database(&ns.db)
            .collection::<Document>(&ns.coll)
            .insert_one(doc! { "_id": "not-an-oid", "n": -1_i64 })
            .await
            .expect("append");
        append(&store, &ns, doc! { "n": 0_i64 }).await;
        support::wait::eventually(PATIENCE, "the ObjectId entry", || seen.len() >= 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let snapshot = listener.snapshot();
        listener.stop().await;
        assert_eq!(seen.all(), vec![0]);
        assert_eq!(snapshot.last_error, None);
    })
    .await;
}
