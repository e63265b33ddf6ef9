//! The console's data tasks: lease changes are pushed by a watch (the lease
//! collection is listed once per watch, never polled), the oplog window and the
//! rate arrive periodically, and a lost source is reported and recovered — on the
//! sandbox and, through the real driver, on the scripted wire-protocol server.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bson::{doc, Bson, Document, Timestamp};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use streamward::console::data::{DataEvent, DataSource};
use streamward::console::feed::{self, FeedIntervals};
use streamward::model::LockKind;
use streamward::model::{ResumeToken, TokenKind};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{
    AcquireOutcome, AcquireRequest, ChangeFeed, CheckpointStore, DocumentStore, LeaseStore,
    Namespace, Tenure,
};
use support::wire::{Action, WireServer};

fn fast() -> FeedIntervals {
    FeedIntervals {
        window: Duration::from_millis(50),
        members_every: 2,
        audit: Duration::from_millis(100),
        listeners: Duration::from_millis(50),
        loss: Duration::from_millis(50),
        checkpoints: Duration::from_millis(100),
        retry: Duration::from_millis(100),
    }
}

/// Receives until `pick` returns something, or fails after `limit`.
async fn until<T>(
    events: &mut mpsc::Receiver<DataEvent>,
    limit: Duration,
    what: &str,
    mut pick: impl FnMut(&DataEvent) -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap_or_else(|_| panic!("no {what} within {limit:?}"))
            .unwrap_or_else(|| panic!("feed closed before {what}"));
        if let Some(found) = pick(&event) {
            return found;
        }
    }
}

fn request(resource: &str, listener: &str) -> AcquireRequest {
    AcquireRequest {
        resource: resource.into(),
        listener: listener.into(),
        kind: LockKind::Update,
        lease: Duration::from_secs(10),
        watch: None,
        seen_version: None,
    }
}

#[tokio::test]
async fn sandbox_leases_are_pushed_and_listed_once() {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    store.acquire(&request("shop.orders", "a")).await.unwrap();
    let (tx, mut events) = mpsc::channel(256);
    let cancel = CancellationToken::new();
    let tasks = feed::spawn(store.clone(), None, fast(), tx, cancel.clone());

    let snapshot = until(
        &mut events,
        Duration::from_secs(5),
        "lease snapshot",
        |e| match e {
            DataEvent::LeaseSnapshot(leases) => Some(leases.clone()),
            _ => None,
        },
    )
    .await;
    assert_eq!(snapshot.items.len(), 1);
    store
        .acquire(&request("pet-aggregates", "b"))
        .await
        .unwrap();
    let changed = until(
        &mut events,
        Duration::from_secs(5),
        "lease change",
        |e| match e {
            DataEvent::LeaseChanged(lease) => Some((**lease).clone()),
            _ => None,
        },
    )
    .await;
    assert_eq!(changed.resource, "pet-aggregates");
    assert_eq!(changed.holder.as_deref(), Some("b"));

    until(
        &mut events,
        Duration::from_secs(5),
        "a first window read",
        |e| matches!(e, DataEvent::Window { .. }).then_some(()),
    )
    .await;
    let ns = Namespace::new("shop", "orders");
    for i in 0..30 {
        store.put(&ns, doc! { "_id": i, "n": i }).await.unwrap();
    }
    let rate = until(
        &mut events,
        Duration::from_secs(5),
        "a write rate",
        |e| match e {
            DataEvent::Window {
                ops_per_sec: Some(rate),
                ..
            } if *rate > 0.0 => Some(*rate),
            _ => None,
        },
    )
    .await;
    assert!(rate > 0.0);
    until(
        &mut events,
        Duration::from_secs(5),
        "members",
        |e| match e {
            DataEvent::Members(Ok(members)) if !members.is_empty() => Some(()),
            _ => None,
        },
    )
    .await;
    until(&mut events, Duration::from_secs(5), "audit", |e| {
        matches!(e, DataEvent::Audit(_)).then_some(())
    })
    .await;
    // Many window reads later, the leases were still listed only once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.calls().list.load(Ordering::SeqCst), 1);
    assert_eq!(store.calls().watch.load(Ordering::SeqCst), 1);
    cancel.cancel();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Takes `resource` for `listener` and commits the newest position: a lease with a
/// resume point in the log.
async fn hold_committed(store: SandboxStore, resource: &'static str, listener: &'static str) {
    let AcquireOutcome::Acquired(lease) =
        store.acquire(&request(resource, listener)).await.unwrap()
    else {
        panic!("{resource} is free");
    };
    let position = store.oplog_window().await.unwrap().last;
    let token = ResumeToken::encode(position, TokenKind::Event, 0);
    let tenure = Tenure::of(&lease).unwrap();
    store
        .commit(&tenure, &token, Duration::from_secs(30))
        .await
        .unwrap();
}

/// The time to loss: predicted from the second read of the oplog's figures for the
/// leases the watch delivered (listed once all the same), following a lease taken after
/// the first read; a log bounded by its number of entries says why there is none.
#[tokio::test]
async fn sandbox_time_to_loss_is_predicted_for_the_watched_leases() {
    let store = SandboxStore::new(
        SandboxConfig {
            log_capacity: usize::MAX,
            log_bytes: 1024 * 1024,
            ..SandboxConfig::default()
        },
        Clock::System,
    );
    hold_committed(store.clone(), "shop.orders", "a").await;
    let ns = Namespace::new("shop", "orders");
    let (tx, mut events) = mpsc::channel(256);
    let cancel = CancellationToken::new();
    let tasks = feed::spawn(store.clone(), None, fast(), tx, cancel.clone());
    let writer = tokio::spawn({
        let store = store.clone();
        let ns = ns.clone();
        async move {
            for i in 0..i64::MAX {
                store
                    .put(&ns, doc! { "_id": i % 50, "n": i })
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let mut first = true;
    let predicted = until(
        &mut events,
        Duration::from_secs(10),
        "a time to loss for both leases",
        |e| match e {
            DataEvent::TimeToLoss { reading, .. } => {
                assert_eq!(reading.unknown, None, "{reading:?}");
                if first {
                    first = false;
                    assert!(reading.predicted.is_empty(), "one read has no fill rate");
                }
                (reading.predicted.len() == 2).then(|| reading.predicted.clone())
            }
            DataEvent::LeaseSnapshot(_) => {
                // A lease taken after the watch's first list: delivered by the watch.
                tokio::spawn(hold_committed(store.clone(), "pet-aggregates", "b"));
                None
            }
            _ => None,
        },
    )
    .await;
    assert!(predicted.contains_key("shop.orders"), "{predicted:?}");
    assert!(predicted.contains_key("pet-aggregates"), "{predicted:?}");
    assert_eq!(store.calls().list.load(Ordering::SeqCst), 1, "never polled");
    cancel.cancel();
    writer.abort();
    for task in tasks {
        task.await.unwrap();
    }

    // Bounded by entries, not bytes: no prediction, and the reason.
    let counted = SandboxStore::new(SandboxConfig::default(), Clock::System);
    counted.acquire(&request("shop.orders", "a")).await.unwrap();
    let (tx, mut events) = mpsc::channel(256);
    let cancel = CancellationToken::new();
    let tasks = feed::spawn(counted, None, fast(), tx, cancel.clone());
    let why = until(
        &mut events,
        Duration::from_secs(5),
        "a reason",
        |e| match e {
            DataEvent::TimeToLoss { reading, .. } => reading.unknown.clone(),
            _ => None,
        },
    )
    .await;
    assert!(why.contains("bounded by its number of entries"), "{why}");
    cancel.cancel();
    for task in tasks {
        task.await.unwrap();
    }
}

/// The checkpoints of the lease the detail view shows: read when it opens on one,
/// again for another lease at once, and not at all while it is closed.
#[tokio::test]
async fn checkpoints_follow_the_lease_in_the_detail_view() {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    for (resource, listener) in [("shop.orders", "a"), ("pet-aggregates", "b")] {
        let AcquireOutcome::Acquired(lease) =
            store.acquire(&request(resource, listener)).await.unwrap()
        else {
            panic!("{resource} is free");
        };
        let tenure = Tenure::of(&lease).unwrap();
        for secs in [1, 2] {
            let token = ResumeToken::encode(
                streamward::model::ClusterTime::new(1_800_000_000 + secs, 1),
                TokenKind::Event,
                0,
            );
            store.record_checkpoint(&tenure, &token, 10).await.unwrap();
        }
    }
    let (tx, mut events) = mpsc::channel(16);
    let (detail, shown) = tokio::sync::watch::channel(None);
    let cancel = CancellationToken::new();
    let task = feed::spawn_checkpoints(store.clone(), fast(), tx, shown, cancel.clone());
    // Closed: nothing is read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(events.try_recv().is_err(), "nothing read while closed");

    detail.send_replace(Some("shop.orders".to_string()));
    let (resource, count) = until(
        &mut events,
        Duration::from_secs(5),
        "checkpoints",
        |e| match e {
            DataEvent::Checkpoints { resource, read } => {
                Some((resource.clone(), read.as_ref().unwrap().items.len()))
            }
            _ => None,
        },
    )
    .await;
    assert_eq!((resource.as_str(), count), ("shop.orders", 2));
    detail.send_replace(Some("pet-aggregates".to_string()));
    until(
        &mut events,
        Duration::from_secs(5),
        "the other lease's",
        |e| match e {
            DataEvent::Checkpoints { resource, read } if resource == "pet-aggregates" => {
                let items = &read.as_ref().unwrap().items;
                assert_eq!(items[0].holder, "b");
                assert!(items[0].at >= items[1].at, "newest first");
                Some(())
            }
            _ => None,
        },
    )
    .await;
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn the_feed_stops_when_the_console_goes_away() {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    let (tx, events) = mpsc::channel(1);
    let tasks = feed::spawn(store, None, fast(), tx, CancellationToken::new());
    drop(events);
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("task ended by itself")
            .unwrap();
    }
}

fn lease_doc(id: &str, holder: &str, version: i64) -> Document {
    doc! {
        "_id": id,
        "listenerId": holder,
        "expiresAt": bson::DateTime::from_millis(1_700_000_010_000),
        "version": version,
        "resumeToken": Bson::Null,
        "kind": "update",
    }
}

fn cursor_reply(id: i64, ns: &str, first: Vec<Document>) -> Action {
    Action::ok(doc! { "cursor": { "id": id, "ns": ns, "firstBatch": first } })
}

#[tokio::test]
async fn on_mongodb_leases_come_from_a_change_stream_on_the_lease_collection() {
    let server = WireServer::start().await;
    let store = support::connected(&server).await;
    let change = doc! {
        "_id": { "_data": "8263E5B9D2000000012B042C0100296E5A1004" },
        "operationType": "update",
        "clusterTime": Timestamp { time: 1_700_000_100, increment: 1 },
        "ns": { "db": "sw", "coll": "leases" },
        "documentKey": { "_id": "shop.orders" },
        "fullDocument": lease_doc("shop.orders", "worker-2", 6),
    };
    server.on("aggregate", move |command| {
        match command.get_str("aggregate") {
            Ok("leases") => cursor_reply(77, "sw.leases", vec![change.clone()]),
            _ => Action::error(13, "Unauthorized", "not authorized"),
        }
    });
    server.on("getMore", |_| {
        Action::Stall(
            Duration::from_millis(200),
            Box::new(Action::ok(
                doc! { "cursor": { "id": 77_i64, "ns": "sw.leases", "nextBatch": [] } },
            )),
        )
    });
    server.on("find", |command| match command.get_str("find") {
        Ok("leases") => cursor_reply(
            0,
            "sw.leases",
            vec![lease_doc("shop.orders", "worker-1", 5)],
        ),
        Ok("oplog.rs") => cursor_reply(
            0,
            "local.oplog.rs",
            vec![doc! { "ts": Timestamp { time: 1_700_000_000, increment: 1 } }],
        ),
        _ => cursor_reply(0, "sw.audit", vec![]),
    });
    let (tx, mut events) = mpsc::channel(256);
    let cancel = CancellationToken::new();
    let tasks = feed::spawn(store, None, fast(), tx, cancel.clone());

    let snapshot = until(
        &mut events,
        Duration::from_secs(10),
        "lease snapshot",
        |e| match e {
            DataEvent::LeaseSnapshot(leases) => Some(leases.clone()),
            _ => None,
        },
    )
    .await;
    assert_eq!(snapshot.items[0].holder.as_deref(), Some("worker-1"));
    let changed = until(
        &mut events,
        Duration::from_secs(10),
        "lease change",
        |e| match e {
            DataEvent::LeaseChanged(lease) => Some((**lease).clone()),
            _ => None,
        },
    )
    .await;
    assert_eq!(
        (changed.holder.as_deref(), changed.version),
        (Some("worker-2"), 6)
    );
    until(&mut events, Duration::from_secs(10), "oplog window", |e| {
        matches!(e, DataEvent::Window { .. }).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    cancel.cancel();
    for task in tasks {
        task.await.unwrap();
    }

    let watches: Vec<Document> = server
        .commands_stripped("aggregate")
        .into_iter()
        .filter(|c| c.get_str("aggregate") == Ok("leases"))
        .collect();
    assert_eq!(watches.len(), 1, "one change stream: {watches:?}");
    assert_eq!(
        watches[0].get_array("pipeline").unwrap(),
        &vec![Bson::Document(
            doc! { "$changeStream": { "fullDocument": "updateLookup" } }
        )],
        "every lease, no $match on one id"
    );
    let lease_reads = server
        .commands_stripped("find")
        .into_iter()
        .filter(|c| c.get_str("find") == Ok("leases"))
        .count();
    assert_eq!(
        lease_reads, 1,
        "leases listed once, then pushed; never polled"
    );
}

#[tokio::test]
async fn on_mongodb_a_lost_lease_watch_is_reported_then_recovered() {
    let server = WireServer::start().await;
    let store = support::connected(&server).await;
    server.script(
        "aggregate",
        [Action::error(
            91,
            "ShutdownInProgress",
            "The server is in quiesce mode and will shut down",
        )],
    );
    server.on("aggregate", |_| cursor_reply(77, "sw.leases", vec![]));
    server.on("getMore", |_| {
        Action::Stall(
            Duration::from_millis(200),
            Box::new(Action::ok(
                doc! { "cursor": { "id": 77_i64, "ns": "sw.leases", "nextBatch": [] } },
            )),
        )
    });
    server.on("find", |_| {
        cursor_reply(0, "sw.leases", vec![lease_doc("a", "w", 1)])
    });
    let (tx, mut events) = mpsc::channel(256);
    let cancel = CancellationToken::new();
    let tasks = feed::spawn(store, None, fast(), tx, cancel.clone());
    let error = until(
        &mut events,
        Duration::from_secs(10),
        "a failure",
        |e| match e {
            DataEvent::SourceFailed {
                source: DataSource::Leases,
                error,
            } => Some(error.clone()),
            _ => None,
        },
    )
    .await;
    assert!(error.contains("quiesce"), "{error}");
    until(&mut events, Duration::from_secs(10), "recovery", |e| {
        matches!(e, DataEvent::LeaseSnapshot(_)).then_some(())
    })
    .await;
    cancel.cancel();
    for task in tasks {
        task.await.unwrap();
    }
}

/// An oplog that shows the user no entry (an Atlas shared tier): the header hears what
/// the cluster is and why the window is unknown, and the feed goes on with the
/// server's clock, as for a refused read; it reports no lost oplog source.
#[tokio::test]
async fn on_mongodb_an_oplog_that_shows_no_entry_is_an_unknown_window_not_a_failure() {
    let server = WireServer::start().await;
    let store = support::connected(&server).await;
    server.on("aggregate", |command| match command.get_str("aggregate") {
        Ok("leases") => cursor_reply(77, "sw.leases", vec![]),
        _ => Action::error(13, "Unauthorized", "not authorized"),
    });
    server.on("getMore", |_| {
        Action::Stall(
            Duration::from_millis(200),
            Box::new(Action::ok(
                doc! { "cursor": { "id": 77_i64, "ns": "sw.leases", "nextBatch": [] } },
            )),
        )
    });
    server.on("find", |command| match command.get_str("find") {
        Ok("leases") => cursor_reply(0, "sw.leases", vec![lease_doc("shop.orders", "w-1", 5)]),
        Ok("oplog.rs") => cursor_reply(0, "local.oplog.rs", vec![]),
        _ => cursor_reply(0, "sw.audit", vec![]),
    });
    let (tx, mut events) = mpsc::channel(256);
    let cancel = CancellationToken::new();
    let tasks = feed::spawn(store, None, fast(), tx, cancel.clone());

    let mut failures = Vec::new();
    let mut topology = None;
    until(
        &mut events,
        Duration::from_secs(10),
        "the server's clock",
        |e| {
            match e {
                DataEvent::Topology(t) => topology = Some(t.clone()),
                DataEvent::SourceFailed { source, error } => {
                    failures.push(format!("{source:?}: {error}"))
                }
                DataEvent::ServerClock(_) => return Some(()),
                _ => {}
            }
            None
        },
    )
    .await;
    cancel.cancel();
    for task in tasks {
        task.await.unwrap();
    }
    let topology = topology.expect("the topology before the clock");
    match &topology.oplog {
        streamward::model::OplogAccess::NotReadable(why) => {
            assert!(why.contains("shows this user no startable"), "{why}")
        }
        other => panic!("expected the window unknown, got {other:?}"),
    }
    assert!(
        topology
            .consequence()
            .contains("history status are unknown"),
        "{topology}"
    );
    assert!(
        !failures.iter().any(|f| f.starts_with("Oplog")),
        "{failures:?}"
    );
}
