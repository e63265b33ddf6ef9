//! The binary as an operator runs it, against the real replica set of
//! `STREAMWARD_TEST_URI`: listing, the oplog, and the guarded actions' dry runs,
//! refusals, executions, audit records and undo. Each test keeps its leases in its
//! own database and reads the outcome back through the store, not from the binary.

mod support;

use std::time::Duration;

use bson::doc;
use serde_json::Value;
use streamward::model::{AuditState, LockKind, ResumeToken};
use streamward::store::mongo::MongoStore;
use streamward::store::*;
use support::live::{live, run, streamward, LiveDb};

const RESOURCE: &str = "shop.orders";

/// A real token on the watched collection, committed by a live holder `worker-1`.
async fn held_lease_with_a_real_token(live: &LiveDb) -> (Tenure, ResumeToken) {
    let store = &live.store;
    let orders = live.ns("orders");
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(
            &orders,
            StartPoint::At(start),
            FeedOptions {
                batch_size: 10,
                max_await: Duration::from_millis(300),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store
        .put(&orders, doc! {"_id": "o1", "status": "new"})
        .await
        .unwrap();
    let first_event = async {
        loop {
            let batch = stream.next_batch().await.unwrap();
            if let Some(event) = batch.events.first() {
                break event.token.clone();
            }
        }
    };
    let token = tokio::time::timeout(Duration::from_secs(30), first_event)
        .await
        .expect("the insert's event arrives within 30 s");
    let request = AcquireRequest {
        resource: RESOURCE.into(),
        listener: "worker-1".into(),
        kind: LockKind::Update,
        lease: Duration::from_secs(60),
        watch: None,
        seen_version: None,
    };
    let AcquireOutcome::Acquired(lease) = store.acquire(&request).await.unwrap() else {
        panic!("worker-1 should acquire a new lease");
    };
    let tenure = Tenure::of(&lease).unwrap();
    assert_eq!(
        store
            .commit(&tenure, &token, Duration::from_secs(60))
            .await
            .unwrap(),
        TenureWrite::Done
    );
    (tenure, token)
}

async fn audit_count(store: &MongoStore) -> usize {
    store.audit_log(100).await.unwrap().items.len()
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_and_oplog_describe_the_real_cluster() {
    live("cli_leases", |live| async move {
        let (_, token) = held_lease_with_a_real_token(&live).await;
        let mut cmd = streamward(&live);
        cmd.args(["leases", "--output", "json"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let rows: Value = serde_json::from_str(&out).expect("leases --output json is JSON");
        let row = &rows[0];
        assert_eq!(row["resource"], RESOURCE);
        assert_eq!(row["holder"], "worker-1");
        assert_eq!(row["version"], 0);
        assert_eq!(row["status"], "OK", "{row}");
        assert_eq!(
            row["tokenTime"]["t"].as_u64(),
            token.time().map(|t| u64::from(t.secs)),
            "the token time is decoded from the real token"
        );
        // The time to loss, from two reads of the real oplog's figures a second apart;
        // the test set's oplog is far from full, so nothing is lost soon.
        let loss = &row["timeToLoss"];
        assert!(loss["text"].is_string(), "{row}");
        match &loss["earliestSecs"] {
            Value::String(never) => assert_eq!(never, "never", "{loss}"),
            secs => assert!(secs.as_u64().is_some_and(|s| s > 3600), "{loss}"),
        }

        let mut cmd = streamward(&live);
        cmd.arg("oplog");
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("oplog window"), "{out}");
        assert!(out.contains("PRIMARY"), "members are listed: {out}");
        // The real server's hello names its replica set; its oplog is readable, so no
        // consequence line follows the topology.
        let topology = out.lines().next().unwrap_or_default();
        assert!(
            topology.starts_with("topology      replica set ") && !topology.contains(':'),
            "{out}"
        );
        assert!(
            out.lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("oplog window")),
            "{out}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_dry_run_writes_nothing_and_execute_writes_once_with_its_audit() {
    live("cli_takeover", |live| async move {
        let (tenure, _) = held_lease_with_a_real_token(&live).await;
        let store = &live.store;
        let before = store.get(RESOURCE).await.unwrap().unwrap();

        let mut cmd = streamward(&live);
        cmd.args(["takeover", RESOURCE]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("worker-1"), "the plan names the holder: {out}");
        assert_eq!(store.get(RESOURCE).await.unwrap().unwrap(), before);
        assert_eq!(audit_count(store).await, 0, "a dry run audits nothing");

        let mut cmd = streamward(&live);
        cmd.args(["--read-only", "takeover", RESOURCE, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 3, "read-only refuses: {err}");
        assert_eq!(store.get(RESOURCE).await.unwrap().unwrap(), before);
        assert_eq!(audit_count(store).await, 0);

        let mut cmd = streamward(&live);
        cmd.args(["takeover", RESOURCE, "--execute", "--reason", "hung holder"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let after = store.get(RESOURCE).await.unwrap().unwrap();
        assert_eq!(after.version, before.version + 1);
        assert_eq!(after.holder, None);
        assert_eq!(
            after.resume_token, before.resume_token,
            "a takeover keeps the resume point"
        );
        assert_eq!(
            store
                .commit(
                    &tenure,
                    before.resume_token.as_ref().unwrap(),
                    Duration::from_secs(60)
                )
                .await
                .unwrap(),
            TenureWrite::LostLock,
            "the fenced-out holder's next commit is refused by the server"
        );
        let records = store.audit_log(10).await.unwrap().items;
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].action, "takeover");
        assert_eq!(records[0].operator, "oncall@test");
        assert_eq!(records[0].reason.as_deref(), Some("hung holder"));
        assert_eq!(
            records[0].before.as_ref().map(|l| l.version),
            Some(before.version)
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rewind_refuses_outside_the_window_applies_inside_it_and_undo_restores_the_token() {
    live("cli_rewind", |live| async move {
        let (_, token) = held_lease_with_a_real_token(&live).await;
        let store = &live.store;
        let window = store.oplog_window().await.unwrap();

        let before_window = format!("{}:1", window.first.secs.saturating_sub(3600));
        let mut cmd = streamward(&live);
        cmd.args(["rewind", RESOURCE, "--to", &before_window, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 3, "outside the oplog window is refused: {err}");
        assert_eq!(audit_count(store).await, 0);

        let target = token.time().unwrap();
        let to = format!("{}:{}", target.secs, target.inc);
        let mut cmd = streamward(&live);
        cmd.args([
            "rewind",
            RESOURCE,
            "--to",
            &to,
            "--execute",
            "--output",
            "json",
        ]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let rewound = store.get(RESOURCE).await.unwrap().unwrap();
        assert_eq!(rewound.resume_token, None);
        assert_eq!(rewound.resume_at, Some(target));
        let reply: Value = serde_json::from_str(&out).expect("JSON");
        let audit_id = reply["outcome"]["auditId"]
            .as_str()
            .expect("the outcome names its audit record")
            .to_string();
        assert!(store.audit_record(&audit_id).await.unwrap().is_some());

        let mut cmd = streamward(&live);
        cmd.args(["undo", &audit_id, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let undone = store.get(RESOURCE).await.unwrap().unwrap();
        assert_eq!(undone.resume_token, Some(token), "undo restores the token");
        assert_eq!(undone.version, rewound.version + 1);
        assert_eq!(audit_count(store).await, 2, "the undo is audited too");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reset_to_now_needs_accept_skip_and_unknown_resources_are_refused() {
    live("cli_reset", |live| async move {
        held_lease_with_a_real_token(&live).await;
        let store = &live.store;
        let before = store.get(RESOURCE).await.unwrap().unwrap();

        let mut cmd = streamward(&live);
        cmd.args(["reset", RESOURCE, "--to", "now", "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 3, "skipping changes needs --accept-skip: {err}");
        assert_eq!(store.get(RESOURCE).await.unwrap().unwrap(), before);

        let mut cmd = streamward(&live);
        cmd.args(["takeover", "no.such.resource", "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_ne!(code, 0, "an unknown resource is refused");
        assert!(err.contains("no.such.resource"), "{err}");
        assert_eq!(
            store.list().await.unwrap().items.len(),
            1,
            "nothing was created"
        );

        let mut cmd = streamward(&live);
        cmd.args([
            "reset",
            RESOURCE,
            "--to",
            "now",
            "--accept-skip",
            "--execute",
        ]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let reset = store.get(RESOURCE).await.unwrap().unwrap();
        assert_eq!(reset.resume_token, None);
        let last = store.oplog_window().await.unwrap().last;
        let at = reset.resume_at.expect("reset to now sets resumeAt");
        assert!(
            at > before.resume_token.as_ref().unwrap().time().unwrap() && at <= last,
            "resumeAt {at:?} is the last oplog entry at the time of the reset"
        );
        assert_eq!(audit_count(store).await, 1);
    })
    .await;
}

/// A config file in its own directory naming an attached `$merge` rebuild of `resource`.
fn rebuild_config(live: &LiveDb) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"[rebuilds.order-counts]
resource = "{RESOURCE}"
db = "{db}"
collection = "orders"
pipeline = '[{{"$group": {{"_id": "$status", "n": {{"$sum": 1}}}}}}, {{"$merge": {{"into": "order_counts", "whenMatched": "replace"}}}}]'
timeout = "60s"
"#,
        db = live.db
    );
    std::fs::write(dir.path().join("streamward.toml"), config).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attached_rebuild_merges_under_the_bulk_lease_and_gives_it_back_at_t0() {
    live("cli_rebuild", |live| async move {
        let (tenure, _) = held_lease_with_a_real_token(&live).await;
        let store = &live.store;
        let orders = live.ns("orders");
        for (id, status) in [("o2", "new"), ("o3", "paid"), ("o4", "paid")] {
            store
                .put(&orders, doc! {"_id": id, "status": status})
                .await
                .unwrap();
        }
        let before = store.get(RESOURCE).await.unwrap().unwrap();
        let config = rebuild_config(&live);

        let mut cmd = streamward(&live);
        cmd.current_dir(config.path()).args([
            "rebuild",
            "order-counts",
            "--execute",
            "--reason",
            "fix",
        ]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{out}\n{err}");

        let counts = store.find_all(&live.ns("order_counts")).await.unwrap();
        assert_eq!(
            counts,
            vec![doc! {"_id": "new", "n": 2}, doc! {"_id": "paid", "n": 2}],
            "the pipeline ran on the real server"
        );
        let after = store.get(RESOURCE).await.unwrap().unwrap();
        assert_eq!(
            after.kind,
            LockKind::Update,
            "the bulk lease was given back"
        );
        assert_eq!(after.holder, None);
        assert_eq!(after.resume_token, None);
        let t0 = after.resume_at.expect("listeners replay from T0");
        assert!(
            t0 > before.resume_token.as_ref().unwrap().time().unwrap(),
            "T0 is the cluster time of the bulk swap, after the last commit"
        );
        assert!(after.version >= before.version + 2, "swap in, swap out");
        assert_eq!(
            store
                .commit(
                    &tenure,
                    before.resume_token.as_ref().unwrap(),
                    Duration::from_secs(60)
                )
                .await
                .unwrap(),
            TenureWrite::LostLock
        );
        let records = store.audit_log(10).await.unwrap().items;
        assert_eq!(records.len(), 1, "one audit record for the whole rebuild");
        assert_eq!(records[0].action, "rebuild");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_bulk_gives_a_stuck_bulk_lease_back_to_the_listeners() {
    live("cli_abort_bulk", |live| async move {
        held_lease_with_a_real_token(&live).await;
        let store = &live.store;
        let current = store.get(RESOURCE).await.unwrap().unwrap();
        // A rebuild that died after taking the bulk lease.
        let swapped = store
            .operator_swap(&OperatorChange {
                resource: RESOURCE.into(),
                expected_version: current.version,
                holder: Some("rebuild@gone".into()),
                expires_in: Duration::ZERO,
                kind: LockKind::Bulk,
                resume: ResumeChange::Keep,
                note: "rebuild by rebuild@gone".into(),
                protocol: Default::default(),
            })
            .await
            .unwrap();
        assert!(matches!(swapped, SwapOutcome::Applied { .. }));
        let incremental = AcquireRequest {
            resource: RESOURCE.into(),
            listener: "worker-2".into(),
            kind: LockKind::Update,
            lease: Duration::from_secs(60),
            watch: None,
            seen_version: None,
        };
        assert_eq!(
            store.acquire(&incremental).await.unwrap(),
            AcquireOutcome::HeldByOther,
            "an expired bulk lease is never taken by an incremental listener"
        );

        let mut cmd = streamward(&live);
        cmd.args(["leases", "--output", "json"]);
        let (_, out, _) = run(cmd).await;
        let rows: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(rows[0]["status"], "STUCK BULK", "{out}");

        let mut cmd = streamward(&live);
        cmd.args(["abort-bulk", RESOURCE, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(matches!(
            store.acquire(&incremental).await.unwrap(),
            AcquireOutcome::Acquired(_)
        ));
    })
    .await;
}

/// Malformed documents as other tools or hand edits leave them: each is reported by
/// its `_id` and field, and never hides the well-formed rest.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_leases_and_audit_records_are_reported_and_the_rest_listed() {
    live("cli_malformed", |live| async move {
        held_lease_with_a_real_token(&live).await;
        let leases = live.ns("leases");
        let oid = bson::oid::ObjectId::new();
        for bad in [
            doc! {"_id": "version-as-text", "version": "7"},
            doc! {"_id": oid, "version": 1_i64},
            doc! {"_id": "expiry-as-text", "expiresAt": "tomorrow"},
            doc! {"_id": "token-as-bytes", "resumeToken": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2] }},
            doc! {"_id": "kind-shouted", "kind": "BULK"},
        ] {
            live.store.put(&leases, bad).await.unwrap();
        }

        let mut cmd = streamward(&live);
        cmd.arg("leases");
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(RESOURCE), "the good lease is listed: {out}");
        for (id, field) in [
            ("version-as-text", "version"),
            ("expiry-as-text", "expiresAt"),
            ("token-as-bytes", "resumeToken"),
            ("kind-shouted", "kind"),
            (&oid.to_hex()[..], "_id"),
        ] {
            let line = err
                .lines()
                .find(|l| l.contains(id))
                .unwrap_or_else(|| panic!("no warning names {id}: {err}"));
            assert!(line.contains(field), "the warning names the field {field}: {line}");
            assert!(!out.contains(id), "{id} is not a row: {out}");
        }

        let mut cmd = streamward(&live);
        cmd.args(["leases", "--output", "json"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let rows: Value = serde_json::from_str(&out).expect("JSON");
        let rows = rows.as_array().expect("an array");
        assert_eq!(rows.len(), 6, "{out}");
        assert_eq!(
            rows.iter().filter(|r| r["status"] == "MALFORMED").count(),
            5,
            "{out}"
        );
        assert!(rows.iter().any(|r| r["resource"] == RESOURCE && r["status"] == "OK"));

        // One unreadable audit record among readable ones.
        let mut cmd = streamward(&live);
        cmd.args(["takeover", RESOURCE, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        live.store
            .put(&live.ns("audit"), doc! {"_id": "hand-written", "operator": 5})
            .await
            .unwrap();
        let mut cmd = streamward(&live);
        cmd.arg("audit");
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("takeover"), "{out}");
        assert!(
            err.lines().any(|l| l.contains("hand-written") && l.contains("operator")),
            "{err}"
        );
    })
    .await;
}

/// A unique index the tool does not know refuses an action's audit record: with no
/// record to stand on, the action is not started and the lease is not touched.
#[tokio::test(flavor = "multi_thread")]
async fn an_action_whose_audit_record_is_refused_by_a_foreign_unique_index_is_not_started() {
    live("cli_audit_refused", |live| async move {
        held_lease_with_a_real_token(&live).await;
        let client = mongodb::Client::with_uri_str(&live.uri).await.unwrap();
        client
            .database(&live.db)
            .collection::<bson::Document>("audit")
            .create_index(
                mongodb::IndexModel::builder()
                    .keys(doc! {"resource": 1})
                    .options(
                        mongodb::options::IndexOptions::builder()
                            .unique(true)
                            .build(),
                    )
                    .build(),
            )
            .await
            .unwrap();
        let mut cmd = streamward(&live);
        cmd.args(["takeover", RESOURCE, "--execute"]);
        let (code, _, err) = run(cmd).await;
        assert_eq!(code, 0, "the first record is written: {err}");
        let released = live.store.get(RESOURCE).await.unwrap().unwrap();
        let mut cmd = streamward(&live);
        cmd.args(["takeover", RESOURCE, "--hold", "1m", "--execute"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 1, "{out}{err}");
        assert!(err.contains("was not started"), "{err}");
        assert!(err.contains("nothing was written to the lease"), "{err}");
        assert!(
            err.contains("not written"),
            "names the refused record: {err}"
        );
        let printed_id = |text: &str| {
            text.split("audit record ").skip(1).any(|rest| {
                rest.chars()
                    .take(24)
                    .filter(char::is_ascii_hexdigit)
                    .count()
                    == 24
            })
        };
        assert!(
            !printed_id(&out) && !printed_id(&err),
            "no id is printed: {out}{err}"
        );
        let records = live.store.audit_log(10).await.unwrap().items;
        assert_eq!(records.len(), 1, "only the first action has a record");
        assert_eq!(
            live.store.get(RESOURCE).await.unwrap().unwrap(),
            released,
            "the second takeover changed nothing"
        );
    })
    .await;
}

/// A rebuild killed with SIGKILL while its pipeline runs on the server: its record
/// stays pending with the bulk swap as a step, `audit` judges it STUCK BULK against
/// the lease and names abort-bulk, and abort-bulk gives the lease back.
#[tokio::test(flavor = "multi_thread")]
async fn a_rebuild_killed_mid_run_leaves_a_pending_record_that_names_its_recovery() {
    live("cli_rebuild_killed", |live| async move {
        held_lease_with_a_real_token(&live).await;
        let store = &live.store;
        let orders = live.ns("orders");
        for n in 0..100 {
            store
                .put(&orders, doc! {"_id": format!("slow-{n}"), "status": "new"})
                .await
                .unwrap();
        }
        // 30 ms of server-side JavaScript per order: about 3 s for the pipeline.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("streamward.toml"),
            format!(
                r#"[rebuilds.slow-counts]
resource = "{RESOURCE}"
db = "{db}"
collection = "orders"
pipeline = '[{{"$addFields": {{"spin": {{"$function": {{"body": "function() {{ const end = Date.now() + 30; while (Date.now() < end) {{}} return 1; }}", "args": [], "lang": "js"}}}}}}}}, {{"$group": {{"_id": "$status", "n": {{"$sum": "$spin"}}}}}}, {{"$merge": {{"into": "order_counts", "whenMatched": "replace"}}}}]'
timeout = "20s"
"#,
                db = live.db
            ),
        )
        .unwrap();
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamward"))
            .env("NO_COLOR", "1")
            .env_remove("STREAMWARD_URI")
            .current_dir(dir.path())
            .args([
                "--uri",
                &live.uri,
                "--leases",
                &format!("{}.leases", live.db),
                "--operator",
                "oncall@test",
                "rebuild",
                "slow-counts",
                "--execute",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let swapped = async {
            loop {
                let records = store.audit_log(10).await.unwrap().items;
                if let Some(record) = records
                    .into_iter()
                    .find(|r| r.steps.iter().any(|s| s.what.starts_with("bulk swap applied")))
                {
                    break record;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let record = tokio::time::timeout(Duration::from_secs(30), swapped)
            .await
            .expect("the rebuild records its bulk swap within 30 s");
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "killed mid-run: {status}");

        let record = store.audit_record(&record.id).await.unwrap().unwrap();
        assert_eq!(record.state, AuditState::Pending, "{record:?}");
        assert_eq!(record.steps.len(), 1, "killed before the run finished: {record:?}");
        let lease = store.get(RESOURCE).await.unwrap().unwrap();
        assert_eq!(lease.kind, LockKind::Bulk);
        assert_eq!(Some(lease.version), record.intended.as_ref().map(|l| l.version));

        // Until its bulk lease runs out it may be running: `audit` says so.
        let verdict_of = |out: &str| -> Value {
            let json: Value = serde_json::from_str(out).unwrap();
            json.as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == record.id.as_str())
                .expect("the record in JSON")
                .clone()
        };
        let mut cmd = streamward(&live);
        cmd.args(["audit", "--output", "json"]);
        let (_, out, _) = run(cmd).await;
        let running = verdict_of(&out);
        assert_eq!(running["state"], "pending", "{running}");
        assert_eq!(running["pending"]["verdict"], "running", "{running}");

        // The runbook: the killed client's pipeline may still run on the server; stop it.
        let client = mongodb::Client::with_uri_str(&live.uri).await.unwrap();
        let ops = client
            .database("admin")
            .aggregate([
                doc! {"$currentOp": {}},
                doc! {"$match": {"ns": format!("{}.orders", live.db), "command.aggregate": "orders"}},
            ])
            .await
            .unwrap();
        let ops: Vec<bson::Document> = futures_util::TryStreamExt::try_collect(ops).await.unwrap();
        for op in &ops {
            if let Some(opid) = op.get("opid") {
                let _ = client
                    .database("admin")
                    .run_command(doc! {"killOp": 1, "op": opid.clone()})
                    .await;
            }
        }

        // Once the bulk lease has run out, it is STUCK BULK, and the recovery is named.
        let stuck = async {
            loop {
                let mut cmd = streamward(&live);
                cmd.args(["audit", "--output", "json"]);
                let (_, out, _) = run(cmd).await;
                let judged = verdict_of(&out);
                if judged["pending"]["verdict"] == "stuck bulk" {
                    break judged;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        };
        let pending = tokio::time::timeout(Duration::from_secs(60), stuck)
            .await
            .expect("stuck bulk once the 30 s bulk lease runs out");
        let mut cmd = streamward(&live);
        cmd.args(["audit"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("PENDING"), "{out}");
        assert!(
            out.contains(&format!("streamward abort-bulk {RESOURCE} --execute")),
            "the pending record names its recovery: {out}"
        );

        let mut cmd = streamward(&live);
        cmd.args(["abort-bulk", RESOURCE, "--execute", "--reason", "rebuild killed"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{out}{err}");
        let given_back = store.get(RESOURCE).await.unwrap().unwrap();
        assert_eq!(
            (given_back.kind, given_back.version),
            (LockKind::Update, lease.version + 1)
        );
        let records = store.audit_log(10).await.unwrap().items;
        assert_eq!(records[0].action, "abort-bulk");
        assert_eq!(records[0].state, AuditState::Applied);
        println!(
            "killed mid-rebuild: record {} pending with step {:?}; {} server op(s) killed; audit said: {} / {}",
            record.id,
            record.steps[0].what,
            ops.len(),
            running["pending"]["recovery"],
            pending["pending"]["recovery"]
        );
    })
    .await;
}

/// For cron and monitors, on the real cluster: `leases --check` passes while the lease
/// is healthy and exits 6 naming it once it is STUCK BULK; `leases --watch --output
/// json` prints a line when that happens.
#[tokio::test(flavor = "multi_thread")]
async fn leases_check_and_watch_follow_the_real_cluster() {
    live("cli_check_watch", |live| async move {
        held_lease_with_a_real_token(&live).await;
        let store = &live.store;

        let mut cmd = streamward(&live);
        cmd.args(["leases", "--check"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            out,
            "ok: 1 leases, none AT RISK, LOST, INVALIDATED, FAILING, STUCK BULK or UNCLAIMED\n",
            "{err}"
        );

        let mut watch = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamward"))
            .env_remove("STREAMWARD_URI")
            .args([
                "--uri",
                &live.uri,
                "--leases",
                &format!("{}.leases", live.db),
            ])
            .args([
                "leases",
                "--watch",
                "--interval",
                "200ms",
                "--output",
                "json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("watch started");
        let stdout = watch.stdout.take().unwrap();
        let (lines, mut received) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let first = next_json(&mut received).await;
        assert_eq!(first[0]["resource"], RESOURCE);
        assert_eq!(first[0]["holder"], "worker-1");

        // A rebuild that died after taking the bulk lease.
        let current = store.get(RESOURCE).await.unwrap().unwrap();
        let swapped = store
            .operator_swap(&OperatorChange {
                resource: RESOURCE.into(),
                expected_version: current.version,
                holder: Some("rebuild@gone".into()),
                expires_in: Duration::ZERO,
                kind: LockKind::Bulk,
                resume: ResumeChange::Keep,
                note: "rebuild by rebuild@gone".into(),
                protocol: Default::default(),
            })
            .await
            .unwrap();
        assert!(matches!(swapped, SwapOutcome::Applied { .. }));
        let stuck = loop {
            let line = next_json(&mut received).await;
            if line[0]["status"] == "STUCK BULK" {
                break line;
            }
        };
        let _ = watch.kill();
        let _ = watch.wait();
        assert_eq!(stuck[0]["version"], current.version + 1);

        let mut cmd = streamward(&live);
        cmd.args(["leases", "--check"]);
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 6, "{err}");
        assert!(
            out.lines()
                .any(|l| l.starts_with(RESOURCE) && l.ends_with("STUCK BULK")),
            "{out}"
        );
        assert!(
            err.contains(&format!(
                "1 of 1 leases need attention: {RESOURCE} STUCK BULK"
            )),
            "{err}"
        );
    })
    .await;
}

/// The next line of a `--watch`, as JSON, within 30 s.
async fn next_json(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(30), lines.recv())
        .await
        .expect("a line within 30 s")
        .expect("the watch still runs");
    serde_json::from_str(&line).expect("one JSON document per line")
}
