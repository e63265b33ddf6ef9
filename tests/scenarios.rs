//! One test per timeline of the lease algorithm, on the sandbox and a virtual clock.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson};
use streamward::demo::orders::{message_id, orders_ns, outbox_ns, OrderOutbox, ORDERS_RESOURCE};
use streamward::demo::pets::{
    animals_ns, expected_counts, read_animals, stored_counts, Animal, PetAggregates, PET_RESOURCE,
};
use streamward::engine::{Bootstrap, ListenerExit, ListenerHandle, ListenerState};
use streamward::model::{HealthThresholds, LeaseHealth, LeaseStatus, LockKind};
use streamward::ops::apply_audited;
use streamward::ops::OperatorOutcome;
use streamward::store::sandbox::{HistoryEntry, SandboxConfig, SandboxStore};
use streamward::store::{
    AcquireOutcome, AcquireRequest, AuditContext, ChangeFeed, ChangeStream, DocumentStore,
    FeedOptions, LeaseStore, OperatorChange, ResumeChange, StartPoint,
};
use support::sandbox::{config, sandbox, state, store_calls, DiesBeforeCommit, Paused};
use support::wait::eventually;
use tokio::sync::{mpsc, Notify};

const SECOND: Duration = Duration::from_secs(1);

async fn put_animal(store: &SandboxStore, id: &str, location: &str, tags: &[&str], version: i64) {
    let animal = Animal {
        id: id.into(),
        location: location.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        version,
    };
    store
        .put(&animals_ns(), animal.to_document("x"))
        .await
        .unwrap();
}

async fn put_order(store: &SandboxStore, id: &str, status: &str) {
    store
        .put(&orders_ns(), doc! {"_id": id, "status": status})
        .await
        .unwrap();
}

async fn assert_aggregates_match(store: &SandboxStore) {
    let animals = read_animals(store).await.unwrap();
    assert_eq!(
        stored_counts(store).await.unwrap(),
        expected_counts(&animals)
    );
}

/// A pet-aggregate listener named `name` on the sandbox.
fn spawn_pets(store: &SandboxStore, name: &str) -> ListenerHandle {
    let handler = PetAggregates::new(store.clone());
    ListenerHandle::spawn(
        store.clone(),
        config(PET_RESOURCE, name, animals_ns()),
        handler,
    )
}

/// An order-outbox listener named `name` on the sandbox.
fn spawn_outbox(store: &SandboxStore, name: &str) -> ListenerHandle {
    let handler = OrderOutbox::new(store.clone());
    ListenerHandle::spawn(
        store.clone(),
        config(ORDERS_RESOURCE, name, orders_ns()),
        handler,
    )
}

fn acquisitions(store: &SandboxStore, resource: &str) -> Vec<(String, i64)> {
    store
        .history()
        .into_iter()
        .filter_map(|h| match h {
            HistoryEntry::Acquired {
                resource: r,
                listener,
                version,
                ..
            } if r == resource => Some((listener, version)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn two_listeners_racing_for_a_new_lease_exactly_one_wins() {
    // The bare race on the port is a store contract check
    // (streamward::contract::leases::racing_inserts_leave_exactly_one_holder); this is the race
    // between two running listeners.
    let store = sandbox(1000);
    let a = spawn_pets(&store, "a");
    let b = spawn_pets(&store, "b");
    eventually(5 * SECOND, "one streaming, one standby", || {
        let states = [state(&a), state(&b)];
        states.contains(&ListenerState::Streaming) && states.contains(&ListenerState::Standby)
    })
    .await;
    assert_eq!(
        acquisitions(&store, PET_RESOURCE).len(),
        1,
        "one acquisition at version 0"
    );
    assert_eq!(acquisitions(&store, PET_RESOURCE)[0].1, 0);
    // Standing by for a minute changes nothing.
    tokio::time::sleep(60 * SECOND).await;
    assert_eq!(acquisitions(&store, PET_RESOURCE).len(), 1);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_paused_holder_is_fenced_out_after_a_takeover() {
    let store = sandbox(1000);
    put_order(&store, "o1", "placed").await;
    let gate = Arc::new(Notify::new());
    let (reached_tx, mut reached) = mpsc::unbounded_channel();
    let paused = Paused {
        inner: OrderOutbox::new(store.clone()),
        gate: gate.clone(),
        reached: reached_tx,
        armed: true,
    };
    let a = ListenerHandle::spawn(
        store.clone(),
        config("shop.orders", "a", orders_ns()),
        paused,
    );
    reached.recv().await.unwrap(); // a holds version 0 and is stuck inside the handler with o1
    let b = spawn_outbox(&store, "b");
    // a's lease runs out; b takes over with version 1, handles o1 and a newer change.
    eventually(30 * SECOND, "b streaming", || {
        state(&b) == ListenerState::Streaming
    })
    .await;
    assert_eq!(b.snapshot().version, Some(1));
    put_order(&store, "o1", "paid").await;
    eventually(5 * SECOND, "b handled both", || b.snapshot().events == 2).await;

    gate.notify_one(); // a wakes and tries to write o1's message with version 0
    eventually(5 * SECOND, "a lost its lock", || {
        a.snapshot()
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("stale fenced write"))
    })
    .await;
    assert_eq!(
        a.snapshot().lost_locks,
        1,
        "the fence cost a exactly its lock"
    );
    assert_eq!(b.snapshot().lost_locks, 0);
    let messages = store.find_all(&outbox_ns()).await.unwrap();
    assert_eq!(
        messages.len(),
        2,
        "one message per change, none from the late write"
    );
    assert!(messages.iter().all(|m| m.get_i64("_fence") == Ok(1)));
    let late_commits = store.history().into_iter().any(
        |h| matches!(h, HistoryEntry::Committed { listener, version: 0, .. } if listener == "a"),
    );
    assert!(!late_commits, "the fenced-out holder committed nothing");
    assert_eq!(a.snapshot().events, 0, "a handled nothing it could count");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn bootstrap_starts_at_the_oldest_entry_even_after_a_crash_before_the_first_commit() {
    let store = sandbox(1000);
    for i in 1..=5 {
        put_animal(&store, &format!("a{i}"), "house", &["fluffy"], 1).await;
    }
    // The first listener crashes while handling its first change, before any commit.
    let (reached_tx, mut reached) = mpsc::unbounded_channel();
    let crashing = Paused {
        inner: PetAggregates::new(store.clone()),
        gate: Arc::new(Notify::new()),
        reached: reached_tx,
        armed: true,
    };
    let first = ListenerHandle::spawn(
        store.clone(),
        config(PET_RESOURCE, "first", animals_ns()),
        crashing,
    );
    reached.recv().await.unwrap();
    first.crash();
    assert_eq!(
        store.get(PET_RESOURCE).await.unwrap().unwrap().resume_token,
        None
    );

    let second = spawn_pets(&store, "second");
    eventually(30 * SECOND, "all five handled", || {
        second.snapshot().events == 5
    })
    .await;
    assert_aggregates_match(&store).await;
    let counts = stored_counts(&store).await.unwrap();
    assert_eq!(
        counts["fluffy"]["house"], 5,
        "writes made before any listener started were handled"
    );
    second.stop().await;
}

/// A lease whose fencing version was set to the largest int64 by hand cannot be taken
/// (the take would bump past it): its listener stops and says why, and writes nothing,
/// instead of looping on "held by other" or storing a version that wrapped.
#[tokio::test(start_paused = true)]
async fn a_lease_at_the_largest_version_stops_its_listener_saying_why() {
    let store = sandbox(1_000);
    let mut lease = streamward::model::Lease::vacant(ORDERS_RESOURCE);
    lease.version = i64::MAX;
    store.put_lease_by_hand(lease.clone());
    let refused = spawn_outbox(&store, "a");
    eventually(5 * SECOND, "refused", || {
        state(&refused) == ListenerState::Refused
    })
    .await;
    match refused.stop().await {
        Some(ListenerExit::Refused(reason)) => {
            assert!(reason.contains("largest fencing version"), "{reason}");
            assert!(reason.contains(ORDERS_RESOURCE), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        store.get(ORDERS_RESOURCE).await.unwrap(),
        Some(lease),
        "nothing written"
    );
}

#[tokio::test(start_paused = true)]
async fn without_oplog_access_bootstrap_refuses_unless_configured_to_start_now() {
    let store = SandboxStore::new(
        SandboxConfig {
            oplog_readable: false,
            ..SandboxConfig::default()
        },
        streamward::store::sandbox::Clock::virtual_from(chrono::Utc::now()),
    );
    put_order(&store, "o1", "placed").await;
    let refused = spawn_outbox(&store, "a");
    eventually(5 * SECOND, "refused", || {
        state(&refused) == ListenerState::Refused
    })
    .await;
    match refused.stop().await {
        Some(ListenerExit::Refused(reason)) => {
            assert!(reason.contains("Bootstrap::Now"), "{reason}");
            assert!(reason.contains("clusterMonitor"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let mut now_config = config("shop.orders", "b", orders_ns());
    now_config.bootstrap = Bootstrap::Now;
    let started = ListenerHandle::spawn(store.clone(), now_config, OrderOutbox::new(store.clone()));
    eventually(5 * SECOND, "streaming", || {
        state(&started) == ListenerState::Streaming
    })
    .await;
    put_order(&store, "o2", "placed").await;
    eventually(5 * SECOND, "o2 handled", || started.snapshot().events == 1).await;
    assert_eq!(
        store.find_all(&outbox_ns()).await.unwrap().len(),
        1,
        "o1 was before the start and skipped"
    );
    started.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_handling_and_commit_redelivers_and_the_fence_applies_once() {
    let store = sandbox(1000);
    put_animal(&store, "rex", "house", &["loud", "tiny"], 1).await;
    let (applied_tx, mut applied) = mpsc::unbounded_channel();
    let dying = DiesBeforeCommit {
        inner: PetAggregates::new(store.clone()),
        applied: applied_tx,
    };
    let a = ListenerHandle::spawn(
        store.clone(),
        config(PET_RESOURCE, "a", animals_ns()),
        dying,
    );
    applied.recv().await.unwrap();
    a.crash();
    let writes_before = store
        .history()
        .iter()
        .filter(|h| matches!(h, HistoryEntry::FencedWrite { .. }))
        .count();

    let b = spawn_pets(&store, "b");
    eventually(30 * SECOND, "b re-delivered rex", || {
        b.snapshot().events == 1
    })
    .await;
    let writes_after = store
        .history()
        .iter()
        .filter(|h| matches!(h, HistoryEntry::FencedWrite { .. }))
        .count();
    assert_eq!(
        writes_before, writes_after,
        "the re-delivered change applied nothing twice"
    );
    let counts = stored_counts(&store).await.unwrap();
    assert_eq!(counts["loud"]["house"], 1);
    assert_eq!(counts["tiny"]["house"], 1);
    eventually(5 * SECOND, "b committed", || b.snapshot().commits >= 1).await;
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn history_lost_waits_for_an_operator_without_restarting_from_now() {
    let store = sandbox(5);
    put_order(&store, "o1", "placed").await;
    let a = spawn_outbox(&store, "a");
    eventually(5 * SECOND, "o1 handled", || a.snapshot().events == 1).await;
    a.stop().await;
    // Ten more changes push the committed token off a five-entry log.
    for i in 2..=11 {
        put_order(&store, &format!("o{i}"), "placed").await;
    }
    let window = store.oplog_window().await.unwrap();
    let lease = store.get("shop.orders").await.unwrap().unwrap();
    let health = LeaseHealth::assess(
        &lease,
        Some(&window),
        store.clock().now(),
        &HealthThresholds::default(),
    );
    assert_eq!(health.status, LeaseStatus::Lost);

    let restarted = spawn_outbox(&store, "a");
    eventually(5 * SECOND, "history lost", || {
        state(&restarted) == ListenerState::HistoryLost
    })
    .await;
    let message = restarted.snapshot().last_error.unwrap();
    assert!(message.contains("286"), "{message}");
    assert!(
        message.contains("rewind shop.orders"),
        "says what to do: {message}"
    );
    assert_eq!(
        restarted.snapshot().events,
        0,
        "nothing after the gap was processed"
    );
    // It waits on its lease: an hour passes without a single store call.
    let calls = store_calls(&store);
    tokio::time::sleep(3600 * SECOND).await;
    assert_eq!(store_calls(&store), calls, "no polling while it waits");
    assert_eq!(state(&restarted), ListenerState::HistoryLost);
    let after = store.get("shop.orders").await.unwrap().unwrap();
    assert_eq!(
        after.resume_token, lease.resume_token,
        "the lost token is kept for the operator"
    );
    assert_eq!(after.holder, None, "it gave the lease back");

    // An operator resets to the oldest entry: it starts again by itself.
    let reset = OperatorChange {
        resource: ORDERS_RESOURCE.into(),
        expected_version: after.version,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Set {
            token: None,
            at: None,
        },
        note: "reset to oldest".into(),
        protocol: Default::default(),
    };
    let ctx = AuditContext {
        operator: "op@test".into(),
        action: "reset".into(),
        reason: None,
    };
    assert!(matches!(
        apply_audited(&store, &reset, None, &ctx).await.unwrap(),
        OperatorOutcome::Applied { .. }
    ));
    // It resumes by itself from the oldest entry still in the log. (Each change it
    // handles writes an outbox message into the same five-entry log, which pushes the
    // entry it just read off the log: as on a real oplog that small, its stream then
    // loses its history again. The point here is that it started on its own.)
    eventually(
        10 * SECOND,
        "the oldest change still in the log handled",
        || restarted.snapshot().events >= 1,
    )
    .await;
    assert!(matches!(
        restarted.stop().await,
        Some(ListenerExit::Stopped)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_slow_stream_overtaken_by_the_log_loses_history_mid_stream() {
    let store = sandbox(4);
    put_order(&store, "o1", "placed").await;
    let (reached_tx, mut reached) = mpsc::unbounded_channel();
    let gate = Arc::new(Notify::new());
    let slow = Paused {
        inner: OrderOutbox::new(store.clone()),
        gate: gate.clone(),
        reached: reached_tx,
        armed: true,
    };
    let mut slow_config = config("shop.orders", "a", orders_ns());
    slow_config.lease = Duration::from_secs(3600);
    let a = ListenerHandle::spawn(store.clone(), slow_config, slow);
    reached.recv().await.unwrap();
    for i in 2..=10 {
        put_order(&store, &format!("o{i}"), "placed").await;
    }
    gate.notify_one();
    eventually(5 * SECOND, "history lost on a later read", || {
        state(&a) == ListenerState::HistoryLost
    })
    .await;
    assert_eq!(
        a.snapshot().events,
        1,
        "the batch in hand was handled, then the gap was detected"
    );
}

#[tokio::test(start_paused = true)]
async fn a_bulk_lease_excludes_update_listeners_even_after_it_expires() {
    let store = sandbox(1000);
    let holder = spawn_pets(&store, "a");
    eventually(5 * SECOND, "a streaming", || {
        state(&holder) == ListenerState::Streaming
    })
    .await;
    let lease = store.get(PET_RESOURCE).await.unwrap().unwrap();
    let bulk = OperatorChange {
        resource: PET_RESOURCE.into(),
        expected_version: lease.version,
        holder: Some("operator".into()),
        expires_in: 5 * SECOND,
        kind: LockKind::Bulk,
        resume: ResumeChange::Keep,
        note: "rebuild".into(),
        protocol: Default::default(),
    };
    let ctx = AuditContext {
        operator: "op@test".into(),
        action: "rebuild".into(),
        reason: None,
    };
    let OperatorOutcome::Applied { after, .. } =
        apply_audited(&store, &bulk, None, &ctx).await.unwrap()
    else {
        panic!("the operator's CAS should apply");
    };
    put_animal(&store, "kiki", "house", &["shy"], 1).await;
    eventually(30 * SECOND, "the fenced-out holder stands by", || {
        state(&holder) == ListenerState::Standby
    })
    .await;
    // An hour after the bulk holder expired, still nobody has taken it.
    tokio::time::sleep(3600 * SECOND).await;
    let still = store.get(PET_RESOURCE).await.unwrap().unwrap();
    assert_eq!(
        (still.kind, still.holder.as_deref(), still.version),
        (LockKind::Bulk, Some("operator"), after.version)
    );
    assert_eq!(
        holder.snapshot().events,
        0,
        "nothing was processed under the bulk lease"
    );

    let give_back = OperatorChange {
        expected_version: after.version,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        ..bulk
    };
    assert!(matches!(
        apply_audited(&store, &give_back, None, &ctx).await.unwrap(),
        OperatorOutcome::Applied { .. }
    ));
    eventually(5 * SECOND, "the listener takes over promptly", || {
        state(&holder) == ListenerState::Streaming
    })
    .await;
    eventually(5 * SECOND, "and handles the change made meanwhile", || {
        holder.snapshot().events == 1
    })
    .await;
    holder.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_waiting_standby_makes_a_bounded_number_of_store_calls() {
    let store = sandbox(1000);
    let holder_request = AcquireRequest {
        resource: "busy".into(),
        listener: "holder".into(),
        kind: LockKind::Update,
        lease: 10 * SECOND,
        watch: None,
        seen_version: None,
    };
    let mut own_calls = 0;
    store.acquire(&holder_request).await.unwrap();
    own_calls += 1;
    let standby = ListenerHandle::spawn(
        store.clone(),
        config("busy", "standby", orders_ns()),
        OrderOutbox::new(store.clone()),
    );
    eventually(5 * SECOND, "standby", || {
        state(&standby) == ListenerState::Standby
    })
    .await;
    let after_start = store.calls().lease_calls() - own_calls;
    // The holder refreshes every 3 s for two hours; each refresh is a lease change the standby sees.
    for _ in 0..2400 {
        tokio::time::sleep(3 * SECOND).await;
        assert!(matches!(
            store.acquire(&holder_request).await.unwrap(),
            AcquireOutcome::Acquired(_)
        ));
        own_calls += 1;
    }
    let standby_calls = store.calls().lease_calls() - own_calls;
    assert_eq!(
        standby_calls, after_start,
        "two hours of waiting cost no store calls"
    );
    assert!(
        after_start <= 4,
        "entering standby took {after_start} calls"
    );
    assert_eq!(state(&standby), ListenerState::Standby);
    // When the holder goes away, the standby takes over at expiry.
    tokio::time::sleep(11 * SECOND).await;
    eventually(5 * SECOND, "took over", || {
        state(&standby) == ListenerState::Streaming
    })
    .await;
    standby.stop().await;
}

#[tokio::test(start_paused = true)]
async fn rotation_by_max_tenure_spreads_the_work() {
    let store = sandbox(1000);
    let handled = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for name in ["a", "b"] {
        let mut c = config(PET_RESOURCE, name, animals_ns());
        c.max_tenure = Some(20 * SECOND);
        handles.push(ListenerHandle::spawn(
            store.clone(),
            c,
            PetAggregates::new(store.clone()),
        ));
    }
    for i in 0..30 {
        put_animal(&store, &format!("p{i}"), "backyard", &["sleepy"], 1).await;
        tokio::time::sleep(3 * SECOND).await;
        handled.store(
            handles.iter().map(|h| h.snapshot().events as usize).sum(),
            Ordering::Relaxed,
        );
    }
    eventually(10 * SECOND, "all handled", || {
        handles.iter().map(|h| h.snapshot().events).sum::<u64>() == 30
    })
    .await;
    let holders: Vec<(String, i64)> = acquisitions(&store, PET_RESOURCE);
    assert!(holders.len() >= 4, "the lease rotated: {holders:?}");
    assert!(holders.iter().any(|(l, _)| l == "a") && holders.iter().any(|(l, _)| l == "b"));
    assert!(
        holders.windows(2).all(|w| w[1].1 == w[0].1 + 1),
        "each tenure has the next version"
    );
    assert!(
        handles.iter().all(|h| h.snapshot().events > 0),
        "both did work"
    );
    assert_aggregates_match(&store).await;
    for h in handles {
        h.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_holder_keeps_its_token_fresh_and_shutdown_releases() {
    let store = sandbox(1000);
    put_order(&store, "o1", "placed").await;
    let a = spawn_outbox(&store, "a");
    eventually(5 * SECOND, "o1 handled", || a.snapshot().events == 1).await;
    let committed = store
        .get("shop.orders")
        .await
        .unwrap()
        .unwrap()
        .resume_token
        .unwrap();
    // Other collections keep the cluster moving while this stream stays quiet.
    for i in 0..5 {
        put_animal(&store, &format!("q{i}"), "house", &[], 1).await;
        tokio::time::sleep(SECOND).await;
    }
    tokio::time::sleep(5 * SECOND).await;
    let lease = store.get("shop.orders").await.unwrap().unwrap();
    let fresh = lease.resume_token.unwrap();
    assert!(
        fresh.time().unwrap() > committed.time().unwrap(),
        "heartbeat committed the post-batch token"
    );
    assert_eq!(fresh.time(), Some(store.last_time()));
    assert!(matches!(a.stop().await, Some(ListenerExit::Stopped)));
    let released = store.get("shop.orders").await.unwrap().unwrap();
    assert_eq!(
        released.holder, None,
        "graceful shutdown released the lease"
    );
    assert_eq!(
        released.version, lease.version,
        "the next holder bumps the version, not the release"
    );
    // The next listener resumes after the heartbeat token: nothing is handled twice.
    let b = spawn_outbox(&store, "b");
    eventually(5 * SECOND, "b streaming", || {
        state(&b) == ListenerState::Streaming
    })
    .await;
    tokio::time::sleep(3 * SECOND).await;
    assert_eq!(b.snapshot().events, 0);
    assert_eq!(
        store.find_one(&outbox_ns(), &Bson::Null).await.unwrap(),
        None
    );
    b.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_redelivered_order_never_makes_a_second_message() {
    let store = sandbox(1000);
    put_order(&store, "o1", "placed").await;
    let (applied_tx, mut applied) = mpsc::unbounded_channel();
    let dying = DiesBeforeCommit {
        inner: OrderOutbox::new(store.clone()),
        applied: applied_tx,
    };
    let a = ListenerHandle::spawn(
        store.clone(),
        config("shop.orders", "a", orders_ns()),
        dying,
    );
    applied.recv().await.unwrap();
    a.crash();
    let b = spawn_outbox(&store, "b");
    eventually(30 * SECOND, "re-delivered", || b.snapshot().events == 1).await;
    let messages = store.find_all(&outbox_ns()).await.unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        messages[0].get_i64("_fence"),
        Ok(1),
        "rewritten by the new holder under its version"
    );
    let window = store.oplog_window().await.unwrap();
    let mut stream = store
        .open(
            &orders_ns(),
            StartPoint::At(window.first),
            FeedOptions::default(),
        )
        .await
        .unwrap();
    let change = stream.next_batch().await.unwrap().events.remove(0);
    assert_eq!(
        messages[0].get_str("_id").unwrap(),
        message_id(&change),
        "keyed by the change"
    );
    b.stop().await;
}

/// A handler whose every fenced write is refused.
struct AlwaysFencedOut;

impl streamward::engine::Handler for AlwaysFencedOut {
    async fn handle(
        &mut self,
        _events: &[streamward::store::ChangeEvent],
        _fence: &streamward::model::Fence,
    ) -> Result<(), streamward::engine::HandlerError> {
        Err(streamward::engine::HandlerError::Fenced(
            "a newer fence is on the document".into(),
        ))
    }
}

/// A handler refused by a fence while nobody else holds the lease (a fence from
/// another lease, a document another resource also writes) gets the lease straight back
/// and is refused again: the listener backs off between rounds instead of acquiring
/// and reopening its stream in a busy loop (found by the fleet simulation). The
/// listener runs on a runtime of its own thread: a busy loop never yields, so it could
/// be neither stopped nor shut down, and the test would hang instead of failing.
#[test]
fn a_handler_fenced_out_while_the_lease_is_still_ours_backs_off() {
    let store = sandbox(1000);
    let (status_tx, status_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let listener_store = store.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            put_order(&listener_store, "o1", "placed").await;
            let mut listener_config = config(ORDERS_RESOURCE, "fenced", orders_ns());
            listener_config.bootstrap = Bootstrap::Oldest;
            listener_config.retry_backoff = Duration::from_millis(50);
            let listener = ListenerHandle::spawn(listener_store, listener_config, AlwaysFencedOut);
            let _ = status_tx.send(listener.status.clone());
            let _ = stop_rx.await;
            listener.stop().await;
        });
    });
    let status = status_rx.recv().expect("the listener started");
    let acquires = || {
        store
            .calls()
            .acquire
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    let started = std::time::Instant::now();
    while status.borrow().lost_locks == 0 {
        assert!(started.elapsed() < 5 * SECOND, "fenced out within 5 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = acquires();
    std::thread::sleep(SECOND);
    let rounds = acquires() - before;
    // Pauses of 50, 100, 200, 400 ms: four or five rounds in a second.
    assert!(
        (2..=6).contains(&rounds),
        "a second of refusals took {rounds} acquires"
    );
    let snapshot = status.borrow().clone();
    assert!(
        snapshot
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("stale fenced write")),
        "{snapshot:?}"
    );
    let _ = stop_tx.send(());
}
