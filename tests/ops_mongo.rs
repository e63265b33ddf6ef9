//! The guarded actions against MongoDB as a user runs them: the real binary, the real
//! driver, over TCP to the scripted wire-protocol server, which applies the lease
//! commands to one lease document with `mini_mongo`. Asserts the exact command
//! documents, that a compare-and-swap conflict exits 4 with nothing written, and that
//! a dry run sends no write at all.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use assert_cmd::Command;
use bson::{doc, Bson, Document, Timestamp};
use support::mini_mongo;
use support::wire::{Action, WireServer};

/// The server's clock: 2023-02-10T03:28:32Z, the newest oplog entry's second.
const NOW_SECS: u32 = 0x63E5_B9E0;
/// The committed token: 14 s before the newest entry.
const TOKEN: &str = "8263E5B9D2000000012B042C0100296E5A1004";
const WRITES: [&str; 4] = ["findAndModify", "insert", "update", "delete"];

fn streamward() -> Command {
    let mut cmd = Command::cargo_bin("streamward").expect("binary built");
    cmd.env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir())
        .timeout(Duration::from_secs(30));
    cmd
}

async fn run(cmd: Command) -> assert_cmd::assert::Assert {
    let mut cmd = cmd;
    tokio::task::spawn_blocking(move || cmd.assert())
        .await
        .expect("command ran")
}

fn now() -> bson::DateTime {
    bson::DateTime::from_millis(i64::from(NOW_SECS) * 1000)
}

fn cursor(ns: &str, docs: Vec<Document>) -> Action {
    Action::ok(doc! { "cursor": { "id": 0_i64, "ns": ns, "firstBatch": docs } })
}

/// Held by w1 at version 12, renewed 3 s ago, expiring in 7 s.
fn live_lease() -> Document {
    doc! {
        "_id": "shop.orders",
        "listenerId": "w1",
        "expiresAt": bson::DateTime::from_millis((i64::from(NOW_SECS) + 7) * 1000),
        "renewedAt": bson::DateTime::from_millis((i64::from(NOW_SECS) - 3) * 1000),
        "version": 12_i64,
        "resumeToken": { "_data": TOKEN },
        "kind": "update",
        "resumeAt": null,
        "watch": { "db": "shop", "coll": "orders", "pipeline": "" },
    }
}

type Shared<T> = Arc<Mutex<T>>;

/// A cluster with one lease and an audit collection: `find` reads them (and the
/// oplog's edges), `findAndModify` and `update` apply their filter and pipeline or
/// update operators, `insert` adds audit records, `aggregate` on the oplog counts 7
/// changes. `interfere` runs on the lease just before each findAndModify (another
/// writer).
fn cluster(
    server: &WireServer,
    lease: Document,
    interfere: impl Fn(&mut Document) + Send + Sync + 'static,
) -> (Shared<Document>, Shared<Vec<Document>>) {
    server.set_local_time(now());
    server.set_operation_time(Timestamp {
        time: NOW_SECS,
        increment: 9,
    });
    let state = Arc::new(Mutex::new(lease));
    let audit: Shared<Vec<Document>> = Arc::default();
    let read = state.clone();
    let read_audit = audit.clone();
    server.on("find", move |cmd| {
        let coll = cmd.get_str("find").unwrap_or_default();
        match coll {
            "oplog.rs" => {
                let first = cmd.get_document("sort").and_then(|s| s.get_i32("$natural")) == Ok(1);
                let ts = if first {
                    Timestamp {
                        time: 0x63E5_B000,
                        increment: 1,
                    }
                } else {
                    Timestamp {
                        time: NOW_SECS,
                        increment: 4,
                    }
                };
                cursor("local.oplog.rs", vec![doc! { "ts": ts }])
            }
            "leases" => {
                let lease = read.lock().unwrap().clone();
                let filter = cmd.get_document("filter").cloned().unwrap_or_default();
                let found = mini_mongo::matches(&filter, Some(&lease), now());
                cursor(
                    "streamward.leases",
                    if found { vec![lease] } else { vec![] },
                )
            }
            "audit" => {
                let filter = cmd.get_document("filter").cloned().unwrap_or_default();
                let found = read_audit
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|d| mini_mongo::matches(&filter, Some(d), now()))
                    .cloned()
                    .collect();
                cursor("streamward.audit", found)
            }
            other => cursor(&format!("streamward.{other}"), vec![]),
        }
    });
    let write = state.clone();
    server.on("findAndModify", move |cmd| {
        let mut lease = write.lock().unwrap();
        interfere(&mut lease);
        let query = cmd.get_document("query").cloned().unwrap_or_default();
        if !mini_mongo::matches(&query, Some(&lease), now()) {
            return Action::ok(doc! { "value": null });
        }
        let before = lease.clone();
        let pipeline = cmd.get_array("update").cloned().unwrap_or_default();
        *lease = mini_mongo::apply_pipeline(&pipeline, &before, now());
        Action::ok(doc! { "value": before })
    });
    server.on("aggregate", |cmd| match cmd.get_str("aggregate") {
        Ok("oplog.rs") => cursor("local.oplog.rs", vec![doc! { "n": 7 }]),
        // A rebuild pipeline ending in $merge returns no documents.
        _ => cursor("shop.orders", vec![]),
    });
    let inserted = audit.clone();
    server.on("insert", move |cmd| {
        assert_eq!(
            cmd.get_str("insert"),
            Ok("audit"),
            "only audit records are inserted"
        );
        let documents = cmd.get_array("documents").unwrap();
        inserted
            .lock()
            .unwrap()
            .extend(documents.iter().map(|d| d.as_document().unwrap().clone()));
        Action::ok(doc! { "n": documents.len() as i32 })
    });
    let updated_lease = state.clone();
    let updated_audit = audit.clone();
    server.on("update", move |cmd| {
        let statement = cmd.get_array("updates").unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        let filter = statement.get_document("q").cloned().unwrap_or_default();
        let matched = |doc: &mut Document| {
            if !mini_mongo::matches(&filter, Some(doc), now()) {
                return false;
            }
            *doc = match statement.get("u") {
                Some(Bson::Array(pipeline)) => mini_mongo::apply_pipeline(pipeline, doc, now()),
                Some(Bson::Document(update)) => mini_mongo::apply_update(update, doc),
                other => panic!("an update without u: {other:?}"),
            };
            true
        };
        let n = match cmd.get_str("update") {
            Ok("leases") => i32::from(matched(&mut updated_lease.lock().unwrap())),
            Ok("audit") => i32::from(updated_audit.lock().unwrap().iter_mut().any(matched)),
            other => panic!("an update of {other:?}"),
        };
        Action::ok(doc! { "n": n, "nModified": n })
    });
    (state, audit)
}

/// The one audit record stored.
fn only_record(audit: &Shared<Vec<Document>>) -> Document {
    let records = audit.lock().unwrap();
    assert_eq!(records.len(), 1, "one audit record: {records:?}");
    records[0].clone()
}

/// `takeover shop.orders --execute` that finds the lease changed: exit 4, its stderr.
async fn changed_takeover(server: &WireServer) -> String {
    let mut cmd = streamward();
    cmd.args([
        "takeover",
        "shop.orders",
        "--execute",
        "--uri",
        &server.uri(),
    ]);
    let assert = run(cmd).await.code(4);
    String::from_utf8_lossy(&assert.get_output().stderr).into_owned()
}

fn writes(server: &WireServer) -> Vec<String> {
    server
        .received()
        .into_iter()
        .filter(|r| WRITES.contains(&r.name.as_str()))
        .map(|r| r.name)
        .collect()
}

fn majority() -> Document {
    doc! { "w": "majority", "wtimeout": 10_000 }
}

#[tokio::test(flavor = "multi_thread")]
async fn takeover_executes_a_pending_record_one_version_cas_then_the_finalization() {
    let server = WireServer::start().await;
    let (lease, audit) = cluster(&server, live_lease(), |_| {});
    let mut cmd = streamward();
    cmd.args([
        "takeover",
        "shop.orders",
        "--execute",
        "--reason",
        "w1 hung",
        "--operator",
        "ann",
        "--uri",
        &server.uri(),
    ]);
    let assert = run(cmd).await.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(
        out.contains("planned against version 12 held by w1"),
        "{out}"
    );
    assert!(
        out.contains("holder w1 renewed 3s ago: it looks alive"),
        "{out}"
    );
    assert!(
        out.contains("applied: takeover shop.orders, version 12 → 13"),
        "{out}"
    );

    assert_eq!(
        writes(&server),
        ["insert", "findAndModify", "update"],
        "the pending record, one CAS, the record finalized"
    );
    assert_eq!(
        server.commands_stripped("findAndModify").remove(0),
        doc! {
            "findAndModify": "leases",
            "query": { "_id": "shop.orders", "version": 12_i64 },
            "update": [{ "$set": {
                "listenerId": null,
                "expiresAt": { "$add": ["$$NOW", 0_i64] },
                "kind": "update",
                "version": { "$add": ["$version", 1_i32] },
                "note": { "$literal": "takeover by ann" },
            } }],
            "new": false,
            "writeConcern": majority(),
            "$db": "streamward",
        }
    );
    let insert = server.commands_stripped("insert").remove(0);
    assert_eq!(insert.get_str("insert"), Ok("audit"));
    assert_eq!(insert.get_str("$db"), Ok("streamward"));
    assert_eq!(insert.get_document("writeConcern"), Ok(&majority()));
    let record = insert.get_array("documents").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(record.get_str("operator"), Ok("ann"));
    assert_eq!(record.get_str("action"), Ok("takeover"));
    assert_eq!(record.get_str("reason"), Ok("w1 hung"));
    assert_eq!(
        record.get_str("state"),
        Ok("pending"),
        "written before the CAS"
    );
    assert_eq!(
        record.get_document("intended").unwrap().get_i64("version"),
        Ok(13)
    );
    let finalize = server.commands_stripped("update").remove(0);
    assert_eq!(finalize.get_str("update"), Ok("audit"));
    assert_eq!(finalize.get_document("writeConcern"), Ok(&majority()));
    let record = only_record(&audit);
    assert_eq!(record.get_str("state"), Ok("applied"));
    assert_eq!(record.get_str("outcome"), Ok("applied"));
    let before = record.get_document("before").unwrap();
    assert_eq!(before.get_i64("version"), Ok(12));
    assert_eq!(before.get_str("listenerId"), Ok("w1"));
    assert_eq!(
        before.get_document("resumeToken").unwrap().get_str("_data"),
        Ok(TOKEN),
        "the full prior resume point, for undo"
    );
    let after = record.get_document("after").unwrap();
    assert_eq!(after.get_i64("version"), Ok(13));
    assert_eq!(after.get("listenerId"), Some(&Bson::Null));
    assert_eq!(lease.lock().unwrap().get_i64("version"), Ok(13));
}

/// A released lease is taken by a standby within milliseconds, possibly before the
/// swap's read-back: the outcome and the audit must still show what the takeover
/// did (released at version 13), not the standby's acquire at version 14.
#[tokio::test(flavor = "multi_thread")]
async fn a_standby_acquiring_right_after_the_swap_is_not_reported_as_its_outcome() {
    let server = WireServer::start().await;
    let (lease, audit) = cluster(&server, live_lease(), |_| {});
    let write = lease.clone();
    server.on("findAndModify", move |cmd| {
        let mut lease = write.lock().unwrap();
        let query = cmd.get_document("query").cloned().unwrap_or_default();
        if !mini_mongo::matches(&query, Some(&lease), now()) {
            return Action::ok(doc! { "value": null });
        }
        let before = lease.clone();
        let pipeline = cmd.get_array("update").cloned().unwrap_or_default();
        *lease = mini_mongo::apply_pipeline(&pipeline, &before, now());
        // The standby's acquire lands before the read-back.
        let version = lease.get_i64("version").unwrap_or_default();
        lease.insert("version", version + 1);
        lease.insert("listenerId", "w2");
        Action::ok(doc! { "value": before })
    });
    let mut cmd = streamward();
    cmd.args([
        "takeover",
        "shop.orders",
        "--execute",
        "--output",
        "json",
        "--uri",
        &server.uri(),
    ]);
    let assert = run(cmd).await.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(json["outcome"]["after"]["version"], 13, "{out}");
    assert_eq!(
        json["outcome"]["after"]["listenerId"],
        serde_json::Value::Null,
        "{out}"
    );
    let record = only_record(&audit);
    assert_eq!(record.get_str("state"), Ok("applied"));
    let after = record.get_document("after").unwrap();
    assert_eq!(after.get_i64("version"), Ok(13));
    assert_eq!(after.get("listenerId"), Some(&Bson::Null));
    assert_eq!(lease.lock().unwrap().get_str("listenerId"), Ok("w2"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compare_and_swap_conflict_exits_4_and_writes_nothing_to_the_lease() {
    let server = WireServer::start().await;
    // A standby takes the lease between the plan and the swap.
    let (lease, audit) = cluster(&server, live_lease(), |lease| {
        lease.insert("version", 13_i64);
        lease.insert("listenerId", "w2");
    });
    let err = changed_takeover(&server).await;
    assert!(
        err.contains("shop.orders changed since it was planned (planned against version 12, now version 13 held by w2): nothing was written to the lease; plan again (audit record "),
        "{err}"
    );
    assert!(err.contains(": not applied)"), "{err}");
    assert_eq!(
        writes(&server),
        ["insert", "findAndModify", "update"],
        "the CAS matched nothing; its record says so"
    );
    let record = only_record(&audit);
    assert_eq!(record.get_str("state"), Ok("not applied"));
    assert!(
        record
            .get_str("outcome")
            .unwrap()
            .contains("now version 13"),
        "{record}"
    );
    assert_eq!(lease.lock().unwrap().get_str("listenerId"), Ok("w2"));
}

/// The swap is refused by a node no longer primary (nothing ran), and by the time it
/// is sent again a standby has moved the lease two versions on: the lease changed since
/// the plan (exit 4, plan again), not an error whose outcome is unknown.
#[tokio::test(flavor = "multi_thread")]
async fn a_swap_refused_as_not_primary_then_finding_the_lease_moved_on_is_a_change() {
    let server = WireServer::start().await;
    let (lease, audit) = cluster(&server, live_lease(), |lease| {
        lease.insert("version", 14_i64);
        lease.insert("listenerId", "w2");
    });
    server.script(
        "findAndModify",
        [Action::error(10107, "NotWritablePrimary", "not primary")],
    );
    let err = changed_takeover(&server).await;
    assert!(
        err.contains("shop.orders changed since it was planned (planned against version 12, now version 14 held by w2)"),
        "{err}"
    );
    assert_eq!(
        writes(&server),
        ["insert", "findAndModify", "findAndModify", "update"],
        "refused, sent again (matched nothing), the record finalized"
    );
    assert_eq!(only_record(&audit).get_str("state"), Ok("not applied"));
    assert_eq!(lease.lock().unwrap().get_i64("version"), Ok(14));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_reads_and_counts_but_sends_no_write() {
    let server = WireServer::start().await;
    let (lease, audit) = cluster(&server, live_lease(), |_| {});
    let mut cmd = streamward();
    cmd.args([
        "rewind",
        "shop.orders",
        "--by",
        "10s",
        "--uri",
        &server.uri(),
    ]);
    let assert = run(cmd).await.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(
        out.contains("7 changes on shop.orders will be replayed, 10s of history"),
        "{out}"
    );
    assert!(
        out.ends_with("nothing written; re-run with --execute to apply\n"),
        "{out}"
    );
    assert!(
        writes(&server).is_empty(),
        "a dry run sends no write: {:?}",
        writes(&server)
    );
    assert_eq!(*lease.lock().unwrap(), live_lease());
    // The count: one bounded aggregate on the oplog, from the target to the committed
    // change, leaving out no-ops and chunk migrations.
    let count = server.commands_stripped("aggregate").remove(0);
    let mut count = count;
    count.remove("maxTimeMS");
    assert_eq!(
        count,
        doc! {
            "aggregate": "oplog.rs",
            "pipeline": [
                { "$match": {
                    // Chunk migrations on a shard are not changes.
                    "fromMigrate": { "$ne": true },
                    // The collection's writes, and the transactions with one on it;
                    // no command, no no-op.
                    "$or": [
                        { "op": { "$in": ["i", "u", "d"] }, "ns": "shop.orders" },
                        { "op": "c", "o.applyOps.ns": "shop.orders" },
                    ],
                    "ts": {
                        "$gte": Timestamp { time: 0x63E5_B9D2 - 10, increment: 1 },
                        "$lte": Timestamp { time: 0x63E5_B9D2, increment: 1 },
                    },
                } },
                { "$limit": 10_000_i64 },
                // A transaction counts by its operations on the collection.
                { "$group": { "_id": Bson::Null, "n": { "$sum": { "$cond": [
                    { "$isArray": "$o.applyOps" },
                    { "$size": { "$filter": {
                        "input": "$o.applyOps",
                        "as": "op",
                        "cond": { "$and": [
                            { "$eq": ["$$op.ns", "shop.orders"] },
                            { "$in": ["$$op.op", ["i", "u", "d"]] },
                        ] },
                    } } },
                    1,
                ] } } } },
            ],
            "cursor": {},
            "$db": "local",
        }
    );

    // The same dry run as JSON is a plan a program can read.
    let mut cmd = streamward();
    cmd.args([
        "rewind",
        "shop.orders",
        "--by",
        "10s",
        "--output",
        "json",
        "--uri",
        &server.uri(),
    ]);
    let assert = run(cmd).await.success();
    let json: serde_json::Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    assert_eq!(json["written"], false);
    assert_eq!(json["plan"]["change"]["filter"]["version"], 12);
    assert_eq!(json["plan"]["change"]["version"], 13);
    assert_eq!(json["plan"]["effect"]["resume"]["counted"], 7);
    assert!(writes(&server).is_empty());
    assert!(
        audit.lock().unwrap().is_empty(),
        "a dry run leaves no record"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_and_guard_refusals_exit_3_without_a_write() {
    let server = WireServer::start().await;
    let (_lease, audit) = cluster(&server, live_lease(), |_| {});
    let no_record = audit.clone();
    for args in [
        vec!["takeover", "shop.orders", "--execute", "--read-only"],
        vec!["reset", "shop.orders", "--to", "now", "--execute"],
        vec![
            "rewind",
            "shop.orders",
            "--to",
            "Timestamp(1, 1)",
            "--execute",
        ],
        vec!["rebuild", "nothing-defined", "--execute"],
    ] {
        let mut cmd = streamward();
        cmd.args(&args).args(["--uri", &server.uri()]);
        let assert = run(cmd).await.code(3);
        let err = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
        assert!(err.starts_with("error: refused: "), "{args:?}: {err}");
    }
    assert!(writes(&server).is_empty(), "{:?}", writes(&server));
    assert!(
        no_record.lock().unwrap().is_empty(),
        "a refusal leaves no record"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attached_rebuild_takes_the_bulk_lease_runs_the_merge_and_gives_it_back_at_t0() {
    let server = WireServer::start().await;
    let mut expired = live_lease();
    expired.insert("expiresAt", now());
    let (lease, audit) = cluster(&server, expired, |_| {});
    let config =
        std::env::temp_dir().join(format!("streamward-ops-mongo-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        r#"[rebuilds.rollup]
resource = "shop.orders"
db = "shop"
collection = "orders"
pipeline = '[{"$group": {"_id": "$status", "n": {"$sum": 1}}}, {"$merge": {"into": "order_counts"}}]'
"#,
    )
    .unwrap();
    let mut cmd = streamward();
    cmd.args([
        "rebuild",
        "rollup",
        "--execute",
        "--operator",
        "ann",
        "--uri",
        &server.uri(),
    ])
    .arg("--config")
    .arg(&config);
    let assert = run(cmd).await.success();
    std::fs::remove_file(&config).unwrap();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(
        out.contains(
            "runs a 2-stage aggregation pipeline on shop.orders merging into order_counts"
        ),
        "{out}"
    );
    assert!(
        out.contains("applied: rebuild shop.orders, version 12 → 14"),
        "{out}"
    );
    let err = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert!(
        err.contains("rebuild rollup: 1/1"),
        "plain progress lines off a terminal: {err}"
    );

    assert_eq!(
        writes(&server),
        [
            "insert",
            "findAndModify",
            "update",
            "update",
            "findAndModify",
            "update"
        ],
        "the pending record, bulk, its step, the run's step, give back, the finalization"
    );
    let swaps = server.commands_stripped("findAndModify");
    let set = |i: usize| {
        swaps[i].get_array("update").unwrap()[0]
            .as_document()
            .unwrap()
            .get_document("$set")
            .unwrap()
            .clone()
    };
    assert_eq!(
        swaps[0].get_document("query"),
        Ok(&doc! { "_id": "shop.orders", "version": 12_i64 })
    );
    assert_eq!(set(0).get_str("kind"), Ok("bulk"));
    assert_eq!(
        set(0).get_document("listenerId"),
        Ok(&doc! { "$literal": "ann" })
    );
    assert_eq!(
        swaps[1].get_document("query"),
        Ok(&doc! { "_id": "shop.orders", "version": 13_i64 })
    );
    assert_eq!(swaps[1].get_document("writeConcern"), Ok(&majority()));
    assert_eq!(set(1).get_str("kind"), Ok("update"));
    assert_eq!(set(1).get("listenerId"), Some(&Bson::Null));
    assert_eq!(
        set(1).get_document("resumeToken"),
        Ok(&doc! { "$literal": null })
    );
    assert_eq!(
        set(1).get_document("resumeAt"),
        Ok(&doc! { "$literal": Timestamp { time: NOW_SECS, increment: 9 } }),
        "resumeAt = T0, the operation time of the bulk write"
    );
    let merge = server
        .commands_stripped("aggregate")
        .into_iter()
        .find(|c| c.get_str("aggregate") == Ok("orders"))
        .expect("the rebuild pipeline ran");
    assert_eq!(merge.get_str("$db"), Ok("shop"));
    assert_eq!(merge.get_document("writeConcern"), Ok(&majority()));
    assert_eq!(merge.get_array("pipeline").unwrap().len(), 2);
    let record = only_record(&audit);
    assert_eq!(record.get_str("action"), Ok("rebuild"));
    assert_eq!(record.get_str("state"), Ok("applied"));
    assert_eq!(
        record.get_document("before").unwrap().get_i64("version"),
        Ok(12)
    );
    // The last announced write: the give-back.
    let intended = record.get_document("intended").unwrap();
    assert_eq!(
        (intended.get_str("kind"), intended.get_i64("version")),
        (Ok("update"), Ok(14))
    );
    let insert = server.commands_stripped("insert").remove(0);
    let first = insert.get_array("documents").unwrap()[0]
        .as_document()
        .unwrap();
    assert_eq!(
        first.get_document("intended").unwrap().get_str("kind"),
        Ok("bulk"),
        "the pending record announced the bulk swap"
    );
    assert_eq!(
        record.get_document("after").unwrap().get_i64("version"),
        Ok(14)
    );
    assert!(record
        .get_str("outcome")
        .unwrap()
        .starts_with("applied: ran the pipeline on shop.orders"));
    let steps: Vec<String> = record
        .get_array("steps")
        .unwrap()
        .iter()
        .map(|s| {
            s.as_document()
                .unwrap()
                .get_str("what")
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert!(
        steps[0].starts_with("bulk swap applied: version 12 → 13, T0 "),
        "{steps:?}"
    );
    assert!(steps[1].starts_with("ran: "), "{steps:?}");
    let now = lease.lock().unwrap().clone();
    assert_eq!(
        (now.get_str("kind"), now.get("listenerId")),
        (Ok("update"), Some(&Bson::Null))
    );
}

/// A rebuild whose lease write is applied by the server but whose reply is lost on
/// the way back (the connection drops): `hang_up_on` says which findAndModify.
async fn rebuild_losing_a_reply(
    hang_up_on: usize,
) -> (assert_cmd::assert::Assert, Document, Document, WireServer) {
    let server = WireServer::start().await;
    let mut expired = live_lease();
    expired.insert("expiresAt", now());
    let (lease, audit) = cluster(&server, expired, |_| {});
    let write = lease.clone();
    let calls = Arc::new(Mutex::new(0_usize));
    server.on("findAndModify", move |cmd| {
        let mut lease = write.lock().unwrap();
        let query = cmd.get_document("query").cloned().unwrap_or_default();
        if !mini_mongo::matches(&query, Some(&lease), now()) {
            return Action::ok(doc! { "value": null });
        }
        let before = lease.clone();
        let pipeline = cmd.get_array("update").cloned().unwrap_or_default();
        *lease = mini_mongo::apply_pipeline(&pipeline, &before, now());
        let mut calls = calls.lock().unwrap();
        *calls += 1;
        if *calls == hang_up_on {
            Action::HangUp
        } else {
            Action::ok(doc! { "value": before })
        }
    });
    let config = std::env::temp_dir().join(format!(
        "streamward-ops-mongo-lost-{hang_up_on}-{}.toml",
        std::process::id()
    ));
    std::fs::write(
        &config,
        r#"[rebuilds.rollup]
resource = "shop.orders"
db = "shop"
collection = "orders"
pipeline = '[{"$group": {"_id": "$status"}}, {"$merge": {"into": "order_counts"}}]'
"#,
    )
    .unwrap();
    let mut cmd = streamward();
    cmd.args([
        "rebuild",
        "rollup",
        "--execute",
        "--operator",
        "ann",
        "--uri",
        &server.uri(),
    ])
    .arg("--config")
    .arg(&config);
    let assert = run(cmd).await;
    std::fs::remove_file(&config).unwrap();
    let stored = lease.lock().unwrap().clone();
    let record = only_record(&audit);
    (assert, stored, record, server)
}

/// The bulk swap applied but its reply was lost: sent again, it finds the lease as it
/// left it, and the resend's cluster time (later, and with everything before it on the
/// server) is the T0 the rebuild replays from: it runs, gives the lease back, and says
/// how it knew.
#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_swap_applied_with_its_reply_lost_goes_on_from_the_resends_time() {
    let (assert, stored, record, server) = rebuild_losing_a_reply(1).await;
    let assert = assert.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let err = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert!(out.contains("applied: rebuild shop.orders"), "{out}{err}");
    assert!(!err.contains("STUCK BULK"), "{err}");
    assert_eq!(record.get_str("state"), Ok("applied"), "{record}");
    assert_eq!(
        server.commands("findAndModify").len(),
        3,
        "bulk, sent again once (found applied), give back"
    );
    assert!(
        server
            .commands("aggregate")
            .iter()
            .any(|c| c.get_str("aggregate") == Ok("orders")),
        "the pipeline ran"
    );
    assert_eq!(stored.get_str("kind"), Ok("update"), "given back: {stored}");
    assert_eq!(
        stored.get("resumeAt"),
        Some(&bson::Bson::Timestamp(Timestamp {
            time: NOW_SECS,
            increment: 9
        })),
        "listeners replay from the resend's time (the server's operationTime): {stored}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_give_back_applied_with_its_reply_lost_is_reported_done_not_stuck() {
    let (assert, stored, record, server) = rebuild_losing_a_reply(2).await;
    let assert = assert.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let err = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert!(out.contains("applied: rebuild shop.orders"), "{out}{err}");
    assert!(out.contains("reply was lost"), "says how it knows: {out}");
    assert!(!err.contains("STUCK BULK"), "{err}");
    assert_eq!(stored.get_str("kind"), Ok("update"));
    assert_eq!(record.get_str("state"), Ok("applied"), "{record}");
    assert_eq!(
        server.commands("findAndModify").len(),
        3,
        "bulk, give back twice"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_swap_the_server_refused_is_a_plain_error_not_an_unknown_outcome() {
    let server = WireServer::start().await;
    let mut expired = live_lease();
    expired.insert("expiresAt", now());
    let (lease, audit) = cluster(&server, expired.clone(), |_| {});
    server.on("findAndModify", |_| {
        Action::error(
            13,
            "Unauthorized",
            "not authorized on streamward to execute command { findAndModify: \"leases\" }",
        )
    });
    let config = std::env::temp_dir().join(format!(
        "streamward-ops-mongo-refused-{}.toml",
        std::process::id()
    ));
    std::fs::write(
        &config,
        r#"[rebuilds.rollup]
resource = "shop.orders"
db = "shop"
collection = "orders"
pipeline = '[{"$group": {"_id": "$status"}}, {"$merge": {"into": "order_counts"}}]'
"#,
    )
    .unwrap();
    let mut cmd = streamward();
    cmd.args([
        "rebuild",
        "rollup",
        "--execute",
        "--operator",
        "ann",
        "--uri",
        &server.uri(),
    ])
    .arg("--config")
    .arg(&config);
    let assert = run(cmd).await;
    std::fs::remove_file(&config).unwrap();
    let assert = assert.code(5);
    let err = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert!(err.contains("not permitted"), "{err}");
    assert!(
        !err.contains("unknown"),
        "a refusal is not an unknown outcome: {err}"
    );
    assert!(!err.contains("STUCK BULK"), "{err}");
    assert!(err.contains("nothing was written to the lease"), "{err}");
    let record = only_record(&audit);
    assert_eq!(record.get_str("state"), Ok("not applied"), "{record}");
    assert_eq!(*lease.lock().unwrap(), expired, "the lease is untouched");
}
