//! `streamward demo --plain` as a newcomer runs it.

use std::time::Duration;

use assert_cmd::Command;
use predicates::prelude::*;

fn streamward() -> Command {
    let mut cmd = Command::cargo_bin("streamward").expect("binary built");
    cmd.env("NO_COLOR", "1")
        .current_dir(std::env::temp_dir())
        .timeout(Duration::from_secs(60));
    cmd
}

#[test]
fn demo_plain_shows_leases_moving_between_listeners() {
    let assert = streamward()
        .args([
            "demo",
            "--plain",
            "--duration",
            "7s",
            "--refresh",
            "1s",
            "--rotate-after",
            "2s",
            "--rate",
            "50",
        ])
        .assert()
        .success();
    let out = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let frames: Vec<&str> = out
        .split("streamward demo (embedded sandbox)")
        .filter(|f| !f.is_empty())
        .collect();
    assert!(frames.len() >= 5, "one frame a second: {out}");
    let last = frames.last().unwrap();
    for column in [
        "RESOURCE",
        "KIND",
        "PROTOCOL",
        "SOURCE",
        "HOLDER",
        "VERSION",
        "TOKEN TIME",
        "LAG",
        "HEADROOM",
        "STATUS",
    ] {
        assert!(last.contains(column), "missing {column}: {last}");
    }
    assert!(
        last.contains("pet-aggregates") && last.contains("shop.orders"),
        "{last}"
    );
    // The event store's resource tails a capped collection, and says so.
    let events = last
        .lines()
        .find(|l| l.starts_with("shop.events "))
        .unwrap_or_else(|| panic!("a row for shop.events: {last}"));
    let cells: Vec<&str> = events.split_whitespace().collect();
    assert_eq!(cells.get(3), Some(&"capped"), "{events}");
    assert_eq!(
        cells.get(2),
        Some(&"streamward"),
        "the demo's own leases: {events}"
    );
    assert!(
        last.lines()
            .filter(|l| l.starts_with("shop.orders ") || l.starts_with("pet-aggregates "))
            .all(|l| l.split_whitespace().nth(3) == Some("stream")),
        "{last}"
    );
    // Leases rotate every 2 s, and a process that rotated waits a refresh interval
    // before it acquires again while one at its fair share leaves a vacant lease to it
    // for a grace: any one frame may fall between two tenures (seen in CI: the last
    // frame had shop.events, pet-aggregates and pet-census#0/2 released 0 s before).
    // The last three frames cover more than a rotation.
    let recent = &frames[frames.len().saturating_sub(3)..];
    assert!(
        recent.iter().any(|frame| frame.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.get(1..3) == Some(&["shop.events", "streaming"][..])
        })),
        "one of its listeners streams in the last three frames: {}",
        recent.join("\n----\n")
    );
    assert!(
        last.contains("streaming") && last.contains("standby"),
        "standbys exist: {last}"
    );
    // Rotation every 2 s: by the end some lease has changed holder, so its version moved past 0.
    let moved = last
        .lines()
        .filter(|l| {
            l.starts_with("pet-aggregates")
                || l.starts_with("shop.orders")
                || l.starts_with("shop.events")
        })
        .any(|l| {
            l.split_whitespace()
                .nth(5)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v >= 1)
        });
    assert!(moved, "leases moved: {last}");
    // Statuses from the same evidence `leases` and the console use: what is left to
    // process is counted on the sandbox's oplog ("0 left", "3 left · 0s").
    assert!(
        frames.iter().any(|frame| frame.lines().any(|l| {
            (l.starts_with("shop.orders ") || l.starts_with("pet-aggregates "))
                && l.contains(" left")
        })),
        "a count of what is left: {last}"
    );
    // ...and the time to loss its status was judged from.
    let orders = last
        .lines()
        .find(|l| l.starts_with("shop.orders "))
        .unwrap_or_else(|| panic!("a row for shop.orders: {last}"));
    assert!(
        orders.contains("never") || orders.contains("(filling)"),
        "a time to loss: {orders}"
    );
}

#[test]
fn demo_rejects_an_event_store_size_out_of_bounds() {
    for size in ["1KiB", "2GiB", "big"] {
        streamward()
            .args(["demo", "--plain", "--events-size", size])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--events-size"));
    }
}

#[test]
fn demo_rejects_a_nonsense_rate_as_a_usage_error() {
    streamward()
        .args(["demo", "--plain", "--rate", "0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--rate"));
}

/// `demo` runs on its sandbox: a cluster given to it must not be silently ignored.
/// (The URI names a closed port: had the demo started it would have run, not failed.)
#[test]
fn demo_refuses_a_cluster_and_names_console_run() {
    for args in [
        ["demo", "--plain", "--uri", "mongodb://127.0.0.1:9/"],
        ["--uri", "mongodb://127.0.0.1:9/", "demo", "--plain"],
    ] {
        streamward()
            .args(args)
            .args(["--duration", "1s"])
            .assert()
            .code(2)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains("console --run"));
    }
}

/// From the environment the URI is ambient configuration, not a request: the demo
/// still runs on its sandbox and says so.
#[test]
fn demo_runs_on_its_sandbox_with_streamward_uri_set() {
    streamward()
        .env("STREAMWARD_URI", "mongodb://127.0.0.1:9/")
        .args(["demo", "--plain", "--duration", "1s", "--refresh", "500ms"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "streamward demo (embedded sandbox)",
        ));
}

#[test]
fn console_demo_db_needs_run_and_a_valid_name() {
    streamward()
        .args(["console", "--demo-db", "mine"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--run"));
    streamward()
        .args(["console", "--run", "--demo-db", "a.b"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot contain '.'"));
}
