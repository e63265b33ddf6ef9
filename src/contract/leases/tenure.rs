//! The holder's writes (commit, renew, release, a failure) matched on its tenure,
//! expiry on the server clock, the reads and the lease watch.

use std::time::Duration;

use crate::model::{ChangeFailure, ClusterTime, FailureCause, Lease, LockKind};
use crate::store::{
    AcquireOutcome, LeaseScope, LeaseStore, LeaseWatch, OperatorChange, OperatorStore,
    ResumeChange, Tenure, TenureWrite,
};

use super::{tenure, token, LONG, SHORT};
use crate::contract::support::*;
use crate::contract::Harness;

pub async fn tenure_writes_match_only_resource_listener_and_version<
    H: Harness<Store: LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    let first = acquired(store, &update("res", "a", LONG)).await;
    store.release(&Tenure::of(&first).unwrap()).await.unwrap();
    let lease = acquired(store, &update("res", "a", LONG)).await;
    assert_eq!(lease.version, 1);
    let wrong = [
        tenure("res", "b", 1),
        tenure("res", "a", 0),
        tenure("res", "a", 2),
        tenure("nothing", "a", 1),
    ];
    for bad in &wrong {
        let results = [
            store.commit(bad, &token(7), LONG).await.unwrap(),
            store.renew(bad, LONG).await.unwrap(),
            store.release(bad).await.unwrap(),
        ];
        assert_eq!(
            results,
            [TenureWrite::LostLock; 3],
            "commit, renew, release on {bad:?}"
        );
    }
    assert_eq!(
        lease_of(store, "res").await,
        lease,
        "writes that matched nothing changed nothing"
    );
    assert_eq!(
        store.get("nothing").await.unwrap(),
        None,
        "a tenure write never inserts"
    );
}

pub async fn commit_renew_and_release_change_only_their_fields<H: Harness<Store: LeaseStore>>(
    h: &H,
) {
    let store = h.store();
    let lease = acquired(store, &update("res", "a", LONG)).await;
    let tenure = Tenure::of(&lease).unwrap();
    wait_until_server_passes(store, lease.acquired_at.unwrap()).await;

    let before = server_now(store).await;
    assert_eq!(
        store.commit(&tenure, &token(42), 2 * LONG).await.unwrap(),
        TenureWrite::Done
    );
    let after = server_now(store).await;
    let committed = lease_of(store, "res").await;
    assert_between("committedAt", committed.committed_at, before, after);
    assert_eq!(
        committed,
        Lease {
            resume_token: Some(token(42)),
            committed_at: committed.committed_at,
            expires_at: committed.committed_at.map(|at| plus(at, 2 * LONG)),
            ..lease.clone()
        },
        "commit sets the token, committedAt and expiresAt, nothing else"
    );

    wait_until_server_passes(store, committed.committed_at.unwrap()).await;
    let before = server_now(store).await;
    assert_eq!(store.renew(&tenure, LONG).await.unwrap(), TenureWrite::Done);
    let after = server_now(store).await;
    let renewed = lease_of(store, "res").await;
    assert_between("renewedAt", renewed.renewed_at, before, after);
    assert_eq!(
        renewed,
        Lease {
            renewed_at: renewed.renewed_at,
            expires_at: renewed.renewed_at.map(|at| plus(at, LONG)),
            ..committed.clone()
        },
        "renew sets renewedAt and expiresAt, nothing else"
    );

    let before = server_now(store).await;
    assert_eq!(store.release(&tenure).await.unwrap(), TenureWrite::Done);
    let after = server_now(store).await;
    let released = lease_of(store, "res").await;
    assert_between("expiresAt", released.expires_at, before, after);
    assert_eq!(
        released,
        Lease {
            holder: None,
            expires_at: released.expires_at,
            ..renewed.clone()
        },
        "release clears the holder and expires now; the version stays for the next holder"
    );
}

pub async fn the_token_survives_a_hand_over<H: Harness<Store: LeaseStore>>(h: &H) {
    let store = h.store();
    let a = acquired(store, &update("res", "a", LONG)).await;
    let tenure_a = Tenure::of(&a).unwrap();
    store.commit(&tenure_a, &token(77), LONG).await.unwrap();
    let committed = lease_of(store, "res").await;
    assert_eq!(store.release(&tenure_a).await.unwrap(), TenureWrite::Done);
    let b = acquired(store, &update("res", "b", LONG)).await;
    assert_eq!(b.version, a.version + 1);
    assert_eq!(
        (&b.resume_token, b.committed_at, b.resume_at),
        (&Some(token(77)), committed.committed_at, None),
        "the next holder resumes where the last one committed"
    );
    assert_eq!(
        store.commit(&tenure_a, &token(78), LONG).await.unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(
        store.release(&tenure_a).await.unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(lease_of(store, "res").await.resume_token, Some(token(77)));
}

/// A failure on change `secs`, as its listener records it at server time `now`.
fn failure_on(secs: u32, attempts: u32, now: chrono::DateTime<chrono::Utc>) -> ChangeFailure {
    let mut failure = ChangeFailure::first(
        Some(token(secs)),
        Some(ClusterTime::new(secs, 1)),
        "shop.orders",
        "insert",
        r#"{"_id":1}"#,
        "no valid \"tags\"",
        FailureCause::Handler,
        now,
    );
    failure.attempts = attempts;
    failure
}

pub async fn a_failure_is_recorded_by_the_holder_and_removed_past_its_change<
    H: Harness<Store: OperatorStore + LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    let lease = acquired(store, &update("res", "a", LONG)).await;
    let holder = Tenure::of(&lease).unwrap();
    store.commit(&holder, &token(10), LONG).await.unwrap();
    let now = server_now(store).await;
    let failure = failure_on(11, 1, now);
    let stale = tenure("res", "a", lease.version + 1);
    assert_eq!(
        store.record_failure(&stale, &failure).await.unwrap(),
        TenureWrite::LostLock,
        "only the holder of the version records a failure"
    );
    assert_eq!(lease_of(store, "res").await.failure, None);
    assert_eq!(
        store.record_failure(&holder, &failure).await.unwrap(),
        TenureWrite::Done
    );
    let recorded = lease_of(store, "res").await;
    assert_eq!(
        recorded.failure.as_ref(),
        Some(&failure),
        "stored as written"
    );
    assert_eq!(
        (recorded.resume_token.as_ref(), recorded.version),
        (Some(&token(10)), lease.version),
        "recording a failure moves neither the resume point nor the version"
    );

    // It outlives the tenure: the next holder reads it, and counts on.
    store.release(&holder).await.unwrap();
    let next = acquired(store, &update("res", "b", LONG)).await;
    assert_eq!(next.failure.as_ref(), Some(&failure));
    let next = Tenure::of(&next).unwrap();
    let again = failure_on(11, 1, server_now(store).await).after(Some(&failure));
    assert_eq!((again.attempts, again.first_at), (2, failure.first_at));
    assert_eq!(
        store.record_failure(&next, &again).await.unwrap(),
        TenureWrite::Done
    );
    store.commit(&next, &token(10), LONG).await.unwrap();
    assert_eq!(
        lease_of(store, "res").await.failure,
        Some(again),
        "a plain commit leaves the failure"
    );
    assert_eq!(
        store
            .commit_past_failure(&stale, &token(11), LONG)
            .await
            .unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(
        store
            .commit_past_failure(&next, &token(11), LONG)
            .await
            .unwrap(),
        TenureWrite::Done
    );
    let past = lease_of(store, "res").await;
    assert_eq!(
        (past.failure, past.resume_token),
        (None, Some(token(11))),
        "a commit past the change removes the failure"
    );

    // An operator's move of the resume point removes it too.
    store
        .record_failure(&next, &failure_on(12, 5, server_now(store).await))
        .await
        .unwrap();
    let failing = lease_of(store, "res").await;
    let change = OperatorChange {
        resource: "res".into(),
        expected_version: failing.version,
        holder: None,
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Set {
            token: Some(token(12)),
            at: None,
        },
        note: "skip".into(),
        protocol: Default::default(),
    };
    assert!(matches!(
        store.operator_swap(&change).await.unwrap(),
        crate::store::SwapOutcome::Applied { .. }
    ));
    assert_eq!(lease_of(store, "res").await.failure, None);
}

pub async fn expiry_is_computed_on_the_server_clock<
    H: Harness<Store: OperatorStore + LeaseStore>,
>(
    h: &H,
) {
    let store = h.store();
    // Each write's expiresAt is its own server time plus the duration it was given,
    // bracketed by the server clock read around it: never the client's clock.
    let before = server_now(store).await;
    let lease = acquired(store, &update("res", "a", LONG)).await;
    let after = server_now(store).await;
    assert_between(
        "expiresAt after acquire",
        lease.expires_at,
        plus(before, LONG),
        plus(after, LONG),
    );

    let tenure = Tenure::of(&lease).unwrap();
    let before = server_now(store).await;
    store.commit(&tenure, &token(5), 3 * LONG).await.unwrap();
    let after = server_now(store).await;
    let expires = lease_of(store, "res").await.expires_at;
    assert_between(
        "expiresAt after commit",
        expires,
        plus(before, 3 * LONG),
        plus(after, 3 * LONG),
    );

    let before = server_now(store).await;
    store.renew(&tenure, 2 * LONG).await.unwrap();
    let after = server_now(store).await;
    let expires = lease_of(store, "res").await.expires_at;
    assert_between(
        "expiresAt after renew",
        expires,
        plus(before, 2 * LONG),
        plus(after, 2 * LONG),
    );

    let change = OperatorChange {
        resource: "res".into(),
        expected_version: lease.version,
        holder: Some("op".into()),
        expires_in: 5 * LONG,
        kind: LockKind::Update,
        resume: ResumeChange::Keep,
        note: "takeover --hold".into(),
        protocol: Default::default(),
    };
    let before = server_now(store).await;
    store.operator_swap(&change).await.unwrap();
    let after = server_now(store).await;
    let expires = lease_of(store, "res").await.expires_at;
    assert_between(
        "expiresAt after an operator hold",
        expires,
        plus(before, 5 * LONG),
        plus(after, 5 * LONG),
    );

    // A lease is free exactly when the server's clock has passed its expiry.
    let short = acquired(store, &update("short", "a", SHORT)).await;
    assert_eq!(
        store.acquire(&update("short", "b", LONG)).await.unwrap(),
        AcquireOutcome::HeldByOther
    );
    wait_until_server_passes(store, short.expires_at.unwrap()).await;
    acquired(store, &update("short", "b", LONG)).await;
}

pub async fn get_and_list_read_what_is_stored<H: Harness<Store: LeaseStore>>(h: &H) {
    let store = h.store();
    assert_eq!(store.get("res").await.unwrap(), None);
    assert_eq!(
        store.list().await.unwrap().items,
        vec![],
        "no lease collection yet"
    );
    for resource in ["b", "c", "a"] {
        acquired(store, &update(resource, "x", LONG)).await;
    }
    let listed = store.list().await.unwrap().items;
    assert_eq!(
        listed
            .iter()
            .map(|l| l.resource.as_str())
            .collect::<Vec<_>>(),
        ["a", "b", "c"],
        "sorted by resource"
    );
    for lease in &listed {
        assert_eq!(
            store.get(&lease.resource).await.unwrap().as_ref(),
            Some(lease)
        );
    }
}

pub async fn the_lease_watch_sees_each_change_of_its_lease<H: Harness<Store: LeaseStore>>(h: &H) {
    let store = h.store();
    let mut watch = store.watch(LeaseScope::One("res".into())).await.unwrap();
    let mut next = async || {
        tokio::time::timeout(PATIENCE, watch.changed())
            .await
            .expect("a lease change within the patience")
            .expect("changed")
    };
    let a = acquired(store, &update("res", "a", LONG)).await;
    let change = next().await;
    assert_eq!(change.resource, "res");
    assert_eq!(
        change.lease,
        Some(a.clone()),
        "the document after the change"
    );
    acquired(store, &update("elsewhere", "a", LONG)).await;
    store.release(&Tenure::of(&a).unwrap()).await.unwrap();
    let change = next().await;
    assert_eq!(
        change.resource, "res",
        "changes of other leases are not in a one-lease watch"
    );
    assert_eq!(change.lease.and_then(|l| l.holder), None);

    let mut all = store.watch(LeaseScope::All).await.unwrap();
    let third = acquired(store, &update("third", "b", LONG)).await;
    let seen = tokio::time::timeout(PATIENCE, all.changed())
        .await
        .expect("a change within the patience")
        .unwrap();
    assert_eq!(
        (seen.resource.as_str(), seen.lease),
        ("third", Some(third)),
        "a watch on all leases sees any"
    );
}
