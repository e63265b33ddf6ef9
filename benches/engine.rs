//! The engine with a no-op handler on the sandbox, against a bare loop reading the
//! same change log, at batch sizes 1 and 1000, with group commits (the default) and
//! with strict ones (a commit per batch). Both run in the same process on the same
//! pre-filled log, so the ratio is the engine's own overhead: lease commits, handler
//! dispatch and status publishing.
//!
//! `cargo bench --bench engine`; `STREAMWARD_BENCH_EVENTS` overrides the event count
//! (default 1,000,000), `STREAMWARD_BENCH_ROUNDS` the rounds per measurement (3) and
//! `STREAMWARD_BENCH_CASES` which cases run (a comma-separated list of `batch1000-group`,
//! `batch1000-strict`, `batch1-group`, `batch1-strict`; all by default), to profile one.

#[path = "support/env.rs"]
mod env;
use env::env_number;

use std::time::{Duration, Instant};

use bson::doc;
use streamward::engine::{CommitPolicy, ListenerConfig, ListenerHandle, NoopHandler};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{
    ChangeFeed, ChangeStream, DocumentStore, FeedOptions, Namespace, StartPoint,
};

async fn filled_store(events: u64) -> SandboxStore {
    let store = SandboxStore::new(
        SandboxConfig {
            log_capacity: usize::try_from(events).expect("event count fits in memory") + 1,
            record_history: false,
            ..SandboxConfig::default()
        },
        Clock::System,
    );
    let ns = namespace();
    for i in 0..events {
        store
            .put(
                &ns,
                doc! {"_id": (i % 1000) as i64, "n": i as i64, "payload": "streamward"},
            )
            .await
            .expect("sandbox write");
    }
    store
}

fn namespace() -> Namespace {
    Namespace::new("bench", "events")
}

/// Reads every event with the change stream alone: the fastest any listener could go.
async fn baseline(store: &SandboxStore, events: u64, batch: u32) -> Duration {
    let window = store.oplog_window().await.expect("window");
    let options = FeedOptions {
        batch_size: batch,
        max_await: Duration::from_millis(10),
        ..Default::default()
    };
    let started = Instant::now();
    let mut stream = store
        .open(&namespace(), StartPoint::At(window.first), options)
        .await
        .expect("open");
    let mut seen = 0u64;
    while seen < events {
        seen += stream.next_batch().await.expect("read").events.len() as u64;
    }
    started.elapsed()
}

/// A full listener: acquire, bootstrap from the oldest entry, handle, commit as `commit`
/// says; timed until every change is counted (once its commit landed).
async fn engine(
    store: &SandboxStore,
    events: u64,
    batch: u32,
    commit: CommitPolicy,
    round: u64,
) -> Duration {
    let mut config = ListenerConfig::new(
        format!("bench-{batch}-{}-{round}", name(commit)),
        "bench-listener",
        namespace(),
    );
    config.batch_size = batch;
    config.commit = commit;
    config.lease = Duration::from_secs(60);
    config.max_batch_wait = Duration::from_millis(10);
    let started = Instant::now();
    let listener = ListenerHandle::spawn(store.clone(), config, NoopHandler);
    let mut status = listener.status.clone();
    status
        .wait_for(|s| s.events >= events)
        .await
        .expect("listener runs");
    let elapsed = started.elapsed();
    listener.stop().await;
    elapsed
}

fn name(commit: CommitPolicy) -> &'static str {
    match commit {
        CommitPolicy::Strict => "strict",
        CommitPolicy::Group { .. } => "group",
    }
}

fn per_sec(events: u64, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64()
}

fn main() {
    let events = env_number("STREAMWARD_BENCH_EVENTS", 1_000_000);
    let rounds = env_number("STREAMWARD_BENCH_ROUNDS", 3).max(1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let fill_started = Instant::now();
    let store = runtime.block_on(filled_store(events));
    eprintln!(
        "filled the sandbox with {events} changes in {:.1?}",
        fill_started.elapsed()
    );
    let mut lines = Vec::new();
    let cases = std::env::var("STREAMWARD_BENCH_CASES").ok();
    for batch in [1000u32, 1] {
        for commit in [CommitPolicy::default(), CommitPolicy::Strict] {
            let case = format!("batch{batch}-{}", name(commit));
            if cases
                .as_deref()
                .is_some_and(|list| !list.split(',').any(|c| c.trim() == case))
            {
                continue;
            }
            let mut best_engine = Duration::MAX;
            let mut best_baseline = Duration::MAX;
            // Interleaved rounds, best of each: both sides see the same machine conditions.
            for round in 0..rounds {
                best_baseline =
                    best_baseline.min(runtime.block_on(baseline(&store, events, batch)));
                let run = engine(&store, events, batch, commit, round);
                best_engine = best_engine.min(runtime.block_on(run));
            }
            let engine_rate = per_sec(events, best_engine);
            let baseline_rate = per_sec(events, best_baseline);
            let commits = name(commit);
            eprintln!(
                "batch={batch} commits={commits}: engine {best_engine:.2?}, baseline {best_baseline:.2?} for {events} events (best of {rounds})"
            );
            lines.push(format!(
                "engine: batch={batch} commits={commits} events_per_sec={engine_rate:.0} baseline_per_sec={baseline_rate:.0} ratio={:.3}",
                engine_rate / baseline_rate
            ));
        }
    }
    for line in lines {
        println!("{line}");
    }
}
