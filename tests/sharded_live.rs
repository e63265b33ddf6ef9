//! A sharded cluster whose shards are real: two single-node replica sets started by
//! `scripts/test.sh` (`STREAMWARD_TEST_URI_SHARD_A`, `…_SHARD_B`), behind the scripted
//! router of `support::wire` (MongoDB's wheel here ships no `mongos`). The router
//! answers the handshake as a mongos, lists the two sets in `listShards`, refuses `local`
//! (code 20) and `replSetGetStatus` as a router does, and forwards every other command
//! to shard A, so leases, audit records, change streams and cursors are the real
//! server's. Each shard's oplog window is read by streamward on its own connection to
//! the real set. Without the URIs each test says it is skipped (and fails under CI or
//! `STREAMWARD_REQUIRE_LIVE=1`).

mod support;

use std::time::{Duration, Instant};

use assert_cmd::Command;
use bson::doc;
use streamward::engine::{Bootstrap, ListenerConfig, ListenerHandle, ListenerState, NoopHandler};
use streamward::model::{OplogAccess, OplogWindow, ShardWindows};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{ChangeFeed, Namespace};
use support::live::live_uri;
use support::wire::WireServer;

const SHARD_A: &str = "STREAMWARD_TEST_URI_SHARD_A";
const SHARD_B: &str = "STREAMWARD_TEST_URI_SHARD_B";

/// The two real shards and the router in front of them.
struct Cluster {
    router: WireServer,
    a: MongoStore,
    b: MongoStore,
    a_uri: String,
    db: String,
}

/// `host:port` of a single-node set's URI (`mongodb://host:port/?replicaSet=name`).
fn host_of(uri: &str) -> String {
    uri.trim_start_matches("mongodb://")
        .split(['/', '?'])
        .next()
        .unwrap_or_default()
        .to_string()
}

async fn direct(uri: &str) -> MongoStore {
    MongoStore::connect(MongoSettings::new(uri.to_string()))
        .await
        .expect("connect to a shard directly")
}

/// The router over the two real shards, plus `extra` shards it also lists.
async fn cluster(test: &str, extra: &[(&str, &str)]) -> Option<Cluster> {
    let a_uri = live_uri(test, SHARD_A)?;
    let b_uri = live_uri(test, SHARD_B)?;
    let (a_host, b_host) = (host_of(&a_uri), host_of(&b_uri));
    let router = WireServer::start().await;
    let listed_a = format!("shardA/{a_host}");
    let listed_b = format!("shardB/{b_host}");
    let mut shards = vec![("shardA", listed_a.as_str()), ("shardB", listed_b.as_str())];
    shards.extend_from_slice(extra);
    router.become_mongos_over(&a_host, &shards);
    Some(Cluster {
        router,
        a: direct(&a_uri).await,
        b: direct(&b_uri).await,
        a_uri,
        db: format!("sw_sharded_{:08x}", rand::random::<u32>()),
    })
}

impl Cluster {
    fn settings(&self) -> MongoSettings {
        let mut settings = MongoSettings::new(self.router.uri_direct());
        settings.leases = Namespace::new(self.db.clone(), "leases");
        settings.server_selection_timeout = Duration::from_secs(2);
        settings
    }

    async fn through_router(&self) -> MongoStore {
        MongoStore::connect(self.settings())
            .await
            .expect("connect through the router")
    }

    fn leases_arg(&self) -> String {
        format!("{}.leases", self.db)
    }

    /// The shards' windows read directly, before and after `read`, so a check can
    /// bound what `read` saw (the last entries move; the first ones do not here).
    async fn windows_around<T>(
        &self,
        read: impl std::future::Future<Output = T>,
    ) -> ([OplogWindow; 2], T, [OplogWindow; 2]) {
        let before = [
            self.a.oplog_window().await.expect("shard A window"),
            self.b.oplog_window().await.expect("shard B window"),
        ];
        let seen = read.await;
        let after = [
            self.a.oplog_window().await.expect("shard A window"),
            self.b.oplog_window().await.expect("shard B window"),
        ];
        (before, seen, after)
    }

    async fn drop_db(&self) {
        let _ = mongodb::Client::with_uri_str(&self.a_uri)
            .await
            .expect("client")
            .database(&self.db)
            .drop()
            .await;
    }
}

fn streamward() -> Command {
    let mut cmd = Command::cargo_bin("streamward").expect("binary built");
    cmd.env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir())
        .timeout(Duration::from_secs(60));
    cmd
}

async fn run(cmd: Command) -> std::process::Output {
    let mut cmd = cmd;
    tokio::task::spawn_blocking(move || cmd.output().expect("the binary runs"))
        .await
        .expect("command ran")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_shards_window_is_read_from_the_shard_and_the_covered_one_is_used() {
    let Some(cluster) = cluster("sharded_windows", &[]).await else {
        return;
    };
    let store = cluster.through_router().await;
    let (before, read, after) = cluster
        .windows_around(async {
            (
                store.topology().await.expect("topology"),
                store.oplog_window().await.expect("the covered window"),
            )
        })
        .await;
    let ((topology, window), covered) = read;
    assert_eq!(topology.oplog, OplogAccess::Readable, "{topology:?}");
    assert_eq!(topology.shards.len(), 2, "{topology:?}");
    for (i, name) in ["shardA", "shardB"].into_iter().enumerate() {
        let shard = &topology.shards[i];
        assert_eq!(shard.name, name);
        let seen = shard.window.as_ref().expect("readable");
        assert_eq!(
            seen.first, before[i].first,
            "{name}: the shard's own first entry"
        );
        assert!(
            before[i].last <= seen.last && seen.last <= after[i].last,
            "{name}: the shard's own last entry ({:?} not within {:?}..{:?})",
            seen.last,
            before[i].last,
            after[i].last
        );
    }
    // A resume point is safe only where every shard has the history.
    let latest_first = before[0].first.max(before[1].first);
    assert_eq!(window.map(|w| w.first), Some(latest_first));
    assert_eq!(
        covered.first, latest_first,
        "oplog_window() is the covered window"
    );
    let limiting = if before[0].first >= before[1].first {
        "shardA"
    } else {
        "shardB"
    };
    assert_eq!(
        ShardWindows(&topology.shards)
            .limiting()
            .map(|s| s.name.as_str()),
        Some(limiting)
    );
    assert!(
        topology
            .consequence()
            .contains(&format!("shard {limiting} has the latest oldest entry")),
        "{}",
        topology.consequence()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oplog_leases_a_takeover_and_a_rewind_work_through_the_router() {
    let Some(cluster) = cluster("sharded_cli", &[]).await else {
        return;
    };
    // A real listener through the router makes a real lease, then stops (released).
    let store = cluster.through_router().await;
    let mut config = ListenerConfig::new(
        "shop.orders",
        "w1",
        Namespace::new(cluster.db.clone(), "orders"),
    );
    config.max_batch_wait = Duration::from_millis(200);
    let listener = ListenerHandle::spawn(store.clone(), config, NoopHandler);
    let started = Instant::now();
    while listener.snapshot().state != ListenerState::Streaming {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the listener streams through the router: {:?}",
            listener.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // It started from the oldest entry every shard still has (bootstrap = oldest).
    let covered = store.oplog_window().await.expect("window").first;
    let opened = cluster
        .router
        .commands("aggregate")
        .into_iter()
        .find_map(|c| {
            c.get_array("pipeline")
                .ok()?
                .first()?
                .as_document()?
                .get_document("$changeStream")
                .ok()
                .and_then(|s| s.get_timestamp("startAtOperationTime").ok())
        })
        .expect("the change stream was opened with a start time");
    assert_eq!(
        streamward::model::ClusterTime::from(opened),
        covered,
        "bootstrap at the latest of the shards' oldest entries"
    );
    listener.stop().await;

    let uri = cluster.router.uri_direct();
    let leases = cluster.leases_arg();

    let mut cmd = streamward();
    cmd.args(["oplog", "--uri", &uri]);
    let out = run(cmd).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("topology      sharded cluster (mongos)"),
        "{stdout}"
    );
    assert!(stdout.contains("SHARD"), "{stdout}");
    assert!(stdout.contains("limits the window"), "{stdout}");
    for name in ["shardA", "shardB"] {
        assert!(stdout.contains(name), "{stdout}");
    }

    let mut cmd = streamward();
    cmd.args(["oplog", "--output", "json", "--uri", &uri]);
    let out = run(cmd).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["topology"]["deployment"]["kind"], "sharded", "{json}");
    assert_eq!(json["topology"]["oplogReadable"], true, "{json}");
    assert_eq!(json["topology"]["shards"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["first"]["t"], covered.secs, "{json}");

    let mut cmd = streamward();
    cmd.args([
        "leases", "--output", "json", "--uri", &uri, "--leases", &leases,
    ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json[0]["resource"], "shop.orders", "{json}");
    assert!(
        json[0]["lagSecs"].is_u64(),
        "lag known from the shards: {json}"
    );
    assert!(json[0]["headroomSecs"].is_u64(), "headroom known: {json}");
    assert!(
        !text(&out.stderr).contains("note:"),
        "no window-unknown note: {}",
        text(&out.stderr)
    );

    // A takeover, executed: the audit record and the lease are the real server's.
    let mut cmd = streamward();
    cmd.args([
        "takeover",
        "shop.orders",
        "--execute",
        "--reason",
        "through mongos",
        "--operator",
        "ann",
        "--uri",
        &uri,
        "--leases",
        &leases,
    ]);
    let out = run(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let audit = cluster
        .a
        .client()
        .database(&cluster.db)
        .collection::<bson::Document>("audit")
        .find_one(doc! {})
        .await
        .expect("read the audit")
        .expect("one record");
    assert_eq!(audit.get_str("state"), Ok("applied"), "{audit}");

    // A rewind to before the latest first entry is refused: one shard lacks that
    // history, though the other has it.
    let older = cluster
        .a
        .oplog_window()
        .await
        .expect("A")
        .first
        .min(cluster.b.oplog_window().await.expect("B").first);
    assert!(
        older < covered,
        "scripts/test.sh starts shard A before shard B, so A's history is longer"
    );
    {
        let mut cmd = streamward();
        cmd.args([
            "rewind",
            "shop.orders",
            "--to",
            &format!("{}:{}", older.secs, older.inc),
            "--uri",
            &uri,
            "--leases",
            &leases,
        ]);
        let out = run(cmd).await;
        eprintln!(
            "rewind through the router:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("outside the oplog window"),
            "{}",
            text(&out.stdout)
        );
        assert_eq!(
            out.status.code(),
            Some(3),
            "refused by the window every shard holds: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    cluster.drop_db().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_that_cannot_be_reached_is_reported_and_the_rest_still_shown() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = dead.local_addr().expect("addr").port();
    drop(dead); // nothing listens here now
    let gone = format!("shardC/127.0.0.1:{port}");
    let Some(cluster) = cluster("sharded_unreachable", &[("shardC", gone.as_str())]).await else {
        return;
    };
    let store = cluster.through_router().await;
    let (topology, window) = store.topology().await.expect("topology, not an error");
    assert_eq!(window, None);
    match &topology.oplog {
        OplogAccess::NotReadable(why) => {
            assert!(why.starts_with("shard shardC ("), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert!(topology.shards[0].window.is_ok() && topology.shards[1].window.is_ok());
    assert!(topology.shards[2].window.is_err());

    let uri = cluster.router.uri_direct();
    let mut cmd = streamward();
    cmd.args(["oplog", "--uri", &uri, "--connect-timeout", "2s"]);
    let out = run(cmd).await;
    let stdout = text(&out.stdout);
    eprintln!(
        "oplog with shardC out of reach:\n{stdout}{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(5), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("oplog window  unknown"), "{stdout}");
    assert!(stdout.contains("not read: "), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("shardA") && l.contains("Z #")),
        "the readable shards still shown: {stdout}"
    );

    let mut cmd = streamward();
    cmd.args([
        "leases",
        "--uri",
        &uri,
        "--connect-timeout",
        "2s",
        "--leases",
        &cluster.leases_arg(),
    ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("shardC"),
        "{}",
        text(&out.stderr)
    );

    // A rewind to a named time is planned, unchecked, saying so; a reset is refused,
    // offering the rewind.
    let now = cluster.a.oplog_window().await.expect("A").last;
    let leases = cluster.leases_arg();
    let args = |action: &[&str]| {
        let mut cmd = streamward();
        cmd.args(action).args([
            "--uri",
            &uri,
            "--connect-timeout",
            "2s",
            "--leases",
            &leases,
        ]);
        cmd
    };
    streams_then_stops(&cluster, "shop.orders", Bootstrap::Now).await;
    let to = format!("{}:1", now.secs - 10);
    let out = run(args(&["rewind", "shop.orders", "--to", &to])).await;
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    eprintln!("rewind with shardC out of reach:\n{shown}");
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("the oplog window cannot be read (shard shardC")
            && shown.contains("so the new resume point is not checked against it"),
        "{shown}"
    );
    let out = run(args(&["reset", "shop.orders", "--to", "oldest"])).await;
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(5), "{shown}");
    assert!(shown.contains("rewind RESOURCE --to TIME"), "{shown}");
    cluster.drop_db().await;
}

/// A listener of `resource` through the router, with `bootstrap`, until it streams;
/// then stopped (its lease released, its resume point committed).
async fn streams_then_stops(cluster: &Cluster, resource: &str, bootstrap: Bootstrap) {
    let mut config =
        ListenerConfig::new(resource, "w1", Namespace::new(cluster.db.clone(), "orders"));
    config.bootstrap = bootstrap;
    config.max_batch_wait = Duration::from_millis(200);
    let listener = ListenerHandle::spawn(cluster.through_router().await, config, NoopHandler);
    let started = Instant::now();
    while listener.snapshot().state != ListenerState::Streaming {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{resource} streams through the router: {:?}",
            listener.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    listener.stop().await;
}

/// `bootstrap = now` needs no oplog window: with a shard out of reach (the window
/// unknown) the listener does not wait for it. The scripted router opens the stream on
/// one shard; a real mongos fails a stream while any shard is out of reach, and the
/// listener then retries (docs/topologies.md) — not shown here.
#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_now_does_not_wait_for_the_window_a_dead_shard_leaves_unknown() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = dead.local_addr().expect("addr").port();
    drop(dead);
    let gone = format!("shardC/127.0.0.1:{port}");
    let Some(cluster) = cluster("sharded_bootstrap_now", &[("shardC", gone.as_str())]).await else {
        return;
    };
    streams_then_stops(&cluster, "shop.now", Bootstrap::Now).await;
    cluster.drop_db().await;
}

/// The console attached through the router, in a pty as a user runs it: the header
/// names the sharded cluster and the window every shard holds, and the oplog view (2)
/// lists both shards, naming the one that limits the window.
#[tokio::test(flavor = "multi_thread")]
async fn the_console_through_the_router_shows_the_shards() {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};

    let Some(cluster) = cluster("sharded_console", &[]).await else {
        return;
    };
    let home = std::env::temp_dir().join(format!("sw-sharded-console-{}", rand::random::<u32>()));
    std::fs::create_dir_all(&home).expect("a home");
    let (rows, cols) = (30, 100);
    let pair = native_pty_system()
        .openpty(PtySize {
            rows,
            cols,
            pixel_width: 0,
            pixel_height: 0,
        })
        .expect("a pty");
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_streamward"));
    let leases = cluster.leases_arg();
    let uri = cluster.router.uri_direct();
    cmd.args(["console", "--uri", &uri, "--leases", &leases]);
    cmd.cwd(&home);
    cmd.env_remove("STREAMWARD_URI");
    cmd.env("TERM", "xterm-256color");
    cmd.env("HOME", &home);
    cmd.env("XDG_CONFIG_HOME", home.join("config"));
    cmd.env("XDG_STATE_HOME", home.join("state"));
    cmd.env("STREAMWARD_LOG", home.join("streamward.log"));
    let mut child = pair.slave.spawn_command(cmd).expect("spawn the console");
    drop(pair.slave);
    let parser = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
    let mut output = pair.master.try_clone_reader().expect("reader");
    let feed = Arc::clone(&parser);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        while let Ok(n) = output.read(&mut buffer) {
            if n == 0 {
                break;
            }
            feed.lock().unwrap().process(&buffer[..n]);
        }
    });
    let mut keys = pair.master.take_writer().expect("writer");
    let screen = || parser.lock().unwrap().screen().contents();
    let wait_for = |what: &str, done: &dyn Fn(&str) -> bool| {
        let started = Instant::now();
        loop {
            let shown = screen();
            if done(&shown) {
                return shown;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "waiting for {what}:\n{shown}\n--- log ---\n{}",
                std::fs::read_to_string(home.join("streamward.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let header = wait_for("the header with the window", &|s| {
        s.contains("sharded cluster (mongos)") && s.contains("oplog   window ")
    });
    eprintln!("{header}");
    keys.write_all(b"2").expect("press 2");
    let oplog = wait_for("the shards in the oplog view", &|s| {
        s.contains("shards (the window is what every shard still holds)")
            && s.contains("limits the window")
    });
    eprintln!("{oplog}");
    for name in ["shardA", "shardB"] {
        assert!(oplog.contains(name), "{oplog}");
    }
    assert!(
        header.contains(" shards  shardA · shardB limits the window"),
        "{header}"
    );
    // q goes back to the leases, q again quits.
    keys.write_all(b"q").expect("press q");
    wait_for("the leases view", &|s| s.contains("┌ Leases"));
    keys.write_all(b"q").expect("press q");
    let started = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "q quits");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&home);
}

/// Through the router the time to loss is predicted from each shard's own oplog (its
/// window, figures and the history before the point there, read on the shard) and a
/// point is lost once it is lost on any shard; with a shard out of reach it is unknown,
/// with the reason, never guessed.
#[tokio::test(flavor = "multi_thread")]
async fn time_to_loss_through_the_router_is_the_soonest_of_the_shards() {
    use streamward::model::{Lease, LossTime, LossTracker};
    use streamward::store::{read_time_to_loss, LeaseStore, OplogFigures};

    let Some(cluster) = cluster("sharded_loss", &[]).await else {
        return;
    };
    let store = cluster.through_router().await;
    let (before, parts, _) = cluster.windows_around(store.oplog_parts()).await;
    let parts = parts.expect("every shard's figures");
    let names: Vec<Option<&str>> = parts.iter().map(|p| p.shard.as_deref()).collect();
    assert_eq!(names, [Some("shardA"), Some("shardB")]);
    for (i, part) in parts.iter().enumerate() {
        assert_eq!(part.window.first, before[i].first, "the shard's own window");
        let direct = [&cluster.a, &cluster.b][i]
            .oplog_stats()
            .await
            .expect("stats");
        assert_eq!(
            part.stats.max_bytes, direct.max_bytes,
            "the shard's own figures"
        );
    }

    // A stalled point at the newest entry both shards hold, and one at the earlier of
    // the two first entries: kept by one shard only, so lost already.
    let covered = store.oplog_window().await.expect("covered window");
    let mut stalled = Lease::vacant("stalled");
    stalled.resume_at = Some(covered.last);
    let mut leases = vec![stalled];
    let earlier_first = before[0].first.min(before[1].first);
    let one_shard_only = before[0].first != before[1].first;
    if one_shard_only {
        let mut half = Lease::vacant("half-lost");
        half.resume_at = Some(earlier_first);
        leases.push(half);
    }
    let mut tracker = LossTracker::default();
    let first = read_time_to_loss(
        &store,
        &mut tracker,
        store.server_now().await.unwrap(),
        &leases,
    )
    .await;
    assert_eq!(first.unknown, None, "{first:?}");
    // One read predicts already: each shard's fill rate is its window's average.
    assert!(first.predicted.contains_key("stalled"), "{first:?}");
    // Shard A is written to between the reads, shard B is not: the stalled point can
    // be lost on A only, so A's finite estimate is the one that counts.
    let padding = cluster
        .a
        .client()
        .database(&cluster.db)
        .collection::<bson::Document>("padding");
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(1) {
        padding
            .insert_one(doc! { "_id": i, "blob": "p".repeat(1_000) })
            .await
            .expect("write to shard A");
        i += 1;
    }
    let second = read_time_to_loss(
        &store,
        &mut tracker,
        store.server_now().await.unwrap(),
        &leases,
    )
    .await;
    assert_eq!(second.unknown, None, "{second:?}");
    assert_eq!(
        second.oplog, None,
        "a sharded cluster's figures are per shard"
    );
    let stalled = second.predicted.get("stalled").expect("a prediction");
    assert!(
        matches!(stalled.earliest, LossTime::In(_)),
        "shard A is written to, so it can be lost there: {stalled:?}"
    );
    eprintln!(
        "through the router, a stalled point at the newest entry: {stalled} \
         ({i} writes on shard A in the second between the reads)"
    );
    if one_shard_only {
        let half = second.predicted.get("half-lost").expect("a prediction");
        assert_eq!(
            half.earliest,
            LossTime::AlreadyLost,
            "lost on one shard: {half:?}"
        );
    }

    // A shard out of reach: unknown, with why.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = dead.local_addr().expect("addr").port();
    drop(dead);
    let gone = format!("shardC/127.0.0.1:{port}");
    let Some(three) = self::cluster("sharded_loss_dead", &[("shardC", gone.as_str())]).await else {
        return;
    };
    let store = three.through_router().await;
    let mut tracker = LossTracker::default();
    let reading = read_time_to_loss(
        &store,
        &mut tracker,
        store.server_now().await.unwrap(),
        &leases,
    )
    .await;
    let why = reading.unknown.expect("unknown with a shard out of reach");
    assert!(why.contains("cannot reach shard shardC"), "{why}");
    assert!(reading.predicted.is_empty());
    cluster.drop_db().await;
}
