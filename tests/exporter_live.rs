//! `streamward exporter` against the real replica set (`STREAMWARD_TEST_URI`): a real
//! listener holds a lease, the binary serves the metrics, an HTTP GET reads them as
//! Prometheus would, and `promtool check metrics` (Debian's `prometheus` package, which
//! `.ci/run` installs) accepts them.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use streamward::engine::{ListenerConfig, ListenerHandle, ListenerState, NoopHandler};
use streamward::store::LeaseStore;
use support::http::{get, promtool, served_address};
use support::live::live;

/// The exporter binary, killed when dropped.
struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the exporter and returns it with the address it says it serves at.
fn start_exporter(uri: &str, leases: &str) -> (Exporter, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamward"))
        .args([
            "exporter",
            "--uri",
            uri,
            "--leases",
            leases,
            "--interval",
            "1s",
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the exporter");
    let address = served_address(&mut child);
    (Exporter(child), address)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_exporter_serves_the_real_clusters_leases_and_promtool_accepts_them() {
    live("exporter_serves", |db| async move {
        let mut config = ListenerConfig::new("shop.orders", "w1", db.ns("orders"));
        config.max_batch_wait = Duration::from_millis(200);
        let listener = ListenerHandle::spawn(db.store.clone(), config, NoopHandler);
        let started = Instant::now();
        while listener.snapshot().state != ListenerState::Streaming {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{:?}",
                listener.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let version = db
            .store
            .get("shop.orders")
            .await
            .expect("read the lease")
            .expect("the lease")
            .version;

        let leases = format!("{}.leases", db.db);
        let (_exporter, address) = start_exporter(&db.uri, &leases);
        // The first read is taken at once; wait until it is served.
        let started = Instant::now();
        let text = loop {
            let (status, text) = get(&address, "/metrics").await;
            assert_eq!(status, 200, "{text}");
            if text.lines().any(|l| l == "streamward_cluster_up 1") {
                break text;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{text}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        for line in [
            "streamward_lease_holder_present{resource=\"shop.orders\"} 1".to_string(),
            format!("streamward_lease_fencing_version{{resource=\"shop.orders\"}} {version}"),
            "streamward_lease_status{resource=\"shop.orders\",status=\"LOST\"} 0".to_string(),
            "streamward_oplog_window_known 1".to_string(),
            "streamward_leases 1".to_string(),
            // Nothing written to its collection: nothing left, counted on the oplog.
            "streamward_lease_pending_changes{resource=\"shop.orders\"} 0".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        let lag = text
            .lines()
            .find_map(|l| l.strip_prefix("streamward_lease_lag_seconds{resource=\"shop.orders\"} "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("a lag for the lease");
        assert!(lag < 30.0, "a streaming listener's lag: {lag}");
        let window = text
            .lines()
            .find_map(|l| l.strip_prefix("streamward_oplog_window_seconds "))
            .and_then(|v| v.parse::<f64>().ok())
            .expect("the window");
        assert!(window > 0.0, "{text}");

        // The time to loss of the lease: from the second read (the first has no rates).
        let started = Instant::now();
        let text = loop {
            let (_, text) = get(&address, "/metrics").await;
            if text.lines().any(|l| {
                l.starts_with(
                    "streamward_lease_history_loss_earliest_seconds{resource=\"shop.orders\"} ",
                )
            }) {
                break text;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{text}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        for line in text.lines().filter(|l| l.contains("history_loss")) {
            eprintln!("{line}");
        }
        // A streaming listener on the test set's large, far-from-full oplog: not soon.
        let earliest: f64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "streamward_lease_history_loss_earliest_seconds{resource=\"shop.orders\"} ",
                )
            })
            .and_then(|v| v.parse().ok())
            .expect("an earliest estimate");
        assert!(earliest > 3600.0, "earliest {earliest} s:\n{text}");
        if let Some((accepted, said)) = promtool(&["check", "metrics"], Some(&text)) {
            assert!(accepted, "promtool check metrics refused:\n{said}\n{text}");
        }
        let (status, _) = get(&address, "/elsewhere").await;
        assert_eq!(status, 404);
        listener.stop().await;
    })
    .await;
}
