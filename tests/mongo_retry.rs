//! A retried write cannot apply twice. The scripted server here holds the lease
//! document and really applies each command the adapter sends (filter, upsert,
//! pipeline update with `$$NOW`, evaluated by `support::mini_mongo`), then drops
//! the connection before replying, as if the network failed after the write
//! landed. The adapter retries once with the same conditional write; the test
//! checks the document afterwards.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, DateTime, Document};
use streamward::model::{LockKind, ResumeToken};

use streamward::store::{AcquireOutcome, AcquireRequest, LeaseStore, Tenure, TenureWrite};
use support::connected;
use support::mini_mongo::{apply_pipeline, matches, upsert_query_error};
use support::wire::{Action, WireServer};

/// The server's one lease document, and how often a write was applied to it.
#[derive(Default)]
struct Held {
    lease: Option<Document>,
    applied: usize,
    calls: usize,
}

/// Serves findAndModify and update on the lease; the first call of each applies and hangs up.
fn serve_leases(server: &WireServer, held: Arc<Mutex<Held>>) {
    let state = held.clone();
    server.on("findAndModify", move |cmd| {
        let mut held = state.lock().unwrap();
        held.calls += 1;
        let now = DateTime::now();
        let filter = cmd.get_document("query").expect("query");
        if cmd.get_bool("upsert").unwrap_or(false) {
            if let Some((code, message)) = upsert_query_error(filter) {
                return Action::error(code, "QueryFeatureNotAllowed", message);
            }
        }
        let pipeline = cmd.get_array("update").expect("pipeline update");
        let updated = match &held.lease {
            current @ Some(_) if matches(filter, current.as_ref(), now) => {
                apply_pipeline(pipeline, current.as_ref().unwrap(), now)
            }
            Some(_) => {
                // The upsert would insert a second document with the same _id.
                return Action::error(
                    11000,
                    "DuplicateKey",
                    "E11000 duplicate key error collection: sw.leases",
                );
            }
            None => apply_pipeline(
                pipeline,
                &doc! { "_id": filter.get("_id").cloned().unwrap() },
                now,
            ),
        };
        held.lease = Some(updated.clone());
        held.applied += 1;
        if held.calls == 1 {
            return Action::HangUp;
        }
        Action::ok(
            doc! { "value": updated, "lastErrorObject": { "n": 1, "updatedExisting": true } },
        )
    });
    server.on("update", move |cmd| {
        let mut held = held.lock().unwrap();
        held.calls += 1;
        let now = DateTime::now();
        let update = cmd.get_array("updates").expect("updates")[0]
            .as_document()
            .unwrap()
            .clone();
        let filter = update.get_document("q").unwrap();
        let pipeline = update.get_array("u").unwrap();
        let n = if matches(filter, held.lease.as_ref(), now) {
            let updated = apply_pipeline(pipeline, held.lease.as_ref().unwrap(), now);
            held.lease = Some(updated);
            held.applied += 1;
            1
        } else {
            0
        };
        if held.calls == 1 {
            return Action::HangUp;
        }
        Action::ok(doc! { "n": n, "nModified": n })
    });
}

fn request(listener: &str) -> AcquireRequest {
    AcquireRequest {
        resource: "shop.orders".into(),
        listener: listener.into(),
        kind: LockKind::Update,
        lease: Duration::from_secs(30),
        watch: None,
        seen_version: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acquire_applied_before_the_connection_dropped_is_not_applied_twice() {
    let server = WireServer::start().await;
    let held = Arc::new(Mutex::new(Held::default()));
    serve_leases(&server, held.clone());
    let store = connected(&server).await;

    let outcome = store.acquire(&request("worker-1")).await.unwrap();
    let AcquireOutcome::Acquired(lease) = outcome else {
        panic!("not acquired: {outcome:?}")
    };
    let (applied, stored) = {
        let state = held.lock().unwrap();
        (state.applied, state.lease.clone().unwrap())
    };
    assert_eq!(
        applied, 2,
        "the write landed, the reply was lost, the retry landed again"
    );
    assert_eq!(
        stored.get_i64("version"),
        Ok(0),
        "the second application did not bump the version: {stored}"
    );
    assert_eq!(stored.get_str("listenerId"), Ok("worker-1"));
    assert_eq!(lease.version, 0);

    // And the lease is really held: another listener's acquire is refused.
    let other = store.acquire(&request("worker-2")).await.unwrap();
    assert_eq!(other, AcquireOutcome::HeldByOther);
    assert_eq!(
        held.lock()
            .unwrap()
            .lease
            .as_ref()
            .unwrap()
            .get_i64("version"),
        Ok(0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_applied_before_the_connection_dropped_lands_once_in_effect() {
    let server = WireServer::start().await;
    let held = Arc::new(Mutex::new(Held {
        lease: Some(doc! {
            "_id": "shop.orders", "listenerId": "worker-1", "version": 4_i64, "kind": "update",
            "expiresAt": DateTime::from_millis(DateTime::now().timestamp_millis() + 30_000),
            "resumeToken": null, "resumeAt": null,
        }),
        ..Held::default()
    }));
    serve_leases(&server, held.clone());
    let store = connected(&server).await;
    let tenure = Tenure {
        resource: "shop.orders".into(),
        listener: "worker-1".into(),
        version: 4,
    };
    let token =
        ResumeToken::from_document(doc! { "_data": "8263E5B9D2000000012B042C0100296E5A1004" });
    let outcome = store
        .commit(&tenure, &token, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        TenureWrite::Done,
        "the retry matched the same holder and version"
    );
    let state = held.lock().unwrap();
    assert_eq!(state.applied, 2);
    let stored = state.lease.as_ref().unwrap();
    assert_eq!(stored.get_i64("version"), Ok(4));
    assert_eq!(stored.get_document("resumeToken"), Ok(token.as_document()));
}

#[test]
fn the_evaluator_tells_a_conditional_write_from_an_unconditional_one() {
    // Guards the test above against an evaluator that would make any write look idempotent.
    let now = DateTime::now();
    let start = doc! { "_id": "r", "listenerId": "a", "version": 3_i64 };
    let unconditional = vec![Bson::Document(
        doc! { "$set": { "version": { "$add": ["$version", 1_i64] } } },
    )];
    let twice = apply_pipeline(
        &unconditional,
        &apply_pipeline(&unconditional, &start, now),
        now,
    );
    assert_eq!(twice.get_i64("version"), Ok(5));
    let conditional = vec![Bson::Document(doc! { "$set": { "version": { "$cond": [
        { "$eq": ["$listenerId", { "$literal": "a" }] }, "$version", { "$add": ["$version", 1_i64] },
    ] } } })];
    let twice = apply_pipeline(
        &conditional,
        &apply_pipeline(&conditional, &start, now),
        now,
    );
    assert_eq!(twice.get_i64("version"), Ok(3));
    assert!(matches(
        &doc! { "$or": [{ "listenerId": "b" }, { "expiresAt": null }] },
        Some(&start),
        now
    ));
    assert!(!matches(
        &doc! { "_id": "r", "kind": { "$ne": "update" }, "listenerId": "b" },
        Some(&start),
        now
    ));
}
