//! Many listeners in one process on a real replica set, inside the driver's pool
//! (issue 16): the lease watches share one change stream, change streams beyond the
//! store's await slots poll, capped tails wait on the server, and nothing is missed or
//! late by more than a read wait either way.
//! `STREAMWARD_TEST_URI=… cargo test --test pool_live`.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures_util::TryStreamExt;
use streamward::engine::{
    Bootstrap, Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerState,
};
use streamward::model::{Fence, SourceKind};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{CappedFeed, ChangeEvent, Namespace};
use support::live::{live, LiveDb};

fn config(resource: &str, listener: &str, ns: Namespace) -> ListenerConfig {
    let mut config = ListenerConfig::new(resource, listener, ns);
    config.bootstrap = Bootstrap::Now;
    config.lease = Duration::from_secs(30);
    config.checkpoint_every = None;
    config
}

async fn wait_for(handle: &ListenerHandle, state: ListenerState, within: Duration) {
    let mut status = handle.status.clone();
    tokio::time::timeout(within, status.wait_for(|s| s.state == state))
        .await
        .unwrap_or_else(|_| panic!("{state:?} within {within:?}: {:?}", handle.snapshot()))
        .expect("listener alive");
}

/// The change streams open on `ns` on the server, idle or in a getMore, by cursor id.
async fn change_streams_on(store: &MongoStore, ns: &str) -> BTreeSet<i64> {
    let ops: Vec<Document> = store
        .client()
        .database("admin")
        .aggregate([
            doc! { "$currentOp": { "idleCursors": true, "allUsers": true } },
            doc! { "$match": {
                "ns": ns,
                "cursor.originatingCommand.pipeline.0.$changeStream": { "$exists": true },
            } },
        ])
        .await
        .expect("$currentOp")
        .try_collect()
        .await
        .expect("$currentOp");
    ops.iter()
        .filter_map(|op| match op.get_document("cursor").ok()?.get("cursorId") {
            Some(Bson::Int64(id)) => Some(*id),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_standby_of_a_process_waits_on_one_lease_stream_and_takes_over_at_once() {
    live("fleet_one_lease_stream", |live: LiveDb| async move {
        const RESOURCES: usize = 30;
        let ns = live.ns("events");
        let store = live.store.clone();
        let mut holders = Vec::new();
        let mut standbys = Vec::new();
        for i in 0..RESOURCES {
            let resource = format!("r{i:02}");
            let holder = ListenerHandle::spawn(
                store.clone(),
                config(&resource, &format!("{resource}-a"), ns.clone()),
                streamward::engine::NoopHandler,
            );
            wait_for(&holder, ListenerState::Streaming, Duration::from_secs(20)).await;
            holders.push(holder);
        }
        for i in 0..RESOURCES {
            let resource = format!("r{i:02}");
            standbys.push(ListenerHandle::spawn(
                store.clone(),
                config(&resource, &format!("{resource}-b"), ns.clone()),
                streamward::engine::NoopHandler,
            ));
        }
        for standby in &standbys {
            wait_for(standby, ListenerState::Standby, Duration::from_secs(20)).await;
        }
        // A listener shows standby just before it watches: give the first watch its
        // moment to open the stream.
        let opened = Instant::now();
        let mut lease_streams = BTreeSet::new();
        while lease_streams.is_empty() && opened.elapsed() < Duration::from_secs(5) {
            lease_streams = change_streams_on(&store, &format!("{}.leases", live.db)).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            lease_streams.len(),
            1,
            "{RESOURCES} standbys, one stream on the lease collection: {lease_streams:?}"
        );
        let data_streams = change_streams_on(&store, &ns.to_string()).await;
        assert_eq!(data_streams.len(), RESOURCES, "one per holder");

        let mut slowest = Duration::ZERO;
        for (holder, standby) in holders.into_iter().zip(&standbys) {
            let released = Instant::now();
            holder.stop().await;
            wait_for(standby, ListenerState::Streaming, Duration::from_secs(10)).await;
            slowest = slowest.max(released.elapsed());
        }
        // The lease's own stream tells the standby; the old one waited for expiry.
        assert!(
            slowest < Duration::from_secs(2),
            "every standby took over within 2 s of its release, the slowest in {slowest:?}"
        );
        for standby in standbys {
            standby.stop().await;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = change_streams_on(&store, &format!("{}.leases", live.db)).await;
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "with no watch left the lease stream is closed: {left:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}

/// A store on `live`'s database with a pool of 4, which leaves one await slot.
async fn one_slot_store(live: &LiveDb) -> MongoStore {
    let mut settings = MongoSettings::new(format!("{}&maxPoolSize=4", live.uri));
    settings.leases = Namespace::new(live.db.clone(), "leases");
    MongoStore::connect(settings).await.expect("connect")
}

/// What one listener handled, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(i32, Instant)>>>);

impl Handler for Seen {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        let now = Instant::now();
        let mut seen = self.0.lock().expect("seen");
        for event in events {
            if let Some(Bson::Int32(n)) = event.full_document.as_ref().and_then(|d| d.get("n")) {
                seen.push((*n, now));
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_await_slots_poll_and_miss_nothing_nor_lag_past_a_read_wait() {
    live("fleet_polling_streams", |live: LiveDb| async move {
        // One await slot: five of the six streams poll.
        let store = one_slot_store(&live).await;
        const STREAMS: usize = 6;
        const WRITES: i32 = 20;
        let mut listeners = Vec::new();
        for i in 0..STREAMS {
            let ns = live.ns(&format!("c{i}"));
            let seen = Seen::default();
            let handle = ListenerHandle::spawn(
                store.clone(),
                config(&format!("c{i}"), "p", ns.clone()),
                seen.clone(),
            );
            wait_for(&handle, ListenerState::Streaming, Duration::from_secs(20)).await;
            listeners.push((ns, seen, handle));
        }
        let mut written = Vec::new();
        for n in 0..WRITES {
            for (ns, _, _) in &listeners {
                live.store
                    .client()
                    .database(&ns.db)
                    .collection::<Document>(&ns.coll)
                    .insert_one(doc! { "n": n })
                    .await
                    .expect("insert");
            }
            written.push(Instant::now());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while listeners
            .iter()
            .any(|(_, seen, _)| seen.0.lock().expect("seen").len() < WRITES as usize)
        {
            assert!(Instant::now() < deadline, "every change handled");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let read_wait = config("x", "x", live.ns("x")).read_wait();
        // A burst on one stream while the others idle: each change is a batch and a
        // commit, and the commits find connections because idle streams hold none.
        const BURST: usize = 40;
        let (burst_ns, burst_seen, burst_handle) = listeners.last().expect("streams");
        let handled_before = burst_seen.0.lock().expect("seen").len();
        // Events count once their batch's commit landed; heartbeats count none.
        let events = || burst_handle.snapshot().events;
        // The last numbered write is handled before its commit lands: let it land.
        let landing = Instant::now();
        while events() < WRITES as u64 {
            assert!(landing.elapsed() < Duration::from_secs(5), "the last write's commit landed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let events_before = events();
        let burst_started = Instant::now();
        let burst: Vec<Document> = (0..BURST).map(|i| doc! { "burst": i as i32 }).collect();
        live.store
            .client()
            .database(&burst_ns.db)
            .collection::<Document>(&burst_ns.coll)
            .insert_many(burst)
            .await
            .expect("insert the burst");
        while events() < events_before + BURST as u64 {
            assert!(
                burst_started.elapsed() < read_wait + Duration::from_secs(2),
                "{BURST} changes on one stream, each committed, within a read wait and 2 s: \
                 {} after {:?}",
                events() - events_before,
                burst_started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!(
            "a burst of {BURST} on one of {STREAMS} streams committed in {:?}",
            burst_started.elapsed()
        );
        assert_eq!(events(), events_before + BURST as u64, "each change of the burst once");
        assert_eq!(
            burst_seen.0.lock().expect("seen").len(),
            handled_before,
            "the burst's changes are not numbered writes"
        );
        let mut worst = Duration::ZERO;
        for (ns, seen, handle) in listeners {
            let seen = seen.0.lock().expect("seen").clone();
            let order: Vec<i32> = seen.iter().map(|(n, _)| *n).collect();
            assert_eq!(order, (0..WRITES).collect::<Vec<_>>(), "{ns}: each once, in order");
            for (n, at) in seen {
                worst = worst.max(at.duration_since(written[n as usize]));
            }
            handle.stop().await;
        }
        // A polling stream reads once per read wait; the commit and the handler add little.
        assert!(
            worst < read_wait + Duration::from_millis(400),
            "a change is handled within a read wait of its write (read wait {read_wait:?}), the latest after {worst:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capped_tails_past_the_await_slots_wait_on_the_server_and_miss_nothing() {
    live("fleet_polling_tails", |live: LiveDb| async move {
        // One await slot, which capped tails do not take: all three wait on the server.
        let store = one_slot_store(&live).await;
        const TAILS: usize = 3;
        const ENTRIES: i32 = 15;
        let mut listeners = Vec::new();
        for i in 0..TAILS {
            let ns = live.ns(&format!("log{i}"));
            store.ensure_capped(&ns, 1 << 20).await.expect("capped");
            let seen = Seen::default();
            let mut config = config(&format!("log{i}"), "p", ns.clone());
            config.source = SourceKind::Capped;
            let handle = ListenerHandle::spawn(store.clone(), config, seen.clone());
            wait_for(&handle, ListenerState::Streaming, Duration::from_secs(20)).await;
            listeners.push((ns, seen, handle));
        }
        let started = Instant::now();
        for n in 0..ENTRIES {
            for (ns, _, _) in &listeners {
                store
                    .append_entry(ns, doc! { "n": n })
                    .await
                    .expect("append");
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while listeners
            .iter()
            .any(|(_, seen, _)| seen.0.lock().expect("seen").len() < ENTRIES as usize)
        {
            assert!(Instant::now() < deadline, "every entry handled");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "{TAILS} tails, {ENTRIES} entries each, all handled after {:?}",
            started.elapsed()
        );
        for (ns, seen, handle) in listeners {
            let order: Vec<i32> = seen
                .0
                .lock()
                .expect("seen")
                .iter()
                .map(|(n, _)| *n)
                .collect();
            assert_eq!(
                order,
                (0..ENTRIES).collect::<Vec<_>>(),
                "{ns}: each once, in order"
            );
            handle.stop().await;
        }
    })
    .await;
}
