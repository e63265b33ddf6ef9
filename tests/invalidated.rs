//! A watched collection dropped or renamed under running listeners, on the sandbox and
//! a virtual clock: INVALIDATED, no progress committed past the drop, a cheap wait on
//! the lease, and a fresh start once an operator moves the resume point. The same
//! timeline on a real replica set is in `tests/mongo_live_scenarios.rs`.

mod support;

use std::time::Duration;

use bson::doc;
use streamward::demo::orders::{orders_ns, outbox_ns, OrderOutbox, ORDERS_RESOURCE};
use streamward::engine::{ListenerExit, ListenerHandle, ListenerState};
use streamward::model::{
    ClusterTime, HealthThresholds, Invalidation, Lease, LeaseHealth, LeaseStatus, LockKind,
};
use streamward::ops::apply_audited;
use streamward::ops::OperatorOutcome;
use streamward::store::sandbox::{HistoryEntry, SandboxStore};
use streamward::store::{
    AuditContext, ChangeFeed, DocumentStore, LeaseStore, Namespace, OperatorChange, ResumeChange,
};
use support::sandbox::{config, sandbox, state, store_calls};
use support::wait::eventually;

const SECOND: Duration = Duration::from_secs(1);

async fn put_order(store: &SandboxStore, id: &str) {
    store
        .put(&orders_ns(), doc! {"_id": id, "status": "placed"})
        .await
        .unwrap();
}

fn spawn_outbox(store: &SandboxStore, name: &str, batch_size: u32) -> ListenerHandle {
    let mut config = config(ORDERS_RESOURCE, name, orders_ns());
    config.batch_size = batch_size;
    ListenerHandle::spawn(store.clone(), config, OrderOutbox::new(store.clone()))
}

async fn lease(store: &SandboxStore) -> Lease {
    store
        .get(ORDERS_RESOURCE)
        .await
        .unwrap()
        .expect("the lease")
}

async fn status(store: &SandboxStore, lease: &Lease) -> LeaseStatus {
    let window = store.oplog_window().await.unwrap();
    LeaseHealth::assess(
        lease,
        Some(&window),
        store.clock().now(),
        &HealthThresholds::default(),
    )
    .status
}

/// The times of every commit of the orders lease.
fn commit_times(store: &SandboxStore) -> Vec<ClusterTime> {
    store
        .history()
        .into_iter()
        .filter_map(|h| match h {
            HistoryEntry::Committed {
                resource,
                token_time,
                ..
            } if resource == ORDERS_RESOURCE => token_time,
            _ => None,
        })
        .collect()
}

fn acquisitions(store: &SandboxStore) -> usize {
    store
        .history()
        .iter()
        .filter(
            |h| matches!(h, HistoryEntry::Acquired { resource, .. } if resource == ORDERS_RESOURCE),
        )
        .count()
}

/// `reset --to now` as the operator action writes it: resumeAt = the last oplog entry.
async fn reset_to_now(store: &SandboxStore) {
    let current = lease(store).await;
    let window = store.oplog_window().await.unwrap();
    let reset = OperatorChange {
        resource: ORDERS_RESOURCE.into(),
        expected_version: current.version,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Set {
            token: None,
            at: Some(window.last),
        },
        note: "reset to now by op@test".into(),
        protocol: Default::default(),
    };
    let ctx = AuditContext {
        operator: "op@test".into(),
        action: "reset".into(),
        reason: Some("orders collection recreated".into()),
    };
    assert!(matches!(
        apply_audited(store, &reset, None, &ctx).await.unwrap(),
        OperatorOutcome::Applied { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_collection_leaves_the_listener_invalidated_waiting_until_a_reset() {
    let store = sandbox(1000);
    let a = spawn_outbox(&store, "a", 1);
    put_order(&store, "o1").await;
    put_order(&store, "o2").await;
    eventually(10 * SECOND, "o1 and o2 handled", || {
        a.snapshot().events == 2
    })
    .await;

    store.drop_collection(&orders_ns()).await.unwrap();
    let dropped_at = store.last_time();
    eventually(10 * SECOND, "invalidated", || {
        state(&a) == ListenerState::Invalidated
    })
    .await;
    let message = a.snapshot().last_error.unwrap();
    for says in [
        "shop.orders was dropped",
        "reset shop.orders --to now --accept-skip",
        "rewind shop.orders",
    ] {
        assert!(message.contains(says), "{says:?} missing from {message}");
    }

    let stuck = lease(&store).await;
    assert_eq!(
        stuck.invalidated,
        Some(Invalidation {
            at: Some(dropped_at),
            reason: "shop.orders was dropped".into(),
        })
    );
    assert_eq!(stuck.holder, None, "it gave the lease back");
    assert!(
        stuck
            .resume_token
            .as_ref()
            .and_then(|t| t.time())
            .is_some_and(|t| t < dropped_at),
        "the token stays before the drop: {:?}",
        stuck.resume_token
    );
    assert!(
        commit_times(&store).iter().all(|t| *t < dropped_at),
        "nothing was committed at or past the drop: {:?}",
        commit_times(&store)
    );
    assert_eq!(status(&store, &stuck).await, LeaseStatus::Invalidated);

    // It waits on its lease: an hour without a store call, the version where it was.
    let calls = store_calls(&store);
    tokio::time::sleep(3600 * SECOND).await;
    assert_eq!(store_calls(&store), calls, "no spinning, no polling");
    assert_eq!(state(&a), ListenerState::Invalidated);
    assert_eq!(lease(&store).await.version, stuck.version);

    // The collection comes back; an operator resets to now; the listener goes on by itself.
    put_order(&store, "o3").await;
    reset_to_now(&store).await;
    assert_eq!(lease(&store).await.invalidated, None, "the reset clears it");
    put_order(&store, "o4").await;
    eventually(10 * SECOND, "o3 and o4 handled", || {
        a.snapshot().events == 4
    })
    .await;
    assert_eq!(state(&a), ListenerState::Streaming);
    assert_eq!(a.snapshot().last_error, None);
    let recovered = lease(&store).await;
    assert_eq!(recovered.invalidated, None);
    assert_ne!(status(&store, &recovered).await, LeaseStatus::Invalidated);
    let messages = store.find_all(&outbox_ns()).await.unwrap();
    assert_eq!(messages.len(), 4, "{messages:?}");
    assert_eq!(a.stop().await, Some(ListenerExit::Stopped));
}

#[tokio::test(start_paused = true)]
async fn changes_before_a_rename_in_the_same_batch_are_handled_and_committed() {
    let store = sandbox(1000);
    for id in ["o1", "o2", "o3"] {
        put_order(&store, id).await;
    }
    let last_change = store.last_time();
    store
        .rename_collection(&orders_ns(), &Namespace::new("shop", "orders_2025"), false)
        .await
        .unwrap();
    // Bootstraps from the oldest entry and reads all three and the rename in one batch.
    let a = spawn_outbox(&store, "a", 10);
    eventually(10 * SECOND, "invalidated", || {
        state(&a) == ListenerState::Invalidated
    })
    .await;
    assert_eq!(a.snapshot().events, 3);
    assert_eq!(a.snapshot().batches, 1);
    let stuck = lease(&store).await;
    assert_eq!(
        stuck.resume_token.as_ref().and_then(|t| t.time()),
        Some(last_change),
        "committed up to the last change before the rename, not past it"
    );
    let reason = stuck.invalidated.map(|i| i.reason).unwrap_or_default();
    assert_eq!(reason, "shop.orders was renamed to shop.orders_2025");
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn standbys_meet_the_closed_stream_once_each_and_wait_too() {
    let store = sandbox(1000);
    let a = spawn_outbox(&store, "a", 1);
    eventually(10 * SECOND, "a streaming", || {
        state(&a) == ListenerState::Streaming
    })
    .await;
    let b = spawn_outbox(&store, "b", 1);
    eventually(10 * SECOND, "b standing by", || {
        state(&b) == ListenerState::Standby
    })
    .await;
    put_order(&store, "o1").await;
    store.drop_collection(&orders_ns()).await.unwrap();
    eventually(30 * SECOND, "both invalidated", || {
        state(&a) == ListenerState::Invalidated && state(&b) == ListenerState::Invalidated
    })
    .await;
    assert_eq!(acquisitions(&store), 2, "one tenure each, then nothing");
    let version = lease(&store).await.version;
    let calls = store_calls(&store);
    tokio::time::sleep(3600 * SECOND).await;
    assert_eq!(store_calls(&store), calls);
    assert_eq!(
        lease(&store).await.version,
        version,
        "the version does not climb"
    );

    reset_to_now(&store).await;
    eventually(30 * SECOND, "one streams, the other stands by", || {
        let states = [state(&a), state(&b)];
        states.contains(&ListenerState::Streaming) && states.contains(&ListenerState::Standby)
    })
    .await;
    a.stop().await;
    b.stop().await;
}
