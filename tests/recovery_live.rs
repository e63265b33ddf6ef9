//! LOST → reset → streaming again, on a real replica set whose oplog holds about 1 MB
//! (`STREAMWARD_TEST_URI_SMALL_OPLOG`): a listener whose committed token fell off the
//! oplog stays alive, waiting on its lease (it never restarts from now on its own), and
//! resumes by itself when an operator resets the lease with the binary; it then handles
//! every change after the reset point and none from before it.

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson};
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerState};
use streamward::model::{ClusterTime, Fence};
use streamward::store::{ChangeEvent, ChangeFeed, DocumentStore, LeaseStore, Namespace};
use support::live::{live_small_oplog, LiveDb};
use support::sandbox::state;

const RESOURCE: &str = "orders";
const PATIENCE: Duration = Duration::from_secs(60);

/// Records the `_id` of every change it is handed.
#[derive(Clone, Default)]
struct Seen {
    ids: Arc<Mutex<Vec<String>>>,
}

impl Seen {
    fn ids(&self) -> BTreeSet<String> {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

impl Handler for Seen {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        for event in events {
            if let Some(Bson::String(id)) = event.document_key.get("_id") {
                ids.push(id.clone());
            }
        }
        Ok(())
    }
}

fn config(live: &LiveDb) -> ListenerConfig {
    let mut config = ListenerConfig::new(RESOURCE, "mailer-1", live.ns("orders"));
    config.lease = Duration::from_secs(5);
    config.max_batch_wait = Duration::from_millis(200);
    config.heartbeat = Duration::from_secs(1);
    config.retry_backoff = Duration::from_millis(200);
    config
}

/// Writes padding until the oplog's first entry is after `time`. The server truncates
/// its oplog at checkpoints (every second on this set), not at each write: keep
/// writing a little, and wait.
async fn roll_the_oplog_past(live: &LiveDb, time: ClusterTime) {
    let padding = live.ns("padding");
    let blob = "x".repeat(100_000);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut n = 0;
    while live.store.oplog_window().await.unwrap().first <= time {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} padding documents of 100 kB written and the oplog still starts before {time}"
        );
        for _ in 0..10 {
            live.store
                // New documents: replacing one with the same content logs nothing.
                .put(&padding, doc! {"_id": n, "blob": &blob})
                .await
                .unwrap();
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_listener_waits_alive_and_resumes_after_a_reset_with_nothing_missed() {
    live_small_oplog("recovery_lost", |live| async move {
        let orders: Namespace = live.ns("orders");
        let seen = Seen::default();
        let first = ListenerHandle::spawn(live.store.clone(), config(&live), seen.clone());
        live.store
            .put(&orders, doc! {"_id": "o1", "status": "placed"})
            .await
            .unwrap();
        support::wait::eventually(PATIENCE, "o1 handled", || seen.ids().contains("o1")).await;
        first.stop().await;
        let committed = live.store.get(RESOURCE).await.unwrap().unwrap();
        let token_time = committed
            .resume_token
            .as_ref()
            .and_then(|t| t.time())
            .expect("a committed token");

        // While nobody listens, the history after its token falls off the oplog.
        live.store
            .put(&orders, doc! {"_id": "o2", "status": "placed"})
            .await
            .unwrap();
        roll_the_oplog_past(&live, token_time).await;

        let listener = ListenerHandle::spawn(live.store.clone(), config(&live), seen.clone());
        support::wait::eventually(PATIENCE, "history lost", || {
            state(&listener) == ListenerState::HistoryLost
        })
        .await;
        let message = listener.snapshot().last_error.unwrap_or_default();
        println!("-- the listener says: {message}");
        assert!(message.contains(&format!("reset {RESOURCE}")), "{message}");
        // It stays alive and waiting: it does not restart from now on its own.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(state(&listener), ListenerState::HistoryLost);
        assert!(!seen.ids().contains("o2"), "nothing after the gap handled");

        // A hand edit leaves the lease unreadable: that is neither an operator's
        // decision nor a vacancy; the listener says so and keeps waiting.
        let leases = live
            .store
            .client()
            .database(&live.db)
            .collection::<bson::Document>("leases");
        let stored = leases
            .find_one(doc! {"_id": RESOURCE})
            .await
            .unwrap()
            .expect("the lease document");
        let mut corrupt = stored.clone();
        corrupt.insert("version", "seven");
        leases
            .replace_one(doc! {"_id": RESOURCE}, corrupt)
            .await
            .unwrap();
        support::wait::eventually(PATIENCE, "the listener names the malformed lease", || {
            listener
                .snapshot()
                .last_error
                .is_some_and(|e| e.contains("field version"))
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            !seen.ids().contains("o2"),
            "a malformed lease did not start it from anywhere"
        );
        assert_ne!(state(&listener), ListenerState::Streaming);
        leases
            .replace_one(doc! {"_id": RESOURCE}, stored)
            .await
            .unwrap();

        // The operator resets it to now with the binary, as the runbook says.
        let output = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamward"))
            .env("NO_COLOR", "1")
            .env_remove("STREAMWARD_URI")
            .args([
                "--uri",
                &live.uri,
                "--leases",
                &format!("{}.leases", live.db),
                "--operator",
                "oncall@recovery",
                "reset",
                RESOURCE,
                "--to",
                "now",
                "--accept-skip",
                "--execute",
            ])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let reset_at = live
            .store
            .get(RESOURCE)
            .await
            .unwrap()
            .unwrap()
            .resume_at
            .expect("reset to now sets resumeAt");

        // Every change after the reset point is handled, by the same listener.
        let after: Vec<String> = (3..=12).map(|n| format!("o{n}")).collect();
        for id in &after {
            live.store
                .put(&orders, doc! {"_id": id, "status": "placed"})
                .await
                .unwrap();
        }
        support::wait::eventually(PATIENCE, "every order after the reset handled", || {
            after.iter().all(|id| seen.ids().contains(id))
        })
        .await;
        assert_eq!(state(&listener), ListenerState::Streaming);
        assert!(
            !seen.ids().contains("o2"),
            "o2 was before the reset point {reset_at}: skipped on purpose"
        );
        println!(
            "-- reset to {reset_at}: the same listener streams again and handled {:?}",
            seen.ids()
        );
        listener.stop().await;
    })
    .await;
}
