//! A clean release is taken over on the lease change, not on a timer (issue 32), on
//! the sandbox store and tokio's paused clock: the clock moves only when every task
//! waits on a timer, so a standby that reacts to the release streams with the clock
//! where it was, and one that waits for a timer (a retry gap, a back-off, a refresh,
//! a balancing round, the lease's expiry) moves it by that timer.

mod support;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use streamward::engine::{Fleet, FleetConfig, ListenerHandle, ListenerState, NoopHandler};
use streamward::store::sandbox::SandboxStore;
use streamward::store::Namespace;
use support::sandbox::{config, sandbox};
use tokio::time::Instant;

fn ns() -> Namespace {
    Namespace::new("shop", "orders")
}

async fn reaches(handle: &ListenerHandle, state: ListenerState) {
    let mut status = handle.status.clone();
    status
        .wait_for(|s| s.state == state)
        .await
        .expect("the listener is running");
}

/// Stops `holder` (it releases its lease) and returns how far the virtual clock moved
/// until `standby` streamed, and how many acquires were made meanwhile.
async fn take_over(
    store: &SandboxStore,
    holder: ListenerHandle,
    standby: &ListenerHandle,
) -> (Duration, u64) {
    // Long enough for the holder to refresh and heartbeat several times, each a lease
    // change the standby sees and goes on waiting through.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(standby.snapshot().state, ListenerState::Standby);
    let acquires = store.calls().acquire.load(Relaxed);
    let released = Instant::now();
    holder.stop().await;
    reaches(standby, ListenerState::Streaming).await;
    (
        released.elapsed(),
        store.calls().acquire.load(Relaxed) - acquires,
    )
}

#[tokio::test(start_paused = true)]
async fn a_clean_release_is_taken_over_on_the_lease_change_not_on_a_timer() {
    let store = sandbox(1000);
    let holder = ListenerHandle::spawn(store.clone(), config("r", "holder", ns()), NoopHandler);
    reaches(&holder, ListenerState::Streaming).await;
    let standby = ListenerHandle::spawn(store.clone(), config("r", "standby", ns()), NoopHandler);
    reaches(&standby, ListenerState::Standby).await;

    let (waited, acquires) = take_over(&store, holder, &standby).await;
    assert_eq!(
        waited,
        Duration::ZERO,
        "from the release to the standby streaming, no timer may run (the lease lasts {:?}, \
         the standby retries no sooner than a twentieth of it)",
        config("r", "standby", ns()).lease
    );
    assert_eq!(acquires, 1, "the standby acquired once, at the release");
    standby.stop().await;
}

/// The same in a fleet of two processes, each holding one lease and standing by for
/// the other's: the one left holding its share takes the released lease at once (the
/// plan made before the release must not keep it waiting for the next round).
#[tokio::test(start_paused = true)]
async fn in_a_fleet_a_clean_release_is_taken_over_on_the_lease_change_not_on_a_round() {
    let store = sandbox(1000);
    let a = Fleet::start(store.clone(), FleetConfig::new("a"));
    let b = Fleet::start(store.clone(), FleetConfig::new("b"));
    let spawn = |fleet: &Fleet, resource: &str, process: &str| {
        ListenerHandle::spawn_in_fleet(
            store.clone(),
            config(resource, &format!("{process}/{resource}"), ns()),
            NoopHandler,
            fleet,
        )
    };
    let a_r0 = spawn(&a, "r0", "a");
    reaches(&a_r0, ListenerState::Streaming).await;
    let b_r1 = spawn(&b, "r1", "b");
    reaches(&b_r1, ListenerState::Streaming).await;
    let a_r1 = spawn(&a, "r1", "a");
    let b_r0 = spawn(&b, "r0", "b");
    reaches(&a_r1, ListenerState::Standby).await;
    reaches(&b_r0, ListenerState::Standby).await;
    // Settled at one each: several rounds, nobody hands anything over.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!((a.holding(), b.holding()), (1, 1), "one lease each");

    let (waited, acquires) = take_over(&store, a_r0, &b_r0).await;
    assert_eq!(
        waited,
        Duration::ZERO,
        "b's standby takes r0 on its release, not after a round ({:?}) or the grace ({:?})",
        b.config().renew_every,
        b.config().grace
    );
    assert_eq!(acquires, 1, "b's standby acquired once, at the release");
    for handle in [a_r1, b_r0, b_r1] {
        handle.stop().await;
    }
    a.stop().await;
    b.stop().await;
}
