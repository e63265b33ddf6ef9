//! A fleet in one process on a real MongoDB (issue 16, docs/performance.md): many
//! resources, each with a holder and a standby listener in this process, all through
//! one driver client, as a service that embeds the engine runs them.
//!
//! - **connections**: `serverStatus.connections.current` once every listener is
//!   settled (every resource held, every standby waiting), less the count before any
//!   listener started: the server connections the fleet holds.
//! - **takeover**: for a sample of resources, the holder is stopped (it commits and
//!   releases) and the time until the standby holds the lease is measured; the 99th
//!   percentile is reported.
//!
//! `STREAMWARD_TEST_URI=mongodb://… cargo bench --bench fleet`; without the URI it says
//! it is skipped. `STREAMWARD_FLEET_RESOURCES` (default 1,000) resources,
//! `STREAMWARD_FLEET_TAKEOVERS` (default 100) takeovers timed.
//!
//! Prints `fleet: resources=N connections=N takeover_p99_ms=N`.

#[path = "../tests/support/live.rs"]
mod live;
#[path = "partitions_bench.rs"]
mod partitions_bench;

use std::time::{Duration, Instant};

use bson::{doc, Document};
use streamward::engine::{Bootstrap, ListenerConfig, ListenerHandle, ListenerState, NoopHandler};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::Namespace;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn connections(store: &MongoStore) -> i64 {
    let status = store
        .client()
        .database("admin")
        .run_command(doc! { "serverStatus": 1, "connections": 1 })
        .await
        .expect("serverStatus");
    let connections: &Document = status.get_document("connections").expect("connections");
    match connections.get("current") {
        Some(bson::Bson::Int32(n)) => i64::from(*n),
        Some(bson::Bson::Int64(n)) => *n,
        other => panic!("connections.current: {other:?}"),
    }
}

/// How long one takeover may take before it is counted as this long.
const TAKEOVER_PATIENCE: Duration = Duration::from_secs(60);

/// How many leases ended at each fencing version.
async fn lease_versions(store: &MongoStore, db: &str) -> std::collections::BTreeMap<i64, u64> {
    use futures_util::TryStreamExt;
    let leases: Vec<Document> = store
        .client()
        .database(db)
        .collection::<Document>("leases")
        .find(doc! {})
        .await
        .expect("leases")
        .try_collect()
        .await
        .expect("leases");
    let mut versions = std::collections::BTreeMap::new();
    for lease in leases {
        *versions
            .entry(lease.get_i64("version").unwrap_or(-1))
            .or_insert(0) += 1;
    }
    versions
}

fn config(resource: &str, listener: &str, ns: &Namespace) -> ListenerConfig {
    let mut config = ListenerConfig::new(resource, listener, ns.clone());
    config.bootstrap = Bootstrap::Now;
    config.lease = Duration::from_secs(30);
    config.checkpoint_every = None;
    config
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    let Some(uri) = live::live_uri("fleet bench", live::URI_VAR) else {
        println!("fleet: skipped: {} is not set", live::URI_VAR);
        partitions_bench::run();
        return;
    };
    let resources = env_number("STREAMWARD_FLEET_RESOURCES", 1_000).max(1) as usize;
    let takeovers = (env_number("STREAMWARD_FLEET_TAKEOVERS", 100) as usize).clamp(1, resources);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let db = format!("sw_bench_fleet_{:08x}", rand::random::<u32>());
    let line = runtime.block_on(async {
        let mut settings = MongoSettings::new(uri);
        settings.leases = Namespace::new(db.clone(), "leases");
        let store = MongoStore::connect(settings).await.expect("connect");
        let ns = Namespace::new(db.clone(), "events");
        store
            .client()
            .database(&db)
            .create_collection("events")
            .await
            .expect("create");
        let before = connections(&store).await;
        let started = Instant::now();
        let mut holders = Vec::with_capacity(resources);
        for i in 0..resources {
            let resource = format!("r{i:05}");
            holders.push(ListenerHandle::spawn(
                store.clone(),
                config(&resource, &format!("{resource}-a"), &ns),
                NoopHandler,
            ));
        }
        for holder in &holders {
            let mut status = holder.status.clone();
            let _ = status
                .wait_for(|s| s.state == ListenerState::Streaming)
                .await;
        }
        let mut standbys = Vec::with_capacity(resources);
        for i in 0..resources {
            let resource = format!("r{i:05}");
            standbys.push(ListenerHandle::spawn(
                store.clone(),
                config(&resource, &format!("{resource}-b"), &ns),
                NoopHandler,
            ));
        }
        for standby in &standbys {
            let mut status = standby.status.clone();
            let _ = status.wait_for(|s| s.state == ListenerState::Standby).await;
        }
        eprintln!(
            "{resources} resources held and {resources} standbys waiting after {:.1?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let held = connections(&store).await - before;
        let mut times = Vec::with_capacity(takeovers);
        let mut timed_out = 0;
        let mut holders: Vec<Option<ListenerHandle>> = holders.into_iter().map(Some).collect();
        for i in 0..takeovers {
            let index = i * resources / takeovers;
            let Some(holder) = holders[index].take() else {
                continue;
            };
            let mut status = standbys[index].status.clone();
            let released = Instant::now();
            let taken = tokio::time::timeout(TAKEOVER_PATIENCE, async {
                holder.stop().await;
                let _ = status
                    .wait_for(|s| s.state == ListenerState::Streaming)
                    .await;
            })
            .await;
            if taken.is_err() {
                timed_out += 1;
            }
            times.push(released.elapsed());
        }
        times.sort();
        let p50 = percentile(&times, 0.5);
        let p99 = percentile(&times, 0.99);
        eprintln!(
            "takeover: p50 {p50:.1?}, p99 {p99:.1?}, max {:.1?} over {} takeovers, {timed_out} \
             not done within {TAKEOVER_PATIENCE:?} (counted as that long)",
            times.last().copied().unwrap_or_default(),
            times.len()
        );
        let versions = lease_versions(&store, &db).await;
        eprintln!(
            "leases per fencing version at the end: {versions:?} (a version above the others' \
             and the takeovers' is a lease its holder lost)"
        );
        for handle in holders.into_iter().flatten().chain(standbys) {
            handle.request_stop();
        }
        if let Err(e) = store.client().database(&db).drop().await {
            eprintln!("could not drop {db}: {e}");
        }
        format!(
            "fleet: resources={resources} connections={held} takeover_p99_ms={}",
            p99.as_millis()
        )
    });
    println!("{line}");
    partitions_bench::run();
}
