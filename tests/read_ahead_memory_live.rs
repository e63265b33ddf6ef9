//! Read-ahead is bounded in bytes (issue 28), on the real replica set of
//! `STREAMWARD_TEST_URI`: a listener catching up on 600 MB of changes with a handler
//! much slower than the stream keeps its resident memory flat, though its stream's
//! task could read the whole backlog long before the handler got through it.
//!
//! Alone in its file: the process's resident memory is the measure.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle};
use streamward::model::Fence;
use streamward::store::{ChangeEvent, ChangeFeed};
use support::live::{insert_lease_resuming_at, live};

const CHANGES: u64 = 6_000;
const PAYLOAD: usize = 100 * 1024;
/// The handler's time per call: the backlog takes it over 10 s to get through, while
/// an unbounded read-ahead would have read all of it in a few.
const CALL: Duration = Duration::from_millis(300);

/// This process's resident memory, in bytes (`VmRSS` of /proc/self/status).
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

#[derive(Clone)]
struct Slow(Arc<AtomicU64>);

impl Handler for Slow {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        tokio::time::sleep(CALL).await;
        self.0.fetch_add(events.len() as u64, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_catching_up_keeps_resident_memory_flat() {
    live("read_ahead_memory", |live| async move {
        let database = live.store.client().database(&live.db);
        let start = live.store.cluster_time().await.expect("cluster time");
        let events = database.collection::<Document>("events");
        let payload = "x".repeat(PAYLOAD);
        for chunk in 0..CHANGES / 100 {
            let documents: Vec<Document> = (0..100)
                .map(|n| doc! {"_id": (chunk * 100 + n) as i64, "payload": &payload})
                .collect();
            events.insert_many(documents).await.expect("insert");
        }
        insert_lease_resuming_at(&live.store, &live.ns("leases"), "memory", start).await;
        let handled = Arc::new(AtomicU64::new(0));
        let mut config = ListenerConfig::new("memory", "listener-1", live.ns("events"));
        config.batch_size = 1000;
        config.lease = Duration::from_secs(60);
        let listener = ListenerHandle::spawn(live.store.clone(), config, Slow(handled.clone()));
        // Measured from the first batch handled: the client, the stream and the
        // listener are all set up by then.
        while handled.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let baseline = resident();
        let mut peak = baseline;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        while handled.load(Ordering::SeqCst) < CHANGES {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not caught up in 300 s"
            );
            peak = peak.max(resident());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        listener.stop().await;
        let backlog = CHANGES * PAYLOAD as u64;
        let grew = peak.saturating_sub(baseline);
        eprintln!(
            "read {} MB of changes: resident {} MB at the first batch, peak {} MB (+{} MB)",
            backlog >> 20,
            baseline >> 20,
            peak >> 20,
            grew >> 20
        );
        // The read-ahead budget (16 MB), the driver's buffer (one server batch, under
        // 16 MB) and the two batches in hand (each under the budget), with the
        // allocator's slack: well under a third of the backlog, which an unbounded
        // read-ahead would mostly hold (measured on 585 MB: +130 MB bounded, +374 MB
        // with the bound lifted).
        assert!(
            grew < backlog / 3,
            "resident memory grew by {} MB while catching up on {} MB",
            grew >> 20,
            backlog >> 20
        );
    })
    .await;
}
