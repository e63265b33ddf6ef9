//! The MongoDB adapter against a black-pipe server: the real driver talks OP_MSG
//! over TCP on 127.0.0.1 to a scripted peer that records every command. Each test
//! asserts the exact command documents the adapter sends and how it reads replies.

mod support;

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document, Timestamp};
use streamward::model::{ClusterTime, Lease, LockKind, ResumeToken, WatchTarget};
use streamward::ops::apply_audited;
use streamward::ops::OperatorOutcome;
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::*;
use support::wire::{Action, WireServer};
use support::{majority, quick_settings};

fn settings(server: &WireServer) -> MongoSettings {
    let mut settings = quick_settings(server);
    settings.leases = Namespace::new("sw", "leases");
    settings
}

async fn connected(server: &WireServer) -> MongoStore {
    MongoStore::connect(settings(server))
        .await
        .expect("connect")
}

fn request(kind: LockKind) -> AcquireRequest {
    AcquireRequest {
        resource: "shop.orders".into(),
        listener: "worker-1".into(),
        kind,
        lease: Duration::from_secs(30),
        watch: None,
        seen_version: None,
    }
}

fn lease_doc(holder: &str, version: i64) -> Document {
    doc! {
        "_id": "shop.orders", "listenerId": holder, "version": version, "kind": "update",
        "expiresAt": bson::DateTime::from_millis(1_700_000_030_000),
        "resumeToken": null, "resumeAt": null,
    }
}

fn tenure() -> Tenure {
    Tenure {
        resource: "shop.orders".into(),
        listener: "worker-1".into(),
        version: 4,
    }
}

fn token(hex: &str) -> ResumeToken {
    ResumeToken::from_document(doc! { "_data": hex })
}

/// What acquire filters on: `_id` alone. A real server refuses `$expr` in an upsert's
/// query (224), and more fields turn an insert race into 11000.
fn expected_acquire_filter() -> Document {
    doc! { "_id": "shop.orders" }
}

// ---------------------------------------------------------------- acquire

#[tokio::test]
async fn acquire_is_one_find_and_modify_with_the_design_filter_and_pipeline() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "findAndModify",
        [Action::ok(doc! { "value": lease_doc("worker-1", 0) })],
    );
    let outcome = store.acquire(&request(LockKind::Update)).await.unwrap();
    let AcquireOutcome::Acquired(lease) = outcome else {
        panic!("expected Acquired, got {outcome:?}")
    };
    assert_eq!(lease.holder.as_deref(), Some("worker-1"));
    assert_eq!(lease.version, 0);

    let sent = server.commands_stripped("findAndModify");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].get_document("query").unwrap(),
        &expected_acquire_filter()
    );
    assert_eq!(sent[0].get_bool("upsert"), Ok(true));
    assert_eq!(sent[0].get_bool("new"), Ok(true));
    assert_eq!(sent[0].get_document("writeConcern").unwrap(), &majority());
    // The pipeline's meaning is proven on a real server (the store contract
    // suite, tests/contract_mongo.rs); this pins its rendering so a change to it is seen in review.
    insta::assert_snapshot!(support::command_json(&sent[0]));
}

#[tokio::test]
async fn a_lease_held_by_another_comes_back_unchanged_and_means_held_by_other() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "findAndModify",
        [Action::ok(doc! { "value": lease_doc("worker-2", 3) })],
    );
    assert_eq!(
        store.acquire(&request(LockKind::Update)).await.unwrap(),
        AcquireOutcome::HeldByOther
    );
}

#[tokio::test]
async fn bulk_acquire_may_take_a_bulk_lease_and_keeps_the_watch_target_literal() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let mut bulk = lease_doc("worker-1", 3);
    bulk.insert("kind", "bulk");
    server.script("findAndModify", [Action::ok(doc! { "value": bulk })]);
    let mut req = request(LockKind::Bulk);
    req.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        pipeline: "$match".into(),
        ..Default::default()
    });
    let AcquireOutcome::Acquired(lease) = store.acquire(&req).await.unwrap() else {
        panic!("not acquired")
    };
    assert_eq!(lease.kind, LockKind::Bulk);
    let sent = server.commands_stripped("findAndModify").remove(0);
    assert_eq!(
        sent.get_document("query").unwrap(),
        &expected_acquire_filter()
    );
    insta::assert_snapshot!(support::command_json(&sent));
}

#[tokio::test]
async fn duplicate_key_on_the_upsert_means_held_by_other() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "findAndModify",
        [Action::error(
            11000,
            "DuplicateKey",
            "E11000 duplicate key error collection: sw.leases index: _id_",
        )],
    );
    assert_eq!(
        store.acquire(&request(LockKind::Update)).await.unwrap(),
        AcquireOutcome::HeldByOther
    );
    assert_eq!(
        server.commands("findAndModify").len(),
        1,
        "11000 is not retried"
    );
}

#[tokio::test]
async fn write_concern_error_on_acquire_is_reported_not_swallowed() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "findAndModify",
        [Action::ok(doc! {
            "value": lease_doc("worker-1", 1),
            "writeConcernError": { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out" },
        })],
    );
    let error = store.acquire(&request(LockKind::Update)).await.unwrap_err();
    assert!(
        matches!(error, StoreError::WriteConcern(ref m) if m.contains("64")),
        "{error:?}"
    );
    assert_eq!(server.commands("findAndModify").len(), 1);
}

#[tokio::test]
async fn dropped_connection_after_the_server_applied_acquire_retries_the_same_conditional_write() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    // The server applied the first attempt (worker-1 now holds version 5) but the
    // reply never arrived. The retry is the same command: its pipeline finds the
    // lease is worker-1's and keeps `version`, so applying it again only refreshes:
    // version stays 5 (tests/mongo_retry.rs applies both attempts to a document).
    server.script(
        "findAndModify",
        [
            Action::HangUp,
            Action::ok(doc! { "value": lease_doc("worker-1", 5) }),
        ],
    );
    let AcquireOutcome::Acquired(lease) = store.acquire(&request(LockKind::Update)).await.unwrap()
    else {
        panic!("not acquired")
    };
    assert_eq!(lease.version, 5);
    let sent = server.commands_stripped("findAndModify");
    assert_eq!(sent.len(), 2, "retried exactly once");
    let connections: Vec<u64> = server
        .received()
        .iter()
        .filter(|r| r.name == "findAndModify")
        .map(|r| r.connection)
        .collect();
    assert_ne!(
        connections[0], connections[1],
        "the retry went out on a new connection"
    );
    assert_eq!(
        sent[0], sent[1],
        "the retry is the identical conditional command"
    );
    assert_eq!(
        sent[1].get_document("query").unwrap(),
        &expected_acquire_filter()
    );
}

#[tokio::test]
async fn a_second_network_failure_is_reported_not_retried_again() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("findAndModify", [Action::HangUp, Action::HangUp]);
    let error = store.acquire(&request(LockKind::Update)).await.unwrap_err();
    assert!(matches!(error, StoreError::Network(_)), "{error:?}");
    assert_eq!(server.commands("findAndModify").len(), 2);
}

#[tokio::test]
async fn malformed_lease_in_the_reply_names_the_field() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let mut bad = lease_doc("worker-1", 1);
    bad.insert("version", "seven");
    server.script("findAndModify", [Action::ok(doc! { "value": bad })]);
    let error = store.acquire(&request(LockKind::Update)).await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Malformed { detail, .. } if detail.contains("version")),
        "{error:?}"
    );
}

#[tokio::test]
async fn invalid_bson_in_a_reply_is_an_error_not_a_panic() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "findAndModify",
        [
            Action::BadBson(vec![
                0x20, 0, 0, 0, 0x02, b'x', 0, 0xff, 0xff, 0xff, 0x7f, 0,
            ]),
            Action::BadBson(vec![5, 0, 0, 0, 0]),
        ],
    );
    let result = store.acquire(&request(LockKind::Update)).await;
    assert!(
        matches!(&result, Err(StoreError::Malformed { what, .. }) if what == "server reply"),
        "{result:?}"
    );
    assert_eq!(
        server.commands("findAndModify").len(),
        1,
        "a reply that arrived but cannot be read is not a network failure: no retry"
    );
}

#[tokio::test]
async fn a_garbled_reply_frame_is_an_error_not_a_panic() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let garbage = vec![
        0x10, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 0xdd, 7, 0, 0,
    ];
    server.script(
        "findAndModify",
        [Action::RawReply(garbage.clone()), Action::RawReply(garbage)],
    );
    let result = store.acquire(&request(LockKind::Update)).await;
    // The driver cannot even frame the reply: the connection is unusable, like a drop,
    // so it is retried once on a new connection and then reported.
    assert!(matches!(&result, Err(StoreError::Network(_))), "{result:?}");
    let sent = server.received();
    let attempts: Vec<_> = sent.iter().filter(|r| r.name == "findAndModify").collect();
    assert_eq!(attempts.len(), 2);
    assert_ne!(attempts[0].connection, attempts[1].connection);
}

// ---------------------------------------------------------------- commit / release

#[tokio::test]
async fn commit_is_one_update_on_holder_and_version_with_server_times() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    let t = token("8263E5B9D2000000022B042C0100296E5A1004");
    let outcome = store
        .commit(&tenure(), &t, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(outcome, TenureWrite::Done);
    let sent = server.commands_stripped("update");
    assert_eq!(
        sent,
        vec![doc! {
            "update": "leases",
            "updates": [{
                "q": { "_id": "shop.orders", "listenerId": "worker-1", "version": 4_i64 },
                "u": [{ "$set": {
                    "resumeToken": { "$literal": { "_data": "8263E5B9D2000000022B042C0100296E5A1004" } },
                    "committedAt": "$$NOW",
                    "expiresAt": { "$add": ["$$NOW", 30_000_i64] },
                } }],
            }],
            "ordered": true,
            "writeConcern": majority(),
            "$db": "sw",
        }]
    );
}

#[tokio::test]
async fn commit_matching_nothing_is_a_lost_lock() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("update", [Action::ok(doc! { "n": 0, "nModified": 0 })]);
    let outcome = store
        .commit(&tenure(), &token("82"), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(outcome, TenureWrite::LostLock);
}

#[tokio::test]
async fn release_clears_the_holder_and_expires_now_on_the_same_filter() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    assert_eq!(store.release(&tenure()).await.unwrap(), TenureWrite::Done);
    let sent = server.commands_stripped("update").remove(0);
    let update = sent.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(
        update,
        doc! {
            "q": { "_id": "shop.orders", "listenerId": "worker-1", "version": 4_i64 },
            "u": [{ "$set": { "listenerId": null, "expiresAt": "$$NOW" } }],
        }
    );
    assert_eq!(sent.get_document("writeConcern").unwrap(), &majority());
}

#[tokio::test]
async fn commit_after_a_dropped_connection_is_retried_once_with_the_same_fence() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "update",
        [Action::HangUp, Action::ok(doc! { "n": 1, "nModified": 0 })],
    );
    let outcome = store
        .commit(&tenure(), &token("82"), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(outcome, TenureWrite::Done);
    let sent = server.commands_stripped("update");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], sent[1]);
}

#[tokio::test]
async fn primary_stepdown_is_retried_once_after_rediscovery() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "update",
        [
            Action::error_with_labels(
                189,
                "PrimarySteppedDown",
                "primary stepped down",
                &["RetryableWriteError"],
            ),
            Action::ok(doc! { "n": 1, "nModified": 1 }),
        ],
    );
    let outcome = store.release(&tenure()).await.unwrap();
    assert_eq!(outcome, TenureWrite::Done);
    let sent = server.commands_stripped("update");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], sent[1]);
}

/// What a real 6.0.5 answers an `update` whose primary stepped down while it ran: the
/// command succeeds and its one statement carries the not-primary code. The statement
/// was not applied, so it is retried like the same code as a command error.
#[tokio::test]
async fn a_not_primary_write_error_is_retried_once() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "update",
        [
            Action::ok(doc! { "n": 0, "nModified": 0, "writeErrors": [{
                "index": 0, "code": 189,
                "errmsg": "Not primary while writing to sw.leases",
            }] }),
            Action::ok(doc! { "n": 1, "nModified": 1 }),
        ],
    );
    let outcome = store
        .commit(&tenure(), &token("82"), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(outcome, TenureWrite::Done);
    let sent = server.commands_stripped("update");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0], sent[1]);
}

#[tokio::test]
async fn other_command_errors_are_never_retried() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("update", [Action::error(2, "BadValue", "nope")]);
    let error = store.release(&tenure()).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Command { code: 2, .. }),
        "{error:?}"
    );
    assert_eq!(server.commands("update").len(), 1);
}

#[tokio::test]
async fn a_stalled_server_is_a_network_error_within_the_operation_timeout() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "update",
        [Action::Stall(
            Duration::from_secs(30),
            Box::new(Action::ok(doc! { "n": 1 })),
        )],
    );
    let started = Instant::now();
    let error = store.release(&tenure()).await.unwrap_err();
    assert!(
        matches!(error, StoreError::Network(ref m) if m.contains("no reply")),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        server.commands("update").len(),
        1,
        "a timeout is not retried"
    );
}

// ---------------------------------------------------------------- reads

#[tokio::test]
async fn get_and_list_read_by_id_and_sorted_by_id() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "find",
        [
            Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "sw.leases", "firstBatch": [lease_doc("worker-1", 2)] } }),
            Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "sw.leases", "firstBatch": [
                { "_id": "a", "version": 1_i64 }, { "_id": "b", "version": 2_i32, "kind": "bulk" },
            ] } }),
            Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "sw.leases", "firstBatch": [] } }),
        ],
    );
    let lease = store.get("shop.orders").await.unwrap().unwrap();
    assert_eq!(lease.version, 2);
    let all = store.list().await.unwrap().items;
    assert_eq!(
        all.iter().map(|l| l.resource.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(all[1].kind, LockKind::Bulk);
    assert!(
        store.list().await.unwrap().items.is_empty(),
        "missing collection is empty"
    );
    let sent = server.commands_stripped("find");
    assert_eq!(
        sent[0],
        doc! { "find": "leases", "filter": { "_id": "shop.orders" }, "limit": 1_i64, "singleBatch": true, "$db": "sw" }
    );
    assert_eq!(
        sent[1],
        doc! { "find": "leases", "filter": {}, "sort": { "_id": 1 }, "$db": "sw" }
    );
}

#[tokio::test]
async fn server_now_is_hello_local_time() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let at = bson::DateTime::from_millis(1_234_567_890_000);
    server.set_local_time(at);
    assert_eq!(store.server_now().await.unwrap(), at.to_chrono());
}

#[tokio::test]
async fn cluster_time_is_the_reply_operation_time() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.set_operation_time(Timestamp {
        time: 1_800_000_000,
        increment: 7,
    });
    assert_eq!(
        store.cluster_time().await.unwrap(),
        ClusterTime::new(1_800_000_000, 7)
    );
}

// ---------------------------------------------------------------- watch

fn event(hex: &str, id: &str, full: Option<Document>) -> Document {
    let mut e = doc! {
        "_id": { "_data": hex },
        "operationType": if full.is_some() { "update" } else { "delete" },
        "clusterTime": Timestamp { time: 1_700_000_100, increment: 1 },
        "ns": { "db": "sw", "coll": "leases" },
        "documentKey": { "_id": id },
    };
    if let Some(full) = full {
        e.insert("fullDocument", full);
    }
    e
}

#[tokio::test]
async fn every_lease_watch_shares_one_change_stream_with_update_lookup_routed_by_lease() {
    // A current-thread runtime: the shared stream's task reads nothing before the test
    // awaits a change, so all three watches are there for its first events.
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "aggregate",
        [Action::ok(
            doc! { "cursor": { "id": 77_i64, "ns": "sw.leases", "firstBatch": [] } },
        )],
    );
    server.script(
        "getMore",
        [Action::ok(doc! { "cursor": { "id": 77_i64, "ns": "sw.leases", "nextBatch": [
            event("8263E5B9D2000000012B042C0100296E5A1004", "pets.cats", Some(lease_doc("worker-1", 3))),
            event("8263E5B9D2000000022B042C0100296E5A1004", "shop.orders", Some(lease_doc("worker-2", 6))),
        ] } })],
    );
    // Then the stream stays open and quiet.
    server.on("getMore", |_| {
        Action::ok(doc! { "cursor": { "id": 77_i64, "ns": "sw.leases", "nextBatch": [] } })
    });
    let mut orders = store
        .watch(LeaseScope::One("shop.orders".into()))
        .await
        .unwrap();
    let mut cats = store
        .watch(LeaseScope::One("pets.cats".into()))
        .await
        .unwrap();
    let mut all = store.watch(LeaseScope::All).await.unwrap();
    let change = orders.changed().await.unwrap();
    assert_eq!(change.resource, "shop.orders", "pets.cats is not its lease");
    assert_eq!(change.lease.unwrap().holder.as_deref(), Some("worker-2"));
    assert_eq!(cats.changed().await.unwrap().resource, "pets.cats");
    assert_eq!(all.changed().await.unwrap().resource, "pets.cats");
    assert_eq!(all.changed().await.unwrap().resource, "shop.orders");
    let sent = server.commands_stripped("aggregate");
    assert_eq!(
        sent,
        vec![doc! {
            "aggregate": "leases",
            "pipeline": [
                { "$changeStream": { "fullDocument": "updateLookup" } },
            ],
            "cursor": {},
            "$db": "sw",
        }],
        "one stream for every watch"
    );
}

#[tokio::test]
async fn watches_waiting_behind_a_failed_open_share_its_error_and_a_later_watch_tries_again() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "aggregate",
        [Action::error(
            13,
            "Unauthorized",
            "not authorized on sw to execute command",
        )],
    );
    let watches = (0..20).map(|i| store.watch(LeaseScope::One(format!("r{i}"))));
    let outcomes = futures_util::future::join_all(watches).await;
    for outcome in &outcomes {
        let error = outcome.as_ref().err().expect("refused").to_string();
        assert!(error.contains("not permitted"), "{error}");
    }
    assert_eq!(
        server.commands_stripped("aggregate").len(),
        1,
        "twenty watches at once, one open sent"
    );
    server.script(
        "aggregate",
        [Action::ok(
            doc! { "cursor": { "id": 78_i64, "ns": "sw.leases", "firstBatch": [] } },
        )],
    );
    server.on("getMore", |_| {
        Action::ok(doc! { "cursor": { "id": 78_i64, "ns": "sw.leases", "nextBatch": [] } })
    });
    store
        .watch(LeaseScope::One("r0".into()))
        .await
        .expect("a later watch opens the stream anew");
    assert_eq!(server.commands_stripped("aggregate").len(), 2);
}

// ---------------------------------------------------------------- operator actions and audit

#[tokio::test]
async fn an_operator_change_is_a_pending_record_then_the_swap_then_the_record_finalized() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.set_operation_time(Timestamp {
        time: 1_700_000_500,
        increment: 3,
    });
    server.script("insert", [Action::ok(doc! { "n": 1 })]);
    server.script(
        "findAndModify",
        [Action::ok(doc! { "value": lease_doc("worker-1", 4) })],
    );
    let mut after = lease_doc("ops", 5);
    after.insert("note", "hold");
    server.script(
        "find",
        [Action::ok(
            doc! { "cursor": { "id": 0_i64, "ns": "sw.leases", "firstBatch": [after] } },
        )],
    );
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    let change = OperatorChange {
        resource: "shop.orders".into(),
        expected_version: 4,
        holder: Some("ops".into()),
        expires_in: Duration::from_secs(600),
        kind: LockKind::Update,
        resume: ResumeChange::Set {
            token: None,
            at: Some(ClusterTime::new(1_700_000_000, 1)),
        },
        note: "hold".into(),
        protocol: Default::default(),
    };
    let audit = AuditContext {
        operator: "ann@host".into(),
        action: "takeover".into(),
        reason: Some("stuck".into()),
    };
    let planned = planned_lease("worker-1", 4);
    let OperatorOutcome::Applied {
        before,
        after,
        operation_time,
        audit_id,
        remark,
    } = apply_audited(&store, &change, Some(&planned), &audit)
        .await
        .unwrap()
    else {
        panic!("not applied")
    };
    assert_eq!(before.map(|b| b.version), Some(4));
    assert_eq!(after.version, 5);
    assert_eq!(operation_time, Some(ClusterTime::new(1_700_000_500, 3)));
    assert_eq!(remark, None);
    let order: Vec<String> = server
        .received()
        .into_iter()
        .map(|r| r.name)
        .filter(|name| name != "ping")
        .collect();
    assert_eq!(
        order,
        ["insert", "findAndModify", "find", "update"],
        "the record comes first, its finalization last"
    );

    let fam = server.commands_stripped("findAndModify").remove(0);
    assert_eq!(
        fam,
        doc! {
            "findAndModify": "leases",
            "query": { "_id": "shop.orders", "version": 4_i64 },
            "update": [{ "$set": {
                "listenerId": { "$literal": "ops" },
                "expiresAt": { "$add": ["$$NOW", 600_000_i64] },
                "kind": "update",
                "version": { "$add": ["$version", 1_i32] },
                "note": { "$literal": "hold" },
                "acquiredAt": "$$NOW",
                "renewedAt": "$$NOW",
                "resumeToken": { "$literal": null },
                // No token, so no time recorded for one (docs/cosmos.md).
                "tokenTime": "$$REMOVE",
                "resumeAt": { "$literal": Timestamp { time: 1_700_000_000, increment: 1 } },
                // Moving the resume point is the operator's decision on a closed stream,
                // and on a change its listeners fail on.
                "invalidated": "$$REMOVE",
                "failure": "$$REMOVE",
            } }],
            "new": false,
            "writeConcern": majority(),
            "$db": "sw",
        }
    );
    let insert = server.commands_stripped("insert").remove(0);
    assert_eq!(insert.get_str("insert").unwrap(), "audit");
    assert_eq!(insert.get_str("$db").unwrap(), "sw");
    assert_eq!(insert.get_document("writeConcern").unwrap(), &majority());
    let record = insert.get_array("documents").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(record.get_object_id("_id").unwrap().to_hex(), audit_id);
    assert_eq!(record.get_str("operator").unwrap(), "ann@host");
    assert_eq!(record.get_str("reason").unwrap(), "stuck");
    assert_eq!(record.get_str("state").unwrap(), "pending");
    let version_of = |field: &str| {
        record
            .get_document(field)
            .unwrap()
            .get_i64("version")
            .unwrap()
    };
    assert_eq!(version_of("before"), 4);
    assert_eq!(version_of("intended"), 5);
    assert_eq!(
        record
            .get_document("intended")
            .unwrap()
            .get_str("listenerId")
            .unwrap(),
        "ops"
    );
    assert_eq!(record.get("after"), Some(&Bson::Null));

    let update = server.commands_stripped("update").remove(0);
    assert_eq!(update.get_str("update").unwrap(), "audit");
    assert_eq!(update.get_document("writeConcern").unwrap(), &majority());
    let statement = update.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(
        statement.get_document("q").unwrap(),
        &doc! { "_id": bson::oid::ObjectId::parse_str(&audit_id).unwrap(), "state": "pending" }
    );
    let set = statement
        .get_document("u")
        .unwrap()
        .get_document("$set")
        .unwrap();
    assert_eq!(set.get_str("state").unwrap(), "applied");
    assert_eq!(set.get_str("outcome").unwrap(), "applied");
    assert_eq!(
        set.get_document("after").unwrap().get_str("note").unwrap(),
        "hold"
    );
}

fn planned_lease(holder: &str, version: i64) -> Lease {
    let mut lease = Lease::vacant("shop.orders");
    lease.holder = Some(holder.into());
    lease.version = version;
    lease
}

/// The `$set` of the n-th `update` on the audit collection (a finalization).
fn audit_update_set(server: &WireServer, n: usize) -> Document {
    let update = server.commands_stripped("update").remove(n);
    let statement = update.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    statement
        .get_document("u")
        .unwrap()
        .get_document("$set")
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn an_operator_change_on_a_moved_version_changes_no_lease_and_is_recorded_not_applied() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("insert", [Action::ok(doc! { "n": 1 })]);
    server.script("findAndModify", [Action::ok(doc! { "value": null })]);
    server.script(
        "find",
        [Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "sw.leases", "firstBatch": [lease_doc("worker-2", 9)] } })],
    );
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    let change = OperatorChange {
        resource: "shop.orders".into(),
        expected_version: 4,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Keep,
        note: "takeover".into(),
        protocol: Default::default(),
    };
    let audit = AuditContext {
        operator: "ann".into(),
        action: "takeover".into(),
        reason: None,
    };
    let outcome = apply_audited(&store, &change, None, &audit).await.unwrap();
    let OperatorOutcome::Changed {
        current: Some(current),
        audit,
        ..
    } = outcome
    else {
        panic!("expected Changed, got {outcome:?}")
    };
    assert_eq!(current.version, 9);
    assert!(audit.ends_with(": not applied"), "{audit}");
    assert_eq!(server.commands("findAndModify").len(), 1);
    let set = audit_update_set(&server, 0);
    assert_eq!(set.get_str("state").unwrap(), "not applied");
    assert!(
        set.get_str("outcome").unwrap().contains("now version 9"),
        "{set}"
    );
    let fam = server.commands_stripped("findAndModify").remove(0);
    let fam_set = fam.get_array("update").unwrap()[0]
        .as_document()
        .unwrap()
        .get_document("$set")
        .unwrap()
        .clone();
    assert_eq!(fam_set.get("listenerId"), Some(&Bson::Null));
    assert!(
        !fam_set.contains_key("resumeToken"),
        "Keep leaves the resume point alone"
    );
}

fn takeover_to(holder: &str) -> (OperatorChange, AuditContext) {
    (
        OperatorChange {
            resource: "shop.orders".into(),
            expected_version: 4,
            holder: Some(holder.into()),
            expires_in: Duration::from_secs(600),
            kind: LockKind::Update,
            resume: ResumeChange::Keep,
            note: "takeover".into(),
            protocol: Default::default(),
        },
        AuditContext {
            operator: "ann".into(),
            action: "takeover".into(),
            reason: None,
        },
    )
}

fn unauthorized(command: &str) -> Action {
    Action::error(
        13,
        "Unauthorized",
        &format!("not authorized on sw to execute command {{ {command}: \"audit\" }}"),
    )
}

#[tokio::test]
async fn a_refused_audit_record_starts_nothing() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("insert", [unauthorized("insert"), unauthorized("insert")]);
    let (change, audit) = takeover_to("ops");
    let error = apply_audited(&store, &change, None, &audit)
        .await
        .unwrap_err();
    assert!(
        matches!(error, streamward::ops::OpsError::NotStarted { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("nothing was written to the lease"),
        "{message}"
    );
    assert!(message.contains("not permitted"), "{message}");
    assert!(
        server.commands("findAndModify").is_empty(),
        "no lease write without its record"
    );
}

#[tokio::test]
async fn a_finalization_that_fails_after_the_swap_reports_it_applied_with_the_record_pending() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("insert", [Action::ok(doc! { "n": 1 })]);
    server.script(
        "findAndModify",
        [Action::ok(doc! { "value": lease_doc("worker-1", 4) })],
    );
    server.script(
        "find",
        [Action::ok(
            doc! { "cursor": { "id": 0_i64, "ns": "sw.leases", "firstBatch": [lease_doc("ops", 5)] } },
        )],
    );
    // The finalization is retried once; both attempts are refused.
    server.script("update", [unauthorized("update"), unauthorized("update")]);
    let (change, audit) = takeover_to("ops");
    let error = apply_audited(&store, &change, None, &audit)
        .await
        .unwrap_err();
    let message = error.to_string();
    let streamward::ops::OpsError::AuditUnfinished {
        version, audit_id, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(*version, 5);
    let inserted = server.commands("insert").remove(0);
    let record_id = inserted.get_array("documents").unwrap()[0]
        .as_document()
        .unwrap()
        .get_object_id("_id")
        .unwrap()
        .to_hex();
    assert_eq!(
        audit_id, &record_id,
        "it names the pending record that exists"
    );
    assert!(message.contains("was applied (now version 5)"), "{message}");
    assert!(message.contains("stays pending"), "{message}");
    assert_eq!(
        server.commands("findAndModify").len(),
        1,
        "the swap is never repeated after a reply"
    );
}

#[tokio::test]
async fn a_swap_whose_reply_is_lost_is_sent_again_and_found_applied() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("insert", [Action::ok(doc! { "n": 1 })]);
    // The first reply is lost after the write applied; sent again, the swap finds the
    // lease at the next version, held as this change leaves it.
    server.script(
        "findAndModify",
        [Action::HangUp, Action::ok(doc! { "value": null })],
    );
    server.script(
        "find",
        [Action::ok(
            doc! { "cursor": { "id": 0_i64, "ns": "sw.leases", "firstBatch": [lease_doc("ops", 5)] } },
        )],
    );
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    let (change, audit) = takeover_to("ops");
    let outcome = apply_audited(&store, &change, Some(&planned_lease("worker-1", 4)), &audit)
        .await
        .unwrap();
    let OperatorOutcome::Applied {
        before,
        after,
        operation_time,
        remark,
        ..
    } = outcome
    else {
        panic!("expected Applied, got {outcome:?}")
    };
    assert_eq!(after.version, 5);
    assert_eq!(before.map(|b| b.version), Some(4), "as planned against");
    // The applied write's own reply was lost; the resend's time (the operationTime the
    // server stamps on its replies) stands for it.
    assert_eq!(operation_time, Some(ClusterTime::new(1_700_000_000, 1)));
    let remark = remark.expect("says how it was found");
    assert!(remark.contains("reply was lost"), "{remark}");
    assert_eq!(server.commands("findAndModify").len(), 2);
    let set = audit_update_set(&server, 0);
    assert_eq!(set.get_str("state").unwrap(), "applied");
    assert!(
        set.get_str("outcome").unwrap().contains("reply was lost"),
        "{set}"
    );
}

/// The audit record's only update is a step (`$push`): it is not finalized.
fn assert_only_a_step_recorded(server: &WireServer) {
    let update = server.commands_stripped("update").remove(0);
    let u = update.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap()
        .get_document("u")
        .unwrap()
        .clone();
    assert!(u.contains_key("$push"), "{u}");
    assert!(!u.contains_key("$set"), "{u}");
}

/// Found by the simulation (seeds 7449, 8273): the first reply lost, the resend
/// refused before it reached the lease. The first may have applied, so the outcome is
/// unknown, never "not applied".
#[tokio::test]
async fn a_swap_whose_reply_is_lost_and_whose_resend_is_refused_is_of_unknown_outcome() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("insert", [Action::ok(doc! { "n": 1 })]);
    server.script(
        "findAndModify",
        [
            Action::HangUp,
            Action::error(11600, "InterruptedAtShutdown", "interrupted at shutdown"),
        ],
    );
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    let (change, audit) = takeover_to("ops");
    let error = apply_audited(&store, &change, None, &audit)
        .await
        .unwrap_err();
    assert!(
        matches!(error, streamward::ops::OpsError::OutcomeUnknown { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("stays pending"), "{error}");
    // The record is not finalized as not applied: its only update is a step.
    assert_only_a_step_recorded(&server);
}

#[tokio::test]
async fn a_swap_whose_reply_is_lost_twice_leaves_the_record_pending_and_says_so() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("insert", [Action::ok(doc! { "n": 1 })]);
    server.script("findAndModify", [Action::HangUp, Action::HangUp]);
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    let (change, audit) = takeover_to("ops");
    let error = apply_audited(&store, &change, None, &audit)
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            streamward::ops::OpsError::OutcomeUnknown {
                planned_version: 4,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        message.contains("whether it was applied is unknown"),
        "{message}"
    );
    assert!(message.contains("stays pending"), "{message}");
    assert!(
        message.contains("version 4 means nothing was written"),
        "{message}"
    );
    assert_eq!(
        server.commands("findAndModify").len(),
        2,
        "sent twice, not more"
    );
    // The only audit update is a step: the record is not finalized.
    assert_only_a_step_recorded(&server);
}

#[tokio::test]
async fn audit_log_is_newest_first_and_limited() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let oid = bson::oid::ObjectId::new();
    server.script(
        "find",
        [Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "sw.audit", "firstBatch": [{
            "_id": oid, "operator": "ann", "at": bson::DateTime::from_millis(5), "action": "reset",
            "resource": "r", "before": { "_id": "r", "version": 1_i64 }, "after": null, "reason": null, "outcome": "applied",
        }] } })],
    );
    let records = store.audit_log(20).await.unwrap().items;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].id, oid.to_hex());
    assert_eq!(records[0].before.as_ref().unwrap().version, 1);
    assert_eq!(
        server.commands_stripped("find").remove(0),
        doc! { "find": "audit", "filter": {}, "sort": { "at": -1, "_id": -1 }, "limit": 20_i64, "$db": "sw" }
    );
}

fn rewind_intent() -> AuditIntent {
    AuditIntent {
        resource: "shop.orders".into(),
        context: AuditContext {
            operator: "ann".into(),
            action: "rewind".into(),
            reason: None,
        },
        before: None,
        intended: None,
    }
}

#[tokio::test]
async fn a_duplicate_key_on_the_first_audit_insert_is_not_taken_for_success() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    // A unique index on another field refuses the record: it was never written.
    server.script(
        "insert",
        [Action::ok(doc! { "n": 0, "writeErrors": [{
            "index": 0, "code": 11000,
            "errmsg": "E11000 duplicate key error collection: sw.audit index: operator_1 dup key",
        }] })],
    );
    server.script(
        "find",
        [Action::ok(
            doc! { "cursor": { "id": 0_i64, "ns": "sw.audit", "firstBatch": [] } },
        )],
    );
    let error = store.begin_audit(&rewind_intent()).await.unwrap_err();
    assert!(error.to_string().contains("not written"), "{error}");
    let find = server.commands_stripped("find").remove(0);
    assert_eq!(
        find.get_str("find").unwrap(),
        "audit",
        "it looked for its own record"
    );
}

#[tokio::test]
async fn a_write_concern_error_on_the_audit_insert_says_the_record_exists_unconfirmed_and_stops_the_action(
) {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let unconfirmed = || {
        Action::ok(doc! {
            "n": 1,
            "writeConcernError": { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out" },
        })
    };
    server.script("insert", [unconfirmed(), unconfirmed()]);
    let error = store.begin_audit(&rewind_intent()).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::WriteConcern(_)), "{error:?}");
    assert!(
        message.contains("on the primary but not confirmed"),
        "{message}"
    );
    let (change, audit) = takeover_to("ops");
    let error = apply_audited(&store, &change, None, &audit)
        .await
        .unwrap_err();
    assert!(
        matches!(error, streamward::ops::OpsError::NotStarted { .. }),
        "{error:?}"
    );
    assert!(
        server.commands("findAndModify").is_empty(),
        "an unconfirmed record may be rolled back: no lease write on it"
    );
}

#[tokio::test]
async fn finalizing_a_record_twice_the_same_way_is_a_no_op_and_otherwise_an_error() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let oid = bson::oid::ObjectId::new();
    let stored = doc! {
        "_id": oid, "operator": "ann", "at": bson::DateTime::from_millis(5), "action": "rewind",
        "resource": "shop.orders", "state": "applied", "outcome": "applied",
    };
    // Matched nothing both times: the record is no longer pending.
    server.script(
        "update",
        [
            Action::ok(doc! { "n": 0, "nModified": 0 }),
            Action::ok(doc! { "n": 0, "nModified": 0 }),
        ],
    );
    let found = || {
        Action::ok(
            doc! { "cursor": { "id": 0_i64, "ns": "sw.audit", "firstBatch": [stored.clone()] } },
        )
    };
    server.script("find", [found(), found()]);
    let id = oid.to_hex();
    let same = AuditFinish {
        state: streamward::model::AuditState::Applied,
        after: None,
        outcome: "applied".into(),
    };
    store
        .finish_audit(&id, &same)
        .await
        .expect("a retry of the same finish");
    let other = AuditFinish {
        state: streamward::model::AuditState::NotApplied,
        after: None,
        outcome: "not applied: x".into(),
    };
    let error = store.finish_audit(&id, &other).await.unwrap_err();
    assert!(
        matches!(error, StoreError::AuditNotPending { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("already applied"), "{error}");
}

#[tokio::test]
async fn a_finalization_whose_write_concern_failed_is_read_back_before_it_is_reported() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let oid = bson::oid::ObjectId::new();
    let finalized = doc! {
        "_id": oid, "operator": "ann", "at": bson::DateTime::from_millis(5), "action": "rewind",
        "resource": "shop.orders", "state": "applied", "outcome": "applied",
    };
    server.script(
        "update",
        [Action::ok(doc! {
            "n": 1, "nModified": 1,
            "writeConcernError": { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out" },
        })],
    );
    server.script(
        "find",
        [Action::ok(
            doc! { "cursor": { "id": 0_i64, "ns": "sw.audit", "firstBatch": [finalized] } },
        )],
    );
    let done = AuditFinish {
        state: streamward::model::AuditState::Applied,
        after: None,
        outcome: "applied".into(),
    };
    store
        .finish_audit(&oid.to_hex(), &done)
        .await
        .expect("the record reads back finalized: not 'stays pending'");
    assert_eq!(server.commands("find").len(), 1, "it read the record back");
}
