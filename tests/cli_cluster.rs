//! `streamward leases` and `streamward oplog` as a user runs them: the real binary,
//! over TCP, against the black-pipe server; exit codes of DESIGN §7.

mod support;

use std::time::{Duration, Instant};

use assert_cmd::Command;
use bson::{doc, Document, Timestamp};
use predicates::prelude::*;
use support::wire::{Action, WireServer};

const TOKEN: &str = "8263E5B9D2000000012B042C0100296E5A1004";

fn streamward() -> Command {
    let mut cmd = Command::cargo_bin("streamward").expect("binary built");
    cmd.env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir())
        .timeout(Duration::from_secs(30));
    cmd
}

fn cursor(ns: &str, docs: Vec<Document>) -> Action {
    Action::ok(doc! { "cursor": { "id": 0_i64, "ns": ns, "firstBatch": docs } })
}

/// Answers the leases `find` with `leases` and the two oplog reads with a window.
fn script_cluster(server: &WireServer, leases: Vec<Document>) {
    server.set_local_time(bson::DateTime::from_millis(0x63E5_B9E0_i64 * 1000));
    server.on("find", move |cmd| {
        let coll = cmd.get_str("find").unwrap_or_default();
        if coll == "oplog.rs" {
            let ascending = cmd.get_document("sort").and_then(|s| s.get_i32("$natural")) == Ok(1);
            let ts = if ascending {
                Timestamp {
                    time: 0x63E5_B000,
                    increment: 1,
                }
            } else {
                Timestamp {
                    time: 0x63E5_B9E0,
                    increment: 4,
                }
            };
            cursor("local.oplog.rs", vec![doc! {"ts": ts}])
        } else {
            cursor(&format!("streamward.{coll}"), leases.clone())
        }
    });
}

fn held_lease() -> Document {
    doc! {
        "_id": "shop.orders",
        "listenerId": "host-7\u{1b}[2J",
        "expiresAt": bson::DateTime::from_millis(0x63E5_B9EA_i64 * 1000),
        "version": 12_i64,
        "resumeToken": { "_data": TOKEN },
        "kind": "update",
        "resumeAt": null,
        // What every streamward holder writes when it acquires: without it the lease
        // would read as one written by another implementation (protocol.md §15).
        "renewedAt": bson::DateTime::from_millis(0x63E5_B9E0_i64 * 1000),
    }
}

async fn run(cmd: Command) -> assert_cmd::assert::Assert {
    let mut cmd = cmd;
    tokio::task::spawn_blocking(move || cmd.assert())
        .await
        .expect("command ran")
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_prints_the_table_with_decoded_token_times() {
    let server = WireServer::start().await;
    script_cluster(&server, vec![held_lease()]);
    let mut cmd = streamward();
    cmd.args(["leases", "--uri", &server.uri()]);
    let assert = run(cmd).await.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(out.starts_with("RESOURCE"), "{out}");
    assert!(out.contains("shop.orders"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("shop.orders"))
        .expect("a row for the lease");
    assert_eq!(
        row.split_whitespace().nth(5),
        Some("12"),
        "version column: {out}"
    );
    // 0x63E5B9D2 = 2023-02-10T03:28:18Z; the last entry, 0x63E5B9E0, is 14 s later.
    assert!(out.contains("03:28:18"), "decoded token time: {out}");
    assert!(out.contains("14s"), "lag against the window: {out}");
    assert!(
        out.contains("host-7\\u{1b}[2J"),
        "control characters escaped: {out}"
    );
    assert!(
        !out.contains('\u{1b}'),
        "no raw escape reaches the terminal"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_as_json_carries_the_health_of_each_lease() {
    let server = WireServer::start().await;
    script_cluster(&server, vec![held_lease()]);
    let mut cmd = streamward();
    cmd.args(["leases", "--output", "json", "--uri", &server.uri()]);
    let assert = run(cmd).await.success();
    let json: serde_json::Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    let lease = &json[0];
    assert_eq!(lease["resource"], "shop.orders");
    assert_eq!(lease["version"], 12);
    assert_eq!(lease["tokenTime"]["t"], 0x63E5_B9D2_u32);
    assert_eq!(lease["tokenTime"]["iso"], "2023-02-10T03:28:18+00:00");
    assert_eq!(lease["lagSecs"], 14);
    assert_eq!(
        lease["liveHolder"], "host-7\u{1b}[2J",
        "JSON keeps the raw value, escaped by the encoder"
    );
    assert_eq!(lease["status"], "OK");
    assert_eq!(lease["invalidated"], serde_json::Value::Null);
    assert_eq!(
        lease["source"],
        serde_json::Value::Null,
        "no listener has recorded what it reads"
    );
}

/// A lease whose listener met a drop of its collection, as the listener records it.
fn invalidated_lease() -> Document {
    let mut lease = held_lease();
    lease.insert("listenerId", bson::Bson::Null);
    lease.insert(
        "invalidated",
        doc! {
            "at": Timestamp { time: 0x63E5_B9D5, increment: 2 },
            "reason": "shop.orders was dropped\u{1b}[2J",
        },
    );
    lease
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalidated_lease_says_so_in_the_table_and_in_json() {
    let server = WireServer::start().await;
    script_cluster(&server, vec![invalidated_lease()]);
    let mut cmd = streamward();
    cmd.args(["leases", "--uri", &server.uri()]);
    let assert = run(cmd).await.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let row = out
        .lines()
        .find(|l| l.starts_with("shop.orders "))
        .expect("a row for the lease");
    assert!(row.ends_with("INVALIDATED"), "status column: {out}");
    let note = out
        .lines()
        .find(|l| l.starts_with("shop.orders: INVALIDATED at 2023-02-10T03:28:21Z #2"))
        .unwrap_or_else(|| panic!("a note under the table: {out}"));
    assert!(
        note.contains("shop.orders was dropped\\u{1b}[2J"),
        "escaped: {note}"
    );
    assert!(
        note.contains("reset shop.orders --to now --accept-skip"),
        "{note}"
    );
    assert!(
        !out.contains('\u{1b}'),
        "no raw escape reaches the terminal"
    );

    let mut cmd = streamward();
    cmd.args(["leases", "--output", "json", "--uri", &server.uri()]);
    let assert = run(cmd).await.success();
    let json: serde_json::Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    assert_eq!(json[0]["status"], "INVALIDATED");
    assert_eq!(
        json[0]["invalidated"]["reason"],
        "shop.orders was dropped\u{1b}[2J"
    );
    assert_eq!(json[0]["invalidated"]["at"]["t"], 0x63E5_B9D5_u32);
    assert_eq!(json[0]["invalidated"]["at"]["i"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_leases_collection_is_an_empty_list() {
    let server = WireServer::start().await;
    script_cluster(&server, vec![]);
    let mut cmd = streamward();
    cmd.args([
        "leases",
        "--leases",
        "nowhere.locks",
        "--uri",
        &server.uri(),
    ]);
    run(cmd)
        .await
        .success()
        .stdout(predicate::str::contains("no leases in nowhere.locks"));
    let finds = server.commands("find");
    assert!(finds
        .iter()
        .any(|f| f.get_str("find") == Ok("locks") && f.get_str("$db") == Ok("nowhere")));
}

#[tokio::test(flavor = "multi_thread")]
async fn oplog_shows_the_window_and_members() {
    let server = WireServer::start().await;
    script_cluster(&server, vec![]);
    server.script(
        "replSetGetStatus",
        [Action::ok(doc! {
            "set": "rs0",
            "members": [
                { "name": "a:27017", "stateStr": "PRIMARY", "health": 1.0, "optime": { "ts": Timestamp { time: 0x63E5_B9E0, increment: 4 } }, "optimeDate": bson::DateTime::from_millis(0x63E5_B9E0_i64 * 1000) },
                { "name": "b:27017", "stateStr": "SECONDARY", "health": 1.0, "optime": { "ts": Timestamp { time: 0x63E5_B9DB, increment: 1 } }, "optimeDate": bson::DateTime::from_millis(0x63E5_B9DB_i64 * 1000) },
            ],
        })],
    );
    let mut cmd = streamward();
    cmd.args(["oplog", "--uri", &server.uri()]);
    let assert = run(cmd).await.success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(out.contains("oplog window  42m08s"), "{out}");
    assert!(
        out.contains("PRIMARY") && out.contains("SECONDARY"),
        "{out}"
    );
    assert!(out.contains("b:27017"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn oplog_without_privilege_exits_5_and_names_the_role() {
    let server = WireServer::start().await;
    server.script(
        "find",
        [Action::error(
            13,
            "Unauthorized",
            "not authorized on local to execute command { find: \"oplog.rs\" }",
        )],
    );
    // Without clusterMonitor, replSetGetStatus is refused too.
    server.script(
        "replSetGetStatus",
        [Action::error(
            13,
            "Unauthorized",
            "not authorized on admin to execute command { replSetGetStatus: 1 }",
        )],
    );
    let mut cmd = streamward();
    cmd.args(["oplog", "--uri", &server.uri()]);
    // What is known is shown (the deployment, and what follows); the window is not.
    run(cmd)
        .await
        .code(5)
        .stdout(
            predicate::str::contains("topology      replica set rs0")
                .and(predicate::str::contains("oplog window  unknown"))
                .and(predicate::str::contains("resets are refused")),
        )
        .stderr(predicate::str::contains("clusterMonitor"));
}

/// Through a mongos the oplog cannot be read (code 20 on `local`): `oplog` says what the
/// cluster is and what follows, instead of failing on the router's refusal.
#[tokio::test(flavor = "multi_thread")]
async fn through_mongos_oplog_names_the_sharded_cluster_and_what_follows() {
    let server = WireServer::start().await;
    server.become_mongos(vec![held_lease()]);
    let mut cmd = streamward();
    cmd.args(["oplog", "--uri", &server.uri_direct()]);
    run(cmd)
        .await
        .code(5)
        .stdout(
            predicate::str::contains("topology      sharded cluster (mongos)")
                .and(predicate::str::contains("the oplog is per shard"))
                .and(predicate::str::contains("oplog window  unknown")),
        )
        .stderr(
            predicate::str::contains("the shards cannot be listed")
                .and(predicate::str::contains("clusterMonitor")),
        );
    let mut cmd = streamward();
    cmd.args(["oplog", "--output", "json", "--uri", &server.uri_direct()]);
    let out = cmd.output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(json["topology"]["deployment"]["kind"], "sharded", "{json}");
    assert_eq!(json["topology"]["oplogReadable"], false, "{json}");
    assert_eq!(json["first"], serde_json::Value::Null, "{json}");
    assert_eq!(json["error"]["exit"], 5, "{json}");

    // `leases` lists what it can and says why lag and headroom are missing.
    let mut cmd = streamward();
    cmd.args(["leases", "--uri", &server.uri_direct()]);
    run(cmd).await.code(0).stderr(predicate::str::contains(
        "note: sharded cluster (mongos): the oplog is per shard and could not be read (the shards cannot be listed",
    ));

    // A takeover needs no window and is planned; a rewind back from the token goes
    // unchecked, saying so; a reset needs the window and is refused with 5, saying why.
    let mut cmd = streamward();
    cmd.args(["takeover", "shop.orders", "--uri", &server.uri_direct()]);
    run(cmd)
        .await
        .code(0)
        .stdout(predicate::str::contains("re-run with --execute"));
    let mut cmd = streamward();
    cmd.args([
        "rewind",
        "shop.orders",
        "--by",
        "1m",
        "--uri",
        &server.uri_direct(),
    ]);
    run(cmd).await.code(0).stdout(
        predicate::str::contains(
            "the oplog window cannot be read (not permitted to list the shards",
        )
        .and(predicate::str::contains(
            "so the new resume point is not checked",
        )),
    );
    let mut cmd = streamward();
    cmd.args([
        "reset",
        "shop.orders",
        "--to",
        "oldest",
        "--uri",
        &server.uri_direct(),
    ]);
    run(cmd).await.code(5).stdout(
        predicate::str::contains("through a mongos, on every shard")
            .and(predicate::str::contains("rewind RESOURCE --to TIME")),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_uri_is_a_usage_error_that_shows_the_expected_form() {
    let mut cmd = streamward();
    cmd.args(["leases", "--uri", "mongo://user:hunter2@db1"]);
    run(cmd).await.code(2).stderr(
        predicate::str::contains("mongodb://").and(predicate::str::contains("hunter2").not()),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_cluster_exits_5_within_seconds_without_the_password() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener); // nothing listens here now
    let mut cmd = streamward();
    cmd.args([
        "leases",
        "--connect-timeout",
        "2s",
        "--uri",
        &format!("mongodb://ops:s3cret-pass@127.0.0.1:{port}/?directConnection=true"),
    ]);
    let started = Instant::now();
    run(cmd).await.code(5).stderr(
        predicate::str::contains("cannot reach").and(predicate::str::contains("s3cret-pass").not()),
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "reported in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_in_uri_options_are_never_printed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener); // nothing listens here now
    let timeouts = "connectTimeoutMS=200&serverSelectionTimeoutMS=200";
    for uri in [
        // Refused while parsing (this build has no TLS key password or SOCKS5 proxy).
        format!(
            "mongodb://u:pw@127.0.0.1:{port}/?{timeouts}&tlsCertificateKeyFilePassword=SECRETX\
             &proxyPassword=SECRETY&authMechanismProperties=AWS_SESSION_TOKEN:SECRETZ"
        ),
        // Parsed, then unreachable.
        format!(
            "mongodb://u:pw@127.0.0.1:{port}/?{timeouts}&authMechanism=SCRAM-SHA-256\
             &authMechanismProperties=SERVICE_NAME:SECRETZ"
        ),
    ] {
        let mut cmd = streamward();
        cmd.args(["leases", "--connect-timeout", "1s", "--uri", &uri]);
        let assert = run(cmd).await.failure();
        let output = assert.get_output();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        for secret in ["SECRETX", "SECRETY", "SECRETZ", "u:pw@"] {
            assert!(
                !printed.contains(secret),
                "{secret} printed for {uri}: {printed}"
            );
        }
        assert!(printed.contains("u:***@127.0.0.1"), "{printed}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_older_than_5_0_exits_5_naming_both_versions() {
    let server = WireServer::start().await;
    server.set_max_wire_version(9);
    server.on("buildInfo", |_| Action::ok(doc! { "version": "4.4.29" }));
    let mut cmd = streamward();
    cmd.args(["leases", "--uri", &server.uri()]);
    run(cmd).await.code(5).stderr(
        predicate::str::contains("MongoDB 4.4.29 (wire version 9) is too old")
            .and(predicate::str::contains("needs MongoDB 5.0")),
    );
    assert!(server.commands("find").is_empty(), "nothing read from it");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_uri_anywhere_is_a_usage_error_that_says_where_to_put_one() {
    let mut cmd = streamward();
    cmd.arg("leases");
    run(cmd)
        .await
        .code(2)
        .stderr(predicate::str::contains("STREAMWARD_URI"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_config_file_names_the_file_and_line() {
    let dir = std::env::temp_dir().join(format!("streamward-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("broken.toml");
    std::fs::write(&file, "uri = \"mongodb://localhost\"\nleases = [1, 2\n").unwrap();
    let mut cmd = streamward();
    cmd.args(["leases", "--config", file.to_str().unwrap()]);
    run(cmd)
        .await
        .code(2)
        .stderr(predicate::str::contains("broken.toml").and(predicate::str::contains("line 2")));
}

#[test]
fn a_hold_too_long_for_date_arithmetic_is_a_usage_error() {
    streamward()
        .args(["takeover", "shop.orders", "--hold", "1000000y"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("at most 30 days"));
}

// ------------------------------------------------ an oplog that shows no window

/// Answers the leases `find` with [`held_lease`] and every oplog read with `oplog`.
fn script_hidden_oplog(server: &WireServer, oplog: fn() -> Action) {
    server.set_local_time(bson::DateTime::from_millis(0x63E5_B9E0_i64 * 1000));
    server.on("find", move |cmd| match cmd.get_str("find") {
        Ok("oplog.rs") => oplog(),
        Ok(coll) => cursor(&format!("streamward.{coll}"), vec![held_lease()]),
        Err(_) => cursor("streamward.leases", vec![]),
    });
    server.on("replSetGetStatus", |_| {
        Action::ok(doc! {
            "set": "rs0",
            "members": [{
                "name": "a:27017", "stateStr": "PRIMARY", "health": 1.0,
                "optime": { "ts": Timestamp { time: 0x63E5_B9E0, increment: 4 }, "t": 1_i64 },
                "optimeDate": bson::DateTime::from_millis(0x63E5_B9E0_i64 * 1000),
            }],
        })
    });
}

/// What needs no window works, saying why it is unknown (`why`); `leases --check` is
/// no pass; what needs the window is refused, naming why.
async fn what_needs_no_window_works(oplog: fn() -> Action, why: &str) {
    let server = WireServer::start().await;
    script_hidden_oplog(&server, oplog);
    let uri = server.uri();
    let note = || {
        predicate::str::contains("note: replica set rs0: the oplog cannot be read (")
            .and(predicate::str::contains(why))
            .and(predicate::str::contains("history status are unknown"))
    };

    let mut cmd = streamward();
    cmd.args(["leases", "--uri", &uri]);
    run(cmd)
        .await
        .code(0)
        .stdout(predicate::str::contains("shop.orders"))
        .stderr(note());

    let mut cmd = streamward();
    cmd.args(["leases", "--output", "json", "--uri", &uri]);
    let assert = run(cmd).await.code(0);
    let json: serde_json::Value =
        serde_json::from_slice(&assert.get_output().stdout).expect("one JSON document");
    assert_eq!(json[0]["resource"], "shop.orders", "{json}");
    assert_eq!(json[0]["headroomSecs"], serde_json::Value::Null, "{json}");

    // Unknown history is no pass: as for an oplog the user may not read.
    let mut cmd = streamward();
    cmd.args(["leases", "--check", "--uri", &uri]);
    run(cmd)
        .await
        .code(5)
        .stdout(predicate::str::contains("ok:").not())
        .stderr(
            predicate::str::contains("cannot check for AT RISK and LOST leases")
                .and(predicate::str::contains(why)),
        );

    let mut cmd = streamward();
    cmd.args(["oplog", "--uri", &uri]);
    run(cmd)
        .await
        .code(5)
        .stdout(
            predicate::str::contains("oplog window  unknown").and(predicate::str::contains(why)),
        )
        .stderr(predicate::str::contains(why));

    // A takeover needs no window: planned (a dry run).
    let mut cmd = streamward();
    cmd.args(["takeover", "shop.orders", "--uri", &uri]);
    run(cmd)
        .await
        .code(0)
        .stdout(predicate::str::contains("re-run with --execute"));

    // A reset to the oldest entry needs it: refused, saying why it is unknown.
    let mut cmd = streamward();
    cmd.args(["reset", "shop.orders", "--to", "oldest", "--uri", &uri]);
    run(cmd).await.code(5).stdout(
        predicate::str::contains("the oplog window cannot be read (")
            .and(predicate::str::contains(why)),
    );

    // --watch lists, and says why once.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamward"))
        .env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .args(["leases", "--watch", "--interval", "200ms", "--uri", &uri])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("streamward starts");
    let stdout = child.stdout.take().expect("piped");
    let listed = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|line| line.starts_with("shop.orders"))
    });
    let listed = tokio::time::timeout(Duration::from_secs(20), listed).await;
    let _ = child.kill();
    let output = child.wait_with_output().expect("streamward stops");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        matches!(listed, Ok(Ok(Some(_)))),
        "--watch lists the lease: {stderr}"
    );
    assert!(note().eval(&stderr), "{stderr}");
}

/// What an Atlas shared tier answers a user: `find` on `local.oplog.rs` returns no
/// document ("no documents in result").
#[tokio::test(flavor = "multi_thread")]
async fn an_oplog_that_shows_no_entry_leaves_the_window_unknown_and_the_rest_working() {
    what_needs_no_window_works(
        || cursor("local.oplog.rs", vec![]),
        "shows this user no startable",
    )
    .await;
}

/// An entry whose `ts` is not a timestamp.
#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_oplog_entry_leaves_the_window_unknown_and_the_rest_working() {
    what_needs_no_window_works(
        || {
            cursor(
                "local.oplog.rs",
                vec![doc! { "ts": "2023-02-10T03:28:18Z" }],
            )
        },
        "entry cannot be read: malformed oplog entry",
    )
    .await;
}

/// Atlas's own refusal (code 8000, AtlasError), not the server's Unauthorized.
#[tokio::test(flavor = "multi_thread")]
async fn an_oplog_read_refused_by_atlas_leaves_the_window_unknown_and_the_rest_working() {
    what_needs_no_window_works(
        || {
            Action::error(
                8000,
                "AtlasError",
                "user is not allowed to do action [find] on [local.oplog.rs]",
            )
        },
        "user is not allowed to do action [find] on [local.oplog.rs]",
    )
    .await;
}

/// The server's Unauthorized (13): the reason names the role to grant.
#[tokio::test(flavor = "multi_thread")]
async fn an_oplog_read_without_privilege_leaves_the_window_unknown_and_the_rest_working() {
    what_needs_no_window_works(
        || {
            Action::error(
                13,
                "Unauthorized",
                "not authorized on local to execute command { find: \"oplog.rs\" }",
            )
        },
        "clusterMonitor",
    )
    .await;
}
