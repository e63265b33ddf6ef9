//! Capped-collection sources on a real MongoDB (docs/capped.md, docs/performance.md).
//!
//! 1. **Throughput**: the engine tailing a capped collection against a bare tailable
//!    cursor, both reading the same pre-appended entries, batch 1000:
//!    - **baseline**: `find` with `cursorType: tailableAwait`, `batchSize`, iterated with
//!      `StreamExt::next` until every entry was seen;
//!    - **engine**: a `Listener` with `source = Capped`, a no-op handler and a commit
//!      (the last entry's `_id`) after every batch, timed until its status counts them all.
//! 2. **Resume cost against the collection's size**: a tailable cursor scans in
//!    insertion order from the oldest entry whatever its filter, so opening one after
//!    an entry near the newest end costs a pass over the collection. Measured as the
//!    time of `tail` + the first batch after the newest entry but one, on collections
//!    of 10,000 (the baseline), 100,000 and 400,000 entries of ~160 bytes.
//!
//! `STREAMWARD_TEST_URI=mongodb://… cargo bench --bench capped`; without the URI it
//! says it is skipped. `STREAMWARD_BENCH_EVENTS` (default 100,000) entries for the
//! throughput, `STREAMWARD_BENCH_ROUNDS` (default 3) rounds, best of each side.

#[path = "support/env.rs"]
mod env;
use env::env_number;

#[path = "../tests/support/live.rs"]
mod live;

use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures_util::StreamExt;
use mongodb::options::CursorType;
use streamward::engine::{ListenerConfig, ListenerHandle, NoopHandler};
use streamward::model::{entry_token, SourceKind};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{CappedFeed, ChangeStream, FeedOptions, Namespace, StartPoint};

const MAX_AWAIT: Duration = Duration::from_millis(100);
const CHUNK: u64 = 5_000;
const BATCH: u32 = 1000;

/// A fresh capped collection holding `entries` entries (sized to hold them all).
async fn fill(store: &MongoStore, ns: &Namespace, entries: u64) {
    store
        .ensure_capped(ns, entries * 400 + 4096)
        .await
        .expect("create capped");
    let collection = store
        .client()
        .database(&ns.db)
        .collection::<Document>(&ns.coll);
    let mut next = 0;
    while next < entries {
        let end = (next + CHUNK).min(entries);
        let chunk: Vec<Document> = (next..end)
            .map(|i| doc! { "n": i as i64, "type": "order.placed", "payload": "x".repeat(100) })
            .collect();
        collection.insert_many(chunk).await.expect("insert_many");
        next = end;
    }
}

async fn baseline(store: &MongoStore, ns: &Namespace, entries: u64) -> Duration {
    let collection = store
        .client()
        .database(&ns.db)
        .collection::<Document>(&ns.coll);
    let started = Instant::now();
    let mut cursor = collection
        .find(doc! {})
        .cursor_type(CursorType::TailableAwait)
        .max_await_time(MAX_AWAIT)
        .batch_size(BATCH)
        .await
        .expect("tail");
    let mut seen = 0;
    while seen < entries {
        match cursor.next().await {
            Some(Ok(_)) => seen += 1,
            Some(Err(e)) => panic!("tailable cursor: {e}"),
            None => panic!("the cursor closed after {seen} entries"),
        }
    }
    started.elapsed()
}

async fn engine(store: &MongoStore, ns: &Namespace, entries: u64, round: u64) -> Duration {
    let mut config = ListenerConfig::new(format!("capped-bench-{round}"), "bench", ns.clone());
    config.source = SourceKind::Capped;
    config.batch_size = BATCH;
    config.lease = Duration::from_secs(60);
    config.max_batch_wait = MAX_AWAIT;
    config.checkpoint_every = None;
    let started = Instant::now();
    let listener = ListenerHandle::spawn(store.clone(), config, NoopHandler);
    let mut status = listener.status.clone();
    status
        .wait_for(|s| s.events >= entries)
        .await
        .expect("the listener runs");
    let elapsed = started.elapsed();
    listener.stop().await;
    elapsed
}

/// `tail` after the newest entry but one, until that one entry arrives: best of 5.
async fn resume(store: &MongoStore, ns: &Namespace) -> Duration {
    let collection = store
        .client()
        .database(&ns.db)
        .collection::<Document>(&ns.coll);
    let mut newest = collection
        .find(doc! {})
        .sort(doc! { "$natural": -1 })
        .limit(2)
        .await
        .expect("newest");
    let mut ids = Vec::new();
    while let Some(entry) = newest.next().await {
        ids.push(
            entry
                .expect("entry")
                .get_object_id("_id")
                .expect("ObjectId"),
        );
    }
    let after = ids[1];
    let options = FeedOptions {
        batch_size: BATCH,
        max_await: MAX_AWAIT,
        ..Default::default()
    };
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        let mut tail = store
            .tail(ns, StartPoint::After(entry_token(after)), options)
            .await
            .expect("tail");
        // A long scan can take more than one read's wait: empty batches until then.
        let mut events = Vec::new();
        while events.is_empty() {
            events = tail.next_batch().await.expect("batch").events;
        }
        assert_eq!(events.len(), 1, "the newest entry alone");
        best = best.min(started.elapsed());
    }
    best
}

fn main() {
    let Some(uri) = live::live_uri("capped bench", live::URI_VAR) else {
        println!("capped: skipped: {} is not set", live::URI_VAR);
        return;
    };
    let entries = env_number("STREAMWARD_BENCH_EVENTS", 100_000).max(1);
    let rounds = env_number("STREAMWARD_BENCH_ROUNDS", 3).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let db = format!("sw_bench_capped_{:08x}", rand::random::<u32>());
    let store = runtime.block_on(async {
        let mut settings = MongoSettings::new(uri);
        settings.leases = Namespace::new(db.clone(), "leases");
        MongoStore::connect(settings).await.expect("connect")
    });
    let mut lines = Vec::new();

    let ns = Namespace::new(db.clone(), "events");
    runtime.block_on(fill(&store, &ns, entries));
    let (mut best_engine, mut best_baseline) = (Duration::MAX, Duration::MAX);
    for round in 0..rounds {
        let b = runtime.block_on(baseline(&store, &ns, entries));
        let e = runtime.block_on(engine(&store, &ns, entries, round));
        eprintln!("round {round}: baseline {b:.2?}, engine {e:.2?}");
        best_baseline = best_baseline.min(b);
        best_engine = best_engine.min(e);
    }
    let rate = |d: Duration| entries as f64 / d.as_secs_f64();
    lines.push(format!(
        "capped: batch={BATCH} events_per_sec={:.0} baseline_per_sec={:.0} ratio={:.3}",
        rate(best_engine),
        rate(best_baseline),
        rate(best_engine) / rate(best_baseline)
    ));

    let mut base: Option<Duration> = None;
    for size in [10_000u64, 100_000, 400_000] {
        let ns = Namespace::new(db.clone(), format!("resume_{size}"));
        runtime.block_on(fill(&store, &ns, size));
        let took = runtime.block_on(resume(&store, &ns));
        let base = *base.get_or_insert(took);
        lines.push(format!(
            "capped_resume: entries={size} resume_ms={:.1} ratio_to_10000={:.1}",
            took.as_secs_f64() * 1000.0,
            took.as_secs_f64() / base.as_secs_f64()
        ));
    }
    runtime.block_on(async {
        if let Err(e) = store.client().database(&db).drop().await {
            eprintln!("could not drop {db}: {e}");
        }
    });
    for line in lines {
        println!("{line}");
    }
}
