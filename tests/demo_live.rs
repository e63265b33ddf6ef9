//! The demo application as `streamward console --run` runs it — `DemoRuntime` with
//! its listeners, rotation and workload — on the real replica set of
//! `STREAMWARD_TEST_URI`, with two operator takeovers through `ops` (plan, then
//! execute) while it runs. Everything is read back from the database: the lease
//! documents, the audit collection, the oplog, the outbox and the aggregate.
//!
//! The demo's collections live in the test's own database
//! (`DemoNamespaces::in_database`), next to its leases, so runs never share the
//! `demo` and `shop` databases. Skipped (with a message) without the URI.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use streamward::demo::orders::{message_id, OrderOutbox, ORDERS_RESOURCE};
use streamward::demo::pets::{
    expected_counts, read_animals_in, stored_counts_in, CENSUS_PARTITIONS, CENSUS_RESOURCE,
    PET_RESOURCE,
};
use streamward::demo::runtime::{DemoConfig, DemoRuntime};
use streamward::demo::workload::WorkloadConfig;
use streamward::demo::DemoNamespaces;
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle};
use streamward::model::Partition;
use streamward::model::{ClusterTime, Fence, Lease};
use streamward::ops::{self, ActionRequest, Executed, GatherOptions, OpsError};
use streamward::store::mongo::MongoStore;
use streamward::store::AuditLog;
use streamward::store::{
    ChangeEvent, ChangeFeed, ChangeStream, DocumentStore, FeedOptions, LeaseStore, Namespace,
    StartPoint,
};
use support::live::{live, LiveDb};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

/// Long enough that only rotation and the operator move a lease, never an expiry
/// while a holder is merely slow on a busy machine.
const LEASE: Duration = Duration::from_secs(10);
const ROTATE: Duration = Duration::from_secs(2);
const BATCH: u32 = 4;
/// Bounds each wait; the whole test takes about 20–30 s.
const PATIENCE: Duration = Duration::from_secs(30);
const PAUSED: &str = "paused-listener";

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {PATIENCE:?} waiting for: {what}"))
}

/// The demo's order outbox handler, holding its first batch until released.
struct PausedMidBatch {
    inner: OrderOutbox<MongoStore>,
    reached: mpsc::UnboundedSender<(Vec<ChangeEvent>, Fence)>,
    gate: Arc<Notify>,
    armed: bool,
}

impl Handler for PausedMidBatch {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        if std::mem::take(&mut self.armed) {
            let _ = self.reached.send((events.to_vec(), fence.clone()));
            self.gate.notified().await;
        }
        self.inner.handle(events, fence).await
    }
}

/// Every lease document, read every 100 ms until cancelled: who held what, when.
fn sample_leases(
    store: MongoStore,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Vec<Lease>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        while !stop.is_cancelled() {
            if let Ok(leases) = store.list().await {
                samples.extend(leases.items);
            }
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        samples
    })
}

/// Plans and executes `request` as the CLI does; re-plans when the lease moved on
/// between the two (a rotation can land in that gap), as an operator would.
async fn operator(store: &MongoStore, request: ActionRequest) -> (ops::Plan, Executed) {
    let options = GatherOptions::new("oncall@test");
    for _ in 0..5 {
        let facts = ops::gather(store, &request, &options)
            .await
            .expect("gather the facts");
        let plan = ops::plan(&request, &facts);
        assert!(!plan.is_refused(), "plan refused: {:?}", plan.refusal);
        match ops::execute(store, &plan, Some("demo_live".into())).await {
            Ok(done) => return (plan, done),
            Err(OpsError::Changed { .. }) => continue,
            Err(e) => panic!("execute {request:?}: {e}"),
        }
    }
    panic!("the lease kept moving between plan and execute: {request:?}");
}

/// The newest oplog entry on `ns`: the last change a listener of it has to handle.
async fn last_change_on(store: &MongoStore, ns: &Namespace) -> ClusterTime {
    let entry = store
        .client()
        .database("local")
        .collection::<Document>("oplog.rs")
        .find_one(doc! { "ns": ns.to_string() })
        .sort(doc! { "$natural": -1 })
        .await
        .expect("read the oplog")
        .expect("the workload wrote to the collection");
    ClusterTime::from(entry.get_timestamp("ts").expect("oplog ts"))
}

/// Every change on `ns` from `from` through `to`, read by a change stream of our own.
async fn changes_on(
    store: &MongoStore,
    ns: &Namespace,
    from: ClusterTime,
    to: ClusterTime,
) -> Vec<ChangeEvent> {
    let mut stream = store
        .open(
            ns,
            StartPoint::At(from),
            FeedOptions {
                batch_size: 1000,
                max_await: Duration::from_millis(200),
                ..Default::default()
            },
        )
        .await
        .expect("open a change stream");
    let mut events = Vec::new();
    within("reading every change back", async {
        while events
            .last()
            .is_none_or(|e: &ChangeEvent| e.cluster_time.unwrap() < to)
        {
            events.extend(stream.next_batch().await.expect("read changes").events);
        }
    })
    .await;
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_rotates_fences_out_a_paused_holder_and_converges_on_a_real_replica_set() {
    live("demo", |live: LiveDb| async move {
        let store = live.store.clone();
        let ns = DemoNamespaces::in_database(&live.db);
        let started_at = store.cluster_time().await.expect("cluster time");
        let mut demo = DemoRuntime::start_on(
            store.clone(),
            &DemoConfig {
                listeners_per_resource: 3,
                workload: WorkloadConfig {
                    rate_per_sec: 30.0,
                    max_animals: 25,
                    order_share: 0.4,
                    seed: 9,
                    ..WorkloadConfig::default()
                },
                lease: LEASE,
                rotate_after: Some(ROTATE),
                batch_size: BATCH,
                mailer_delay: None,
                namespaces: ns.clone(),
                ..DemoConfig::default()
            },
        );
        let sampling = CancellationToken::new();
        let sampler = sample_leases(store.clone(), sampling.clone());

        // 1. Holders acquire and rotate: several holders per lease, versions moving up.
        support::wait::until(
            PATIENCE,
            "both leases changed holder three times",
            || async {
                let leases = store.list().await.ok()?.items;
                let moved = [PET_RESOURCE, ORDERS_RESOURCE]
                    .iter()
                    .all(|r| leases.iter().any(|l| l.resource == *r && l.version >= 3));
                moved.then_some(())
            },
        )
        .await;

        // 2. An operator hands the orders lease to a listener that pauses in its first batch.
        let gate = Arc::new(Notify::new());
        let (reached_tx, mut reached) = mpsc::unbounded_channel();
        let mut paused_config = ListenerConfig::new(ORDERS_RESOURCE, PAUSED, ns.orders.clone());
        paused_config.lease = LEASE;
        paused_config.max_tenure = Some(ROTATE);
        paused_config.batch_size = BATCH;
        let (_, handover) = operator(
            &store,
            ActionRequest::Takeover {
                resource: ORDERS_RESOURCE.into(),
                to: Some(PAUSED.into()),
                hold: None,
            },
        )
        .await;
        assert_eq!(handover.after.holder.as_deref(), Some(PAUSED));
        // Started only once the lease names it: a listener running before the handover
        // could take the lease itself between two of the demo's tenures, under an older version.
        let paused = ListenerHandle::spawn(
            store.clone(),
            paused_config,
            PausedMidBatch {
                inner: OrderOutbox::writing_to(store.clone(), ns.outbox.clone()),
                reached: reached_tx,
                gate: gate.clone(),
                armed: true,
            },
        );
        let (batch, fence) = within("the paused listener holds a batch", reached.recv())
            .await
            .expect("the paused listener runs");
        assert_eq!(
            fence.version, handover.after.version,
            "it claimed the version the operator handed it"
        );
        assert!(!batch.is_empty());

        // 3. While it is paused mid-batch, the operator takes the lease away from it.
        let (plan, takeover) = operator(
            &store,
            ActionRequest::Takeover {
                resource: ORDERS_RESOURCE.into(),
                to: None,
                hold: None,
            },
        )
        .await;
        assert_eq!(
            plan.captured.as_ref().and_then(|c| c.holder.as_deref()),
            Some(PAUSED),
            "planned against the paused holder"
        );
        assert!(
            plan.confirmation.is_some(),
            "fencing out a live holder asks for the resource name"
        );
        assert_eq!(takeover.before.version, fence.version);
        assert_eq!(takeover.after.holder, None);
        for done in [&handover, &takeover] {
            let record = store
                .audit_record(&done.audit_id)
                .await
                .expect("read the audit")
                .expect("the takeover has its audit record");
            assert_eq!(
                (record.action.as_str(), record.resource.as_str()),
                ("takeover", ORDERS_RESOURCE)
            );
            // What the action did, even when a standby acquired right after it.
            let (before, after) = (record.before.unwrap(), record.after.unwrap());
            assert_eq!(after.version, before.version + 1);
            assert_eq!(after.holder, done.after.holder);
        }
        // A standby takes over and handles the paused batch again, under a newer fence.
        let ids: Vec<Bson> = batch.iter().map(|e| Bson::String(message_id(e))).collect();
        let rewritten = support::wait::until(
            PATIENCE,
            "a newer holder rewrote the paused batch's messages",
            || async {
                let mut messages = Vec::new();
                for id in &ids {
                    let message = store.find_one(&ns.outbox, id).await.ok()??;
                    (message.get_i64("_fence").ok()? > fence.version).then_some(())?;
                    messages.push(message);
                }
                Some(messages)
            },
        )
        .await;
        let successor = store.get(ORDERS_RESOURCE).await.unwrap().unwrap();
        assert!(successor.version > takeover.after.version);
        assert_ne!(successor.holder.as_deref(), Some(PAUSED));

        // 4. The paused holder wakes: its late write is refused and it stops that tenure.
        gate.notify_one();
        support::wait::until(
            PATIENCE,
            "the paused listener reports its fenced write",
            || async {
                paused
                    .snapshot()
                    .last_error
                    .filter(|e| e.starts_with("stale fenced write"))
            },
        )
        .await;
        let mut after = Vec::new();
        for id in &ids {
            after.push(store.find_one(&ns.outbox, id).await.unwrap().unwrap());
        }
        assert_eq!(after, rewritten, "the late write changed no message");
        let outbox = store.find_all(&ns.outbox).await.unwrap();
        assert!(
            outbox
                .iter()
                .all(|m| m.get_i64("_fence") != Ok(fence.version)),
            "no message was written under the fenced-out version {}",
            fence.version
        );
        let lease = store.get(ORDERS_RESOURCE).await.unwrap().unwrap();
        assert!(lease.version >= successor.version);
        paused.stop().await;

        // 5. The workload stops; once every listener has committed past the last
        // change, the derived data must match the source exactly.
        let writes = demo
            .stop_workload()
            .await
            .expect("the workload ran")
            .expect("the workload made its writes");
        assert!(writes > 100, "{writes} writes");
        let last_animal = last_change_on(&store, &ns.animals).await;
        let last_order = last_change_on(&store, &ns.orders).await;
        support::wait::until(
            PATIENCE,
            "both listeners committed past the last change",
            || async {
                let caught_up = |resource: &str, last: ClusterTime| {
                    let store = store.clone();
                    let resource = resource.to_string();
                    async move {
                        let lease = store.get(&resource).await.ok()??;
                        let time = lease.resume_token.as_ref()?.time()?;
                        (time >= last).then_some(())
                    }
                };
                caught_up(PET_RESOURCE, last_animal).await?;
                caught_up(ORDERS_RESOURCE, last_order).await
            },
        )
        .await;

        let animals = read_animals_in(&store, &ns.animals).await.unwrap();
        assert!(animals.len() >= 10, "{} animals", animals.len());
        assert_eq!(
            stored_counts_in(&store, &ns.aggregates).await.unwrap(),
            expected_counts(&animals),
            "the aggregate equals a from-scratch recomputation"
        );
        // The partitioned census: a partition whose last change came before the last
        // animal change need not commit past it (an idle holder commits its post-batch
        // token only on a heartbeat, longer than these tenures), so it is awaited by
        // what it wrote: its two partitions together equal the recomputation too.
        let want = expected_counts(&animals);
        support::wait::until(
            PATIENCE,
            "the partitioned census equals the recomputation",
            || async {
                let census = stored_counts_in(&store, &ns.census).await.ok()?;
                (census == want).then_some(())
            },
        )
        .await;
        for partition in Partition::all(CENSUS_PARTITIONS).unwrap() {
            let lease = store
                .get(&partition.lease_id(CENSUS_RESOURCE))
                .await
                .unwrap();
            let lease = lease.expect("each census partition has its lease");
            assert!(
                lease.version > 1,
                "{} moved between listeners",
                lease.resource
            );
        }

        // Exactly one message per order change: the ids are those of the changes as a
        // change stream of our own reads them, and nothing else.
        let changes = changes_on(&store, &ns.orders, started_at, last_order).await;
        let expected: BTreeSet<String> = changes.iter().map(message_id).collect();
        assert_eq!(expected.len(), changes.len());
        let outbox = store.find_all(&ns.outbox).await.unwrap();
        let stored: BTreeSet<String> = outbox
            .iter()
            .map(|m| m.get_str("_id").unwrap().to_string())
            .collect();
        assert_eq!(stored, expected, "one message per change, none other");
        // And per order: one "created", and its newest message carries its status.
        let mut by_order: BTreeMap<String, Vec<&Document>> = BTreeMap::new();
        for message in &outbox {
            by_order
                .entry(message.get_str("order").unwrap().to_string())
                .or_default()
                .push(message);
        }
        let orders = store.find_all(&ns.orders).await.unwrap();
        assert!(orders.len() >= 5, "{} orders", orders.len());
        assert_eq!(by_order.len(), orders.len());
        for order in &orders {
            let id = order.get_str("_id").unwrap();
            let messages = &by_order[id];
            let created = messages
                .iter()
                .filter(|m| m.get_str("event") == Ok("created"))
                .count();
            assert_eq!(created, 1, "order {id}: {messages:?}");
            let newest = messages
                .iter()
                .max_by_key(|m| m.get_timestamp("clusterTime").unwrap())
                .unwrap();
            assert_eq!(newest.get_str("status"), order.get_str("status"), "{id}");
        }

        demo.stop().await;
        sampling.cancel();
        let samples = sampler.await.unwrap();
        for resource in [PET_RESOURCE, ORDERS_RESOURCE] {
            let seen: Vec<&Lease> = samples.iter().filter(|l| l.resource == resource).collect();
            let holders: BTreeSet<&str> = seen.iter().filter_map(|l| l.holder.as_deref()).collect();
            let demo_holders = holders.iter().filter(|h| **h != PAUSED).count();
            assert!(demo_holders >= 2, "{resource} rotated: {holders:?}");
            eprintln!(
                "demo_live: {resource}: holders {holders:?}, versions {:?}..{:?}",
                seen.first().map(|l| l.version),
                seen.last().map(|l| l.version)
            );
            let versions: Vec<i64> = seen.iter().map(|l| l.version).collect();
            assert!(
                versions.windows(2).all(|w| w[0] <= w[1]),
                "{resource}: a version never goes back: {versions:?}"
            );
            assert!(
                versions.last() > versions.first(),
                "{resource}: versions grew: {versions:?}"
            );
        }
        eprintln!(
            "demo_live: {writes} writes, {} animals, {} orders, {} order changes, \
             fenced-out version {}, successor version {}, {} lease samples",
            animals.len(),
            orders.len(),
            changes.len(),
            fence.version,
            successor.version,
            samples.len()
        );
        // Stopping released every lease.
        for lease in store.list().await.unwrap().items {
            assert_eq!(lease.holder, None, "{} released", lease.resource);
        }
    })
    .await;
}

/// The demo's event store on the real replica set: the workload makes `events` a
/// capped collection through the port and appends an order event for every order
/// write; the `shop.events` resource's three listeners rotate every 2 s and its holder
/// is crashed once (a standby resumes from the last committed entry once the lease
/// expires). After the workload stops, the counts equal the collection's entries
/// counted by type, the lease's position is the newest entry, and `streamward leases`
/// says the resource reads a capped collection and measures it against that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_event_store_counts_every_entry_once_on_a_real_replica_set() {
    use streamward::demo::events::{expected_tally, stored_tally, EVENTS_RESOURCE};
    use streamward::model::{token_entry, SourceKind};
    use streamward::store::CappedFeed;

    live("demo_events", |live: LiveDb| async move {
        let store = live.store.clone();
        let ns = DemoNamespaces::in_database(&live.db);
        let mut demo = DemoRuntime::start_on(
            store.clone(),
            &DemoConfig {
                listeners_per_resource: 3,
                workload: WorkloadConfig {
                    rate_per_sec: 40.0,
                    order_share: 0.6,
                    orders_kept: 20,
                    seed: 11,
                    ..WorkloadConfig::default()
                },
                lease: Duration::from_secs(3),
                rotate_after: Some(ROTATE),
                batch_size: BATCH,
                mailer_delay: None,
                // Nothing overwritten: every entry appended is still there to count.
                events_bytes: 4 << 20,
                namespaces: ns.clone(),
                ..DemoConfig::default()
            },
        );
        let moved = support::wait::until(
            PATIENCE,
            "the event store's lease changed holder three times",
            || async {
                let lease = store.get(EVENTS_RESOURCE).await.ok()??;
                (lease.version >= 3).then_some(lease.version)
            },
        )
        .await;
        // Holders rotate every 2 s: between two tenures nobody holds it, so wait for one.
        let listeners = &demo.listeners;
        let holder = support::wait::until(
            PATIENCE,
            "a listener holds the event store",
            || async move {
                listeners.iter().position(|l| {
                    let snapshot = l.snapshot();
                    snapshot.resource == EVENTS_RESOURCE && snapshot.version.is_some()
                })
            },
        )
        .await;
        let crashed = demo.listeners.swap_remove(holder);
        let crashed_id = crashed.snapshot().listener_id;
        crashed.crash();
        support::wait::until(
            PATIENCE,
            "a standby took over from the crashed holder",
            || async {
                let lease = store.get(EVENTS_RESOURCE).await.ok()??;
                (lease.version > moved + 1 && lease.holder.as_deref() != Some(crashed_id.as_str()))
                    .then_some(())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let writes = demo
            .stop_workload()
            .await
            .expect("the workload ran")
            .expect("the workload made its writes");
        let expected = expected_tally(&store, &ns.events)
            .await
            .expect("read the entries");
        assert!(expected.total > 50, "{writes} writes, {expected:?}");
        assert!(
            expected.counts.len() == 4,
            "placed, paid, shipped and retired: {expected:?}"
        );
        let stored = support::wait::until(
            PATIENCE,
            "the counts caught up with the event store",
            || async {
                let stored = stored_tally(&store, &ns.event_counts).await.ok()?;
                (stored.total >= expected.total).then_some(stored)
            },
        )
        .await;
        assert_eq!(stored.counts, expected.counts, "each entry counted once");
        assert_eq!(stored.total, expected.total);
        let window = store
            .capped_window(&ns.events)
            .await
            .expect("window")
            .expect("entries");
        let newest = support::wait::until(PATIENCE, "the last entry committed", || async {
            let lease = store.get(EVENTS_RESOURCE).await.ok()??;
            let position = lease.resume_token.as_ref().and_then(token_entry)?;
            (position == window.newest).then_some(lease)
        })
        .await;
        let watch = newest.watch.as_ref().expect("what it watches");
        assert_eq!(watch.source, SourceKind::Capped);
        assert_eq!(
            (watch.db.as_str(), watch.coll.as_str()),
            (live.db.as_str(), "events")
        );

        // What an operator sees: the source, and lag against the collection's window.
        // Holders still rotate: read while one holds it (between two tenures it is
        // EXPIRED, rightly).
        let mut attempts = 0;
        let (listing, events) = loop {
            attempts += 1;
            let mut cmd = support::live::streamward(&live);
            cmd.args(["leases", "--output", "json"]);
            let (code, out, err) = support::live::run(cmd).await;
            assert_eq!(code, 0, "{err}");
            let listing: serde_json::Value = serde_json::from_str(&out).expect("JSON");
            let events = listing
                .as_array()
                .expect("an array")
                .iter()
                .find(|l| l["resource"] == EVENTS_RESOURCE)
                .expect("the event store's lease")
                .clone();
            if !events["liveHolder"].is_null() || attempts == 20 {
                break (listing, events);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let leases = listing.as_array().expect("an array");
        assert_eq!(events["source"], "capped", "{events}");
        assert_eq!(
            events["lagSecs"], 0,
            "caught up with its collection: {events}"
        );
        assert_eq!(events["status"], "OK", "{events}");
        let orders = leases
            .iter()
            .find(|l| l["resource"] == ORDERS_RESOURCE)
            .expect("the orders lease");
        assert_eq!(orders["source"], "stream", "{orders}");

        demo.stop().await;
        eprintln!(
            "demo_live events: {writes} writes, {} entries {:?}, lease version {}",
            expected.total, expected.counts, newest.version
        );
    })
    .await;
}
