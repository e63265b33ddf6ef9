//! Acquire: a new lease, a refresh, a take-over, a bulk lease, and the version that
//! moves only with the holder.

use std::time::Duration;

use crate::model::{Lease, LockKind, WatchTarget};
use crate::store::{
    AcquireOutcome, AuditContext, AuditLog, LeaseStore, OperatorChange, OperatorStore,
    ResumeChange, SwapOutcome, Tenure, TenureWrite,
};

use super::{tenure, token, LONG, SHORT};
use crate::contract::audited::apply_audited;
use crate::contract::support::*;
use crate::contract::Harness;

pub async fn acquire_inserts_a_new_lease_at_version_zero<H: Harness<Store: LeaseStore>>(h: &H) {
    let store = h.store();
    let mut req = update("res", "a", LONG);
    req.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        pipeline: "[]".into(),
        ..Default::default()
    });
    let before = server_now(store).await;
    let lease = acquired(store, &req).await;
    let after = server_now(store).await;
    assert_eq!(
        (lease.holder.as_deref(), lease.version, lease.kind),
        (Some("a"), 0, LockKind::Update),
        "{lease:?}"
    );
    assert_eq!(
        (&lease.resume_token, lease.resume_at, lease.committed_at),
        (&None, None, None),
        "a new lease has no resume point and no commit"
    );
    assert_between("acquiredAt", lease.acquired_at, before, after);
    assert_eq!(
        lease.renewed_at, lease.acquired_at,
        "one server time per write"
    );
    assert_eq!(
        lease.expires_at,
        lease.acquired_at.map(|at| plus(at, LONG)),
        "expiresAt = server now + lease"
    );
    assert_eq!(lease.watch, req.watch, "the watch target is stored");
    assert_eq!(
        store.get("res").await.unwrap(),
        Some(lease.clone()),
        "acquire returns the document as stored"
    );
}

pub async fn a_refresh_keeps_the_version_and_acquired_at<H: Harness<Store: LeaseStore>>(h: &H) {
    let store = h.store();
    let first = acquired(store, &update("res", "a", LONG)).await;
    let acquired_at = first.acquired_at.expect("acquiredAt");
    wait_until_server_passes(store, acquired_at).await;
    let refreshed = acquired(store, &update("res", "a", 2 * LONG)).await;
    assert_eq!(
        refreshed.version, first.version,
        "a refresh keeps the version"
    );
    assert_eq!(
        refreshed.acquired_at, first.acquired_at,
        "acquiredAt moves only with the holder"
    );
    let renewed = refreshed.renewed_at.expect("renewedAt");
    assert!(
        renewed > acquired_at,
        "renewedAt is the refresh's server time"
    );
    assert_eq!(refreshed.expires_at, Some(plus(renewed, 2 * LONG)));
    assert_eq!(lease_of(store, "res").await, refreshed);
}

pub async fn a_live_lease_is_held_by_other<H: Harness<Store: LeaseStore>>(h: &H) {
    let store = h.store();
    let held = acquired(store, &update("res", "a", LONG)).await;
    for other in [
        update("res", "b", LONG),
        request("res", "b", LockKind::Bulk, LONG),
    ] {
        assert_eq!(
            store.acquire(&other).await.unwrap(),
            AcquireOutcome::HeldByOther,
            "{other:?}"
        );
    }
    assert_eq!(
        lease_of(store, "res").await,
        held,
        "a refused acquire changes nothing"
    );
}

/// A fencing version is never written past `i64::MAX`: a lease set there by hand cannot
/// be taken (taking bumps the version), the acquire says so instead of "held by other",
/// and nothing is written (MongoDB would store a double; the sandbox would wrap). Its
/// holder still refreshes it: a refresh keeps the version.
pub async fn an_acquire_never_bumps_the_version_past_the_largest<H: Harness<Store: LeaseStore>>(
    h: &H,
) {
    let store = h.store();
    let held = acquired(store, &update("max", "a", LONG)).await;
    h.set_version_by_hand("max", i64::MAX).await;
    assert_eq!(
        acquired(store, &update("max", "a", LONG)).await.version,
        i64::MAX
    );
    let tenure = tenure("max", "a", i64::MAX);
    assert_eq!(store.release(&tenure).await.unwrap(), TenureWrite::Done);
    let before = lease_of(store, "max").await;
    for taker in [update("max", "b", LONG), update("max", "a", LONG)] {
        assert_eq!(
            store.acquire(&taker).await.unwrap(),
            AcquireOutcome::VersionExhausted,
            "{taker:?}"
        );
    }
    let after = lease_of(store, "max").await;
    assert_eq!(after, before, "nothing written");
    assert_eq!(after.version, i64::MAX);
    assert!(held.version < i64::MAX);
}

/// A caller that has seen a lease never creates it: a lease that is gone would come
/// back at version 0 (docs/protocol.md §3.1). Where it exists, nothing changes.
pub async fn an_acquire_that_saw_the_lease_never_creates_it<H: Harness<Store: LeaseStore>>(h: &H) {
    let store = h.store();
    let mut seen = update("gone", "a", LONG);
    seen.seen_version = Some(3);
    assert_eq!(
        store.acquire(&seen).await.unwrap(),
        AcquireOutcome::Vanished { seen_version: 3 }
    );
    assert_eq!(
        store.get("gone").await.unwrap(),
        None,
        "nothing was created"
    );

    let held = acquired(store, &update("res", "a", LONG)).await;
    let mut refresh = update("res", "a", LONG);
    refresh.seen_version = Some(held.version);
    assert_eq!(acquired(store, &refresh).await.version, held.version);
    let mut other = update("res", "b", LONG);
    other.seen_version = Some(held.version);
    assert_eq!(
        store.acquire(&other).await.unwrap(),
        AcquireOutcome::HeldByOther
    );
    let tenure = tenure("res", "a", held.version);
    assert_eq!(store.release(&tenure).await.unwrap(), TenureWrite::Done);
    assert_eq!(
        acquired(store, &other).await.version,
        held.version + 1,
        "taken with the next version, as without a seen version"
    );
}

pub async fn racing_inserts_leave_exactly_one_holder<H: Harness<Store: LeaseStore + Clone>>(h: &H) {
    const RACERS: usize = 8;
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| {
            let store = h.store().clone();
            tokio::spawn(
                async move { store.acquire(&update("race", &format!("l{i}"), LONG)).await },
            )
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task
            .await
            .expect("racer")
            .expect("acquire never fails in a race")
        {
            AcquireOutcome::Acquired(lease) => winners.push(lease),
            AcquireOutcome::HeldByOther => {}
            AcquireOutcome::Vanished { .. } => {
                panic!("a racer that never saw it found it vanished")
            }
            AcquireOutcome::VersionExhausted => panic!("a new lease is at version 0"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {RACERS} wins: {winners:?}"
    );
    assert_eq!(winners[0].version, 0);
    let stored = lease_of(h.store(), "race").await;
    assert_eq!(stored.holder, winners[0].holder, "the winner is the holder");
    assert_eq!(stored.version, 0, "one acquisition, one version");
}

pub async fn an_expired_lease_is_taken_over_with_the_next_version<H: Harness<Store: LeaseStore>>(
    h: &H,
) {
    let store = h.store();
    let a = acquired(store, &update("res", "a", SHORT)).await;
    let tenure_a = Tenure::of(&a).unwrap();
    assert_eq!(
        store.commit(&tenure_a, &token(100), SHORT).await.unwrap(),
        TenureWrite::Done
    );
    let committed = lease_of(store, "res").await;
    wait_until_server_passes(store, committed.expires_at.expect("expiresAt")).await;
    let b = acquired(store, &update("res", "b", LONG)).await;
    assert_eq!((b.holder.as_deref(), b.version), (Some("b"), a.version + 1));
    assert!(
        b.acquired_at > a.acquired_at,
        "acquiredAt moves with the holder"
    );
    assert_eq!(
        store.commit(&tenure_a, &token(101), LONG).await.unwrap(),
        TenureWrite::LostLock,
        "the old holder's commit matches nothing"
    );
    assert_eq!(
        store.acquire(&update("res", "a", LONG)).await.unwrap(),
        AcquireOutcome::HeldByOther,
        "nor can it refresh its way back"
    );
    assert_eq!(lease_of(store, "res").await, b);
}

pub async fn a_released_lease_starts_a_new_tenure_even_for_the_same_listener<
    H: Harness<Store: LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    let first = acquired(store, &update("res", "a", LONG)).await;
    assert_eq!(
        store.release(&Tenure::of(&first).unwrap()).await.unwrap(),
        TenureWrite::Done
    );
    let again = acquired(store, &update("res", "a", LONG)).await;
    assert_eq!(
        again.version,
        first.version + 1,
        "every tenure has its own version"
    );
    assert_eq!(
        store
            .commit(&Tenure::of(&first).unwrap(), &token(1), LONG)
            .await
            .unwrap(),
        TenureWrite::LostLock,
        "the first tenure is over"
    );
}

pub async fn a_bulk_lease_is_never_taken_by_an_update_listener<
    H: Harness<Store: OperatorStore + LeaseStore + AuditLog>,
>(
    h: &H,
) {
    let store = h.store();
    let bulk = acquired(store, &request("res", "rebuild", LockKind::Bulk, SHORT)).await;
    assert_eq!((bulk.kind, bulk.version), (LockKind::Bulk, 0));
    wait_until_server_passes(store, bulk.expires_at.expect("expiresAt")).await;
    for listener in ["w", "rebuild"] {
        assert_eq!(
            store.acquire(&update("res", listener, LONG)).await.unwrap(),
            AcquireOutcome::HeldByOther,
            "an expired bulk lease is not taken by the update listener {listener}"
        );
    }
    assert_eq!(
        store.release(&Tenure::of(&bulk).unwrap()).await.unwrap(),
        TenureWrite::Done
    );
    assert_eq!(
        store.acquire(&update("res", "w", LONG)).await.unwrap(),
        AcquireOutcome::HeldByOther,
        "nor a released one"
    );
    let released = lease_of(store, "res").await;
    assert_eq!(
        (released.kind, released.holder.as_deref(), released.version),
        (LockKind::Bulk, None, 0)
    );
    // An operator gives it back (abort-bulk): kind update, released, version + 1.
    let change = OperatorChange {
        resource: "res".into(),
        expected_version: released.version,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Keep,
        note: "abort-bulk".into(),
        protocol: Default::default(),
    };
    let audit = AuditContext {
        operator: "tester".into(),
        action: "abort-bulk".into(),
        reason: None,
    };
    assert!(matches!(
        apply_audited(store, &change, None, &audit).await.swap,
        SwapOutcome::Applied { .. }
    ));
    let w = acquired(store, &update("res", "w", LONG)).await;
    assert_eq!(
        (w.kind, w.version),
        (LockKind::Update, released.version + 2)
    );
}

pub async fn a_bulk_request_refreshes_or_takes_by_the_same_rules<H: Harness<Store: LeaseStore>>(
    h: &H,
) {
    let store = h.store();
    let bulk = |who: &str, lease| request("res", who, LockKind::Bulk, lease);
    let first = acquired(store, &bulk("r1", SHORT)).await;
    let refreshed = acquired(store, &bulk("r1", SHORT)).await;
    assert_eq!(
        (refreshed.version, refreshed.acquired_at),
        (first.version, first.acquired_at),
        "the rebuild refreshes its own bulk lease"
    );
    assert_eq!(
        store.acquire(&bulk("r2", LONG)).await.unwrap(),
        AcquireOutcome::HeldByOther,
        "a live bulk lease is held"
    );
    wait_until_server_passes(store, refreshed.expires_at.expect("expiresAt")).await;
    let taken = acquired(store, &bulk("r2", LONG)).await;
    assert_eq!(
        (taken.holder.as_deref(), taken.kind, taken.version),
        (Some("r2"), LockKind::Bulk, first.version + 1),
        "an expired bulk lease goes to another bulk request"
    );

    // On an update lease: the holder may turn it bulk in place; others take it once expired.
    let held = acquired(store, &update("upd", "a", SHORT)).await;
    let mine = acquired(store, &request("upd", "a", LockKind::Bulk, SHORT)).await;
    assert_eq!(
        (mine.kind, mine.version, mine.acquired_at),
        (LockKind::Bulk, held.version, held.acquired_at)
    );
    let other = acquired(store, &update("upd2", "a", SHORT)).await;
    assert_eq!(
        store
            .acquire(&request("upd2", "r", LockKind::Bulk, LONG))
            .await
            .unwrap(),
        AcquireOutcome::HeldByOther
    );
    wait_until_server_passes(store, other.expires_at.expect("expiresAt")).await;
    let over = acquired(store, &request("upd2", "r", LockKind::Bulk, LONG)).await;
    assert_eq!(
        (over.holder.as_deref(), over.kind, over.version),
        (Some("r"), LockKind::Bulk, other.version + 1)
    );
}

/// One step of [`the_version_moves_only_with_the_holder`].
enum Step {
    Acquire(&'static str),
    Commit,
    Renew,
    Release,
    HandTo(&'static str),
}

pub async fn the_version_moves_only_with_the_holder<
    H: Harness<Store: OperatorStore + LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    // (step, holder after it, version after it).
    let steps = [
        (Step::Acquire("a"), Some("a"), 0),
        (Step::Acquire("a"), Some("a"), 0),
        (Step::Commit, Some("a"), 0),
        (Step::Renew, Some("a"), 0),
        (Step::Release, None, 0),
        (Step::Acquire("a"), Some("a"), 1),
        (Step::HandTo("b"), Some("b"), 2),
        (Step::Acquire("b"), Some("b"), 2),
        (Step::Commit, Some("b"), 2),
        (Step::Release, None, 2),
        (Step::Acquire("c"), Some("c"), 3),
    ];
    let mut last: Option<Lease> = None;
    for (i, (step, holder, version)) in steps.into_iter().enumerate() {
        let current = || Tenure::of(last.as_ref().expect("a lease")).expect("a holder");
        match step {
            Step::Acquire(who) => {
                acquired(store, &update("res", who, LONG)).await;
            }
            Step::Commit => {
                let done = store.commit(&current(), &token(i as u32 + 1), LONG).await;
                assert_eq!(done.unwrap(), TenureWrite::Done, "step {i}");
            }
            Step::Renew => {
                let done = store.renew(&current(), LONG).await;
                assert_eq!(done.unwrap(), TenureWrite::Done, "step {i}");
            }
            Step::Release => {
                let done = store.release(&current()).await;
                assert_eq!(done.unwrap(), TenureWrite::Done, "step {i}");
            }
            Step::HandTo(who) => {
                let before = last.as_ref().expect("a lease");
                let change = OperatorChange {
                    resource: "res".into(),
                    expected_version: before.version,
                    holder: Some(who.into()),
                    expires_in: LONG,
                    kind: LockKind::Update,
                    resume: ResumeChange::Keep,
                    note: "takeover --to".into(),
                    protocol: Default::default(),
                };
                assert!(matches!(
                    store.operator_swap(&change).await.unwrap(),
                    crate::store::SwapOutcome::Applied { .. }
                ));
            }
        }
        let now = lease_of(store, "res").await;
        assert_eq!(
            (now.holder.as_deref(), now.version),
            (holder, version),
            "after step {i}"
        );
        if let Some(prev) = &last {
            assert!(now.version >= prev.version, "the version never decreases");
        }
        last = Some(now);
    }
}
