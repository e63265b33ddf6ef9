//! Partitioned resources (issue 16, docs/performance.md "Partitions"): throughput of
//! one resource read by P = 1 and by P = 4 partition listeners, with a handler that
//! takes a fixed time per event (a sleep), on the sandbox and, when
//! `STREAMWARD_TEST_URI` is set, on that real replica set.
//!
//! Each run: P listeners (one per partition, `bootstrap = now`, batches of 32) stream
//! a fresh collection; then `STREAMWARD_PARTITIONS_EVENTS` (default 2,000) documents
//! are inserted at once, and the time from the insert until the last of them is
//! handled gives the throughput. The handler sleeps `STREAMWARD_PARTITIONS_HANDLER_MS`
//! (default 2) per event, so one listener can do at most 500 events/s.
//!
//! Prints `partitions: p=4 speedup=S`, S = throughput at P = 4 ÷ at P = 1: the real
//! set's, or the sandbox's when there is no URI (said on stderr). Called at the end of
//! `benches/fleet.rs`.

use super::env::env_number;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use streamward::engine::{
    Bootstrap, Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerState,
};
use streamward::model::{Fence, Partition};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{ChangeEvent, DocumentStore, Namespace, Store};

const RESOURCE: &str = "projection";
const BATCH: u32 = 32;
/// A run that has not handled everything by then is reported as failed.
const PATIENCE: Duration = Duration::from_secs(300);

/// Takes a fixed time per event: the work a partition lets run side by side.
#[derive(Clone)]
struct FixedTime {
    per_event: Duration,
    handled: Arc<AtomicU64>,
}

impl Handler for FixedTime {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        for _ in events {
            tokio::time::sleep(self.per_event).await;
            self.handled.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Where the events go: the sandbox, or a real replica set (one `insertMany`).
#[derive(Clone)]
enum Target {
    Sandbox(SandboxStore),
    Mongo(MongoStore),
}

impl Target {
    async fn insert(&self, ns: &Namespace, documents: Vec<Document>) {
        match self {
            Target::Sandbox(store) => {
                for document in documents {
                    store.put(ns, document).await.expect("sandbox write");
                }
            }
            Target::Mongo(store) => {
                store
                    .client()
                    .database(&ns.db)
                    .collection::<Document>(&ns.coll)
                    .insert_many(documents)
                    .await
                    .expect("insertMany");
            }
        }
    }
}

/// Events per second through `count` partition listeners.
async fn throughput<S: Store>(store: &S, target: &Target, db: &str, count: u32) -> f64 {
    let events = env_number("STREAMWARD_PARTITIONS_EVENTS", 2_000).max(1);
    let per_event = Duration::from_millis(env_number("STREAMWARD_PARTITIONS_HANDLER_MS", 2));
    let ns = Namespace::new(db, format!("events_p{count}"));
    let resource = format!("{RESOURCE}-p{count}");
    let handled = Arc::new(AtomicU64::new(0));
    let mut listeners = Vec::new();
    for partition in Partition::all(count).expect("a valid count") {
        let mut config = ListenerConfig::new(&resource, format!("bench-{partition}"), ns.clone())
            .partitioned(partition);
        config.bootstrap = Bootstrap::Now;
        config.batch_size = BATCH;
        config.checkpoint_every = None;
        config.lease = Duration::from_secs(30);
        let handler = FixedTime {
            per_event,
            handled: handled.clone(),
        };
        listeners.push(ListenerHandle::spawn(store.clone(), config, handler));
    }
    for listener in &listeners {
        let mut status = listener.status.clone();
        let _ = status
            .wait_for(|s| s.state == ListenerState::Streaming)
            .await;
    }
    let documents: Vec<Document> = (0..events)
        .map(|i| doc! { "_id": format!("order-{i}"), "n": i64::try_from(i).unwrap_or(0) })
        .collect();
    let started = Instant::now();
    target.insert(&ns, documents).await;
    let done = tokio::time::timeout(PATIENCE, async {
        while handled.load(Ordering::Relaxed) < events {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let elapsed = started.elapsed();
    // Stopped and awaited: the next run must not share the store with these, and a
    // runtime dropped under running listeners panics in the driver's tasks.
    futures_util::future::join_all(listeners.into_iter().map(ListenerHandle::stop)).await;
    assert!(
        done.is_ok(),
        "P={count}: {} of {events} events handled within {PATIENCE:?}",
        handled.load(Ordering::Relaxed)
    );
    let rate = events as f64 / elapsed.as_secs_f64();
    eprintln!(
        "partitions: P={count}: {events} events ({per_event:?} each) in {elapsed:.2?}: {rate:.0} events/s"
    );
    rate
}

/// (throughput at P=1, at P=4) on `store`.
async fn speedup<S: Store>(store: &S, target: &Target, db: &str) -> (f64, f64) {
    let one = throughput(store, target, db, 1).await;
    let four = throughput(store, target, db, 4).await;
    (one, four)
}

/// Runs both measurements and prints the `partitions:` line.
pub fn run() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let line = runtime.block_on(async {
        let sandbox = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let (one, four) = speedup(&sandbox, &Target::Sandbox(sandbox.clone()), "bench").await;
        let on_sandbox = four / one;
        eprintln!("partitions: sandbox: P=1 {one:.0}/s, P=4 {four:.0}/s, speedup {on_sandbox:.2}");
        let Ok(uri) = std::env::var("STREAMWARD_TEST_URI") else {
            eprintln!(
                "partitions: the speedup below is the sandbox's: STREAMWARD_TEST_URI is not set"
            );
            return format!("partitions: p=4 speedup={on_sandbox:.2}");
        };
        let db = format!("sw_bench_partitions_{:08x}", rand::random::<u32>());
        let mut settings = MongoSettings::new(uri);
        settings.leases = Namespace::new(db.clone(), "leases");
        let store = MongoStore::connect(settings).await.expect("connect");
        let (one, four) = speedup(&store, &Target::Mongo(store.clone()), &db).await;
        let on_mongo = four / one;
        eprintln!(
            "partitions: replica set: P=1 {one:.0}/s, P=4 {four:.0}/s, speedup {on_mongo:.2}"
        );
        if let Err(e) = store.client().database(&db).drop().await {
            eprintln!("could not drop {db}: {e}");
        }
        format!("partitions: p=4 speedup={on_mongo:.2}")
    });
    println!("{line}");
}
