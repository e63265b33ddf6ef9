//! A fleet in one process on a real MongoDB (issue 16, docs/performance.md): many
//! resources, each with a holder and a standby listener in this process, all through
//! one driver client, as a service that embeds the engine runs them.
//!
//! - **connections**: `serverStatus.connections.current` once every listener is
//!   settled (every resource held, every standby waiting) and has run through a quiet
//!   spell, less the count before any listener started: the server connections the
//!   fleet holds.
//! - **quiet**: two lease periods with nothing asked of the fleet; a lease whose
//!   version moved meanwhile was lost by a renewal that came too late.
//! - **takeover**: for a sample of resources, the holder is stopped (it commits and
//!   releases) and the time until the standby streams is measured; p50, p99 and max
//!   are reported, and where the slowest takeovers' time went: the holder's stop (its
//!   release included), the standby seeing the release (to acquiring), the acquire, and
//!   opening its stream (from the states the standby publishes). Beside them, from the
//!   driver's pool and command events during the takeovers, per command: how long it
//!   waited for a pooled connection and how long the server took to answer.
//! - **memory**: resident memory the fleet added, per resource.
//!
//! The same run first measures a fleet of ten resources, the baseline the figures are
//! divided by.
//!
//! `STREAMWARD_TEST_URI=mongodb://… cargo bench --bench fleet`; without the URI it says
//! it is skipped. `STREAMWARD_FLEET_RESOURCES` (default 1,000) resources,
//! `STREAMWARD_FLEET_TAKEOVERS` (default 100) takeovers timed,
//! `STREAMWARD_FLEET_QUIET_SECS` (default 65) of quiet.
//!
//! Prints `fleet: resources=N connections=N takeover_p99_ms=N`, then
//! `fleet_takeover: resources=N p50_ms=N p99_ms=N max_ms=N slowest_5_waited_longest_on="…"`.

#[path = "support/env.rs"]
mod env;
use env::env_number;

#[path = "../tests/support/live.rs"]
mod live;
#[path = "support/partitions.rs"]
mod partitions_bench;
#[path = "support/pool_watch.rs"]
mod pool_watch;

use std::time::{Duration, Instant};

use bson::{doc, Document};
use streamward::engine::{Bootstrap, ListenerConfig, ListenerHandle, ListenerState, NoopHandler};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::Namespace;

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

/// The server's CPU time so far (`serverStatus.extra_info`, Linux), if it says.
async fn server_cpu(store: &MongoStore) -> Option<Duration> {
    let status = store
        .client()
        .database("admin")
        .run_command(doc! { "serverStatus": 1 })
        .await
        .ok()?;
    let extra = status.get_document("extra_info").ok()?;
    let micros = |field: &str| match extra.get(field) {
        Some(bson::Bson::Int64(n)) => u64::try_from(*n).ok(),
        Some(bson::Bson::Int32(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    Some(Duration::from_micros(
        micros("user_time_us")? + micros("system_time_us")?,
    ))
}

/// This process's CPU time so far (`utime + stime` of /proc/self/stat), if it says.
fn client_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on Linux.
    Some(Duration::from_millis(ticks * 10))
}

/// How long one takeover may take before it is counted as this long.
const TAKEOVER_PATIENCE: Duration = Duration::from_secs(60);

/// Each lease's fencing version.
async fn lease_versions(store: &MongoStore, db: &str) -> std::collections::BTreeMap<String, i64> {
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
    leases
        .iter()
        .map(|lease| {
            (
                lease.get_str("_id").unwrap_or_default().to_string(),
                lease.get_i64("version").unwrap_or(-1),
            )
        })
        .collect()
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

/// What one fleet run measured.
struct Figures {
    resources: usize,
    connections: i64,
    /// Each takeover and where its time went, fastest first.
    takeovers: Vec<(Duration, Stages)>,
    /// What the pool made each kind of command wait during the takeovers.
    pool_waits: Vec<String>,
    timed_out: usize,
    /// Leases whose version moved while nothing asked them to: renewals that came late.
    lost_in_quiet: usize,
    quiet: Duration,
    /// Resident memory added by the fleet, per resource (holder and standby).
    rss_per_resource_kib: Option<u64>,
    /// CPU time per second of quiet, in this process and in the server.
    quiet_cpu: (Option<f64>, Option<f64>),
}

impl Figures {
    fn p(&self, p: f64) -> Duration {
        let times: Vec<Duration> = self.takeovers.iter().map(|(took, _)| *took).collect();
        percentile(&times, p)
    }

    fn max(&self) -> Duration {
        self.takeovers
            .last()
            .map(|(took, _)| *took)
            .unwrap_or_default()
    }

    /// Which wait was the longest in each of the [`SLOWEST`] takeovers, counted:
    /// `stream opening 4, acquire 1`.
    fn slowest_waited_on(&self) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for (_, stages) in self.takeovers.iter().rev().take(SLOWEST) {
            match counts
                .iter_mut()
                .find(|(name, _)| *name == stages.longest())
            {
                Some((_, n)) => *n += 1,
                None => counts.push((stages.longest(), 1)),
            }
        }
        counts.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let counts: Vec<String> = counts
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        counts.join(", ")
    }
}

/// When, counted from the holder being asked to stop, one takeover got where.
#[derive(Debug, Clone, Copy, Default)]
struct Stages {
    /// The holder's `stop` returned: it had committed, released and ended.
    stopped: Duration,
    /// The standby first said it was acquiring (it saw the lease change or a timer ran out).
    acquiring: Option<Duration>,
    /// The standby held the lease (its status carries the new version).
    acquired: Option<Duration>,
    /// The standby streamed.
    streaming: Duration,
}

impl Stages {
    /// The four waits a takeover is made of, named: the holder's stop (its release
    /// included), from there to the standby acquiring (it saw the release on the lease
    /// stream), the acquire, and opening the stream.
    fn waits(&self) -> [(&'static str, Duration); 4] {
        let acquired = self.acquired.unwrap_or(self.streaming);
        let acquiring = self.acquiring.unwrap_or(acquired).min(acquired);
        [
            ("holder stop", self.stopped),
            (
                "release to acquiring",
                acquiring.saturating_sub(self.stopped),
            ),
            (
                "acquire",
                acquired.saturating_sub(acquiring.max(self.stopped)),
            ),
            ("stream opening", self.streaming.saturating_sub(acquired)),
        ]
    }

    /// The longest of [`Stages::waits`].
    fn longest(&self) -> &'static str {
        self.waits()
            .into_iter()
            .max_by_key(|(_, wait)| *wait)
            .map_or("?", |(name, _)| name)
    }
}

/// The process's resident memory (`VmRSS` of /proc/self/status), where there is one.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn run_fleet(uri: &str, resources: usize, takeovers: usize, quiet: Duration) -> Figures {
    let db = format!("sw_bench_fleet_{:08x}", rand::random::<u32>());
    let mut settings = MongoSettings::new(uri.to_string());
    settings.leases = Namespace::new(db.clone(), "leases");
    let pool = pool_watch::PoolWatch::default();
    let store = MongoStore::connect_with(settings, |options| pool.install(options))
        .await
        .expect("connect");
    let ns = Namespace::new(db.clone(), "events");
    store
        .client()
        .database(&db)
        .create_collection("events")
        .await
        .expect("create");
    let before = connections(&store).await;
    let rss_before = rss_kib();
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
    let settled = lease_versions(&store, &db).await;
    let (client_before, server_before) = (client_cpu(), server_cpu(&store).await);
    let quiet_started = Instant::now();
    tokio::time::sleep(quiet.max(Duration::from_secs(2))).await;
    let quiet_spent = quiet_started.elapsed().as_secs_f64();
    let share = |before: Option<Duration>, after: Option<Duration>| {
        before
            .zip(after)
            .map(|(b, a)| a.saturating_sub(b).as_secs_f64() / quiet_spent)
    };
    let quiet_cpu = (
        share(client_before, client_cpu()),
        share(server_before, server_cpu(&store).await),
    );
    let connections_held = connections(&store).await - before;
    let rss_per_resource_kib = rss_before
        .zip(rss_kib())
        .map(|(before, after)| after.saturating_sub(before) / resources as u64);
    let lost_in_quiet = lease_versions(&store, &db)
        .await
        .iter()
        .filter(|(resource, version)| settled.get(*resource) != Some(version))
        .count();
    let mut times = Vec::with_capacity(takeovers);
    let mut timed_out = 0;
    let mut holders: Vec<Option<ListenerHandle>> = holders.into_iter().map(Some).collect();
    pool.start();
    for i in 0..takeovers {
        let index = i * resources / takeovers;
        let Some(holder) = holders[index].take() else {
            continue;
        };
        let mut status = standbys[index].status.clone();
        status.borrow_and_update();
        let released = Instant::now();
        let mut stages = Stages::default();
        let taken = tokio::time::timeout(TAKEOVER_PATIENCE, async {
            let stop = async {
                holder.stop().await;
                released.elapsed()
            };
            // The standby's states as it publishes them, timed from the stop.
            let follow = async {
                let (mut acquiring, mut acquired) = (None, None);
                loop {
                    let (state, holds) = {
                        let s = status.borrow_and_update();
                        (s.state, s.version.is_some())
                    };
                    let at = released.elapsed();
                    if state == ListenerState::Acquiring {
                        acquiring.get_or_insert(at);
                    }
                    if holds {
                        acquired.get_or_insert(at);
                    }
                    if state == ListenerState::Streaming {
                        return (acquiring, acquired, at);
                    }
                    if status.changed().await.is_err() {
                        return (acquiring, acquired, released.elapsed());
                    }
                }
            };
            let (stopped, (acquiring, acquired, streaming)) = tokio::join!(stop, follow);
            stages = Stages {
                stopped,
                acquiring,
                acquired,
                streaming,
            };
        })
        .await;
        if taken.is_err() {
            timed_out += 1;
        }
        times.push((released.elapsed(), stages));
    }
    times.sort_by_key(|(took, _)| *took);
    let pool_waits = pool.stop();
    // Stopped and awaited: a runtime dropped under running listeners panics in the
    // driver's tasks.
    futures_util::future::join_all(
        holders
            .into_iter()
            .flatten()
            .chain(standbys)
            .map(ListenerHandle::stop),
    )
    .await;
    if let Err(e) = store.client().database(&db).drop().await {
        eprintln!("could not drop {db}: {e}");
    }
    Figures {
        resources,
        connections: connections_held,
        takeovers: times,
        pool_waits,
        timed_out,
        lost_in_quiet,
        // What was spent, not what was asked: the baseline asks for none and settles 2 s.
        quiet: Duration::from_secs_f64(quiet_spent),
        rss_per_resource_kib,
        quiet_cpu,
    }
}

fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "?".to_string(), |s| format!("{:.0}%", s * 100.0))
}

fn report(figures: &Figures) {
    eprintln!(
        "{} resources: takeover p50 {:.1?}, p99 {:.1?}, max {:.1?} over {} takeovers, {} not \
         done within {TAKEOVER_PATIENCE:?} (counted as that long); {} leases changed hands \
         unasked in {:?} of quiet, using {} of a core here and {} in the server; {} KiB \
         resident per resource",
        figures.resources,
        figures.p(0.5),
        figures.p(0.99),
        figures.max(),
        figures.takeovers.len(),
        figures.timed_out,
        figures.lost_in_quiet,
        figures.quiet,
        percent(figures.quiet_cpu.0),
        percent(figures.quiet_cpu.1),
        figures
            .rss_per_resource_kib
            .map_or_else(|| "?".to_string(), |k| k.to_string()),
    );
    eprintln!(
        "{} resources: the {SLOWEST} slowest takeovers waited longest on: {}",
        figures.resources,
        figures.slowest_waited_on()
    );
    let slowest = figures.takeovers.iter().rev().take(SLOWEST);
    for (took, stages) in slowest {
        let waits: Vec<String> = stages
            .waits()
            .iter()
            .map(|(name, wait)| format!("{name} {wait:.1?}"))
            .collect();
        let acquired = stages
            .acquired
            .map_or_else(|| "?".to_string(), |at| format!("{at:.1?}"));
        eprintln!(
            "  takeover {took:.1?}: {} (held at {acquired}, streaming at {:.1?})",
            waits.join(", "),
            stages.streaming
        );
    }
    eprintln!(
        "{} resources: during the takeovers, per command (the driver's pool events):",
        figures.resources
    );
    for row in &figures.pool_waits {
        eprintln!("  {row}");
    }
}

/// How many of the slowest takeovers the report takes apart.
const SLOWEST: usize = 5;

fn main() {
    let Some(uri) = live::live_uri("fleet bench", live::URI_VAR) else {
        println!("fleet: skipped: {} is not set", live::URI_VAR);
        partitions_bench::run();
        return;
    };
    let resources = env_number("STREAMWARD_FLEET_RESOURCES", 1_000).max(1) as usize;
    let takeovers = (env_number("STREAMWARD_FLEET_TAKEOVERS", 100) as usize).clamp(1, resources);
    // Two lease periods (30 s each), so a renewal that comes late shows.
    let quiet = Duration::from_secs(env_number("STREAMWARD_FLEET_QUIET_SECS", 65));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (baseline, fleet) = runtime.block_on(async {
        let baseline =
            run_fleet(&uri, BASELINE_RESOURCES, BASELINE_RESOURCES, Duration::ZERO).await;
        report(&baseline);
        let fleet = run_fleet(&uri, resources, takeovers, quiet).await;
        report(&fleet);
        (baseline, fleet)
    });
    println!(
        "fleet_baseline: resources={} connections={} takeover_p99_ms={}",
        baseline.resources,
        baseline.connections,
        baseline.p(0.99).as_millis()
    );
    println!(
        "fleet_ratio: takeover_p99={:.2} connections={:.2} (resources={} against {})",
        fleet.p(0.99).as_secs_f64() / baseline.p(0.99).as_secs_f64().max(1e-6),
        fleet.connections as f64 / (baseline.connections.max(1)) as f64,
        fleet.resources,
        baseline.resources
    );
    println!(
        "fleet: resources={} connections={} takeover_p99_ms={}",
        fleet.resources,
        fleet.connections,
        fleet.p(0.99).as_millis()
    );
    println!(
        "fleet_takeover: resources={} p50_ms={} p99_ms={} max_ms={} slowest_{SLOWEST}_waited_longest_on=\"{}\"",
        fleet.resources,
        fleet.p(0.5).as_millis(),
        fleet.p(0.99).as_millis(),
        fleet.max().as_millis(),
        fleet.slowest_waited_on()
    );
    partitions_bench::run();
}

/// The same run's baseline: a fleet this small never queued on the pool, before or after.
const BASELINE_RESOURCES: usize = 10;
