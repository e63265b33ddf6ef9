//! Change feed, oplog window and fenced document writes of the MongoDB adapter,
//! against the black-pipe server (the real driver over TCP).

mod support;

use std::time::Duration;

use bson::{doc, Bson, Document, Timestamp};
use streamward::model::{ClusterTime, Fence, MemberLag, OplogWindow, ResumeToken};
use streamward::store::mongo::MemberState;
use streamward::store::*;
use support::wire::{Action, WireServer};
use support::{connected, majority};

const T1: &str = "8263E5B9D2000000012B042C0100296E5A1004";
const T2: &str = "8263E5B9D2000000022B042C0100296E5A1004";
const PBRT: &str = "8263E5B9D3000000012B0229";

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

fn change(hex: &str, id: i32) -> Document {
    doc! {
        "_id": { "_data": hex },
        "operationType": "insert",
        "clusterTime": Timestamp { time: 0x63E5B9D2, increment: 1 },
        "wallTime": bson::DateTime::from_millis(1),
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": id },
        "fullDocument": { "_id": id, "total": 5 },
    }
}

fn cursor(first: bool, batch: Vec<Document>, pbrt: &str) -> Action {
    let key = if first { "firstBatch" } else { "nextBatch" };
    Action::ok(doc! { "cursor": {
        "id": 77_i64, "ns": "shop.orders", key: batch, "postBatchResumeToken": { "_data": pbrt },
    } })
}

fn options(batch_size: u32) -> FeedOptions {
    FeedOptions {
        batch_size,
        max_await: Duration::from_millis(300),
        ..Default::default()
    }
}

// ---------------------------------------------------------------- change streams

#[tokio::test]
async fn open_now_batches_events_and_returns_the_post_batch_token_when_idle() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "aggregate",
        [cursor(true, vec![change(T1, 1), change(T2, 2)], T2)],
    );
    server.script("getMore", [cursor(false, vec![], PBRT)]);
    let mut stream = store
        .open(&orders(), StartPoint::Now, options(2))
        .await
        .unwrap();

    let batch = stream.next_batch().await.unwrap();
    assert_eq!(batch.events.len(), 2);
    assert_eq!(batch.events[0].operation, OperationType::Insert);
    assert_eq!(batch.events[0].ns, orders());
    assert_eq!(batch.events[0].document_key, doc! { "_id": 1 });
    assert_eq!(
        batch.events[1].full_document,
        Some(doc! { "_id": 2, "total": 5 })
    );
    assert_eq!(
        batch.events[0].cluster_time.unwrap(),
        ClusterTime::new(0x63E5B9D2, 1)
    );
    assert_eq!(
        batch.resume_token,
        Some(ResumeToken::from_document(doc! { "_data": T2 }))
    );

    let idle = stream.next_batch().await.unwrap();
    assert!(idle.events.is_empty());
    assert_eq!(
        idle.resume_token,
        Some(ResumeToken::from_document(doc! { "_data": PBRT }))
    );

    assert_eq!(
        server.commands_stripped("aggregate"),
        vec![doc! {
            "aggregate": "orders",
            "pipeline": [
                { "$changeStream": { "fullDocument": "updateLookup" } },
                { "$changeStreamSplitLargeEvent": {} },
            ],
            "cursor": { "batchSize": 2 },
            "$db": "shop",
        }]
    );
    assert_eq!(
        server.commands_stripped("getMore"),
        vec![doc! {
            "getMore": 77_i64, "collection": "orders", "batchSize": 2, "maxTimeMS": 300, "$db": "shop",
        }]
    );
}

#[tokio::test]
async fn open_after_a_token_sends_resume_after_and_at_a_time_sends_start_at_operation_time() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "aggregate",
        [cursor(true, vec![], T1), cursor(true, vec![], T1)],
    );
    let token = ResumeToken::from_document(doc! { "_data": T1 });
    let _a = store
        .open(&orders(), StartPoint::After(token), options(1))
        .await
        .unwrap();
    let _b = store
        .open(
            &orders(),
            StartPoint::At(ClusterTime::new(1_700_000_000, 4)),
            options(1),
        )
        .await
        .unwrap();
    let sent = server.commands_stripped("aggregate");
    assert_eq!(
        sent[0].get_array("pipeline").unwrap()[0],
        Bson::Document(
            doc! { "$changeStream": { "fullDocument": "updateLookup", "resumeAfter": { "_data": T1 } } }
        )
    );
    assert_eq!(
        sent[1].get_array("pipeline").unwrap()[0],
        Bson::Document(doc! { "$changeStream": {
            "fullDocument": "updateLookup",
            "startAtOperationTime": Timestamp { time: 1_700_000_000, increment: 4 },
        } })
    );
}

// ------------------------------------------ events split by $changeStreamSplitLargeEvent
//
// The only real server here is 6.0.5, which has no such stage: these replies follow
// the stage's documentation (fragments in order, each with its own `_id` and
// `splitEvent: {fragment, of}`, the first holding the event's context).

const F1: &str = "8263E5B9D4000000012B042C0100296E5A1004";
const F2: &str = "8263E5B9D4000000012B042C0100296E5A1004FA";
const F3: &str = "8263E5B9D4000000012B042C0100296E5A1004FB";
const AFTER: &str = "8263E5B9D5000000012B042C0100296E5A1004";

fn fragment(token: &str, n: i32, of: i32, fields: Document) -> Document {
    let mut document =
        doc! { "_id": { "_data": token }, "splitEvent": { "fragment": n, "of": of } };
    document.extend(fields);
    document
}

/// A 30 MB update as three fragments: the context and the post-image's first half
/// would not fit one reply, so each fragment here stands for one.
fn split_update() -> [Document; 3] {
    [
        fragment(
            F1,
            1,
            3,
            doc! {
                "operationType": "update",
                "clusterTime": Timestamp { time: 0x63E5B9D4, increment: 1 },
                "wallTime": bson::DateTime::from_millis(1),
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 9 },
                "updateDescription": { "updatedFields": { "note": "n" }, "removedFields": [] },
            },
        ),
        fragment(
            F2,
            2,
            3,
            doc! { "fullDocument": { "_id": 9, "note": "n", "blob": "b" } },
        ),
        fragment(F3, 3, 3, doc! { "fullDocumentBeforeChange": { "_id": 9 } }),
    ]
}

async fn server_of_version(wire: i32, version: Option<&str>) -> WireServer {
    let server = WireServer::start().await;
    server.set_max_wire_version(wire);
    if let Some(version) = version {
        server.script("buildInfo", [Action::ok(doc! { "version": version })]);
    }
    server
}

fn pipeline_sent(server: &WireServer) -> Vec<Bson> {
    server.commands_stripped("aggregate")[0]
        .get_array("pipeline")
        .unwrap()
        .clone()
}

#[tokio::test]
async fn the_split_stage_is_asked_for_only_where_the_server_has_it() {
    for (wire, version, split) in [
        (21, None, true),           // 7.0
        (17, Some("6.0.9"), true),  // the first 6.0 with the stage
        (17, Some("6.0.5"), false), // the real server of this suite
        (17, None, false),          // a 6.0 whose patch cannot be read
    ] {
        let server = server_of_version(wire, version).await;
        let store = connected(&server).await;
        server.script("aggregate", [cursor(true, vec![], T1)]);
        let _stream = store
            .open(&orders(), StartPoint::Now, options(1))
            .await
            .unwrap();
        let pipeline = pipeline_sent(&server);
        let last = pipeline.last().unwrap().as_document().unwrap();
        assert_eq!(
            last.contains_key("$changeStreamSplitLargeEvent"),
            split,
            "wire {wire}, {version:?}: {pipeline:?}"
        );
        if split {
            assert_eq!(
                last,
                &doc! { "$changeStreamSplitLargeEvent": {} },
                "the stage is last"
            );
        }
    }
}

#[tokio::test]
async fn a_split_event_is_one_change_under_its_last_fragments_token_even_across_replies() {
    let server = WireServer::start().await; // 7.0
    let store = connected(&server).await;
    let [first, second, third] = split_update();
    // The first reply holds only the first fragment, and the next none: the
    // post-batch token is that fragment's, yet a batch ends only after the last one.
    server.script("aggregate", [cursor(true, vec![first], F1)]);
    server.script(
        "getMore",
        [
            cursor(false, vec![], F1),
            cursor(false, vec![second], F2),
            cursor(false, vec![third, change(AFTER, 10)], AFTER),
            cursor(false, vec![], PBRT),
        ],
    );
    let mut stream = store
        .open(&orders(), StartPoint::Now, options(1))
        .await
        .unwrap();

    let batch = stream.next_batch().await.unwrap();
    assert_eq!(batch.events.len(), 1, "{:?}", batch.events);
    let event = &batch.events[0];
    assert_eq!(
        event.token,
        ResumeToken::from_document(doc! { "_data": F3 })
    );
    assert_eq!(
        batch.resume_token,
        Some(ResumeToken::from_document(doc! { "_data": F3 })),
        "a commit of this batch resumes after the whole event"
    );
    assert_eq!(event.operation, OperationType::Update);
    assert_eq!(event.document_key, doc! { "_id": 9 });
    assert_eq!(event.cluster_time, Some(ClusterTime::new(0x63E5B9D4, 1)));
    assert_eq!(
        event.full_document,
        Some(doc! { "_id": 9, "note": "n", "blob": "b" }),
        "the post-image of the second fragment"
    );

    let next = stream.next_batch().await.unwrap();
    assert_eq!(next.events.len(), 1);
    assert_eq!(next.events[0].document_key, doc! { "_id": 10 });
    assert_eq!(
        next.resume_token,
        Some(ResumeToken::from_document(doc! { "_data": AFTER }))
    );
}

#[tokio::test]
async fn fragments_that_do_not_make_one_event_are_malformed_not_a_made_up_change() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let [first, _second, third] = split_update();
    server.script("aggregate", [cursor(true, vec![first, third], F3)]);
    let mut stream = store
        .open(&orders(), StartPoint::Now, options(5))
        .await
        .unwrap();
    let error = stream.next_batch().await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Malformed { what, .. } if what == "split change event"),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("fragment 3 of 3 arrived where fragment 2 of 3 was due"),
        "{error}"
    );
}

fn history_lost() -> Action {
    Action::error_with_labels(
        286,
        "ChangeStreamHistoryLost",
        "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
        &["NonResumableChangeStreamError"],
    )
}

#[tokio::test]
async fn history_lost_on_the_aggregate_is_history_lost() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("aggregate", [history_lost()]);
    let token = ResumeToken::from_document(doc! { "_data": T1 });
    let error = store
        .open(&orders(), StartPoint::After(token), options(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::HistoryLost { code: 286, .. }),
        "{error:?}"
    );
    assert_eq!(
        server.commands("aggregate").len(),
        1,
        "never silently restarted"
    );
}

#[tokio::test]
async fn history_lost_on_a_later_get_more_is_history_lost() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("aggregate", [cursor(true, vec![change(T1, 1)], T1)]);
    server.script("getMore", [history_lost()]);
    let mut stream = store
        .open(&orders(), StartPoint::Now, options(1))
        .await
        .unwrap();
    assert_eq!(stream.next_batch().await.unwrap().events.len(), 1);
    let error = stream.next_batch().await.unwrap_err();
    assert!(
        matches!(error, StoreError::HistoryLost { code: 286, .. }),
        "{error:?}"
    );
    assert_eq!(
        server.commands("aggregate").len(),
        1,
        "no automatic resume from 286"
    );
}

#[tokio::test]
async fn token_not_found_280_is_history_lost_too() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("aggregate", [cursor(true, vec![], T1)]);
    server.script(
        "getMore",
        [Action::error_with_labels(
            280,
            "ChangeStreamFatalError",
            "cannot resume stream; the resume token was not found",
            &["NonResumableChangeStreamError"],
        )],
    );
    let mut stream = store
        .open(&orders(), StartPoint::Now, options(1))
        .await
        .unwrap();
    let _ = stream.next_batch().await.unwrap();
    let error = stream.next_batch().await.unwrap_err();
    assert!(
        matches!(error, StoreError::HistoryLost { code: 280, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn another_280_is_a_command_error_not_history_lost() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("aggregate", [cursor(true, vec![], T1)]);
    // The message a real server gives for an ambiguous updateLookup: a rewind cannot cure it.
    server.script(
        "getMore",
        [Action::error_with_labels(
            280,
            "ChangeStreamFatalError",
            "found more than one document with document key { _id: 1 } [{ _id: 1 }, { _id: 1 }]",
            &["NonResumableChangeStreamError"],
        )],
    );
    let mut stream = store
        .open(&orders(), StartPoint::Now, options(1))
        .await
        .unwrap();
    let _ = stream.next_batch().await.unwrap();
    let error = stream.next_batch().await.unwrap_err();
    assert!(
        matches!(error, StoreError::Command { code: 280, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn resuming_after_an_invalidate_notification_is_invalidated_at_the_tokens_time() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    // As a real 6.0.5 answers (tests/mongo_live_invalidate.rs): no labels.
    server.script(
        "aggregate",
        [Action::error(
            260,
            "InvalidResumeToken",
            "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification",
        )],
    );
    let token = ResumeToken::from_document(doc! { "_data": T1 });
    let error = store
        .open(&orders(), StartPoint::After(token.clone()), options(1))
        .await
        .unwrap_err();
    match error {
        StoreError::Invalidated { cause, at } => {
            assert_eq!(cause, InvalidationCause::ResumedFromInvalidate);
            assert_eq!(at, token.time());
            assert!(at.is_some());
        }
        other => panic!("expected Invalidated, got {other:?}"),
    }
    assert_eq!(server.commands("aggregate").len(), 1, "not retried");
}

#[tokio::test]
async fn a_malformed_event_is_malformed_not_a_panic() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let mut bad = change(T1, 1);
    bad.insert("clusterTime", "yesterday");
    server.script("aggregate", [cursor(true, vec![bad], T1)]);
    let mut stream = store
        .open(&orders(), StartPoint::Now, options(1))
        .await
        .unwrap();
    let error = stream.next_batch().await.unwrap_err();
    assert!(
        matches!(&error, StoreError::Malformed { detail, .. } if detail.contains("clusterTime")),
        "{error:?}"
    );
}

/// A stream with expanded events asks for them, and decodes what it gets whatever the
/// kind: a `createIndexes` shaped as MongoDB 6.0.5 sends it, and a kind this program
/// has never heard of, are both `Other(name)` with the fields they carry.
#[tokio::test]
async fn expanded_and_unknown_operation_types_decode_as_other() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    let uuid = bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: vec![7; 16],
    };
    let ddl = |hex: &str, kind: &str| {
        doc! {
            "_id": { "_data": hex },
            "operationType": kind,
            "clusterTime": Timestamp { time: 0x63E5B9D2, increment: 1 },
            "collectionUUID": uuid.clone(),
            "wallTime": bson::DateTime::from_millis(1_000),
            "ns": { "db": "shop", "coll": "orders" },
            "operationDescription": { "indexes": [ { "v": 2, "key": { "a": 1 }, "name": "a_1" } ] },
        }
    };
    server.script(
        "aggregate",
        [cursor(
            true,
            vec![ddl(T1, "createIndexes"), ddl(T2, "reshardBlockingWrites")],
            T2,
        )],
    );
    let mut stream = store
        .open(
            &orders(),
            StartPoint::Now,
            FeedOptions {
                expanded_events: true,
                ..options(2)
            },
        )
        .await
        .unwrap();
    let batch = stream.next_batch().await.unwrap();
    let kinds: Vec<_> = batch.events.iter().map(|e| e.operation.clone()).collect();
    assert_eq!(
        kinds,
        [
            OperationType::Other("createIndexes".into()),
            OperationType::Other("reshardBlockingWrites".into())
        ]
    );
    for event in &batch.events {
        assert_eq!(event.ns, orders());
        assert_eq!(event.document_key, Document::new());
        assert_eq!(event.full_document, None);
        assert_eq!(event.cluster_time, Some(ClusterTime::new(0x63E5B9D2, 1)));
        assert_eq!(event.details.collection_uuid, Some([7; 16]));
        assert_eq!(
            event.details.wall_time,
            Some(bson::DateTime::from_millis(1_000).to_chrono())
        );
    }
    let sent = server.commands_stripped("aggregate");
    assert_eq!(
        sent[0].get_array("pipeline").unwrap()[0],
        Bson::Document(
            doc! { "$changeStream": { "fullDocument": "updateLookup", "showExpandedEvents": true } }
        )
    );
}

// ---------------------------------------------------------------- oplog, cluster

#[tokio::test]
async fn oplog_window_reads_first_startable_and_last_entry_in_natural_order() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "find",
        [
            Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "local.oplog.rs", "firstBatch": [{ "ts": Timestamp { time: 100, increment: 2 } }] } }),
            Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "local.oplog.rs", "firstBatch": [{ "ts": Timestamp { time: 900, increment: 1 } }] } }),
        ],
    );
    assert_eq!(
        store.oplog_window().await.unwrap(),
        OplogWindow::new(ClusterTime::new(100, 2), ClusterTime::new(900, 1))
    );
    let sent = server.commands_stripped("find");
    let base = |filter: Document, natural: i32| {
        doc! {
            "find": "oplog.rs", "filter": filter, "sort": { "$natural": natural },
            "projection": { "ts": 1, "_id": 0 }, "limit": 1_i64, "singleBatch": true, "$db": "local",
        }
    };
    assert_eq!(
        sent,
        vec![base(doc! { "op": { "$ne": "n" } }, 1), base(doc! {}, -1)]
    );
}

#[tokio::test]
async fn oplog_without_privilege_names_the_role() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "find",
        [Action::error(
            13,
            "Unauthorized",
            "not authorized on local to execute command { find: \"oplog.rs\" }",
        )],
    );
    let error = store.oplog_window().await.unwrap_err();
    match error {
        StoreError::NotPermitted { action, hint, .. } => {
            assert!(action.contains("oplog"), "{action}");
            assert!(
                hint.contains("clusterMonitor") && hint.contains("local"),
                "{hint}"
            );
        }
        other => panic!("expected NotPermitted, got {other:?}"),
    }
    assert_eq!(server.commands("find").len(), 1, "13 is not retried");
}

/// What an Atlas shared tier answers its users ("no documents in result"): the window
/// is unknown, with why, as for a refused read; not a malformed reply.
#[tokio::test]
async fn an_empty_oplog_leaves_the_window_unknown_and_says_why() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "find",
        [Action::ok(
            doc! { "cursor": { "id": 0_i64, "ns": "local.oplog.rs", "firstBatch": [] } },
        )],
    );
    let error = store.oplog_window().await.unwrap_err();
    assert!(
        matches!(&error, StoreError::OplogUnknown(why) if why.contains("shows this user no startable")),
        "{error:?}"
    );
    assert!(error.oplog_unreadable(), "{error:?}");
}

#[tokio::test]
async fn members_report_state_and_lag_behind_the_primary() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "replSetGetStatus",
        [Action::ok(doc! { "set": "rs0", "members": [
            { "name": "a:27017", "health": 1.0, "stateStr": "PRIMARY",
              "optime": { "ts": Timestamp { time: 1000, increment: 1 }, "t": 1_i64 }, "optimeDate": bson::DateTime::from_millis(1_000_000) },
            { "name": "b:27017", "health": 1.0, "stateStr": "SECONDARY",
              "optime": { "ts": Timestamp { time: 993, increment: 1 }, "t": 1_i64 }, "optimeDate": bson::DateTime::from_millis(993_000) },
            // As the server reports a member it cannot reach (6.0, one of three
            // stopped): health 0, state 8, every optime at the epoch.
            { "_id": 2, "name": "c:27017", "health": 0.0, "state": 8, "stateStr": "(not reachable/healthy)", "uptime": 0,
              "optime": { "ts": Timestamp { time: 0, increment: 0 }, "t": -1_i64 },
              "optimeDurable": { "ts": Timestamp { time: 0, increment: 0 }, "t": -1_i64 },
              "optimeDate": bson::DateTime::from_millis(0), "optimeDurableDate": bson::DateTime::from_millis(0),
              "lastAppliedWallTime": bson::DateTime::from_millis(0), "lastDurableWallTime": bson::DateTime::from_millis(0),
              "lastHeartbeat": bson::DateTime::from_millis(1_004_000), "lastHeartbeatRecv": bson::DateTime::from_millis(0),
              "pingMs": 0_i64, "lastHeartbeatMessage": "Error connecting to c:27017 :: caused by :: Connection refused",
              "authenticated": false, "syncSourceHost": "", "syncSourceId": -1, "infoMessage": "", "configVersion": -1, "configTerm": -1 },
            // An arbiter holds no oplog: healthy, with its optime at the epoch too.
            { "_id": 3, "name": "d:27017", "health": 1.0, "state": 7, "stateStr": "ARBITER", "uptime": 50,
              "optime": { "ts": Timestamp { time: 0, increment: 0 }, "t": -1_i64 },
              "optimeDate": bson::DateTime::from_millis(0),
              "lastHeartbeat": bson::DateTime::from_millis(1_004_000), "pingMs": 0_i64,
              "syncSourceHost": "", "syncSourceId": -1, "infoMessage": "", "configVersion": 1, "configTerm": 1 },
        ] })],
    );
    let members = store.members().await.unwrap();
    assert_eq!(members.len(), 4);
    assert_eq!(members[0].state, MemberState::Primary);
    assert_eq!(members[1].lag, MemberLag::Behind(Duration::from_secs(7)));
    assert_eq!(members[1].optime, Some(ClusterTime::new(993, 1)));
    assert!(!members[2].healthy);
    assert_eq!(members[2].lag, MemberLag::Unreachable);
    assert_eq!(members[2].lag.to_string(), "unreachable");
    assert_eq!(members[2].optime, None, "no optime rather than the epoch");
    assert!(members[3].healthy);
    assert_eq!(members[3].optime, None);
    assert_eq!(
        members[3].lag,
        MemberLag::Unknown,
        "an arbiter is not decades behind"
    );
    assert_eq!(
        server.commands_stripped("replSetGetStatus"),
        vec![doc! { "replSetGetStatus": 1, "$db": "admin" }]
    );
}

// ---------------------------------------------------------------- fenced writes

fn agg() -> Namespace {
    Namespace::new("pets", "aggregates")
}

#[tokio::test]
async fn lease_fenced_upsert_admits_stored_fence_up_to_the_version() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "update",
        [
            Action::ok(doc! { "n": 1, "nModified": 1 }),
            Action::ok(doc! { "n": 0, "nModified": 0 }),
        ],
    );
    let fence = WriteFence::Lease(Fence {
        resource: "pets".into(),
        version: 3,
    });
    let id = Bson::String("msg-1".into());
    assert_eq!(
        store
            .fenced_upsert(&agg(), &id, &fence, doc! { "body": "x" })
            .await
            .unwrap(),
        WriteOutcome::Applied
    );
    assert_eq!(
        store
            .fenced_upsert(&agg(), &id, &fence, doc! { "body": "x" })
            .await
            .unwrap(),
        WriteOutcome::Stale
    );
    assert_eq!(
        server.commands_stripped("update")[0],
        doc! {
            "update": "aggregates",
            "updates": [{
                "q": { "_id": "msg-1", "$or": [{ "_fence": { "$lte": 3_i64 } }, { "_fence": { "$exists": false } }] },
                "u": { "$set": { "body": "x", "_fence": 3_i64 } },
                "upsert": true,
            }],
            "ordered": true,
            "writeConcern": majority(),
            "$db": "pets",
        }
    );
}

#[tokio::test]
async fn source_fenced_upsert_needs_a_newer_version_and_11000_is_stale() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "update",
        [Action::ok(doc! { "n": 0, "nModified": 0, "writeErrors": [
            { "index": 0, "code": 11000, "errmsg": "E11000 duplicate key error" },
        ] })],
    );
    let outcome = store
        .fenced_upsert(
            &agg(),
            &Bson::Int32(7),
            &WriteFence::SourceVersion(12),
            doc! { "name": "rex" },
        )
        .await
        .unwrap();
    assert_eq!(outcome, WriteOutcome::Stale);
    let update = server.commands_stripped("update").remove(0);
    assert_eq!(
        update.get_array("updates").unwrap()[0],
        Bson::Document(doc! {
            "q": { "_id": 7, "$or": [{ "_v": { "$lt": 12_i64 } }, { "_v": { "$exists": false } }] },
            "u": { "$set": { "name": "rex", "_v": 12_i64 } },
            "upsert": true,
        })
    );
}

#[tokio::test]
async fn member_upsert_fences_per_member_and_recounts_in_the_same_write() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 1 })]);
    let outcome = store
        .fenced_member_upsert(&agg(), "tag:cute", "a.b$c", 4, Some("house"))
        .await
        .unwrap();
    assert_eq!(outcome, WriteOutcome::Applied);
    let update = server.commands_stripped("update").remove(0);
    let statement = update.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    // `_id` alone: a real server refuses `$expr` in an upsert's query (224); the fence
    // is decided in the pipeline, proven on a real server by the contract suite.
    assert_eq!(
        statement.get_document("q").unwrap(),
        &doc! { "_id": "tag:cute" }
    );
    assert_eq!(statement.get_bool("upsert"), Ok(true));
    insta::assert_snapshot!(support::command_json(&statement));
}

#[tokio::test]
async fn member_upsert_that_modified_nothing_is_stale() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    // What a real server answers when the pipeline's fence kept the document as it was.
    server.script("update", [Action::ok(doc! { "n": 1, "nModified": 0 })]);
    let outcome = store
        .fenced_member_upsert(&agg(), "tag:cute", "rex", 4, Some("house"))
        .await
        .unwrap();
    assert_eq!(outcome, WriteOutcome::Stale);
}

#[tokio::test]
async fn put_replaces_by_id_and_replace_all_upserts_then_deletes_the_rest() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.on("update", |_| {
        Action::ok(doc! { "n": 1, "nModified": 0, "upserted": [{ "index": 0, "_id": 9 }] })
    });
    server.script("delete", [Action::ok(doc! { "n": 3 })]);
    store
        .put(&agg(), doc! { "_id": 9, "name": "a" })
        .await
        .unwrap();
    store
        .replace_all(&agg(), vec![doc! { "_id": 1, "n": 5 }, doc! { "_id": 2 }])
        .await
        .unwrap();
    let updates: Vec<Bson> = server
        .commands_stripped("update")
        .into_iter()
        .map(|u| u.get_array("updates").unwrap()[0].clone())
        .collect();
    assert_eq!(
        updates,
        vec![
            Bson::Document(
                doc! { "q": { "_id": 9 }, "u": { "_id": 9, "name": "a" }, "upsert": true }
            ),
            Bson::Document(doc! { "q": { "_id": 1 }, "u": { "_id": 1, "n": 5 }, "upsert": true }),
            Bson::Document(doc! { "q": { "_id": 2 }, "u": { "_id": 2 }, "upsert": true }),
        ]
    );
    let delete = server.commands_stripped("delete").remove(0);
    assert_eq!(
        delete.get_array("deletes").unwrap()[0],
        Bson::Document(doc! { "q": { "_id": { "$nin": [1, 2] } }, "limit": 0 })
    );
    assert!(store.put(&agg(), doc! { "name": "no id" }).await.is_err());
    let before = server.received().len();
    assert!(store
        .replace_all(&agg(), vec![doc! { "_id": 3 }, doc! { "name": "no id" }])
        .await
        .is_err());
    assert_eq!(
        server.received().len(),
        before,
        "a bad rebuild output writes nothing"
    );
}

#[tokio::test]
async fn find_one_and_find_all_read_by_id() {
    let server = WireServer::start().await;
    let store = connected(&server).await;
    server.script(
        "find",
        [
            Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "pets.aggregates", "firstBatch": [{ "_id": "x", "n": 1 }] } }),
            Action::ok(doc! { "cursor": { "id": 0_i64, "ns": "pets.aggregates", "firstBatch": [{ "_id": "a" }, { "_id": "b" }] } }),
        ],
    );
    assert_eq!(
        store
            .find_one(&agg(), &Bson::String("x".into()))
            .await
            .unwrap(),
        Some(doc! { "_id": "x", "n": 1 })
    );
    assert_eq!(store.find_all(&agg()).await.unwrap().len(), 2);
    let sent = server.commands_stripped("find");
    assert_eq!(
        sent[0],
        doc! { "find": "aggregates", "filter": { "_id": "x" }, "limit": 1_i64, "singleBatch": true, "$db": "pets" }
    );
    assert_eq!(
        sent[1],
        doc! { "find": "aggregates", "filter": {}, "sort": { "_id": 1 }, "$db": "pets" }
    );
}
