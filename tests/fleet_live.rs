//! Membership and balancing (`tests/fleet/`) on a real replica set named by
//! `STREAMWARD_TEST_URI`, each process on its own client; skipped without it (fails
//! instead under `STREAMWARD_REQUIRE_LIVE=1` or CI).

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
