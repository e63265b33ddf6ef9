//! Membership and balancing (`tests/support/fleet.rs`) on the sandbox store, on a
//! virtual clock.

#[path = "support/fleet.rs"]
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

/// A sandbox on a virtual clock (tokio's, paused), from a fixed date.
fn virtual_sandbox() -> SandboxStore {
    let epoch = Utc
        .with_ymd_and_hms(2031, 6, 1, 12, 0, 0)
        .single()
        .expect("a valid date");
    SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch))
}

#[tokio::test(start_paused = true)]
async fn a_second_process_takes_half_and_the_survivor_takes_all() {
    let harness = SandboxFleet {
        store: virtual_sandbox(),
    };
    fleet::a_second_process_takes_half_and_the_survivor_takes_all(&harness).await;
}

#[tokio::test(start_paused = true)]
async fn three_processes_settle_at_four_and_a_graceful_leave_at_six() {
    let harness = SandboxFleet {
        store: virtual_sandbox(),
    };
    fleet::three_processes_settle_at_four_and_a_graceful_leave_at_six(&harness).await;
}

/// A listener whose task is aborted never returns from `run`; its process must stop
/// announcing it all the same, or the plan keeps leaving leases to a listener that is
/// gone (seen in the demo: a crashed holder's lease stayed vacant for the grace, again
/// and again).
#[tokio::test(start_paused = true)]
async fn a_crashed_listener_is_no_longer_announced_by_its_process() {
    use streamward::engine::{Fleet, FleetConfig, ListenerConfig, ListenerHandle, ListenerState};
    use streamward::store::{MemberScope, MembershipStore};

    let store = virtual_sandbox();
    let fleet = Fleet::start(store.clone(), FleetConfig::new("p"));
    let announced = || async {
        let members = store
            .list_members(MemberScope::Live)
            .await
            .expect("members");
        members
            .items
            .iter()
            .flat_map(|m| m.listeners.iter().map(|l| l.listener.clone()))
            .collect::<Vec<_>>()
    };
    let handles: Vec<ListenerHandle> = ["a", "b"]
        .iter()
        .map(|r| {
            ListenerHandle::spawn_in_fleet(
                store.clone(),
                ListenerConfig::new(*r, format!("{r}-1"), Namespace::new("fleet", "c")),
                streamward::engine::NoopHandler,
                &fleet,
            )
        })
        .collect();
    for handle in &handles {
        let mut status = handle.status.clone();
        status
            .wait_for(|s| s.state == ListenerState::Streaming)
            .await
            .expect("streams");
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(announced().await, ["a-1", "b-1"]);
    let mut handles = handles.into_iter();
    handles.next().expect("a").crash();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(announced().await, ["b-1"], "the crashed one is withdrawn");
    for handle in handles {
        handle.stop().await;
    }
    fleet.stop().await;
}
