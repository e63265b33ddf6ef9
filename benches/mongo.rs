//! The engine on a real MongoDB against bare change-stream loops, one case per goal of
//! docs/performance.md. Every side reads the same pre-inserted changes of one
//! collection through the same driver client, from the same start point
//! (`startAtOperationTime` just before the inserts), with the same change-stream
//! options; each is timed from its start to its last event.
//!
//! Cases (`case=`), and their sides (`side=`):
//!
//! - `batch1000`, `batch1`: `batchSize` 1000 or 1 everywhere.
//!   - **baseline**: `Collection::watch()` (`fullDocument: updateLookup`, `batchSize`)
//!     iterated with `StreamExt::next` until every change was seen;
//!   - **floor**: the same loop that also writes the resume token of every `batchSize`
//!     changes (one server batch) with one majority `update`, the next read
//!     overlapping it: the least "commit what you read" can cost, with no lease, no
//!     fence and no handler;
//!   - **engine**: a `Listener` with a no-op handler and the default group commits;
//!   - **strict**: the same with `CommitPolicy::Strict` (each batch committed before
//!     the next is handed).
//! - `default`: nothing set but what the case needs.
//!   - **baseline**: the bare loop with the driver's default batching (no `batchSize`);
//!   - **engine**: a `Listener` with `ListenerConfig::new`'s settings.
//! - `handler1ms`: a handler that takes 1 ms per change (`tokio::time::sleep`).
//!   - **loop**: the bare loop (driver's default batching) calling it for each change;
//!   - **engine**: a `Listener` with default settings calling it.
//!
//! A listener is timed until its status counts every change (a change counts once
//! its commit landed). A command event handler on the shared client counts the
//! commands each side sends: round trips per 1,000 changes.
//!
//! `STREAMWARD_TEST_URI=mongodb://… cargo bench --bench mongo`; without the URI it says
//! it is skipped. `STREAMWARD_BENCH_EVENTS` (default 100,000) changes per case but
//! `handler1ms`, which reads `STREAMWARD_BENCH_HANDLER_EVENTS` (default 10,000: ten
//! seconds a side); `STREAMWARD_BENCH_ROUNDS` (default 3) rounds for `batch1000` and
//! `default`, `STREAMWARD_BENCH_ROUNDS_SLOW` (default 1) for the others (a round trip
//! per change makes them slow). `STREAMWARD_BENCH_CASES=batch1000,default` runs those
//! cases only.

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
use streamward::engine::{CommitPolicy, Handler, HandlerError, ListenerConfig, ListenerHandle};
use streamward::model::{ClusterTime, Fence};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{ChangeEvent, ChangeFeed, Namespace};
use tokio::sync::watch;

/// How long a read waits on a quiet stream; never reached while changes are pending.
const MAX_AWAIT: Duration = Duration::from_millis(100);
const INSERT_CHUNK: u64 = 10_000;
/// How long the handler-bound case's handler takes per change.
const HANDLER_TIME: Duration = Duration::from_millis(1);

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

/// One measured configuration: `events` changes in `ns` from `start`, read `batch` at
/// a time (`None`: the driver's and server's default batching).
struct Case {
    ns: Namespace,
    start: ClusterTime,
    batch: Option<u32>,
    events: u64,
}

/// The change stream the bare loops read: the options the engine's has.
async fn open_stream(
    collection: &mongodb::Collection<Document>,
    case: &Case,
) -> mongodb::change_stream::ChangeStream<mongodb::change_stream::event::ChangeStreamEvent<Document>>
{
    let watch = collection
        .watch()
        .full_document(FullDocumentType::UpdateLookup)
        .max_await_time(MAX_AWAIT)
        .start_at_operation_time(bson::Timestamp::from(case.start));
    match case.batch {
        Some(batch) => watch.batch_size(batch).await,
        None => watch.await,
    }
    .expect("open the change stream")
}

/// What the handler-bound case's handler does for each change.
async fn handle_one_change() {
    tokio::time::sleep(HANDLER_TIME).await;
}

/// The bare loop: every change read, and, when `per_change`, handed to that handler.
async fn baseline(store: &MongoStore, case: &Case, commands: &Commands, per_change: bool) -> Run {
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
        if per_change {
            handle_one_change().await;
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
    let Case { ns, events, .. } = case;
    let (batch, events) = (u64::from(case.batch.unwrap_or(1)), *events);
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
        if !seen.is_multiple_of(batch) && seen < events {
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

/// The engine's handler: counts what it was handed, and sleeps `HANDLER_TIME` per
/// change when the case is handler-bound.
#[derive(Clone)]
struct Counting {
    handled: Arc<watch::Sender<u64>>,
    per_change: bool,
}

impl Handler for Counting {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        if self.per_change {
            for _ in events {
                handle_one_change().await;
            }
        }
        self.handled.send_modify(|n| *n += events.len() as u64);
        Ok(())
    }
}

/// A listener with `ListenerConfig::new`'s settings but what `setup` changes, timed
/// until its handler got every change and a graceful stop committed them: the commit
/// of the last changes is paid for, not the wait for the stream to look quiet.
async fn engine(
    store: &MongoStore,
    leases: &Namespace,
    case: &Case,
    name: &str,
    commands: &Commands,
    per_change: bool,
    setup: impl FnOnce(&mut ListenerConfig),
) -> Run {
    let Case {
        ns, start, events, ..
    } = case;
    let (start, events) = (*start, *events);
    let resource = format!("bench-{name}");
    // A lease whose resume point is the operator's `resumeAt`: the same start point.
    live::insert_lease_resuming_at(store, leases, &resource, start).await;
    let mut config = ListenerConfig::new(resource, "bench-listener", ns.clone());
    setup(&mut config);
    let (handled, mut seen) = watch::channel(0u64);
    let handler = Counting {
        handled: Arc::new(handled),
        per_change,
    };
    commands.take();
    let cpu = process_cpu();
    let started = Instant::now();
    let listener = ListenerHandle::spawn(store.clone(), config, handler);
    let status = listener.status.clone();
    seen.wait_for(|n| *n >= events)
        .await
        .expect("the listener runs");
    listener.stop().await;
    let elapsed = started.elapsed();
    let cpu = cpu_since(cpu);
    let commands = commands.take();
    let committed = status.borrow().events;
    assert_eq!(
        committed, events,
        "{name}: every change handled was committed by the stop"
    );
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

/// The cases this run measures: `STREAMWARD_BENCH_CASES`, else all.
fn cases() -> Vec<String> {
    let all = ["batch1000", "batch1", "default", "handler1ms"];
    match std::env::var("STREAMWARD_BENCH_CASES") {
        Ok(list) => list
            .split(',')
            .map(str::trim)
            .filter(|c| all.contains(c))
            .map(String::from)
            .collect(),
        Err(_) => all.map(String::from).to_vec(),
    }
}

/// Runs every side `rounds` times, interleaved (every side sees the same machine
/// conditions), and keeps each side's best.
fn best_of(rounds: u64, sides: &[(&str, &dyn Fn(u64) -> Run)]) -> Vec<Run> {
    let mut best: Vec<Option<Run>> = sides.iter().map(|_| None).collect();
    for round in 0..rounds {
        for ((name, run), best) in sides.iter().zip(&mut best) {
            let r = run(round);
            eprintln!(
                "round {round}: {name} {:.2?} (client CPU {:.2?})",
                r.elapsed,
                r.cpu.unwrap_or_default()
            );
            keep_best(best, r);
        }
    }
    best.into_iter()
        .map(|b| b.expect("at least one round ran"))
        .collect()
}

fn main() {
    let Some(uri) = live::live_uri("mongo bench", live::URI_VAR) else {
        println!("mongo: skipped: {} is not set", live::URI_VAR);
        return;
    };
    let events = env_number("STREAMWARD_BENCH_EVENTS", 100_000).max(1);
    let handler_events = env_number("STREAMWARD_BENCH_HANDLER_EVENTS", 10_000).max(1);
    let rounds = env_number("STREAMWARD_BENCH_ROUNDS", 3).max(1);
    let rounds_slow = env_number("STREAMWARD_BENCH_ROUNDS_SLOW", 1).max(1);
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
    let mut lines = Vec::new();
    for name in cases() {
        let (batch, events, rounds) = match name.as_str() {
            "batch1000" => (Some(1000), events, rounds),
            "batch1" => (Some(1), events, rounds_slow),
            "default" => (None, events, rounds),
            _ => (None, handler_events, rounds_slow),
        };
        let ns = Namespace::new(db.clone(), format!("events_{name}"));
        let filled = Instant::now();
        let start = runtime.block_on(fill(&store, &ns, events));
        let case = Case {
            ns: ns.clone(),
            start,
            batch,
            events,
        };
        eprintln!(
            "case={name}: inserted {events} changes into {ns} in {:.1?}",
            filled.elapsed()
        );
        let store = &store;
        let (case, commands, leases, runtime) = (&case, &commands, &leases, &runtime);
        let listener = |side: &str, round: u64, per_change: bool, policy: Option<CommitPolicy>| {
            let id = format!("{name}-{side}-{round}");
            runtime.block_on(engine(
                store,
                leases,
                case,
                &id,
                commands,
                per_change,
                |c| {
                    if let Some(batch) = batch {
                        c.batch_size = batch;
                        c.max_batch_wait = MAX_AWAIT;
                    }
                    if let Some(policy) = policy {
                        c.commit = policy;
                    }
                },
            ))
        };
        let bare = |per_change: bool| runtime.block_on(baseline(store, case, commands, per_change));
        let floor_run = |_: u64| runtime.block_on(floor(store, case, commands));
        let (baseline_run, loop_run) = (|_: u64| bare(false), |_: u64| bare(true));
        let group = |r: u64| listener("engine", r, false, None);
        let strict = |r: u64| listener("strict", r, false, Some(CommitPolicy::Strict));
        let handler_bound = |r: u64| listener("engine", r, true, None);
        let sides: Vec<(&str, &dyn Fn(u64) -> Run)> = match name.as_str() {
            "batch1000" | "batch1" => vec![
                ("baseline", &baseline_run),
                ("floor", &floor_run),
                ("engine", &group),
                ("strict", &strict),
            ],
            "default" => vec![("baseline", &baseline_run), ("engine", &group)],
            _ => vec![("loop", &loop_run), ("engine", &handler_bound)],
        };
        let runs = best_of(rounds, &sides);
        let mut rate = BTreeMap::new();
        for ((side, _), run) in sides.iter().zip(&runs) {
            eprintln!(
                "case={name}: {side} sent {}",
                describe(&run.commands, events)
            );
            rate.insert(*side, per_sec(events, run.elapsed));
            lines.push(format!(
                "mongo: case={name} side={side} events_per_sec={:.0} round_trips_per_1000={:.2}",
                per_sec(events, run.elapsed),
                round_trips_per_1000(&run.commands, events)
            ));
        }
        let ratio = |a: &str, b: &str| rate[a] / rate[b];
        lines.push(match name.as_str() {
            "batch1000" | "batch1" => format!(
                "mongo: case={name} engine/baseline={:.3} engine/floor={:.3} strict/floor={:.3}",
                ratio("engine", "baseline"),
                ratio("engine", "floor"),
                ratio("strict", "floor")
            ),
            "default" => format!(
                "mongo: case={name} engine/baseline={:.3}",
                ratio("engine", "baseline")
            ),
            _ => format!(
                "mongo: case={name} engine/loop={:.3}",
                ratio("engine", "loop")
            ),
        });
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
