//! The command line's conventions, as a user or a script meets them: completions and
//! the man page, `--version`, per-command help, errors as JSON, guards refused before
//! connecting, an unreachable cluster in one sentence, quiet broken pipes,
//! `leases --check` and `--watch`, and the default operator's real names. The real
//! binary, against the black-pipe server or a closed port.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use bson::{doc, Document, Timestamp};
use serde_json::Value;
use support::wire::{Action, WireServer};

/// The window the scripted cluster reports: 0x63E5_B000 to 0x63E5_B9E0 (42m08s), and
/// the server's clock at its last entry.
const FIRST: u32 = 0x63E5_B000;
const LAST: u32 = 0x63E5_B9E0;

fn streamward() -> Command {
    let mut cmd = Command::cargo_bin("streamward").expect("binary built");
    cmd.env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir())
        .timeout(Duration::from_secs(60));
    cmd
}

fn raw_streamward() -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamward"));
    cmd.env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir());
    cmd
}

async fn run(cmd: Command) -> std::process::Output {
    let mut cmd = cmd;
    tokio::task::spawn_blocking(move || cmd.output().expect("ran"))
        .await
        .expect("joined")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A resume token of the scripted kind at cluster time `secs`.
fn token_at(secs: u32) -> String {
    format!("82{secs:08X}000000012B042C0100296E5A1004")
}

fn lease(id: &str, token_secs: u32) -> Document {
    doc! {
        "_id": id,
        "listenerId": "host-7/1-1",
        "expiresAt": bson::DateTime::from_millis((i64::from(LAST) + 10) * 1000),
        "version": 12_i64,
        "resumeToken": { "_data": token_at(token_secs) },
        "kind": "update",
        "resumeAt": null,
        // Written by streamward's own listener (a lease with only the seed fields is
        // another implementation's: docs/protocol.md §15).
        "renewedAt": bson::DateTime::from_millis(i64::from(LAST) * 1000),
    }
}

fn cursor(ns: &str, docs: Vec<Document>) -> Action {
    Action::ok(doc! { "cursor": { "id": 0_i64, "ns": ns, "firstBatch": docs } })
}

fn oplog_entry(cmd: &Document) -> Action {
    let ascending = cmd.get_document("sort").and_then(|s| s.get_i32("$natural")) == Ok(1);
    let time = if ascending { FIRST } else { LAST };
    cursor(
        "local.oplog.rs",
        vec![doc! {"ts": Timestamp { time, increment: 1 }}],
    )
}

/// Answers the leases `find` with what `leases` returns (called once per read), and
/// the oplog reads with the window.
fn script_cluster(server: &WireServer, leases: impl Fn() -> Vec<Document> + Send + Sync + 'static) {
    server.set_local_time(bson::DateTime::from_millis(i64::from(LAST) * 1000));
    server.on("find", move |cmd| {
        let coll = cmd.get_str("find").unwrap_or_default();
        if coll == "oplog.rs" {
            oplog_entry(cmd)
        } else {
            cursor(&format!("streamward.{coll}"), leases())
        }
    });
}

/// Answers `$collStats` on the oplog with a full oplog (its figures readable), and every
/// other aggregation (the counts a time to loss needs) with an error: no lease gets a
/// time to loss, and the oplog is known to be full.
fn script_full_oplog_without_counts(server: &WireServer) {
    server.on("aggregate", |cmd| {
        let collstats = cmd
            .get_array("pipeline")
            .ok()
            .and_then(|p| p.first())
            .and_then(|s| s.as_document())
            .is_some_and(|s| s.contains_key("$collStats"));
        if collstats {
            Action::ok(doc! { "cursor": {
                "firstBatch": [{ "ns": "local.oplog.rs", "storageStats": {
                    "size": 1_048_000_i64, "count": 4_000_i64, "capped": true,
                    "maxSize": 1_048_576_i64,
                } }],
                "id": 0_i64, "ns": "local.oplog.rs",
            } })
        } else {
            Action::error(50, "MaxTimeMSExpired", "operation exceeded time limit")
        }
    });
}

// ---------------------------------------------------------------- completions, man, version, help

#[test]
fn completions_name_the_commands_in_bash_zsh_and_fish() {
    let bash = streamward()
        .args(["completions", "bash"])
        .assert()
        .success();
    let bash = text(&bash.get_output().stdout);
    for word in [
        "_streamward()",
        "takeover",
        "abort-bulk",
        "leases",
        "completions",
        "--uri",
        "--check",
    ] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }
    let zsh = streamward().args(["completions", "zsh"]).assert().success();
    assert!(text(&zsh.get_output().stdout).starts_with("#compdef streamward"));
    let fish = streamward()
        .args(["completions", "fish"])
        .assert()
        .success();
    let fish = text(&fish.get_output().stdout);
    assert!(fish.contains("complete -c streamward"), "{fish}");
    assert!(fish.contains("rewind"), "{fish}");
    streamward().args(["completions", "tcsh"]).assert().code(2);
}

#[test]
fn the_man_page_has_the_name_the_commands_and_the_options() {
    let page = streamward().arg("man").assert().success();
    let page = text(&page.get_output().stdout);
    assert!(page.contains(".TH streamward 1"), "{page}");
    for word in [
        "streamward",
        "takeover",
        "\\-\\-uri",
        "\\-\\-output",
        "\\-\\-version",
    ] {
        assert!(page.contains(word), "man page lacks {word}");
    }
    let dir = tempfile::tempdir().unwrap();
    streamward()
        .args(["man", "--dir"])
        .arg(dir.path())
        .assert()
        .success()
        .stdout("");
    let leases = std::fs::read_to_string(dir.path().join("streamward-leases.1")).unwrap();
    assert!(leases.contains(".TH streamward-leases 1"), "{leases}");
    assert!(leases.contains("\\-\\-check") && leases.contains("\\-\\-watch"));
    for command in ["streamward.1", "streamward-takeover.1", "streamward-demo.1"] {
        assert!(dir.path().join(command).exists(), "{command}");
    }
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let out = streamward().arg("--version").assert().success();
    let line = text(&out.get_output().stdout).trim().to_string();
    let commit = line
        .strip_prefix(&format!("streamward {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("streamward VERSION (COMMIT): {line}"));
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match git {
        Ok(git) if git.status.success() => {
            assert_eq!(commit, text(&git.stdout).trim(), "{line}")
        }
        _ => assert_eq!(commit, "unknown", "{line}"),
    }
}

fn help(args: &[&str]) -> String {
    let out = streamward().args(args).arg("--help").assert().success();
    text(&out.get_output().stdout)
}

#[test]
fn each_command_offers_only_the_options_that_apply() {
    let demo = help(&["demo"]);
    for absent in ["--uri", "--leases", "--connect-timeout", "--output"] {
        assert!(!demo.contains(absent), "demo offers {absent}:\n{demo}");
    }
    for present in ["--plain", "--rate", "--theme", "--config"] {
        assert!(demo.contains(present), "demo lacks {present}:\n{demo}");
    }
    let leases = help(&["leases"]);
    for absent in ["--read-only", "--operator", "--theme", "--execute"] {
        assert!(
            !leases.contains(absent),
            "leases offers {absent}:\n{leases}"
        );
    }
    for present in ["--uri", "--output", "--watch", "--check", "--config"] {
        assert!(
            leases.contains(present),
            "leases lacks {present}:\n{leases}"
        );
    }
    let takeover = help(&["takeover"]);
    for present in [
        "--uri",
        "--output",
        "--read-only",
        "--operator",
        "--execute",
    ] {
        assert!(takeover.contains(present), "takeover lacks {present}");
    }
    let console = help(&["console"]);
    assert!(console.contains("--read-only") && !console.contains("--output"));
    let completions = help(&["completions"]);
    assert!(!completions.contains("--uri") && !completions.contains("--config"));
}

/// Options typed before the command's name are settings for the whole run, as before:
/// scripts that put them first for every command keep working.
#[tokio::test(flavor = "multi_thread")]
async fn options_before_the_command_apply_to_every_command() {
    let server = WireServer::start().await;
    script_cluster(&server, || vec![lease("shop.orders", LAST - 14)]);
    // One primary, as a real 6.0.5 single-node set answers replSetGetStatus (the
    // fields `oplog` reads).
    server.on("replSetGetStatus", |_| {
        let at = bson::Timestamp {
            time: LAST,
            increment: 1,
        };
        Action::ok(doc! { "set": "rs0", "members": [{
            "_id": 0, "name": "127.0.0.1:27017", "health": 1.0, "state": 1,
            "stateStr": "PRIMARY", "optime": { "ts": at, "t": 1_i64 },
            "optimeDate": bson::DateTime::from_millis(i64::from(LAST) * 1000),
        }] })
    });
    for (command, read_only) in [
        (&["oplog"][..], true),
        (&["leases"][..], true),
        (&["audit"], true),
        (&["takeover", "shop.orders"], false),
        (&["takeover", "shop.orders"], true),
    ] {
        let mut cmd = streamward();
        cmd.args([
            "--uri",
            &server.uri(),
            "--leases",
            "streamward.leases",
            "--operator",
            "oncall@test",
            "--output",
            "json",
            "--connect-timeout",
            "5s",
        ]);
        if read_only {
            cmd.arg("--read-only");
        }
        cmd.args(command);
        let out = run(cmd).await;
        let what = format!("{command:?} read-only {read_only}");
        // --read-only took effect: a takeover is refused (3), even as a dry run.
        let refused = read_only && command[0] == "takeover";
        assert_eq!(
            out.status.code(),
            Some(if refused { 3 } else { 0 }),
            "{what}: {}",
            text(&out.stderr)
        );
        // --output json took effect: one JSON document.
        let json: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", text(&out.stdout)));
        if refused {
            // Refused before connecting: no plan (nothing read), nothing written.
            assert_eq!(json["error"]["kind"], "refused", "{json}");
            assert_eq!(json["written"], false, "{json}");
            assert_eq!(json["plan"], Value::Null, "{json}");
        } else if command[0] == "takeover" {
            // --operator took effect: the plan is by oncall.
            assert_eq!(json["plan"]["operator"], "oncall@test", "{json}");
            assert_eq!(json["written"], false, "a dry run: {json}");
        }
    }
}

// ---------------------------------------------------------------- errors

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_cluster_is_one_sentence_with_the_redacted_address() {
    let port = closed_port();
    let uri = format!("mongodb://ops:s3cret@127.0.0.1:{port}/?directConnection=true");
    let mut cmd = streamward();
    cmd.args(["leases", "--connect-timeout", "1s", "--uri", &uri]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(5));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with(&format!(
            "error: cannot reach mongodb://ops:***@127.0.0.1:{port}/?directConnection=true within 1s: connection refused"
        )),
        "{err}"
    );
    for noise in ["Topology", "s3cret", "labels", "Kind:"] {
        assert!(!err.contains(noise), "{noise} in {err}");
    }
    assert!(out.stdout.is_empty());

    let mut cmd = streamward();
    cmd.args([
        "oplog",
        "--output",
        "json",
        "--connect-timeout",
        "1s",
        "--uri",
        &uri,
    ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(5));
    let json: Value = serde_json::from_slice(&out.stdout).expect("a JSON error on stdout");
    assert_eq!(json["error"]["exit"], 5);
    assert_eq!(json["error"]["kind"], "cannot_connect");
    let message = json["error"]["message"].as_str().unwrap();
    assert!(message.contains("ops:***@127.0.0.1"), "{message}");
    assert!(!message.contains("s3cret") && !message.contains("Topology"));
}

/// Guards that need no server refuse at once with their own code, even when the
/// cluster could never be reached (a 30 s connect timeout would show).
#[tokio::test(flavor = "multi_thread")]
async fn guards_that_need_no_server_refuse_before_connecting() {
    let uri = format!("mongodb://127.0.0.1:{}/", closed_port());
    for args in [
        &["reset", "shop.orders", "--to", "now"][..],
        &["reset", "shop.orders", "--to", "now", "--execute"],
        &["rebuild", "not-in-the-config", "--execute"],
        &["--read-only", "takeover", "shop.orders", "--execute"],
        &["abort-bulk", "shop.orders", "--read-only"],
    ] {
        let mut cmd = streamward();
        cmd.args(args)
            .args(["--connect-timeout", "30s", "--uri", &uri]);
        let started = Instant::now();
        let out = run(cmd).await;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).starts_with("error: refused: "),
            "{args:?}"
        );

        let mut cmd = streamward();
        cmd.args(args).args([
            "--connect-timeout",
            "30s",
            "--output",
            "json",
            "--uri",
            &uri,
        ]);
        let out = run(cmd).await;
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(json["error"]["exit"], 3, "{json}");
        assert_eq!(json["error"]["kind"], "refused", "{json}");
    }
    // A usage error is 2, at once, whatever the cluster.
    let mut cmd = streamward();
    cmd.args([
        "rewind",
        "shop.orders",
        "--connect-timeout",
        "30s",
        "--uri",
        &uri,
    ]);
    let started = Instant::now();
    assert_eq!(run(cmd).await.status.code(), Some(2));
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The TOML parser's message spans lines (the line, a caret under the column, what it
/// expected): they are printed as lines, not as one line of `\n` escapes.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_config_file_prints_the_parsers_lines() {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "leases = [1,\n").unwrap();
    let path = config.path().to_str().unwrap().to_string();
    let mut cmd = streamward();
    cmd.args(["oplog", "--config", &path]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(!err.contains("\\n"), "escaped line breaks: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(format!("error: config file {path} is not valid:").as_str()),
        "{err}"
    );
    assert!(
        lines.contains(&"TOML parse error at line 1, column 14")
            && lines.contains(&"1 | leases = [1,"),
        "the parser's lines: {err}"
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_output_json_every_failure_is_a_json_object_on_stdout() {
    // Usage: no cluster, an unknown flag, a broken config file.
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "leases = [1,\n").unwrap();
    let config = config.path().to_str().unwrap().to_string();
    for args in [
        vec!["leases", "--output", "json"],
        vec!["leases", "--output", "json", "--bogus"],
        vec!["--output=json", "audit", "--limit", "0"],
        vec!["oplog", "--output", "json", "--config", &config],
    ] {
        let mut cmd = streamward();
        cmd.args(&args);
        let out = run(cmd).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let json: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out.stdout)));
        assert_eq!(json["error"]["exit"], 2, "{args:?}");
        assert_eq!(json["error"]["kind"], "usage", "{args:?}");
        assert!(json["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert!(
            text(&out.stderr).starts_with("error: "),
            "text on stderr too"
        );
    }
    // Table output: stdout stays empty.
    let mut cmd = streamward();
    cmd.arg("leases");
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

/// A plan refused after reading the lease: one document, the plan and the error.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_plan_in_json_carries_the_error_in_the_same_document() {
    let server = WireServer::start().await;
    script_cluster(&server, || vec![lease("shop.orders", LAST - 14)]);
    let mut cmd = streamward();
    cmd.args([
        "abort-bulk",
        "shop.orders",
        "--execute",
        "--output",
        "json",
        "--uri",
        &server.uri(),
    ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(json["written"], false);
    assert_eq!(json["plan"]["refusal"]["exitCode"], 3, "{json}");
    assert_eq!(json["error"]["exit"], 3);
    assert_eq!(json["error"]["kind"], "refused");
    assert!(json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("is not bulk"));
}

// ---------------------------------------------------------------- broken pipes

/// Runs `cmd` with its stdout's reader gone (after `read_first` bytes, if any);
/// returns the exit code and stderr.
fn with_reader_gone(mut cmd: std::process::Command, read_first: bool) -> (Option<i32>, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawned");
    let mut stdout = child.stdout.take().unwrap();
    if read_first {
        let mut first = [0u8; 16];
        let _ = stdout.read(&mut first);
    }
    drop(stdout);
    let mut stderr = child.stderr.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running with its reader gone");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    let _ = stderr.read_to_string(&mut err);
    (status.code(), err)
}

fn quiet(what: &str, (code, err): (Option<i32>, String)) {
    assert!(
        matches!(code, Some(0 | 141)),
        "{what}: exit {code:?}, stderr {err}"
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(!err.to_lowercase().contains("broken pipe"), "{what}: {err}");
}

#[test]
fn demo_plain_into_a_closed_pipe_ends_quietly() {
    let mut cmd = raw_streamward();
    cmd.args(["demo", "--plain", "--refresh", "100ms", "--duration", "20s"]);
    let (code, err) = with_reader_gone(cmd, true);
    assert_eq!(code, Some(141), "{err}");
    quiet("demo --plain", (code, err));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_printing_command_into_a_closed_pipe_ends_quietly() {
    let server = WireServer::start().await;
    let many: Vec<Document> = (0..2000)
        .map(|n| lease(&format!("resource-{n:04}"), LAST - 14))
        .collect();
    script_cluster(&server, move || many.clone());
    server.on("replSetGetStatus", |_| {
        Action::ok(doc! {
            "set": "rs0",
            "members": [{ "name": "a:27017", "stateStr": "PRIMARY", "health": 1.0,
                "optime": { "ts": Timestamp { time: LAST, increment: 1 } },
                "optimeDate": bson::DateTime::from_millis(i64::from(LAST) * 1000) }],
        })
    });
    let uri = server.uri();
    let cases: Vec<Vec<&str>> = vec![
        vec!["leases", "--uri", &uri],
        vec!["leases", "--output", "json", "--uri", &uri],
        vec!["oplog", "--uri", &uri],
        vec!["completions", "bash"],
        vec!["man"],
        vec!["--help"],
        vec!["leases", "--watch", "--uri", &uri],
    ];
    for args in cases {
        let mut cmd = raw_streamward();
        cmd.args(&args);
        let result = tokio::task::spawn_blocking(move || with_reader_gone(cmd, false))
            .await
            .unwrap();
        quiet(&format!("{args:?}"), result);
    }
}

// ---------------------------------------------------------------- leases --check, --watch

fn stuck_bulk(id: &str) -> Document {
    let mut bulk = lease(id, LAST - 100);
    bulk.insert("kind", "bulk");
    bulk.insert("listenerId", "ops@host");
    bulk.insert(
        "expiresAt",
        bson::DateTime::from_millis((i64::from(LAST) - 90) * 1000),
    );
    bulk
}

/// Expired two minutes ago and nobody took it.
fn unclaimed(id: &str) -> Document {
    let mut lease = lease(id, LAST - 14);
    lease.insert(
        "expiresAt",
        bson::DateTime::from_millis((i64::from(LAST) - 120) * 1000),
    );
    lease
}

fn invalidated(id: &str) -> Document {
    let mut lease = lease(id, LAST - 30);
    lease.insert("listenerId", bson::Bson::Null);
    lease.insert(
        "invalidated",
        doc! { "at": Timestamp { time: LAST - 20, increment: 2 }, "reason": "shop.gone was dropped" },
    );
    lease
}

/// A lease whose listeners failed three times on one change, as they record it.
fn failing(id: &str) -> Document {
    let mut lease = lease(id, LAST - 30);
    let at = bson::DateTime::from_millis(i64::from(LAST - 5) * 1000);
    lease.insert(
        "failure",
        doc! {
            "token": { "_data": "8263E5B9D2000000022B042C0100296E5A1004" },
            "at": Timestamp { time: LAST - 29, increment: 1 },
            "ns": "zoo.animals", "op": "insert", "key": "{\"_id\":\"x\u{1b}[2J\"}",
            "error": "animal x has no valid \"tags\"", "cause": "handler",
            "attempts": 3_i64, "firstAt": at, "lastAt": at,
        },
    );
    lease
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_check_passes_quietly_and_fails_naming_each_lease_that_needs_attention() {
    let healthy = WireServer::start().await;
    script_cluster(&healthy, || vec![lease("shop.orders", LAST - 14)]);
    let mut cmd = streamward();
    cmd.args(["leases", "--check", "--uri", &healthy.uri()]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "ok: 1 leases, none AT RISK, LOST, INVALIDATED, FAILING, STUCK BULK or UNCLAIMED\n"
    );

    // The same short headroom in an oplog not known to be full, with no time to loss:
    // the risk is unknown, not AT RISK (issue 26).
    let young = WireServer::start().await;
    script_cluster(&young, || vec![lease("shop.at-risk", FIRST + 100)]);
    let mut cmd = streamward();
    cmd.args(["leases", "--check", "--uri", &young.uri()]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut cmd = streamward();
    cmd.args(["leases", "--output", "json", "--uri", &young.uri()]);
    let out = run(cmd).await;
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed[0]["risk"], "unknown", "{listed}");
    assert_ne!(listed[0]["status"], "AT RISK", "{listed}");

    let troubled = WireServer::start().await;
    script_cluster(&troubled, || {
        vec![
            lease("shop.orders", LAST - 14),
            lease("shop.at-risk", FIRST + 100),
            lease("shop.lost", FIRST - 600),
            invalidated("shop.gone"),
            failing("zoo.tags"),
            stuck_bulk("pets"),
            unclaimed("shop.mailer"),
        ]
    });
    // No time to loss can be counted, but the oplog is full: its share of the window
    // says AT RISK (reference/statuses.md).
    script_full_oplog_without_counts(&troubled);
    let mut cmd = streamward();
    cmd.args(["leases", "--check", "--uri", &troubled.uri()]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for (resource, status) in [
        ("shop.at-risk", "AT RISK"),
        ("shop.lost", "LOST"),
        ("shop.gone", "INVALIDATED"),
        ("zoo.tags", "FAILING"),
        ("pets", "STUCK BULK"),
        ("shop.mailer", "UNCLAIMED"),
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{resource} ")))
            .unwrap_or_else(|| panic!("{resource} listed: {table}"));
        assert!(row.ends_with(status), "{row}");
    }
    assert!(
        !table.lines().any(|l| l.starts_with("shop.orders ")),
        "a healthy lease is not listed: {table}"
    );
    let failure = table
        .lines()
        .find(|l| l.starts_with("zoo.tags: fails on "))
        .unwrap_or_else(|| panic!("the failing change is named under the table: {table}"));
    assert!(
        failure.contains("insert zoo.animals")
            && failure.contains("3 attempts (handler): animal x has no valid \"tags\"")
            && !failure.contains('\u{1b}'),
        "named, with its control characters escaped: {failure}"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("6 of 7 leases need attention: ")
            && err.contains("shop.at-risk AT RISK")
            && err.contains("pets STUCK BULK"),
        "{err}"
    );

    let mut cmd = streamward();
    cmd.args([
        "leases",
        "--check",
        "--output",
        "json",
        "--uri",
        &troubled.uri(),
    ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(6));
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(json["ok"], false);
    assert_eq!(json["leases"], 7);
    let problems: Vec<(&str, &str)> = json["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["resource"].as_str().unwrap(),
                p["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(problems.len(), 6, "{problems:?}");
    assert!(problems.contains(&("zoo.tags", "FAILING")), "{problems:?}");
    assert!(problems.contains(&("shop.lost", "LOST")), "{problems:?}");
    assert!(
        problems.contains(&("shop.mailer", "UNCLAIMED")),
        "{problems:?}"
    );
    assert_eq!(json["error"]["exit"], 6);
    assert_eq!(json["error"]["kind"], "unhealthy");
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_check_without_oplog_access_is_not_a_pass() {
    let server = WireServer::start().await;
    server.set_local_time(bson::DateTime::from_millis(i64::from(LAST) * 1000));
    server.on("find", |cmd| {
        if cmd.get_str("find") == Ok("oplog.rs") {
            Action::error(
                13,
                "Unauthorized",
                "not authorized on local to execute command",
            )
        } else {
            cursor("streamward.leases", vec![lease("shop.orders", LAST - 14)])
        }
    });
    let mut cmd = streamward();
    cmd.args(["leases", "--check", "--uri", &server.uri()]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("cannot check for AT RISK and LOST"));
}

/// Reads lines from `child`'s stdout on a thread, so a test can wait with a bound.
fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    receive
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_watch_prints_one_json_document_per_line_when_a_lease_changes() {
    let server = WireServer::start().await;
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = reads.clone();
    script_cluster(&server, move || {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let mut lease = lease("shop.orders", LAST - 14);
        // Reads 0–3 see version 12, later ones 13 (a new holder).
        if n >= 4 {
            lease.insert("version", 13_i64);
            lease.insert("listenerId", "host-8/2-1");
        }
        vec![lease]
    });
    let mut child = raw_streamward()
        .args([
            "leases",
            "--watch",
            "--interval",
            "100ms",
            "--output",
            "json",
        ])
        .args(["--uri", &server.uri()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    let wait = Duration::from_secs(20);
    let first = tokio::task::block_in_place(|| lines.recv_timeout(wait)).expect("a first line");
    let second = tokio::task::block_in_place(|| lines.recv_timeout(wait)).expect("a second line");
    let _ = child.kill();
    let _ = child.wait();
    let first: Value = serde_json::from_str(&first).expect("a JSON document per line");
    let second: Value = serde_json::from_str(&second).expect("a JSON document per line");
    assert_eq!(first[0]["version"], 12);
    assert_eq!(
        second[0]["version"], 13,
        "the unchanged reads printed nothing: {second}"
    );
    assert_eq!(second[0]["liveHolder"], "host-8/2-1");
    assert!(reads.load(Ordering::SeqCst) >= 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn leases_watch_as_a_table_says_when() {
    let server = WireServer::start().await;
    script_cluster(&server, || vec![lease("shop.orders", LAST - 14)]);
    let mut child = raw_streamward()
        .args(["leases", "--watch", "--uri", &server.uri()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    let wait = Duration::from_secs(20);
    let header = tokio::task::block_in_place(|| lines.recv_timeout(wait)).expect("a header");
    let columns = tokio::task::block_in_place(|| lines.recv_timeout(wait)).expect("a table");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        header.starts_with("leases in streamward.leases at 2023-02-10 "),
        "{header}"
    );
    assert!(columns.starts_with("RESOURCE"), "{columns}");
    streamward()
        .args(["leases", "--watch", "--check"])
        .assert()
        .code(2);
    streamward()
        .args(["leases", "--interval", "1s"])
        .assert()
        .code(2);
}

// ---------------------------------------------------------------- names

/// Without `--operator` the audit names user@host from the system, with `$HOSTNAME`
/// and `$USER` unset (as under cron or in a container).
#[tokio::test(flavor = "multi_thread")]
async fn the_default_operator_is_the_real_user_at_the_real_host() {
    let server = WireServer::start().await;
    script_cluster(&server, || vec![lease("shop.orders", LAST - 14)]);
    let mut cmd = streamward();
    cmd.env_remove("HOSTNAME")
        .env_remove("USER")
        .env_remove("USERNAME")
        .args([
            "takeover",
            "shop.orders",
            "--output",
            "json",
            "--uri",
            &server.uri(),
        ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Asked of the system by other means than the code under test uses.
    let ask = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| ask("uname", &["-n"]));
    let user = ask("id", &["-un"]);
    assert!(!host.is_empty() && !user.is_empty());
    assert_eq!(json["plan"]["operator"], format!("{user}@{host}"), "{json}");
}
