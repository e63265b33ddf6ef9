//! The whole demo in one process: a sandbox, several listeners per resource (so
//! standbys exist), and the workload.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::events::{EventCounts, DEMO_EVENTS_BYTES, EVENTS_RESOURCE};
use super::orders::{OrderOutbox, MAILER_RESOURCE, ORDERS_RESOURCE};
use super::pets::{PetAggregates, CENSUS_PARTITIONS, CENSUS_RESOURCE, PET_RESOURCE};
use super::workload::{Workload, WorkloadConfig, WorkloadStatus};
use super::{DemoNamespaces, DemoStore};
use crate::engine::{Fleet, FleetConfig, ListenerConfig, ListenerHandle};
use crate::metrics::EngineMetrics;
use crate::model::{Partition, SourceKind};
use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};

#[derive(Debug, Clone)]
pub struct DemoConfig {
    pub listeners_per_resource: usize,
    pub workload: WorkloadConfig,
    /// Bytes the sandbox's oplog keeps ([`DEMO_OPLOG_BYTES`] by default).
    pub oplog_bytes: usize,
    /// Bytes the capped event store holds when the demo makes it
    /// ([`DEMO_EVENTS_BYTES`] by default); one that exists capped is kept as it is.
    pub events_bytes: u64,
    pub lease: Duration,
    /// Holders hand over after this long, so leases move between listeners.
    pub rotate_after: Option<Duration>,
    pub batch_size: u32,
    /// Runs the slow mailer resource with this delay per message (it falls behind).
    pub mailer_delay: Option<Duration>,
    /// Where the animals, orders and derived collections live.
    pub namespaces: DemoNamespaces,
    /// The listeners record their series here (`--metrics ADDR`).
    pub metrics: Option<EngineMetrics>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            listeners_per_resource: 3,
            workload: WorkloadConfig::default(),
            oplog_bytes: DEMO_OPLOG_BYTES,
            events_bytes: DEMO_EVENTS_BYTES,
            lease: Duration::from_secs(10),
            rotate_after: Some(Duration::from_secs(20)),
            batch_size: 1,
            mailer_delay: None,
            namespaces: DemoNamespaces::default(),
            metrics: None,
        }
    }
}

/// A listener of the demo process `fleet`, recording into `metrics` when there are any.
fn spawn_listener<S: DemoStore, H: crate::engine::Handler>(
    (metrics, fleet): (Option<&EngineMetrics>, &Fleet),
    store: S,
    config: ListenerConfig,
    handler: H,
) -> ListenerHandle {
    let observer = metrics.map(|m| m.observer(&config));
    ListenerHandle::spawn_with(store, config, handler, observer, Some(fleet))
}

pub struct DemoRuntime<S = SandboxStore> {
    pub store: S,
    pub listeners: Vec<ListenerHandle>,
    /// The demo's processes, one per set of listeners.
    fleets: Vec<Fleet>,
    namespaces: DemoNamespaces,
    shutdown: CancellationToken,
    /// `None` once [`DemoRuntime::stop_workload`] has collected it.
    workload: Option<JoinHandle<u64>>,
    /// What the workload is doing: writing, stopped (why), resumed.
    pub workload_status: watch::Receiver<WorkloadStatus>,
    /// The census task of a demo on its sandbox; it ends with the workload.
    census: Option<JoinHandle<()>>,
}

/// How often a demo on its sandbox logs its [`DemoCensus`] (to the `STREAMWARD_LOG` file).
pub const CENSUS_EVERY: Duration = Duration::from_secs(60);

/// How many documents each of the demo's collections holds, and changes the sandbox's
/// log: what a demo left running all night keeps in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoCensus {
    pub animals: usize,
    pub aggregates: usize,
    pub orders: usize,
    pub outbox: usize,
    pub mails: usize,
    pub log_entries: u64,
}

/// The demo sandbox's oplog holds at most this much by default (about 46,000 of the
/// demo's changes), like an oplog sized in megabytes: a demo left running all night
/// stays within its memory, and its figures predict the time to loss as MongoDB's do.
pub const DEMO_OPLOG_BYTES: usize = DEMO_OPLOG_MIB * 1024 * 1024;
pub const DEMO_OPLOG_MIB: usize = 12;

impl DemoRuntime<SandboxStore> {
    /// Starts everything on a new sandbox on the wall clock. Must run inside a tokio runtime.
    pub fn start(config: &DemoConfig) -> Self {
        let store = SandboxStore::new(
            SandboxConfig {
                // Sized in bytes alone, as an oplog is.
                log_capacity: usize::MAX,
                log_bytes: config.oplog_bytes,
                ..SandboxConfig::default()
            },
            Clock::System,
        );
        let mut demo = Self::start_on(store, config);
        demo.census = Some(tokio::spawn(census_task(
            demo.store.clone(),
            demo.namespaces.clone(),
            demo.shutdown.clone(),
        )));
        demo
    }

    /// The collections' sizes now.
    pub fn census(&self) -> DemoCensus {
        census_of(&self.store, &self.namespaces)
    }
}

fn census_of(store: &SandboxStore, ns: &DemoNamespaces) -> DemoCensus {
    DemoCensus {
        animals: store.document_count(&ns.animals),
        aggregates: store.document_count(&ns.aggregates),
        orders: store.document_count(&ns.orders),
        outbox: store.document_count(&ns.outbox),
        mails: store.document_count(&ns.mails),
        log_entries: store.log_len(),
    }
}

/// Logs the census every [`CENSUS_EVERY`], and once more when the workload stops.
async fn census_task(store: SandboxStore, ns: DemoNamespaces, shutdown: CancellationToken) {
    let log = |census: DemoCensus| {
        tracing::info!(
            animals = census.animals,
            aggregates = census.aggregates,
            orders = census.orders,
            outbox = census.outbox,
            mails = census.mails,
            log_entries = census.log_entries,
            "demo census"
        );
    };
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + CENSUS_EVERY, CENSUS_EVERY);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            _ = ticker.tick() => log(census_of(&store, &ns)),
        }
    }
    log(census_of(&store, &ns));
}

impl<S: DemoStore> DemoRuntime<S> {
    /// Starts the listeners and the workload on `store` (the sandbox, or a cluster for
    /// `console --run`). Must run inside a tokio runtime.
    pub fn start_on(store: S, config: &DemoConfig) -> Self {
        let host = hostname();
        let ns = &config.namespaces;
        let mut listeners = Vec::new();
        let mut fleets = Vec::new();
        for n in 1..=config.listeners_per_resource {
            let id = format!("{host}/{}-{n}", std::process::id());
            // Each set of listeners is one process of a fleet, which balances the
            // leases over the three (docs/protocol.md, "Membership and balancing").
            // Its membership lasts a lease: a fleet whose membership outlasts its leases
            // plans on stale holders (docs/protocol.md, "Limits").
            let fleet = Fleet::start(
                store.clone(),
                FleetConfig::new(id.clone()).with_ttl(config.lease),
            );
            let attach = (config.metrics.as_ref(), &fleet);
            listeners.push(spawn_listener(
                attach,
                store.clone(),
                listener_config(
                    config,
                    PET_RESOURCE,
                    &format!("{id}-pets"),
                    ns.animals.clone(),
                ),
                PetAggregates::writing_to(store.clone(), ns.aggregates.clone()),
            ));
            // A partitioned resource across the listeners: every listener runs one
            // per partition, so each partition has a holder and standbys.
            for partition in Partition::all(CENSUS_PARTITIONS).unwrap_or_default() {
                let census = listener_config(
                    config,
                    CENSUS_RESOURCE,
                    &format!("{id}-census{}", partition.index()),
                    ns.animals.clone(),
                )
                .partitioned(partition);
                listeners.push(spawn_listener(
                    attach,
                    store.clone(),
                    census,
                    PetAggregates::writing_to(store.clone(), ns.census.clone()),
                ));
            }
            listeners.push(spawn_listener(
                attach,
                store.clone(),
                listener_config(
                    config,
                    ORDERS_RESOURCE,
                    &format!("{id}-orders"),
                    ns.orders.clone(),
                ),
                OrderOutbox::writing_to(store.clone(), ns.outbox.clone()),
            ));
            let mut events = listener_config(
                config,
                EVENTS_RESOURCE,
                &format!("{id}-events"),
                ns.events.clone(),
            );
            events.source = SourceKind::Capped;
            listeners.push(spawn_listener(
                attach,
                store.clone(),
                events,
                EventCounts::writing_to(store.clone(), ns.event_counts.clone(), config.batch_size),
            ));
            if let Some(delay) = config.mailer_delay {
                listeners.push(spawn_listener(
                    attach,
                    store.clone(),
                    listener_config(
                        config,
                        MAILER_RESOURCE,
                        &format!("{id}-mailer"),
                        ns.orders.clone(),
                    ),
                    OrderOutbox::mailer_writing_to(
                        store.clone(),
                        ns.orders.clone(),
                        ns.mails.clone(),
                        delay,
                    ),
                ));
            }
            fleets.push(fleet);
        }
        let shutdown = CancellationToken::new();
        let mut workload = Workload::writing_to(store.clone(), config.workload.clone(), ns.clone());
        let workload_status = workload.status();
        let events_bytes = config.events_bytes;
        let stop = shutdown.clone();
        let workload = tokio::spawn(async move {
            // Without an event store the rest of the demo still runs (the log says why).
            let _ = workload.open_event_store(events_bytes).await;
            workload.run(stop).await
        });
        Self {
            store,
            listeners,
            fleets,
            namespaces: ns.clone(),
            shutdown,
            workload: Some(workload),
            workload_status,
            census: None,
        }
    }

    /// Stops the workload and waits for its last write; the listeners go on, so they
    /// can catch up. Returns how many writes it made, or why its task ended abnormally
    /// (a failed write does not end it: it retries). `None` when it was already stopped.
    pub async fn stop_workload(&mut self) -> Option<Result<u64, String>> {
        self.shutdown.cancel();
        let workload = self.workload.take()?;
        Some(
            workload
                .await
                .map_err(|e| format!("the workload task ended abnormally: {e}")),
        )
    }

    /// Stops the workload, then every listener gracefully (each releases its lease).
    pub async fn stop(mut self) {
        let _ = self.stop_workload().await;
        if let Some(census) = self.census.take() {
            let _ = census.await;
        }
        // All at once, so no standby takes over a lease another listener just released.
        for listener in &self.listeners {
            listener.request_stop();
        }
        for listener in self.listeners {
            listener.stop().await;
        }
        for fleet in &self.fleets {
            fleet.stop().await;
        }
    }
}

fn listener_config(
    config: &DemoConfig,
    resource: &str,
    id: &str,
    watch: crate::store::Namespace,
) -> ListenerConfig {
    let mut c = ListenerConfig::new(resource, id, watch);
    c.lease = config.lease;
    c.max_tenure = config.rotate_after;
    c.batch_size = config.batch_size;
    c
}

fn hostname() -> String {
    whoami::hostname()
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::demo::pets::{expected_counts, read_animals_in, stored_counts_in};
    use crate::demo::workload::ORDER_STATES;
    use crate::engine::ListenerState;
    use crate::store::{DocumentStore, LeaseStore, Namespace};

    /// Per order, the statuses and events of its messages in `ns`, oldest change first.
    async fn messages_by_order(
        store: &SandboxStore,
        ns: &Namespace,
    ) -> BTreeMap<String, Vec<(String, String)>> {
        let mut documents = store.find_all(ns).await.expect("read");
        documents.sort_by_key(|d| {
            d.get_timestamp("clusterTime")
                .ok()
                .map(|t| (t.time, t.increment))
        });
        let mut by_order: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for message in documents {
            let field = |name: &str| message.get_str(name).unwrap_or("?").to_string();
            by_order
                .entry(field("order"))
                .or_default()
                .push((field("status"), field("event")));
        }
        by_order
    }

    /// Once every listener has caught up: the outbox and the mails hold exactly one
    /// message per change of each order the shop holds (it went through its states in
    /// order), none about a retired order, and the tag counts equal a recomputation.
    async fn settled(store: &SandboxStore, ns: &DemoNamespaces) -> Result<(), String> {
        let mut expected = BTreeMap::new();
        for order in store.find_all(&ns.orders).await.expect("read") {
            let id = order.get_str("_id").expect("id").to_string();
            let status = order.get_str("status").expect("status");
            let reached = ORDER_STATES
                .iter()
                .position(|s| *s == status)
                .expect("a known status");
            let messages: Vec<(String, String)> = ORDER_STATES[..=reached]
                .iter()
                .enumerate()
                .map(|(n, s)| {
                    let event = if n == 0 { "created" } else { "changed" };
                    (s.to_string(), event.to_string())
                })
                .collect();
            expected.insert(id, messages);
        }
        for collection in [&ns.outbox, &ns.mails] {
            let held = messages_by_order(store, collection).await;
            if held != expected {
                let stray: Vec<_> = held.keys().filter(|o| !expected.contains_key(*o)).collect();
                return Err(format!(
                    "{collection}: {} orders' messages, expected {} (not in the shop: {stray:?})",
                    held.len(),
                    expected.len()
                ));
            }
        }
        let animals = read_animals_in(store, &ns.animals).await.expect("read");
        let counts = stored_counts_in(store, &ns.aggregates).await.expect("read");
        if counts != expected_counts(&animals) {
            return Err(format!("tag counts {counts:?} differ from a recomputation"));
        }
        // The partitioned resource's copy too: its two partitions together.
        let census = stored_counts_in(store, &ns.census).await.expect("read");
        if census != expected_counts(&animals) {
            return Err(format!(
                "the partitioned census {census:?} differs from a recomputation"
            ));
        }
        Ok(())
    }

    /// A sandbox on tokio's paused clock, from 2026-01-01.
    fn virtual_sandbox() -> SandboxStore {
        let epoch = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch))
    }

    /// `--poison-after`: the animal the pets handler cannot process is written once,
    /// its lease goes FAILING naming it (not in a loop: a handful of attempts in a
    /// minute), and a skip lets the pets listeners go on.
    #[tokio::test(start_paused = true)]
    async fn the_poison_animal_makes_the_pets_lease_fail_until_it_is_skipped() {
        use crate::demo::pets::PET_RESOURCE;
        use crate::demo::workload::POISON_ANIMAL;
        use crate::model::{HealthThresholds, LeaseHealth, LeaseStatus};
        let store = virtual_sandbox();
        let config = DemoConfig {
            workload: WorkloadConfig {
                poison_after: Some(Duration::from_secs(5)),
                ..WorkloadConfig::default()
            },
            ..DemoConfig::default()
        };
        let mut demo = DemoRuntime::start_on(store.clone(), &config);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let lease = store.get(PET_RESOURCE).await.unwrap().unwrap();
        let failure = lease.failure.clone().expect("failing on the poison animal");
        assert_eq!(
            failure.document_key,
            format!("{{\"_id\":\"{POISON_ANIMAL}\"}}")
        );
        assert!(
            failure.error.contains("has no valid \"tags\""),
            "{failure:?}"
        );
        // 1 + 2 + 4 + 8 + 16 s of back-off fit in the minute: at most six attempts.
        assert!((3..=6).contains(&failure.attempts), "{failure:?}");
        let health = LeaseHealth::assess(
            &lease,
            None,
            store.clock().now(),
            &HealthThresholds::default(),
        );
        assert_eq!(health.status, LeaseStatus::Failing);

        let request = crate::ops::ActionRequest::Skip {
            resource: PET_RESOURCE.into(),
            to_token: None,
        };
        let facts = crate::ops::gather(&store, &request, &crate::ops::GatherOptions::new("t"))
            .await
            .unwrap();
        let plan = crate::ops::plan(&request, &facts);
        crate::ops::execute(&store, &plan, None)
            .await
            .expect("skipped");
        tokio::time::sleep(Duration::from_secs(30)).await;
        let lease = store.get(PET_RESOURCE).await.unwrap().unwrap();
        assert_eq!(lease.failure, None, "past it, and nothing else fails");
        assert!(lease.live_holder(store.clock().now()).is_some());
        demo.stop_workload().await;
    }

    /// The demo at default settings but for a small `orders_kept`, for five minutes of
    /// tokio's paused time: some twenty times as many orders as the shop keeps are placed.
    /// No collection outgrows its bound on the way, and at the end every listener has
    /// kept the demo's invariants.
    #[tokio::test(start_paused = true)]
    async fn a_long_run_keeps_every_collection_within_its_bound() {
        const KEPT: usize = 30;
        const RUN: Duration = Duration::from_secs(300);
        let store = virtual_sandbox();
        let config = DemoConfig {
            workload: WorkloadConfig {
                orders_kept: KEPT,
                ..WorkloadConfig::default()
            },
            // The demo's slow mailer: it lags, so it reads about many retired orders.
            mailer_delay: Some(Duration::from_secs(1)),
            ..DemoConfig::default()
        };
        let ns = config.namespaces.clone();
        let mut demo = DemoRuntime::start_on(store.clone(), &config);
        // Each order has at most one message per state. Its messages outlive it until
        // its listener handles its retirement: the mailer lags by up to an order's
        // lifetime, during which as many orders again are retired.
        let most_messages = 2 * ORDER_STATES.len() * KEPT;
        let mut largest = census_of(&store, &ns);
        let started = tokio::time::Instant::now();
        while started.elapsed() < RUN {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let census = census_of(&store, &ns);
            assert!(census.orders <= KEPT, "{census:?}");
            assert!(census.outbox <= most_messages, "{census:?}");
            assert!(census.mails <= most_messages, "{census:?}");
            largest.outbox = largest.outbox.max(census.outbox);
            largest.mails = largest.mails.max(census.mails);
        }
        let writes = demo.stop_workload().await.expect("running").expect("wrote");
        assert!(writes > 5_000, "{writes} writes");
        let orders = store.find_all(&ns.orders).await.expect("read");
        assert_eq!(orders.len(), KEPT, "the shop is full");
        let newest = orders
            .iter()
            .filter_map(|o| {
                o.get_str("_id")
                    .ok()?
                    .strip_prefix('o')?
                    .parse::<usize>()
                    .ok()
            })
            .max();
        assert!(
            newest.is_some_and(|n| n > 15 * KEPT),
            "placed {newest:?} orders: many more than the shop keeps"
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            match settled(&store, &ns).await {
                Ok(()) => break,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    panic!("not settled 10 minutes after the workload stopped: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
        for listener in &demo.listeners {
            let snapshot = listener.snapshot();
            assert!(
                matches!(
                    snapshot.state,
                    ListenerState::Standby | ListenerState::Streaming | ListenerState::Acquiring
                ),
                "{snapshot:?}"
            );
        }
        eprintln!("largest outbox {}, mails {}", largest.outbox, largest.mails);
        demo.stop().await;
    }

    /// The event store's resource while its holders rotate every 2 s and the holder is
    /// crashed three times, 15 s apart (its lease then expires and a standby resumes
    /// from the last committed entry): once the workload stops and the listeners catch up, the counts
    /// equal the event store's entries counted by type — every entry once, none missed
    /// on a resume. (On tokio's paused clock a crash lands while the holder waits for
    /// entries, not between its handling and its commit: the batch handed over again
    /// after such a crash is `events::tests::each_entry_is_counted_once_even_when_
    /// handed_over_again`.)
    #[tokio::test(start_paused = true)]
    async fn the_event_store_counts_every_entry_once_across_rotations_and_crashes() {
        use crate::demo::events::{expected_tally, stored_tally, EVENTS_RESOURCE};
        use crate::model::token_entry;
        use crate::store::CappedFeed;

        let store = virtual_sandbox();
        let config = DemoConfig {
            // Three are crashed, one by one; the last goes on alone.
            listeners_per_resource: 4,
            // Orders are retired too, so every type of event is appended.
            workload: WorkloadConfig {
                orders_kept: 30,
                ..WorkloadConfig::default()
            },
            lease: Duration::from_secs(3),
            rotate_after: Some(Duration::from_secs(2)),
            batch_size: 4,
            // Nothing overwritten: every entry appended is still there to count.
            events_bytes: 8 << 20,
            ..DemoConfig::default()
        };
        let ns = config.namespaces.clone();
        let mut demo = DemoRuntime::start_on(store.clone(), &config);
        let mut crashed = 0;
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(15)).await;
            let holder = demo.listeners.iter().position(|l| {
                let snapshot = l.snapshot();
                snapshot.resource == EVENTS_RESOURCE && snapshot.version.is_some()
            });
            if let Some(index) = holder {
                demo.listeners.swap_remove(index).crash();
                crashed += 1;
            }
        }
        assert_eq!(crashed, 3, "crashed the holder three times");
        tokio::time::sleep(Duration::from_secs(15)).await;
        demo.stop_workload().await.expect("running").expect("wrote");
        let expected = expected_tally(&store, &ns.events).await.expect("read");
        assert!(expected.total > 250, "{expected:?}");
        assert_eq!(expected.counts.len(), 4, "every type: {expected:?}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let stored = loop {
            let stored = stored_tally(&store, &ns.event_counts).await.expect("read");
            if stored.total >= expected.total || tokio::time::Instant::now() >= deadline {
                break stored;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        assert_eq!(stored.counts, expected.counts, "each entry counted once");
        assert_eq!(stored.total, expected.total);
        let window = store
            .capped_window(&ns.events)
            .await
            .expect("window")
            .expect("entries");
        // Group commits: the last changes handled are committed once the holder's
        // stream comes back empty (caught up), a read later.
        let lease = loop {
            let lease = store
                .get(EVENTS_RESOURCE)
                .await
                .expect("read")
                .expect("lease");
            let committed = lease.resume_token.as_ref().and_then(token_entry);
            if committed == Some(window.newest) || tokio::time::Instant::now() >= deadline {
                break lease;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            lease.version >= 10,
            "rotations and crashes moved the lease: version {}",
            lease.version
        );
        let watch = lease.watch.as_ref().expect("what it watches");
        assert_eq!(watch.source, SourceKind::Capped);
        let committed = lease.resume_token.as_ref().and_then(token_entry);
        assert_eq!(
            committed,
            Some(window.newest),
            "committed up to the newest entry"
        );
        demo.stop().await;
    }

    #[tokio::test]
    async fn stopping_releases_every_lease_without_handing_it_over() {
        let demo = DemoRuntime::start(&DemoConfig {
            rotate_after: None,
            ..DemoConfig::default()
        });
        let store = demo.store.clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let held = loop {
            let leases = store.list().await.unwrap().items;
            // Pets, orders, the event store and the census's two partitions.
            if leases.len() == 5 && leases.iter().all(|l| l.holder.is_some()) {
                break leases;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the five leases held: {leases:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        demo.stop().await;
        let released = store.list().await.unwrap().items;
        for (before, after) in held.iter().zip(&released) {
            assert_eq!(after.holder, None, "{} released", after.resource);
            assert_eq!(
                after.version, before.version,
                "nobody took {} over on the way out",
                after.resource
            );
        }
    }
}
