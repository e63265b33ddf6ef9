//! The oplog's statistics and the time-to-loss prediction against MongoDB: what a
//! refusal looks like (a scripted peer), what a real replica set says, and a prediction
//! for a stalled resume point on a 1 MiB oplog next to the moment it really fell off.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use chrono::Utc;
use futures_util::TryStreamExt;
use streamward::model::{ClusterTime, LossInputs, LossTime, OplogRates, OplogStats, Rate};
use streamward::store::mongo::MongoStore;
use streamward::store::{ChangeFeed, OplogFigures, StoreError};
use support::live::{live_small_oplog, LiveDb};
use support::wire::{Action, WireServer};

/// The live tests share one small oplog and measure its rates: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn coll_stats_reply(storage: Document) -> Action {
    Action::ok(doc! {
        "cursor": {
            "firstBatch": [{ "ns": "local.oplog.rs", "storageStats": storage }],
            "id": 0_i64,
            "ns": "local.oplog.rs",
        }
    })
}

#[tokio::test]
async fn a_user_without_clustermonitor_is_told_to_get_it() {
    let server = WireServer::start().await;
    let store = support::connected(&server).await;
    let refused = || {
        Action::error(
            13,
            "Unauthorized",
            "not authorized on local to execute command { aggregate: \"oplog.rs\", pipeline: \
             [ { $collStats: { storageStats: {} } } ] }",
        )
    };
    server.script("aggregate", [refused(), refused()]);
    let error = store.oplog_stats().await.unwrap_err();
    assert!(
        matches!(error, StoreError::NotPermitted { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("clusterMonitor"), "{message}");
    assert!(
        message.contains("$collStats on local.oplog.rs"),
        "{message}"
    );
    let sent = server.commands("aggregate");
    assert_eq!(sent[0].get_str("aggregate").unwrap(), "oplog.rs");
    assert_eq!(sent[0].get_str("$db").unwrap(), "local");

    let error = store
        .oplog_history_before(ClusterTime::new(1_700_000_000, 1), 1000)
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::NotPermitted { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_optional_figures_are_left_out_when_refused() {
    let server = WireServer::start().await;
    let store = support::connected(&server).await;
    server.script(
        "aggregate",
        [coll_stats_reply(doc! {
            "size": 960_000_i64, "count": 414_i64, "capped": true, "maxSize": 1_048_576_i64,
            "wiredTiger": { "cursor": {
                "insert calls": 1000_i64, "insert key and value bytes": 2_009_000_i64,
            } },
        })],
    );
    for command in ["getParameter", "serverStatus"] {
        let refused = Action::error(13, "Unauthorized", "not authorized on admin");
        server.script(command, [refused.clone(), refused]);
    }
    let stats = store.oplog_stats().await.unwrap();
    assert_eq!(
        stats,
        OplogStats {
            size_bytes: 960_000,
            max_bytes: 1_048_576,
            entries: 414,
            written_bytes: Some(2_000_000),
            checkpoint_interval: None,
            min_retention: None,
            largest_entry_bytes: None,
            truncation_bytes: None,
        }
    );
}

/// Every entry of the oplog with its BSON size, oldest first (a small oplog).
async fn entries(store: &MongoStore) -> Vec<(ClusterTime, String, u64)> {
    let oplog = store
        .client()
        .database("local")
        .collection::<Document>("oplog.rs");
    let pipeline = vec![doc! { "$project": {
        "_id": 0, "ts": 1, "op": 1, "bytes": { "$bsonSize": "$$ROOT" },
    } }];
    let docs: Vec<Document> = oplog
        .aggregate(pipeline)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    docs.iter()
        .map(|d| {
            let ts = ClusterTime::from(d.get_timestamp("ts").unwrap());
            let bytes = match d.get("bytes") {
                Some(Bson::Int32(b)) => u64::try_from(*b).unwrap(),
                Some(Bson::Int64(b)) => u64::try_from(*b).unwrap(),
                other => panic!("bytes: {other:?}"),
            };
            (ts, d.get_str("op").unwrap().to_string(), bytes)
        })
        .collect()
}

/// Stats with nothing written while they were read (the count of bytes written the same
/// before and after reading the window), so both describe the same oplog.
async fn settled(store: &MongoStore) -> (OplogStats, streamward::model::OplogWindow) {
    for _ in 0..20 {
        let before = store.oplog_stats().await.unwrap();
        let window = store.oplog_window().await.unwrap();
        let after = store.oplog_stats().await.unwrap();
        if before.written_bytes == after.written_bytes && before.size_bytes == after.size_bytes {
            return (after, window);
        }
    }
    panic!("the oplog never stood still");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_oplog_statistics_say_what_the_server_holds() {
    let _one_at_a_time = SERIAL.lock().await;
    live_small_oplog("ttl_stats", |live: LiveDb| async move {
        let store = &live.store;
        let raw = store
            .client()
            .database("local")
            .run_command(doc! { "collStats": "oplog.rs" })
            .await
            .unwrap();
        let (stats, window) = settled(store).await;
        let max_size = match raw.get("maxSize") {
            Some(Bson::Int32(m)) => u64::try_from(*m).unwrap(),
            Some(Bson::Int64(m)) => u64::try_from(*m).unwrap(),
            other => panic!("maxSize: {other:?}"),
        };
        assert_eq!(stats.max_bytes, max_size);
        assert_eq!(
            stats.max_bytes,
            1024 * 1024,
            "the set was started with --oplogSize 1"
        );
        assert_eq!(
            stats.checkpoint_interval,
            Some(Duration::from_secs(1)),
            "--syncdelay 1"
        );
        assert_eq!(stats.min_retention, Some(Duration::ZERO));

        // The size is the sum of the entries' BSON sizes, what the prediction counts.
        let mut compared = false;
        for _ in 0..10 {
            let (before, _) = settled(store).await;
            let held = entries(store).await;
            let (after, _) = settled(store).await;
            if before.written_bytes == after.written_bytes {
                assert_eq!(held.iter().map(|e| e.2).sum::<u64>(), after.size_bytes);
                assert_eq!(held.len() as u64, after.entries);
                compared = true;
                break;
            }
        }
        assert!(compared, "the oplog never stood still");

        // Bytes written grow by exactly the bytes of the entries written in between (a
        // few small ones: whatever the server truncates meanwhile is older).
        let padding = store
            .client()
            .database(&live.db)
            .collection::<Document>("padding");
        for i in 0..5 {
            padding
                .insert_one(doc! { "_id": i, "blob": "x".repeat(1_000) })
                .await
                .unwrap();
        }
        let (after, window_after) = settled(store).await;
        let new_bytes: u64 = entries(store)
            .await
            .iter()
            .filter(|(ts, _, _)| *ts > window.last && *ts <= window_after.last)
            .map(|e| e.2)
            .sum();
        assert!(new_bytes > 5_000, "{new_bytes}");
        assert_eq!(
            after.written_bytes.unwrap() - stats.written_bytes.unwrap(),
            new_bytes
        );

        // Once full, the size stands still while the bytes written keep growing.
        let blob = "x".repeat(20_000);
        for i in 5..125 {
            padding
                .insert_one(doc! { "_id": i, "blob": &blob })
                .await
                .unwrap();
        }
        // After the burst the size is well over the maximum (seen: 2.4 MB), and stays so
        // while nothing is written: the server truncates when an insert completes a chunk
        // (and behind its checkpoints, every second on this set). Small writes wake it.
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut i = 1_000;
        let (full, rolled) = loop {
            let (full, rolled) = settled(store).await;
            let chunk = streamward::model::truncation_chunk(full.max_bytes);
            if full.size_bytes <= full.max_bytes + chunk {
                break (full, rolled);
            }
            assert!(Instant::now() < deadline, "never truncated back: {full:?}");
            padding
                .insert_one(doc! { "_id": i, "blob": "x".repeat(1_000) })
                .await
                .unwrap();
            i += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let written = full.written_bytes.unwrap() - after.written_bytes.unwrap();
        assert!(written > 2_400_000, "{written}");
        assert!(rolled.first > window_after.first, "the oplog rolled over");

        // Bytes before a resume point, against the entries themselves.
        let (_, window) = settled(store).await;
        let mut compared = None;
        for _ in 0..10 {
            let held = entries(store).await;
            let token = held[held.len() / 2].0;
            let counted = store.oplog_history_before(token, 1_000_000).await.unwrap();
            if entries(store).await.first() != held.first() {
                continue; // truncated meanwhile
            }
            let entry = held
                .iter()
                .rev()
                .find(|(ts, op, _)| *ts <= token && op != "n")
                .map(|e| e.0)
                .unwrap();
            let older: u64 = held.iter().filter(|e| e.0 < entry).map(|e| e.2).sum();
            assert_eq!(counted.entry, Some(entry));
            assert_eq!(counted.older_bytes, older);
            assert!(counted.complete);
            compared = Some((token, counted));
            break;
        }
        let (token, counted) = compared.expect("the oplog never stood still");
        let partly = store.oplog_history_before(token, 3).await.unwrap();
        assert!(!partly.complete);
        assert!(partly.older_bytes <= counted.older_bytes);
        // Counted from the newest end (what the time to loss uses): a point three
        // quarters along, with a limit the entries after it stay under and the ones
        // before it pass, is counted exactly but for what was written meanwhile (a
        // few no-ops at most), and never more than the count from the oldest entry.
        let mut checked = false;
        for _ in 0..10 {
            let (stats, _) = settled(store).await;
            let held = entries(store).await;
            let point = held[held.len() * 3 / 4].0;
            let limit = u32::try_from(held.len() / 2).unwrap();
            let from_the_end =
                OplogFigures::oplog_history_before(store, None, point, stats.size_bytes, limit)
                    .await
                    .unwrap();
            let exact = store.oplog_history_before(point, 1_000_000).await.unwrap();
            let from_oldest = store.oplog_history_before(point, limit).await.unwrap();
            if entries(store).await.first() != held.first() {
                continue; // truncated meanwhile
            }
            assert!(!from_oldest.complete, "more than {limit} entries before it");
            assert!(from_the_end.complete, "{from_the_end:?}");
            assert_eq!(from_the_end.entry, exact.entry);
            assert!(
                from_the_end.older_bytes <= exact.older_bytes
                    && exact.older_bytes - from_the_end.older_bytes < 2_000,
                "from the end {from_the_end:?}, exact {exact:?}"
            );
            checked = true;
            break;
        }
        assert!(checked, "the oplog never stood still");
        let before_all = store
            .oplog_history_before(ClusterTime::new(window.first.secs - 1, 0), 1000)
            .await
            .unwrap();
        assert_eq!(before_all.entry, None);
        assert_eq!(before_all.older_bytes, 0);
    })
    .await;
}

fn shown(time: LossTime) -> String {
    match time {
        LossTime::In(d) => format!("{:.1} s", d.as_secs_f64()),
        other => format!("{other:?}"),
    }
}

/// A stalled resume point on the 1 MiB oplog, written at a steady rate: sampled as a
/// console would (window and statistics every second), predicted, then watched until the
/// window's first entry passes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_prediction_brackets_the_real_loss_on_a_small_oplog() {
    let _one_at_a_time = SERIAL.lock().await;
    live_small_oplog("ttl_predict", |live: LiveDb| async move {
        let store = live.store.clone();
        let padding = store
            .client()
            .database(&live.db)
            .collection::<Document>("padding");
        // Fill the oplog first, so what follows is the steady rate alone.
        let blob = "f".repeat(20_000);
        for i in 0..60 {
            padding
                .insert_one(doc! { "_id": format!("fill{i}"), "blob": &blob })
                .await
                .unwrap();
        }
        // ~1.1 kB entries every 25 ms: ~45 kB/s, a turnover of about 23 s.
        let stop = Arc::new(AtomicBool::new(false));
        let writer = tokio::spawn({
            let stop = stop.clone();
            let padding = padding.clone();
            async move {
                let blob = "s".repeat(1_000);
                let mut tick = tokio::time::interval(Duration::from_millis(25));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    padding
                        .insert_one(doc! { "_id": i as i64, "blob": &blob })
                        .await
                        .expect("steady write");
                    i += 1;
                }
            }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The resume point: the newest entry now, as a listener that stopped here.
        let token = store.oplog_window().await.unwrap().last;

        let mut rates = OplogRates::new(Duration::from_secs(60));
        let mut last = None;
        for sample in 0..7 {
            if sample > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let window = store.oplog_window().await.unwrap();
            let stats = store.oplog_stats().await.unwrap();
            rates.record(Utc::now(), Some(&window), Some(&stats));
            last = Some((window, stats, Instant::now()));
        }
        let (window, stats, sampled_at) = last.unwrap();
        // Statistics first, then the history before the token (see oplog_history_before).
        let history = store.oplog_history_before(token, 100_000).await.unwrap();
        let inputs = LossInputs::new(Utc::now(), token)
            .with_oplog(Some(window), Some(&stats), &rates)
            .with_progress(Rate::exactly(0.0))
            .with_history_before(Some(history));
        let predicted_at = Instant::now();
        let ttl = inputs.predict();
        let written_then = stats.written_bytes.unwrap();

        // Keep writing until the first entry passes the token, sampling as before (the
        // samples compete with the writer: the rate stays what was measured).
        let (mut seen_before, mut lost_by) = (predicted_at, None);
        let mut polls = 0u32;
        while predicted_at.elapsed() < Duration::from_secs(50) {
            let polled = Instant::now();
            let first = store.oplog_window().await.unwrap().first;
            if token < first {
                lost_by = Some(polled);
                break;
            }
            seen_before = polled;
            polls += 1;
            if polls.is_multiple_of(10) {
                store.oplog_stats().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let after = store.oplog_stats().await.unwrap();
        let after_at = Instant::now();
        stop.store(true, Ordering::Relaxed);
        writer.await.unwrap();

        let lost_by = lost_by.expect("the resume point fell off within 50 s");
        let (low, high) = (
            (seen_before - predicted_at).as_secs_f64(),
            (lost_by - predicted_at).as_secs_f64(),
        );
        let fill = inputs.fill_rate.unwrap();
        let achieved = (after.written_bytes.unwrap() - written_then) as f64
            / (after_at - sampled_at).as_secs_f64();
        println!(
            "-- time to loss on a 1 MiB oplog, stalled resume point {token}:\n   \
             inputs: size {} of {} bytes, fill {:.0}–{:.0} B/s (achieved {achieved:.0} B/s \
             until the loss), {} bytes of history before it, checkpoint every {:?}\n   \
             predicted: earliest {}, latest {}\n   \
             actual: fell off between {low:.1} s and {high:.1} s after the prediction",
            stats.size_bytes,
            stats.max_bytes,
            fill.low,
            fill.high,
            history.older_bytes,
            stats.checkpoint_interval.unwrap_or_default(),
            shown(ttl.earliest),
            ttl.latest.map_or("unknown".into(), shown),
        );
        assert!(
            ttl.missing.is_empty(),
            "every input known: {:?}",
            ttl.missing
        );
        let LossTime::In(earliest) = ttl.earliest else {
            panic!("a stalled resume point on a busy oplog: {ttl:?}")
        };
        assert!(
            earliest.as_secs_f64() <= high,
            "lost by {high:.1} s, before the earliest {earliest:?}"
        );
        // The latest holds while the writer kept at least the slowest rate measured;
        // on a loaded machine it may not have.
        match ttl.latest {
            Some(LossTime::In(latest)) if achieved >= fill.low => assert!(
                low <= latest.as_secs_f64(),
                "still there at {low:.1} s, after the latest {latest:?}"
            ),
            Some(LossTime::In(_)) => println!(
                "   (the writer slowed below the slowest rate measured: the latest is not checked)"
            ),
            other => panic!("a latest for a stalled resume point on a busy oplog: {other:?}"),
        }
    })
    .await;
}

/// The sandbox's oplog agrees with the model the real server is judged by: a stalled
/// resume point on a byte-sized sandbox log, written at a steady rate on a virtual
/// clock, falls off between the earliest and the latest predicted — through the same
/// read the console, `leases` and the exporter use.
#[tokio::test(start_paused = true)]
async fn the_sandbox_oplog_drops_a_stalled_point_within_the_predicted_range() {
    use streamward::model::{Lease, LossTracker};
    use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use streamward::store::{read_time_to_loss, DocumentStore, LeaseStore, Namespace};

    let epoch = chrono::DateTime::parse_from_rfc3339("2026-11-24T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let store = SandboxStore::new(
        SandboxConfig {
            log_capacity: usize::MAX,
            log_bytes: 1024 * 1024,
            ..SandboxConfig::default()
        },
        Clock::virtual_from(epoch),
    );
    // One ~1.3 kB entry every 25 ms: ~50 kB/s, a turnover of about 20 s.
    async fn write(store: &SandboxStore, n: &mut i64) {
        *n += 1;
        let document = doc! { "_id": *n, "blob": "s".repeat(1_000) };
        store
            .put(&Namespace::new("shop", "padding"), document)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut n = 0;
    while !store.has_dropped_history() {
        write(&store, &mut n).await;
    }
    let token = store.oplog_window().await.unwrap().last;
    let mut lease = Lease::vacant("stalled");
    lease.resume_at = Some(token);
    let leases = [lease];

    let mut tracker = LossTracker::default();
    let mut predicted = None;
    for sample in 0..7 {
        for _ in 0..(if sample > 0 { 40 } else { 0 }) {
            write(&store, &mut n).await;
        }
        let now = store.server_now().await.unwrap();
        let reading = read_time_to_loss(&store, &mut tracker, now, &leases).await;
        assert_eq!(reading.unknown, None);
        predicted = reading.predicted.get("stalled").cloned().map(|p| (p, now));
    }
    let (ttl, predicted_at) = predicted.expect("a prediction after seven reads");
    assert!(
        ttl.missing.is_empty(),
        "every input known: {:?}",
        ttl.missing
    );

    let mut lost_at = None;
    for _ in 0..4_000 {
        write(&store, &mut n).await;
        if store.oplog_window().await.unwrap().first > token {
            lost_at = Some(store.server_now().await.unwrap());
            break;
        }
    }
    let lost_after = (lost_at.expect("the stalled point fell off") - predicted_at)
        .to_std()
        .unwrap();
    let (LossTime::In(earliest), Some(LossTime::In(latest))) = (ttl.earliest, ttl.latest) else {
        panic!("a stalled point on a busy log: {ttl:?}");
    };
    println!("sandbox: predicted {earliest:?}–{latest:?}, lost after {lost_after:?}");
    assert!(
        earliest <= lost_after,
        "lost after {lost_after:?}, before the earliest {earliest:?}"
    );
    // One write's step of slack: the loss is seen after the write that caused it.
    assert!(
        lost_after <= latest + Duration::from_millis(25),
        "still there after the latest {latest:?}: lost after {lost_after:?}"
    );
}

/// A capped collection drops its oldest entries as appends need the room: a stalled
/// position on one filled at a steady rate falls off between the earliest and the
/// latest predicted, through the same read the console, `leases` and the exporter use
/// — on the sandbox's capped collections and on a real replica set's.
async fn a_capped_position_falls_off_within_the_predicted_range<S>(
    store: S,
    ns: streamward::store::Namespace,
    pace: Duration,
) where
    S: streamward::store::Store + streamward::store::CappedFeed + OplogFigures,
{
    use streamward::model::{entry_token, Lease, LossTracker, SourceKind, WatchTarget};
    use streamward::store::read_time_to_loss;

    store.ensure_capped(&ns, 256 * 1024).await.unwrap();
    // One ~1 kB entry on each tick of `pace` (a late tick is caught up, so the reads
    // between samples do not slow the rate), then a read of the window.
    async fn append<S: streamward::store::CappedFeed>(
        store: &S,
        ns: &streamward::store::Namespace,
        ticks: &mut tokio::time::Interval,
    ) -> streamward::store::CappedWindow {
        ticks.tick().await;
        store
            .append_entry(ns, doc! { "blob": "c".repeat(1_000) })
            .await
            .unwrap();
        store.capped_window(ns).await.unwrap().unwrap()
    }
    let mut ticks = tokio::time::interval(pace);
    // Full first: a collection that still has room drops nothing.
    for _ in 0..400 {
        append(&store, &ns, &mut ticks).await;
    }
    let position = store.capped_window(&ns).await.unwrap().unwrap().newest;
    const APPENDS_PER_SAMPLE: u32 = 10;
    let mut lease = Lease::vacant("stalled-events");
    lease.resume_token = Some(entry_token(position));
    lease.watch = Some(WatchTarget {
        db: ns.db.clone(),
        coll: ns.coll.clone(),
        source: SourceKind::Capped,
        ..Default::default()
    });
    let leases = [lease];
    let mut tracker = LossTracker::default();
    let mut predicted = None;
    // The slowest pace of appending between two samples: the latest holds while the
    // appends keep at least that rate.
    let (mut sampled_before, mut slowest_step) = (None::<chrono::DateTime<Utc>>, Duration::ZERO);
    for sample in 0..4 {
        for _ in 0..(if sample > 0 { APPENDS_PER_SAMPLE } else { 0 }) {
            append(&store, &ns, &mut ticks).await;
        }
        let now = store.server_now().await.unwrap();
        if let Some(before) = sampled_before {
            let step = (now - before).to_std().unwrap() / APPENDS_PER_SAMPLE;
            slowest_step = slowest_step.max(step);
        }
        sampled_before = Some(now);
        let reading = read_time_to_loss(&store, &mut tracker, now, &leases).await;
        // The first read predicts too, from the collection's average rate (its bytes
        // over the seconds its entries span).
        assert_eq!(reading.unpredicted.get("stalled-events"), None);
        assert!(reading.predicted.contains_key("stalled-events"), "{sample}");
        predicted = reading
            .predicted
            .get("stalled-events")
            .cloned()
            .map(|p| (p, now));
    }
    let (ttl, predicted_at) = predicted.expect("a prediction after four reads");
    assert!(
        ttl.missing.is_empty(),
        "every input known: {:?}",
        ttl.missing
    );
    let (mut lost_at, mut appended) = (None, 0u32);
    for _ in 0..4_000 {
        appended += 1;
        if append(&store, &ns, &mut ticks).await.oldest > position {
            lost_at = Some(store.server_now().await.unwrap());
            break;
        }
    }
    let lost_after = (lost_at.expect("the stalled position fell off") - predicted_at)
        .to_std()
        .unwrap();
    let achieved_step = lost_after / appended;
    let (LossTime::In(earliest), Some(LossTime::In(latest))) = (ttl.earliest, ttl.latest) else {
        panic!("a stalled position on a busy collection: {ttl:?}");
    };
    println!(
        "capped {ns}: predicted {earliest:?}–{latest:?}, lost after {lost_after:?} \
         (one append per {achieved_step:?} while waiting, the slowest sampled {slowest_step:?})"
    );
    assert!(
        earliest <= lost_after,
        "lost after {lost_after:?}, before the earliest {earliest:?}"
    );
    // The latest holds while the appends kept at least the slowest rate measured; on a
    // loaded machine they may not have. One append's step of slack: the loss is seen
    // after the append that caused it.
    // The server's clock reads whole milliseconds: a sample's step (ten appends) is
    // known to a tenth of one.
    if achieved_step <= slowest_step + Duration::from_micros(100) {
        assert!(
            lost_after <= latest + pace * 3,
            "still there after the latest {latest:?}: lost after {lost_after:?}"
        );
    } else {
        println!(
            "   (the appends slowed below the slowest rate measured: the latest is not checked)"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_sandbox_capped_collection_drops_a_stalled_position_within_the_predicted_range() {
    use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    let epoch = chrono::DateTime::parse_from_rfc3339("2026-11-24T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
    a_capped_position_falls_off_within_the_predicted_range(
        store,
        streamward::store::Namespace::new("shop", "events"),
        Duration::from_millis(20),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prediction_brackets_the_real_loss_of_a_capped_position() {
    support::live::live("capped_time_to_loss", |db: LiveDb| async move {
        let ns = db.ns("events");
        a_capped_position_falls_off_within_the_predicted_range(
            db.store,
            ns,
            Duration::from_millis(20),
        )
        .await;
    })
    .await;
}
