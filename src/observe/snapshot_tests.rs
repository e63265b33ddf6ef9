use bson::doc;
use chrono::TimeZone;

use super::*;
use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use crate::store::{ChangeFeed, DocumentStore, Namespace};

/// A sandbox on a virtual clock from `epoch`, with one write so its change log has a
/// window.
async fn written_store(epoch: DateTime<Utc>) -> SandboxStore {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
    store
        .put(&Namespace::new("shop", "orders"), doc! {"_id": 1})
        .await
        .expect("a write, so the change log has a window");
    store
}

#[tokio::test(start_paused = true)]
async fn a_snapshot_lists_partitions_under_their_resource_and_reads_the_servers_clock() {
    let epoch = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let store = written_store(epoch).await;
    for id in ["r#0/3", "r#1/2", "q", "r", "r#0/2"] {
        store.put_lease_by_hand(Lease::vacant(id));
    }
    tokio::time::advance(std::time::Duration::from_secs(5)).await;

    let snapshot = ClusterSnapshot::read(&store).await.expect("reads");

    let ids: Vec<&str> = snapshot
        .leases
        .iter()
        .map(|l| l.resource.as_str())
        .collect();
    // By resource, its own lease first, then its partitions by count and index (not
    // by text: `r#0/3` after `r#1/2`).
    assert_eq!(ids, ["q", "r", "r#0/2", "r#1/2", "r#0/3"]);
    assert!(snapshot.malformed.is_empty());
    assert_eq!(snapshot.topology, None, "the sandbox names itself");
    let window = snapshot
        .window
        .expect("the sandbox's change log has a window");
    assert!(window.first <= window.last);
    assert_eq!(snapshot.now, epoch + chrono::TimeDelta::seconds(5));
    assert!(
        snapshot.capped.entries.is_empty(),
        "no capped lease, nothing read"
    );
}

#[tokio::test(start_paused = true)]
async fn a_history_read_takes_the_window_it_is_given_or_reads_it() {
    let epoch = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let store = written_store(epoch).await;
    tokio::time::advance(std::time::Duration::from_secs(7)).await;
    let read = store.oplog_window().await.expect("window");
    let given = OplogWindow {
        first: crate::model::ClusterTime::new(1, 0),
        last: crate::model::ClusterTime::new(2, 0),
    };
    assert_ne!(given, read, "told apart from the one the store has");

    let known = HistoryReading::read(&store, &[], WindowSource::Known(given))
        .await
        .clock
        .expect("reads");
    assert_eq!(known.0, Some(given), "not read again");
    let unreadable = HistoryReading::read(&store, &[], WindowSource::Unreadable)
        .await
        .clock
        .expect("reads the clock");
    assert_eq!(unreadable, (None, epoch + chrono::TimeDelta::seconds(7)));
    let fresh = HistoryReading::read(&store, &[], WindowSource::Read)
        .await
        .clock
        .expect("reads");
    assert_eq!(fresh.0, Some(read));
}

/// A failed oplog read does not leave the capped windows unread: they are what capped
/// leases are judged by, and a stale one would show more headroom than there is.
#[tokio::test(start_paused = true)]
async fn capped_windows_are_read_when_the_oplog_cannot_be() {
    let epoch = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let config = SandboxConfig {
        oplog_readable: false,
        ..SandboxConfig::default()
    };
    let store = SandboxStore::new(config, Clock::virtual_from(epoch));
    let events = Namespace::new("shop", "events");
    store.create_capped(&events, 4096).expect("create capped");
    store.append(&events, doc! {"n": 1}).expect("append");
    let mut lease = Lease::vacant("events");
    lease.watch = Some(crate::model::WatchTarget {
        db: "shop".into(),
        coll: "events".into(),
        pipeline: String::new(),
        source: crate::model::SourceKind::Capped,
    });

    let history = HistoryReading::read(&store, &[lease], WindowSource::Read).await;

    assert!(
        matches!(history.clock, Err(ObserveError::Cluster(_))),
        "{:?}",
        history.clock
    );
    assert!(
        history.capped.entries.contains_key("shop.events"),
        "{:?}",
        history.capped
    );
}
