//! Membership: a process's document, renewed on the server's clock (docs/protocol.md,
//! "Membership and balancing").

use std::time::Duration;

use crate::model::{Announcement, MemberListener};
use crate::store::{LeaseStore, MemberScope, MembershipStore};

use super::support::*;
use super::Harness;

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(400);

fn announcement(process: &str, resources: &[&str]) -> Announcement {
    Announcement {
        process: process.into(),
        host: "host-1".into(),
        pid: 4242,
        listeners: resources
            .iter()
            .map(|r| MemberListener {
                resource: (*r).into(),
                listener: format!("{process}/{r}"),
            })
            .collect(),
    }
}

pub async fn announce_joins_then_renews_on_the_server_clock<
    H: Harness<Store: MembershipStore + LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    let before = server_now(store).await;
    // Out of order, and one named like a field path: stored as given, read sorted.
    let first = store
        .announce(&announcement("p1", &["orders", "$pets"]), LONG)
        .await
        .expect("announce");
    let after = server_now(store).await;
    assert_between("renewedAt", Some(first.renewed_at), before, after);
    assert_eq!(
        first.started_at, first.renewed_at,
        "a new member starts now"
    );
    assert_eq!(first.expires_at, plus(first.renewed_at, LONG));
    assert_eq!((first.host.as_str(), first.pid), ("host-1", 4242));
    let resources: Vec<&str> = first
        .listeners
        .iter()
        .map(|l| l.resource.as_str())
        .collect();
    assert_eq!(resources, ["$pets", "orders"]);
    assert_eq!(first.listeners[1].listener, "p1/orders");

    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = store
        .announce(&announcement("p1", &["mailer"]), 2 * LONG)
        .await
        .expect("renew");
    assert_eq!(
        second.started_at, first.started_at,
        "a renewal keeps the start"
    );
    assert!(
        second.renewed_at > first.renewed_at,
        "{second:?} after {first:?}"
    );
    assert_eq!(second.expires_at, plus(second.renewed_at, 2 * LONG));
    assert_eq!(second.listeners.len(), 1, "the listeners are replaced");

    let all = store.list_members(MemberScope::All).await.expect("members");
    assert!(all.malformed.is_empty());
    assert_eq!(all.items, vec![second]);
}

pub async fn an_expired_member_is_not_live_and_rejoins_with_a_new_start<
    H: Harness<Store: MembershipStore + LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    let short = store
        .announce(&announcement("p2", &["a"]), SHORT)
        .await
        .expect("announce p2");
    store
        .announce(&announcement("p1", &["a"]), LONG)
        .await
        .expect("announce p1");
    let live = store.list_members(MemberScope::Live).await.expect("live");
    let ids: Vec<&str> = live.items.iter().map(|m| m.process.as_str()).collect();
    assert_eq!(ids, ["p1", "p2"], "sorted by _id");

    wait_until_server_passes(store, short.expires_at).await;
    let live = store.list_members(MemberScope::Live).await.expect("live");
    let ids: Vec<&str> = live.items.iter().map(|m| m.process.as_str()).collect();
    assert_eq!(ids, ["p1"], "expiry is inclusive, by the server's clock");
    let all = store.list_members(MemberScope::All).await.expect("all");
    assert_eq!(
        all.items.len(),
        2,
        "an expired member is still listed to operators"
    );

    let back = store
        .announce(&announcement("p2", &["a"]), LONG)
        .await
        .expect("rejoin");
    assert!(
        back.started_at > short.started_at && back.started_at == back.renewed_at,
        "an expired member that announces again starts a new membership: {back:?}"
    );
}

pub async fn leaving_removes_only_the_own_document_and_twice_is_harmless<
    H: Harness<Store: MembershipStore + LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    for p in ["p1", "p2"] {
        store
            .announce(&announcement(p, &["a"]), LONG)
            .await
            .expect("announce");
    }
    store.leave("p1").await.expect("leave");
    store.leave("p1").await.expect("leave again");
    store.leave("never-joined").await.expect("leave unknown");
    let all = store.list_members(MemberScope::All).await.expect("all");
    let ids: Vec<&str> = all.items.iter().map(|m| m.process.as_str()).collect();
    assert_eq!(ids, ["p2"]);
}
