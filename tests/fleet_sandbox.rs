//! Membership and balancing (`tests/fleet/`) on the sandbox store, on a virtual clock.

mod fleet;

use std::time::Duration;

use chrono::{TimeZone, Utc};
use fleet::FleetHarness;
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::Namespace;

struct SandboxFleet {
    store: SandboxStore,
}

impl FleetHarness for SandboxFleet {
    type Store = SandboxStore;

    /// One store for every process: the sandbox is one server.
    async fn process_store(&self) -> SandboxStore {
        self.store.clone()
    }

    fn ns(&self, coll: &str) -> Namespace {
        Namespace::new("fleet", coll)
    }

    fn patience(&self) -> Duration {
        10 * fleet::LEASE
    }
}

#[tokio::test(start_paused = true)]
async fn a_second_process_takes_half_and_the_survivor_takes_all() {
    let epoch = Utc
        .with_ymd_and_hms(2031, 6, 1, 12, 0, 0)
        .single()
        .expect("a valid date");
    let harness = SandboxFleet {
        store: SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch)),
    };
    fleet::a_second_process_takes_half_and_the_survivor_takes_all(&harness).await;
}

#[tokio::test(start_paused = true)]
async fn three_processes_settle_at_four_and_a_graceful_leave_at_six() {
    let epoch = Utc
        .with_ymd_and_hms(2031, 6, 1, 12, 0, 0)
        .single()
        .expect("a valid date");
    let harness = SandboxFleet {
        store: SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch)),
    };
    fleet::three_processes_settle_at_four_and_a_graceful_leave_at_six(&harness).await;
}
