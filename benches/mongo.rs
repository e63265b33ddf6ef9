//! The engine on a real MongoDB against a bare change-stream loop, at batch 1000 and
//! batch 1. Both read the same pre-inserted changes of one collection through the
//! same driver client, from the same start point (`startAtOperationTime` just before
//! the inserts), with the same batch size and change-stream options; each is timed
//! from its start to its last event.
//!
//! - **baseline**: `Collection::watch()` (`fullDocument: updateLookup`, `batchSize`)
//!   iterated with `StreamExt::next` until every change was seen;
//! - **floor**: the same loop that also writes the resume token of every `batchSize`
//!   changes (one server batch) with one majority `update`, the next read overlapping
//!   it: the least "commit what you read" can cost, with no lease, no fence and no
//!   handler;
//! - **engine**: a `Listener` with a no-op handler (acquire, open at the lease's
//!   `resumeAt`, handle, commit the token after every batch), timed until its
//!   status counts every change (a change counts once its commit landed).
//!
//! A command event handler on the shared client counts the commands each side sends,
//! which gives the round trips per 1,000 changes.
//!
//! `STREAMWARD_TEST_URI=mongodb://… cargo bench --bench mongo`; without the URI it says
//! it is skipped. `STREAMWARD_BENCH_EVENTS` (default 100,000) changes per batch size;
//! `STREAMWARD_BENCH_ROUNDS` (default 3) rounds at batch 1000; batch 1 runs
//! `STREAMWARD_BENCH_ROUNDS_BATCH1` rounds (default 1: a round trip per change makes
//! it slow). `STREAMWARD_BENCH_BATCHES=1000` runs one batch size only (for profiling).

#[path = "support/env.rs"]
mod env;
use env::env_number;

#[path = "../tests/support/live.rs"]
mod live;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use futures_util::StreamExt;
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::{FullDocumentType, WriteConcern};
use streamward::engine::{ListenerConfig, ListenerHandle, NoopHandler};
use streamward::model::ClusterTime;
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{ChangeFeed, Namespace};

/// How long a read waits on a quiet stream; never reached while changes are pending.
const MAX_AWAIT: Duration = Duration::from_millis(100);
const INSERT_CHUNK: u64 = 10_000;

/// Commands sent, by name; reset before each measured run.
#[derive(Clone, Default)]
struct Commands(Arc<Mutex<BTreeMap<String, u64>>>);

impl Commands {
    fn handler(&self) -> EventHandler<CommandEvent> {
        let counts = self.0.clone();
        EventHandler::callback(move |event| {
            if let CommandEvent::Started(started) = event {
                if let Ok(mut counts) = counts.lock() {
                    *counts.entry(started.command_name).or_default() += 1;
                }
            }
        })
    }

    fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().expect("counter lock"))
    }
}

struct Run {
    elapsed: Duration,
    commands: BTreeMap<String, u64>,
    /// CPU this process used meanwhile (all threads), where the platform says.
    cpu: Option<Duration>,
}

/// User + system CPU time of this process so far, from `/proc/self/stat` (Linux).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at state (field 3).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // The kernel's USER_HZ is 100 on every Linux this runs on.
    Some(Duration::from_millis(ticks * 10))
}

fn cpu_since(start: Option<Duration>) -> Option<Duration> {
    Some(process_cpu()?.saturating_sub(start?))
}

/// Inserts `events` documents into a fresh collection; returns the time to start at.
async fn fill(store: &MongoStore, ns: &Namespace, events: u64) -> ClusterTime {
    let collection = store
        .client()
        .database(&ns.db)
        .collection::<Document>(&ns.coll);
    let start = store.cluster_time().await.expect("cluster time");
    let mut next = 0u64;
    while next < events {
        let end = (next + INSERT_CHUNK).min(events);
        let chunk: Vec<Document> = (next..end)
            .map(
                |i| doc! {"_id": i as i64, "n": i as i64, "payload": "streamward benchmark change"},
            )
            .collect();
        collection.insert_many(chunk).await.expect("insert_many");
        next = end;
    }
    start
}

/// One measured configuration: `events` changes in `ns` from `start`, read `batch` at a time.
struct Case {
    ns: Namespace,
    start: ClusterTime,
    batch: u32,
    events: u64,
}

/// The change stream the baseline and the floor read: the options the engine's has.
async fn open_stream(
    collection: &mongodb::Collection<Document>,
    case: &Case,
) -> mongodb::change_stream::ChangeStream<mongodb::change_stream::event::ChangeStreamEvent<Document>>
{
    collection
        .watch()
        .full_document(FullDocumentType::UpdateLookup)
        .batch_size(case.batch)
        .max_await_time(MAX_AWAIT)
        .start_at_operation_time(bson::Timestamp::from(case.start))
        .await
        .expect("open the change stream")
}

async fn baseline(store: &MongoStore, case: &Case, commands: &Commands) -> Run {
    let Case { ns, events, .. } = case;
    let events = *events;
    let collection = store
        .client()
        .database(&ns.db)
        .collection::<Document>(&ns.coll);
    commands.take();
    let cpu = process_cpu();
    let started = Instant::now();
    let mut stream = open_stream(&collection, case).await;
    let mut seen = 0u64;
    while seen < events {
        match stream.next().await {
            Some(Ok(_event)) => seen += 1,
            Some(Err(e)) => panic!("change stream: {e}"),
            None => panic!("the change stream ended after {seen} events"),
        }
    }
    let elapsed = started.elapsed();
    Run {
        elapsed,
        commands: commands.take(),
        cpu: cpu_since(cpu),
    }
}

async fn floor(store: &MongoStore, case: &Case, commands: &Commands) -> Run {
    let Case {
        ns, batch, events, ..
    } = case;
    let (batch, events) = (*batch, *events);
    let database = store.client().database(&ns.db);
    let collection = database.collection::<Document>(&ns.coll);
    let checkpoints = database.collection::<Document>("floor_checkpoints");
    commands.take();
    let cpu = process_cpu();
    let started = Instant::now();
    let mut stream = open_stream(&collection, case).await;
    let mut seen = 0u64;
    let mut next = stream.next().await;
    loop {
        match next {
            Some(Ok(_event)) => seen += 1,
            Some(Err(e)) => panic!("change stream: {e}"),
            None => panic!("the change stream ended after {seen} events"),
        }
        if !seen.is_multiple_of(u64::from(batch)) && seen < events {
            next = stream.next().await;
            continue;
        }
        let token = bson::to_bson(&stream.resume_token()).expect("token as BSON");
        let write = checkpoints
            .update_one(doc! {"_id": "floor"}, doc! {"$set": {"resumeToken": token}})
            .upsert(true)
            .write_concern(WriteConcern::majority())
            .into_future();
        if seen == events {
            write.await.expect("write the resume token");
            break;
        }
        // The next read overlaps the write, as the engine's read-ahead does.
        let (written, read) = tokio::join!(write, stream.next());
        written.expect("write the resume token");
        next = read;
    }
    let elapsed = started.elapsed();
    Run {
        elapsed,
        commands: commands.take(),
        cpu: cpu_since(cpu),
    }
}

async fn engine(
    store: &MongoStore,
    leases: &Namespace,
    case: &Case,
    round: u64,
    commands: &Commands,
) -> Run {
    let Case {
        ns,
        start,
        batch,
        events,
    } = case;
    let (start, batch, events) = (*start, *batch, *events);
    let resource = format!("bench-{batch}-{round}");
    // A lease whose resume point is the operator's `resumeAt`: the same start point.
    store
        .client()
        .database(&leases.db)
        .collection::<Document>(&leases.coll)
        .insert_one(doc! {
            "_id": &resource,
            "listenerId": null,
            "expiresAt": null,
            "version": 0_i64,
            "kind": "update",
            "resumeToken": null,
            "resumeAt": bson::Timestamp::from(start),
        })
        .await
        .expect("insert the lease");
    let mut config = ListenerConfig::new(resource, "bench-listener", ns.clone());
    config.batch_size = batch;
    config.lease = Duration::from_secs(60);
    config.max_batch_wait = MAX_AWAIT;
    commands.take();
    let cpu = process_cpu();
    let started = Instant::now();
    let listener = ListenerHandle::spawn(store.clone(), config, NoopHandler);
    let mut status = listener.status.clone();
    status
        .wait_for(|s| s.events >= events)
        .await
        .expect("the listener runs");
    let elapsed = started.elapsed();
    let cpu = cpu_since(cpu);
    let commands = commands.take();
    listener.stop().await;
    Run {
        elapsed,
        commands,
        cpu,
    }
}

fn per_sec(events: u64, elapsed: Duration) -> f64 {
    events as f64 / elapsed.as_secs_f64()
}

/// The commands a side sent, and how many round trips that is per 1,000 changes.
fn describe(commands: &BTreeMap<String, u64>, events: u64) -> String {
    let total: u64 = commands.values().sum();
    let each: Vec<String> = commands.iter().map(|(k, v)| format!("{k} {v}")).collect();
    format!(
        "{total} commands ({}), {:.2} round trips per 1,000 changes",
        each.join(", "),
        round_trips_per_1000(commands, events)
    )
}

fn round_trips_per_1000(commands: &BTreeMap<String, u64>, events: u64) -> f64 {
    commands.values().sum::<u64>() as f64 * 1000.0 / events as f64
}

/// Keeps `run` in `best` when it is the fastest so far.
fn keep_best(best: &mut Option<Run>, run: Run) {
    if best.as_ref().is_none_or(|r| run.elapsed < r.elapsed) {
        *best = Some(run);
    }
}

fn main() {
    let Some(uri) = live::live_uri("mongo bench", live::URI_VAR) else {
        println!("mongo: skipped: {} is not set", live::URI_VAR);
        return;
    };
    let events = env_number("STREAMWARD_BENCH_EVENTS", 100_000).max(1);
    let rounds = env_number("STREAMWARD_BENCH_ROUNDS", 3).max(1);
    let rounds_batch1 = env_number("STREAMWARD_BENCH_ROUNDS_BATCH1", 1).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let db = format!("sw_bench_{:08x}", rand::random::<u32>());
    let leases = Namespace::new(db.clone(), "leases");
    let commands = Commands::default();
    let store = runtime.block_on(async {
        let mut settings = MongoSettings::new(uri);
        settings.leases = leases.clone();
        let handler = commands.handler();
        MongoStore::connect_with(settings, move |options| {
            options.command_event_handler = Some(handler);
        })
        .await
        .expect("connect")
    });
    let batch_sizes: Vec<u32> = match std::env::var("STREAMWARD_BENCH_BATCHES") {
        Ok(list) => list
            .split(',')
            .filter_map(|b| b.trim().parse().ok())
            .filter(|b| *b > 0)
            .collect(),
        Err(_) => vec![1000, 1],
    };
    let mut lines = Vec::new();
    for batch in batch_sizes {
        let ns = Namespace::new(db.clone(), format!("events_{batch}"));
        let filled = Instant::now();
        let start = runtime.block_on(fill(&store, &ns, events));
        let case = Case {
            ns: ns.clone(),
            start,
            batch,
            events,
        };
        eprintln!(
            "batch={batch}: inserted {events} changes into {ns} in {:.1?}",
            filled.elapsed()
        );
        let mut best_engine: Option<Run> = None;
        let mut best_baseline: Option<Run> = None;
        let mut best_floor: Option<Run> = None;
        let rounds = if batch == 1 { rounds_batch1 } else { rounds };
        // Interleaved rounds, best of each: every side sees the same machine conditions.
        for round in 0..rounds {
            let b = runtime.block_on(baseline(&store, &case, &commands));
            let f = runtime.block_on(floor(&store, &case, &commands));
            let e = runtime.block_on(engine(&store, &leases, &case, round, &commands));
            eprintln!(
                "batch={batch} round {round}: baseline {:.2?} (client CPU {:.2?}), floor {:.2?} (client CPU {:.2?}), engine {:.2?} (client CPU {:.2?})",
                b.elapsed, b.cpu.unwrap_or_default(), f.elapsed, f.cpu.unwrap_or_default(), e.elapsed, e.cpu.unwrap_or_default()
            );
            keep_best(&mut best_baseline, b);
            keep_best(&mut best_floor, f);
            keep_best(&mut best_engine, e);
        }
        let (Some(engine), Some(baseline), Some(floor)) = (best_engine, best_baseline, best_floor)
        else {
            unreachable!("at least one round ran");
        };
        for (side, run) in [
            ("baseline", &baseline),
            ("floor", &floor),
            ("engine", &engine),
        ] {
            eprintln!(
                "batch={batch}: {side} sent {}",
                describe(&run.commands, events)
            );
            lines.push(format!(
                "mongo: batch={batch} side={side} events_per_sec={:.0} round_trips_per_1000={:.2}",
                per_sec(events, run.elapsed),
                round_trips_per_1000(&run.commands, events)
            ));
        }
        let engine_rate = per_sec(events, engine.elapsed);
        let baseline_rate = per_sec(events, baseline.elapsed);
        let floor_rate = per_sec(events, floor.elapsed);
        lines.push(format!(
            "mongo: batch={batch} events_per_sec={engine_rate:.0} baseline_per_sec={baseline_rate:.0} ratio={:.3} floor_per_sec={floor_rate:.0} ratio_to_floor={:.3}",
            engine_rate / baseline_rate,
            engine_rate / floor_rate
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
