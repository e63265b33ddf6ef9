//! `leases export` / `leases import` as a user runs them, where no cluster is needed:
//! a file that is not an export, or a bad one, is a usage error (exit 2) naming the
//! lease and field, read-only refuses an import (exit 3) before connecting, and the
//! listing itself still works as before.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{json, Value};

fn streamward() -> Command {
    let mut cmd = Command::cargo_bin("streamward").expect("binary built");
    cmd.env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir())
        .timeout(std::time::Duration::from_secs(30));
    cmd
}

fn file(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("leases.json");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn export_with(leases: Value) -> String {
    json!({
        "format": "streamward-leases",
        "version": 1,
        "exportedAt": "2026-01-02T03:04:05Z",
        "cluster": {"uri": "mongodb://db1/", "leases": "streamward.leases", "replicaSet": "rs0"},
        "leases": leases,
    })
    .to_string()
}

/// Nothing listens there: an import that got as far as connecting would fail with 5.
const NOWHERE: &str = "mongodb://127.0.0.1:9/?connectTimeoutMS=200";

#[test]
fn garbage_is_a_usage_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, "garbage\u{1b}[31m {");
    streamward()
        .args(["--uri", NOWHERE, "leases", "import", &path])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "leases.json: the file is not JSON",
        ))
        .stderr(predicate::str::contains('\u{1b}').not());
}

#[test]
fn an_unknown_format_or_version_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(&dir, r#"{"format": "mongoexport", "version": 1}"#);
    streamward()
        .args(["--uri", NOWHERE, "leases", "import", &path])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "not a streamward lease export: its format is \"mongoexport\"",
        ));
    let path = file(&dir, r#"{"format": "streamward-leases", "version": 9}"#);
    streamward()
        .args(["--uri", NOWHERE, "leases", "import", &path])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("version 9"));
}

#[test]
fn a_bad_lease_is_named_with_its_field_and_json_output_says_usage() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(
        &dir,
        &export_with(json!([{"resource": "shop.orders", "resumeToken": [1, 2]}])),
    );
    let output = streamward()
        .args([
            "--uri", NOWHERE, "--output", "json", "leases", "import", &path,
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let reply: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(reply["error"]["kind"], "usage");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "lease \"shop.orders\" (leases[0]), field resumeToken: a list, not a document"
        ),
        "{message}"
    );
    let duplicate = export_with(json!([
        {"resource": "r", "resumeToken": null},
        {"resource": "r", "resumeToken": null},
    ]));
    streamward()
        .args([
            "--uri",
            NOWHERE,
            "leases",
            "import",
            &file(&dir, &duplicate),
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"r\" is in the file twice"));
}

#[test]
fn a_missing_file_and_an_unknown_only_are_usage_errors() {
    streamward()
        .args([
            "--uri",
            NOWHERE,
            "leases",
            "import",
            "/nonexistent/leases.json",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot read /nonexistent/leases.json",
        ));
    let dir = tempfile::tempdir().unwrap();
    let path = file(
        &dir,
        &export_with(json!([{"resource": "r", "resumeToken": null}])),
    );
    streamward()
        .args([
            "--uri", NOWHERE, "leases", "import", &path, "--only", "nope",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--only nope: the file has no lease",
        ));
}

#[test]
fn read_only_refuses_an_import_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let path = file(
        &dir,
        &export_with(json!([{"resource": "r", "resumeToken": null}])),
    );
    streamward()
        .args([
            "--uri",
            NOWHERE,
            "--read-only",
            "leases",
            "import",
            &path,
            "--execute",
        ])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "read-only mode: import is not allowed",
        ));
    let output = streamward()
        .args([
            "--uri",
            NOWHERE,
            "--output",
            "json",
            "leases",
            "import",
            &path,
            "--read-only",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(reply["written"], false);
    assert_eq!(reply["error"]["kind"], "refused");
}

#[test]
fn listing_flags_and_a_transfer_subcommand_do_not_mix() {
    streamward()
        .args(["leases", "--watch", "export"])
        .assert()
        .code(2);
    streamward()
        .args(["leases", "import"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("<FILE>"));
}
