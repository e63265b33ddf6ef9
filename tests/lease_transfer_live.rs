//! `leases export` and `leases import` as an operator runs them, against the real
//! replica set of `STREAMWARD_TEST_URI`: export, move the leases on (a rewind, later
//! commits), import (plan, refusal without --accept-skip, --execute), every token back
//! byte for byte, one `import` audit record per moved lease, an idempotent rerun, and
//! undo of one import move. Outcomes are read back through the store.

mod support;

use std::time::Duration;

use bson::doc;
use serde_json::Value;
use streamward::model::{LockKind, ResumeToken};
use streamward::store::*;
use support::live::{live, run, streamward, LiveDb};

/// `n` real tokens of inserts into `coll`, oldest first.
async fn real_tokens(live: &LiveDb, coll: &str, n: usize) -> Vec<ResumeToken> {
    let store = &live.store;
    let ns = live.ns(coll);
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(
            &ns,
            StartPoint::At(start),
            FeedOptions {
                batch_size: 100,
                max_await: Duration::from_millis(300),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for i in 0..n {
        store
            .put(&ns, doc! {"_id": i as i64, "n": i as i64})
            .await
            .unwrap();
    }
    let collect = async {
        let mut tokens = Vec::new();
        while tokens.len() < n {
            let batch = stream.next_batch().await.unwrap();
            tokens.extend(batch.events.iter().map(|e| e.token.clone()));
        }
        tokens
    };
    tokio::time::timeout(Duration::from_secs(30), collect)
        .await
        .expect("the inserts' events arrive within 30 s")
}

/// `resource` acquired by `listener` with `token` committed; returns its tenure.
async fn committed(live: &LiveDb, resource: &str, listener: &str, token: &ResumeToken) -> Tenure {
    let request = AcquireRequest {
        resource: resource.into(),
        listener: listener.into(),
        kind: LockKind::Update,
        lease: Duration::from_secs(60),
        watch: None,
        seen_version: None,
    };
    let AcquireOutcome::Acquired(lease) = live.store.acquire(&request).await.unwrap() else {
        panic!("{listener} should acquire {resource}");
    };
    let tenure = Tenure::of(&lease).unwrap();
    assert_eq!(
        live.store
            .commit(&tenure, token, Duration::from_secs(60))
            .await
            .unwrap(),
        TenureWrite::Done
    );
    tenure
}

fn bytes(token: Option<&ResumeToken>) -> Option<Vec<u8>> {
    token.map(|t| {
        let mut b = Vec::new();
        t.as_document().to_writer(&mut b).unwrap();
        b
    })
}

async fn import_records(store: &streamward::store::mongo::MongoStore) -> Vec<String> {
    store
        .audit_log(100)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.action == "import")
        .map(|r| r.resource)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn export_then_import_restores_every_token_byte_for_byte_audited_and_undoable() {
    live("lease_transfer", |live| async move {
        let store = &live.store;
        let orders = real_tokens(&live, "orders", 3).await;
        let mails = real_tokens(&live, "mails", 3).await;
        let orders_tenure = committed(&live, "shop.orders", "worker-1", &orders[1]).await;
        let mails_tenure = committed(&live, "shop.mailer", "worker-2", &mails[0]).await;
        store.release(&mails_tenure).await.unwrap();
        let exported: Vec<_> = store.list().await.unwrap().items;
        assert_eq!(exported.len(), 2);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leases.json");
        let file_arg = file.to_str().unwrap().to_string();
        let mut cmd = streamward(&live);
        cmd.args(["--read-only", "leases", "export", &file_arg]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "export is allowed read-only: {err}");
        assert!(out.contains("exported 2 leases"), "{out}");
        let text = std::fs::read_to_string(&file).unwrap();
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
        let json: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["format"], "streamward-leases");
        assert_eq!(json["leases"][0]["resource"], "shop.mailer");
        assert_eq!(json["leases"][1]["resource"], "shop.orders");
        assert!(json["cluster"]["replicaSet"].is_string(), "{json}");

        // Stdout is the same document, bar the time.
        let mut cmd = streamward(&live);
        cmd.args(["leases", "export"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let again: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(again["leases"], json["leases"]);

        // The leases move on: orders is rewound to before its token (a later import
        // moves it forward), the mailer's next holder commits a later token (an import
        // moves it back).
        let window = store.oplog_window().await.unwrap();
        let mut cmd = streamward(&live);
        cmd.args([
            "rewind",
            "shop.orders",
            "--to",
            &format!("{}:{}", window.first.secs, window.first.inc),
            "--execute",
        ]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let mailer_again = committed(&live, "shop.mailer", "worker-3", &mails[2]).await;
        assert_eq!(mailer_again.version, 1);
        let moved_on: Vec<_> = store.list().await.unwrap().items;

        // Read-only refuses the import before connecting, writing nothing.
        let mut cmd = streamward(&live);
        cmd.args(["--read-only", "leases", "import", &file_arg, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 3, "{err}");
        // Without --accept-skip the forward move of orders is refused: nothing written.
        let mut cmd = streamward(&live);
        cmd.args(["leases", "import", &file_arg, "--execute"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 3, "{out}{err}");
        assert!(err.contains("shop.orders"), "{err}");
        assert_eq!(
            store.list().await.unwrap().items,
            moved_on,
            "nothing written"
        );
        // A dry run plans both moves and writes nothing.
        let mut cmd = streamward(&live);
        cmd.args(["leases", "import", &file_arg, "--accept-skip"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("re-run with --execute to move 2 leases"),
            "{out}"
        );
        assert!(out.contains("fences out worker-3"), "{out}");
        assert_eq!(
            store.list().await.unwrap().items,
            moved_on,
            "nothing written"
        );
        assert!(import_records(store).await.is_empty());

        let mut cmd = streamward(&live);
        cmd.args([
            "leases",
            "import",
            &file_arg,
            "--accept-skip",
            "--execute",
            "--reason",
            "restore after the bad deploy",
            "--output",
            "json",
        ]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let reply: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(reply["written"], true);
        let moved = reply["moved"].as_array().unwrap();
        assert_eq!(moved.len(), 2);

        let restored = store.list().await.unwrap().items;
        assert_eq!(
            exported.len(),
            restored.len(),
            "the same leases, none missing or added"
        );
        for (then, now) in exported.iter().zip(&restored) {
            assert_eq!(then.resource, now.resource);
            assert_eq!(
                bytes(then.resume_token.as_ref()),
                bytes(now.resume_token.as_ref()),
                "{}: the token is back byte for byte",
                now.resource
            );
            assert_eq!(now.holder, None, "the holder is fenced out as by a rewind");
        }
        let mut recorded = import_records(store).await;
        recorded.sort();
        assert_eq!(recorded, ["shop.mailer", "shop.orders"], "one record each");
        let records = store.audit_log(100).await.unwrap().items;
        assert!(records
            .iter()
            .filter(|r| r.action == "import")
            .all(
                |r| r.reason.as_deref() == Some("restore after the bad deploy")
                    && r.state == streamward::model::AuditState::Applied
            ));
        // The fenced-out holder of orders can no longer commit.
        assert_eq!(
            store
                .commit(&orders_tenure, &orders[2], Duration::from_secs(60))
                .await
                .unwrap(),
            TenureWrite::LostLock
        );

        // Again: every lease is at the file's point, nothing is written.
        let mut cmd = streamward(&live);
        cmd.args(["leases", "import", &file_arg, "--accept-skip", "--execute"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("nothing to do"), "{out}");
        assert_eq!(store.list().await.unwrap().items, restored);
        assert_eq!(import_records(store).await.len(), 2);

        // Undo of the mailer's import move gives it back worker-3's token.
        let audit_id = moved
            .iter()
            .find(|m| m["resource"] == "shop.mailer")
            .and_then(|m| m["auditId"].as_str())
            .unwrap()
            .to_string();
        let mut cmd = streamward(&live);
        cmd.args(["undo", &audit_id, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let undone = store.get("shop.mailer").await.unwrap().unwrap();
        assert_eq!(
            bytes(undone.resume_token.as_ref()),
            bytes(Some(&mails[2])),
            "undo restores the point before the import"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_import_of_a_lease_the_cluster_lacks_is_refused_and_only_leaves_it_out() {
    live("lease_transfer_missing", |live| async move {
        let store = &live.store;
        let tokens = real_tokens(&live, "orders", 2).await;
        committed(&live, "shop.orders", "worker-1", &tokens[0]).await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("leases.json");
        let file_arg = file.to_str().unwrap().to_string();
        let mut cmd = streamward(&live);
        cmd.args(["leases", "export", &file_arg]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        // A second lease in the file that this cluster does not have.
        let mut json: Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let mut ghost = json["leases"][0].clone();
        ghost["resource"] = "shop.ghost".into();
        json["leases"].as_array_mut().unwrap().push(ghost);
        std::fs::write(&file, json.to_string()).unwrap();
        // Orders moves on by its holder.
        let lease = store.get("shop.orders").await.unwrap().unwrap();
        store
            .commit(
                &Tenure::of(&lease).unwrap(),
                &tokens[1],
                Duration::from_secs(60),
            )
            .await
            .unwrap();

        let mut cmd = streamward(&live);
        cmd.args(["leases", "import", &file_arg, "--execute"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 3, "{out}{err}");
        assert!(
            err.contains("shop.ghost") && err.contains("start its listener once"),
            "{err}"
        );
        assert_eq!(
            store.list().await.unwrap().items.len(),
            1,
            "nothing created"
        );
        assert!(import_records(store).await.is_empty());

        let mut cmd = streamward(&live);
        cmd.args([
            "leases",
            "import",
            &file_arg,
            "--only",
            "shop.orders",
            "--execute",
        ]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let restored = store.get("shop.orders").await.unwrap().unwrap();
        assert_eq!(
            bytes(restored.resume_token.as_ref()),
            bytes(Some(&tokens[0]))
        );
        assert_eq!(import_records(store).await, ["shop.orders"]);
    })
    .await;
}
