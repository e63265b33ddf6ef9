//! Statuses judged from what is left to process, against the real replica set of
//! `STREAMWARD_TEST_URI` (issue 26): a lease written by another implementation of the
//! lease algorithm (the first five fields only, an int32 version, a token that stops
//! moving when its collection is quiet) is IDLE once caught up and quiet, whatever the
//! age of its token and whatever else the cluster writes; a change on its collection
//! is counted as left; and reads seconds apart say the same time to loss.

mod support;

use std::time::Duration;

use bson::{doc, Bson, Document};
use futures_util::StreamExt;
use serde_json::Value;
use support::live::{live, run, streamward, LiveDb};

const RESOURCE: &str = "seed-orders";

/// The token of one insert into `coll`, as a change stream on it delivers it.
async fn event_token(live: &LiveDb, coll: &str) -> Document {
    let collection = live
        .store
        .client()
        .database(&live.db)
        .collection::<Document>(coll);
    let mut stream = collection.watch().await.expect("watch");
    collection
        .insert_one(doc! {"status": "new"})
        .await
        .expect("insert");
    let event = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .expect("the insert's event arrives within 30 s")
        .expect("a change")
        .expect("a readable change");
    bson::to_document(&event.id).expect("the token as a document")
}

/// A lease as the other implementation writes it: no kind, no watch, no acquiredAt;
/// an int32 version; held by `host-a` for five minutes.
async fn insert_seed_lease(live: &LiveDb, token: Option<Document>) {
    let mut lease = doc! {
        "_id": RESOURCE,
        "listenerId": "host-a",
        "expiresAt": bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() + 300_000),
        "version": Bson::Int32(3),
    };
    if let Some(token) = token {
        lease.insert("resumeToken", token);
    }
    live.store
        .client()
        .database(&live.db)
        .collection::<Document>("leases")
        .insert_one(lease)
        .await
        .unwrap();
}

/// `leases --output json` as parsed objects, with `config`.
async fn listed(live: &LiveDb, config: &std::path::Path) -> Vec<Value> {
    let mut cmd = streamward(live);
    cmd.args(["leases", "--output", "json", "--config"])
        .arg(config);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Vec<Value>>(&out).expect("a JSON array")
}

fn lease<'a>(listing: &'a [Value], resource: &str) -> &'a Value {
    listing
        .iter()
        .find(|l| l["resource"] == resource)
        .unwrap_or_else(|| panic!("{resource} listed: {listing:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_caught_up_lease_of_another_implementation_is_idle_and_steady() {
    live("status_seed_idle", |live| async move {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("streamward.toml");
        // Lines drawn tight: a token two seconds old is BEHIND by its age alone.
        std::fs::write(
            &config,
            "[thresholds]\nquiet_after = \"1s\"\nbehind_after = \"1s\"\n",
        )
        .unwrap();

        let token = event_token(&live, "orders").await;
        insert_seed_lease(&live, Some(token)).await;
        // The cluster goes on writing elsewhere; its oplog moves past the token.
        let elsewhere = live
            .store
            .client()
            .database(&live.db)
            .collection::<Document>("elsewhere");
        for i in 0..20 {
            elsewhere.insert_one(doc! {"i": i}).await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;

        let first = listed(&live, &config).await;
        let seed = lease(&first, RESOURCE);
        assert_eq!(seed["status"], "IDLE", "{seed}");
        assert_eq!(seed["pending"]["count"], 0, "{seed}");
        assert_eq!(seed["pending"]["bound"], "exact", "{seed}");
        assert_eq!(seed["lagSecs"], 0, "{seed}");
        assert_ne!(seed["risk"], "loss within the horizon", "{seed}");

        let mut check = streamward(&live);
        check.args(["leases", "--check", "--config"]).arg(&config);
        let (code, out, err) = run(check).await;
        assert_eq!(code, 0, "--check passes: {out}{err}");

        // Reads a few seconds apart say the same time to loss and status.
        let mut said = std::collections::BTreeSet::new();
        for _ in 0..3 {
            let listing = listed(&live, &config).await;
            let seed = lease(&listing, RESOURCE);
            said.insert((
                seed["timeToLoss"]["text"].to_string(),
                seed["status"].to_string(),
            ));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(said.len(), 1, "one answer: {said:?}");

        // A change on its own collection is left to process: no longer caught up.
        live.store
            .client()
            .database(&live.db)
            .collection::<Document>("orders")
            .insert_one(doc! {"status": "late"})
            .await
            .unwrap();
        let listing = listed(&live, &config).await;
        let seed = lease(&listing, RESOURCE);
        assert_eq!(seed["pending"]["count"], 1, "{seed}");
        assert_ne!(seed["status"], "IDLE", "{seed}");
        assert!(seed["lagSecs"].as_u64().is_some_and(|l| l > 0), "{seed}");

        // A transaction's changes are counted one by one: three on its collection (one
        // oplog entry, applyOps) and one elsewhere that is not its.
        let client = live.store.client();
        let mut session = client.start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        let orders = client.database(&live.db).collection::<Document>("orders");
        for n in 0..3 {
            orders
                .insert_one(doc! {"status": "in a transaction", "n": n})
                .session(&mut session)
                .await
                .unwrap();
        }
        elsewhere
            .insert_one(doc! {"i": "in a transaction"})
            .session(&mut session)
            .await
            .unwrap();
        session.commit_transaction().await.unwrap();
        let listing = listed(&live, &config).await;
        let seed = lease(&listing, RESOURCE);
        assert_eq!(
            seed["pending"]["count"], 4,
            "1 + 3 in the transaction: {seed}"
        );
        assert_eq!(seed["pending"]["bound"], "exact", "{seed}");

        // Commands on the collection carry its UUID too (an index build's two entries,
        // collMod) but no change stream delivers them unasked: nothing more is left.
        orders
            .create_index(mongodb::IndexModel::builder().keys(doc! {"n": 1}).build())
            .await
            .unwrap();
        client
            .database(&live.db)
            .run_command(doc! {"collMod": "orders", "validationLevel": "off"})
            .await
            .unwrap();
        let listing = listed(&live, &config).await;
        let seed = lease(&listing, RESOURCE);
        assert_eq!(
            seed["pending"]["count"], 4,
            "commands are not changes: {seed}"
        );
    })
    .await;
}

/// Lease documents are never deleted: with the lease collection dropped after an
/// operator acted on a lease, `leases` warns and `leases --check` fails naming the lease
/// VANISHED, with the version it had, instead of "no leases" and all well.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_collection_dropped_under_its_leases_is_flagged() {
    live("status_vanished", |live| async move {
        insert_seed_lease(&live, None).await;
        let mut takeover = streamward(&live);
        takeover.args(["takeover", RESOURCE, "--execute", "--reason", "test"]);
        let (code, out, err) = run(takeover).await;
        assert_eq!(code, 0, "{out}{err}");
        live.store
            .client()
            .database(&live.db)
            .collection::<Document>("leases")
            .drop()
            .await
            .unwrap();

        let mut list = streamward(&live);
        list.arg("leases");
        let (code, _, err) = run(list).await;
        assert_eq!(code, 0, "{err}");
        assert!(
            err.contains(&format!(
                "{RESOURCE} was at version 4 (audit log) and has no lease document now"
            )),
            "{err}"
        );
        let mut check = streamward(&live);
        check.args(["leases", "--check", "--output", "json"]);
        let (code, out, _) = run(check).await;
        assert_eq!(code, 6, "{out}");
        let verdict: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(verdict["vanished"][0]["resource"], RESOURCE, "{verdict}");
        assert_eq!(verdict["vanished"][0]["seenVersion"], 4, "{verdict}");
    })
    .await;
}
