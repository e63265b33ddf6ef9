//! What a real MongoDB sends when a watched collection goes away, read with the bare
//! driver: the facts the adapter's invalidation handling and the sandbox's imitation
//! of it rest on. Runs only when `STREAMWARD_TEST_URI` is set (by `scripts/test.sh`);
//! otherwise each test says it is skipped and returns.
//!
//! Seen on 6.0.5 (and asserted below):
//! - drop of a watched collection: `drop` (ns = the collection), then `invalidate`
//!   (no ns) at the same cluster time, with a token of its own; the stream is then dead.
//! - rename of a watched collection: `rename` (ns = old name, `to` = new), `invalidate`.
//! - another collection renamed onto the watched one (`dropTarget`, and `$out`, whose
//!   temporary `tmp.agg_out.…` collection is renamed over it): `rename` with `to` = the
//!   watched collection, `invalidate`.
//! - `dropDatabase`: a collection stream sees `drop` of its collection, `invalidate`; a
//!   database stream sees `drop` per collection, `dropDatabase`, `invalidate`.
//! - `resumeAfter` the invalidate token: 260 InvalidResumeToken "… not allowed from an
//!   invalidate notification"; `resumeAfter` the drop's token: the `invalidate` again at
//!   once; `startAfter` the invalidate token: a new stream on whatever has the name now.
//! - `resumeAfter` a token this stream never produced: 280 ChangeStreamFatalError
//!   "… cannot resume stream; the resume token was not found …", labelled
//!   NonResumableChangeStreamError.

mod support;

use std::time::Duration;

use bson::{doc, Document};
use futures_util::TryStreamExt;
use mongodb::change_stream::event::ResumeToken;
use mongodb::change_stream::ChangeStream;
use mongodb::error::ErrorKind;
use mongodb::{Client, Database};
use support::live::live;

const PATIENCE: Duration = Duration::from_secs(20);
const AWAIT: Duration = Duration::from_millis(200);

/// Every event until the stream dies (after `invalidate`) or `PATIENCE` runs out.
/// `is_alive` turns false as soon as the server has closed the cursor, while events
/// of its last batch may still be buffered: the end is `None` from a dead stream.
async fn events_until_closed(stream: &mut ChangeStream<Document>) -> Vec<Document> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut events = Vec::new();
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream was not closed within {PATIENCE:?}; saw {events:?}"
        );
        match stream.next_if_any().await.expect("read the stream") {
            Some(event) => events.push(event),
            None if stream.is_alive() => {}
            None => break,
        }
    }
    let started = std::time::Instant::now();
    assert_eq!(
        stream.next_if_any().await.expect("a closed stream reads"),
        None,
        "a closed stream returns nothing more"
    );
    assert!(
        started.elapsed() < AWAIT,
        "a closed stream answers at once, without a round trip: a reader that loops on it spins"
    );
    events
}

/// The first `n` events (waiting for them), leaving the stream open.
async fn first_events(stream: &mut ChangeStream<Document>, n: usize) -> Vec<Document> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut events = Vec::new();
    while events.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "saw only {events:?}"
        );
        if let Some(event) = stream.next_if_any().await.expect("read the stream") {
            events.push(event);
        }
    }
    events
}

fn operations(events: &[Document]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.get_str("operationType").unwrap_or("?"))
        .collect()
}

fn ns_of(event: &Document, field: &str) -> String {
    let ns = event.get_document(field).expect("a namespace field");
    format!(
        "{}.{}",
        ns.get_str("db").unwrap_or("?"),
        ns.get_str("coll").unwrap_or("?")
    )
}

fn token(event: &Document) -> ResumeToken {
    bson::from_document(event.get_document("_id").expect("an _id").clone()).expect("a token")
}

async fn watch(db: &Database, coll: &str) -> ChangeStream<Document> {
    db.collection::<Document>(coll)
        .watch()
        .max_await_time(AWAIT)
        .await
        .expect("open a change stream")
        .with_type::<Document>()
}

async fn rename(client: &Client, db: &str, from: &str, to: &str, drop_target: bool) {
    client
        .database("admin")
        .run_command(doc! {
            "renameCollection": format!("{db}.{from}"),
            "to": format!("{db}.{to}"),
            "dropTarget": drop_target,
        })
        .await
        .expect("renameCollection");
}

fn command_error(error: &mongodb::error::Error) -> (i32, String, String) {
    match &*error.kind {
        ErrorKind::Command(c) => (c.code, c.code_name.clone(), c.message.clone()),
        other => panic!("expected a command error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_closes_the_stream_with_drop_then_invalidate() {
    live("invalidate_drop", |live| async move {
        let client = live.store.client().clone();
        let db = client.database(&live.db);
        let orders = db.collection::<Document>("orders");
        orders.insert_one(doc! {"_id": 1}).await.unwrap();
        let mut stream = watch(&db, "orders").await;
        orders.insert_one(doc! {"_id": 2}).await.unwrap();
        orders.drop().await.unwrap();

        let events = events_until_closed(&mut stream).await;
        assert_eq!(operations(&events), ["insert", "drop", "invalidate"]);
        let (drop, invalidate) = (&events[1], &events[2]);
        assert_eq!(ns_of(drop, "ns"), format!("{}.orders", live.db));
        assert!(!invalidate.contains_key("ns"), "{invalidate}");
        assert_eq!(
            drop.get_timestamp("clusterTime").unwrap(),
            invalidate.get_timestamp("clusterTime").unwrap(),
            "one cluster time for both"
        );
        assert_ne!(token(drop), token(invalidate), "each has its own token");
        assert_eq!(
            stream.resume_token(),
            Some(token(invalidate)),
            "a closed stream's resume token is the invalidate token: never commit it"
        );

        // Resuming after the invalidate notification is refused for good.
        let refused = orders
            .watch()
            .resume_after(token(invalidate))
            .await
            .expect_err("resumeAfter the invalidate token");
        let (code, name, message) = command_error(&refused);
        assert_eq!((code, name.as_str()), (260, "InvalidResumeToken"));
        assert!(
            message.contains("'resumeAfter' is not allowed from an invalidate notification"),
            "{message}"
        );

        // Resuming after the drop meets the invalidation again, at once.
        let mut again = orders
            .watch()
            .resume_after(token(drop))
            .max_await_time(AWAIT)
            .await
            .expect("resumeAfter the drop's token")
            .with_type::<Document>();
        let events = events_until_closed(&mut again).await;
        assert_eq!(operations(&events), ["invalidate"]);
        assert_eq!(token(&events[0]), token(invalidate));

        // startAfter the invalidate token opens a new stream on the name.
        let mut after = orders
            .watch()
            .start_after(token(invalidate))
            .max_await_time(AWAIT)
            .await
            .expect("startAfter the invalidate token")
            .with_type::<Document>();
        orders.insert_one(doc! {"_id": 3}).await.unwrap();
        let events = first_events(&mut after, 1).await;
        assert_eq!(operations(&events), ["insert"]);
        assert_eq!(
            events[0].get_document("documentKey").unwrap(),
            &doc! {"_id": 3}
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_away_and_onto_close_the_stream_with_rename_then_invalidate() {
    live("invalidate_rename", |live| async move {
        let client = live.store.client().clone();
        let db = client.database(&live.db);
        let name = |coll: &str| format!("{}.{coll}", live.db);

        // The watched collection renamed away.
        db.collection::<Document>("orders")
            .insert_one(doc! {"_id": 1})
            .await
            .unwrap();
        let mut stream = watch(&db, "orders").await;
        rename(&client, &live.db, "orders", "orders_old", false).await;
        let events = events_until_closed(&mut stream).await;
        assert_eq!(operations(&events), ["rename", "invalidate"]);
        assert_eq!(ns_of(&events[0], "ns"), name("orders"));
        assert_eq!(ns_of(&events[0], "to"), name("orders_old"));

        // Another collection renamed onto the watched one (dropTarget).
        db.collection::<Document>("orders")
            .insert_one(doc! {"_id": 2})
            .await
            .unwrap();
        let mut stream = watch(&db, "orders").await;
        rename(&client, &live.db, "orders_old", "orders", true).await;
        let events = events_until_closed(&mut stream).await;
        assert_eq!(operations(&events), ["rename", "invalidate"]);
        assert_eq!(ns_of(&events[0], "ns"), name("orders_old"));
        assert_eq!(ns_of(&events[0], "to"), name("orders"));

        // `$out` into the watched collection is a rename onto it as well.
        db.collection::<Document>("source")
            .insert_one(doc! {"_id": 9})
            .await
            .unwrap();
        let mut stream = watch(&db, "orders").await;
        let _: Vec<Document> = db
            .collection::<Document>("source")
            .aggregate(vec![doc! {"$out": "orders"}])
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let events = events_until_closed(&mut stream).await;
        assert_eq!(operations(&events), ["rename", "invalidate"]);
        assert!(
            ns_of(&events[0], "ns").starts_with(&name("tmp.agg_out.")),
            "{}",
            events[0]
        );
        assert_eq!(ns_of(&events[0], "to"), name("orders"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_database_closes_collection_and_database_streams() {
    live("invalidate_dropdb", |live| async move {
        let client = live.store.client().clone();
        let db = client.database(&live.db);
        for coll in ["orders", "pets"] {
            db.collection::<Document>(coll)
                .insert_one(doc! {"_id": 1})
                .await
                .unwrap();
        }
        let mut on_orders = watch(&db, "orders").await;
        let mut on_db = db
            .watch()
            .max_await_time(AWAIT)
            .await
            .unwrap()
            .with_type::<Document>();
        db.drop().await.unwrap();

        let events = events_until_closed(&mut on_orders).await;
        assert_eq!(operations(&events), ["drop", "invalidate"]);
        assert_eq!(ns_of(&events[0], "ns"), format!("{}.orders", live.db));

        let events = events_until_closed(&mut on_db).await;
        let mut dropped: Vec<String> = events
            .iter()
            .filter(|e| e.get_str("operationType") == Ok("drop"))
            .map(|e| ns_of(e, "ns"))
            .collect();
        dropped.sort();
        assert_eq!(
            dropped,
            [format!("{}.orders", live.db), format!("{}.pets", live.db)]
        );
        assert_eq!(
            operations(&events)[events.len() - 2..],
            ["dropDatabase", "invalidate"]
        );
        assert_eq!(
            events[events.len() - 2].get_document("ns").unwrap(),
            &doc! {"db": &live.db},
            "dropDatabase names the database only"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_the_stream_never_produced_is_280_token_not_found() {
    live("invalidate_280", |live| async move {
        let client = live.store.client().clone();
        let db = client.database(&live.db);
        let (a, b) = (
            db.collection::<Document>("a"),
            db.collection::<Document>("b"),
        );
        b.insert_one(doc! {"_id": 0}).await.unwrap();
        let mut on_a = watch(&db, "a").await;
        a.insert_one(doc! {"_id": 1}).await.unwrap();
        let from_a = token(&first_events(&mut on_a, 1).await[0]);
        b.insert_one(doc! {"_id": 2}).await.unwrap();

        let error = match b.watch().resume_after(from_a).await {
            Err(e) => e,
            Ok(stream) => {
                let mut stream = stream.with_type::<Document>();
                stream.next_if_any().await.expect_err("a's token on b")
            }
        };
        let (code, name, message) = command_error(&error);
        assert_eq!((code, name.as_str()), (280, "ChangeStreamFatalError"));
        assert!(
            message.contains("cannot resume stream; the resume token was not found"),
            "{message}"
        );
        assert!(
            error.contains_label("NonResumableChangeStreamError"),
            "{error:?}"
        );
    })
    .await;
}
