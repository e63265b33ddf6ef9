//! Membership and balancing (`tests/support/fleet.rs`) on a real replica set named by
//! `STREAMWARD_TEST_URI`, each process on its own client; skipped without it (fails
//! instead under `STREAMWARD_REQUIRE_LIVE=1` or CI).

#[path = "support/fleet.rs"]
mod fleet;
mod support;

use std::time::Duration;

use fleet::FleetHarness;
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::Namespace;
use support::live::{live, LiveDb};

struct LiveFleet {
    live: LiveDb,
}

impl FleetHarness for LiveFleet {
    type Store = MongoStore;

    async fn process_store(&self) -> MongoStore {
        let mut settings = MongoSettings::new(self.live.uri.clone());
        settings.leases = self.live.ns("leases");
        MongoStore::connect(settings)
            .await
            .expect("connect a process's client")
    }

    fn ns(&self, coll: &str) -> Namespace {
        self.live.ns(coll)
    }

    /// A busy two-core machine: generous.
    fn patience(&self) -> Duration {
        20 * fleet::LEASE
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_takes_half_and_the_survivor_takes_all() {
    live("fleet_balance", |live| async move {
        fleet::a_second_process_takes_half_and_the_survivor_takes_all(&LiveFleet { live }).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_settle_at_four_and_a_graceful_leave_at_six() {
    live("fleet_three", |live| async move {
        fleet::three_processes_settle_at_four_and_a_graceful_leave_at_six(&LiveFleet { live })
            .await;
    })
    .await;
}

/// `streamward processes`, as an operator runs it, against two balanced processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processes_command_shows_each_process_with_its_leases_and_standbys() {
    live("fleet_cli", |live| async move {
        let harness = LiveFleet { live: live.clone() };
        let running = fleet::balanced_pair(&harness).await;

        let mut json = support::live::streamward(&live);
        json.args(["processes", "--output", "json"]);
        let (code, stdout, stderr) = support::live::run(json).await;
        assert_eq!(code, 0, "{stderr}");
        let shown: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        let processes = shown.as_array().expect("an array");
        assert_eq!(processes.len(), 2, "{stdout}");
        for (process, name) in processes.iter().zip(["a", "b"]) {
            assert_eq!(process["process"], name);
            assert_eq!(process["live"], true);
            assert_eq!(process["share"], 6);
            assert_eq!(
                process["holds"].as_array().map(Vec::len),
                Some(6),
                "{process}"
            );
            assert_eq!(
                process["standby"].as_array().map(Vec::len),
                Some(6),
                "{process}"
            );
            assert_eq!(process["handingOver"], serde_json::json!([]));
            assert_eq!(process["listeners"].as_array().map(Vec::len), Some(12));
        }
        let mut table = support::live::streamward(&live);
        table.arg("processes");
        let (code, stdout, stderr) = support::live::run(table).await;
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("PROCESS"), "{stdout}");
        let row_a = stdout.lines().nth(1).unwrap_or_default();
        assert!(
            row_a.starts_with("a ") && row_a.contains("live") && row_a.contains(" 6 r"),
            "{stdout}"
        );
        eprintln!("{stdout}");

        fleet::stop_all(running).await;
        let mut after = support::live::streamward(&live);
        after.arg("processes");
        let (code, stdout, _) = support::live::run(after).await;
        assert_eq!(code, 0);
        assert!(stdout.starts_with("no processes"), "both left: {stdout}");

        // A document that is not a membership is listed as one that cannot be read,
        // not dropped, and no longer "no processes".
        live.store
            .client()
            .database(&live.db)
            .collection::<bson::Document>("processes")
            .insert_one(bson::doc! { "_id": "odd", "expiresAt": "soon" })
            .await
            .expect("insert a malformed membership");
        let mut json = support::live::streamward(&live);
        json.args(["processes", "--output", "json"]);
        let (code, stdout, stderr) = support::live::run(json).await;
        assert_eq!(code, 0, "{stderr}");
        let shown: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        assert_eq!(shown[0]["id"], "odd", "{stdout}");
        assert_eq!(shown[0]["status"], "MALFORMED", "{stdout}");
        let mut table = support::live::streamward(&live);
        table.arg("processes");
        let (code, stdout, stderr) = support::live::run(table).await;
        assert_eq!(code, 0);
        assert!(!stdout.starts_with("no processes"), "{stdout}");
        assert!(
            stderr.contains("odd"),
            "the malformed document is warned about: {stderr}"
        );
    })
    .await;
}
