//! The store contract (issue 9, item 2): one set of checks, written once as plain
//! `async fn`s generic over the store ports, run on the sandbox
//! (`tests/contract_sandbox.rs`) and on a real replica set (`tests/contract_mongo.rs`).
//! A store is correct when it passes all of them; where the sandbox and MongoDB
//! disagree, MongoDB is right (DESIGN §10).
//!
//! Everything is observed through the ports (`get`, `find_one`, change streams,
//! `audit_record`), never through what a store says about itself. Time is the
//! store's own clock (`server_now`), waited on by polling with a deadline.
// Each test crate calls every check, but the helpers are shared.
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use bson::{doc, Bson, Document};
use chrono::{DateTime, TimeDelta, Utc};
use streamward::model::{ClusterTime, Fence, Lease, LockKind, ResumeToken, WatchTarget};
use streamward::store::{
    AcquireOutcome, AcquireRequest, AuditContext, ChangeEvent, ChangeFeed, ChangeStream,
    DocumentStore, FeedOptions, LeaseScope, LeaseStore, LeaseWatch, Namespace, OperationType,
    OperatorChange, OperatorOutcome, ResumeChange, StartPoint, Store, StoreError, SwapOutcome,
    Tenure, TenureWrite, WriteFence, WriteOutcome,
};

/// What a store needs to be put through the contract: the store, a namespace of the
/// test's own, and a way to make history fall off for real.
pub trait Harness: Send + Sync + 'static {
    type Store: Store;

    fn store(&self) -> &Self::Store;

    /// A collection in the test's own database.
    fn ns(&self, coll: &str) -> Namespace;

    /// Writes elsewhere until every history entry at or before `time` has fallen off
    /// (`oplog_window().first > time`).
    fn roll_history_past(&self, time: ClusterTime) -> impl Future<Output = ()> + Send;

    /// Whether the history has never dropped an entry (a precondition, read from
    /// outside the ports: the oplog's first entry is still the replica set's initiation).
    fn history_never_rolled(&self) -> impl Future<Output = bool> + Send;
}

/// Bounds every wait; generous for a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
const MINUTE: Duration = Duration::from_secs(60);

/// Calls `probe` until it returns `Some`, or panics after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

fn request(resource: &str, listener: &str, kind: LockKind, lease: Duration) -> AcquireRequest {
    AcquireRequest {
        resource: resource.into(),
        listener: listener.into(),
        kind,
        lease,
        watch: None,
    }
}

async fn try_acquire<S: LeaseStore>(
    store: &S,
    resource: &str,
    listener: &str,
    kind: LockKind,
    lease: Duration,
) -> AcquireOutcome {
    store
        .acquire(&request(resource, listener, kind, lease))
        .await
        .unwrap_or_else(|e| panic!("{listener} acquiring {resource}: {e}"))
}

async fn acquired<S: LeaseStore>(
    store: &S,
    resource: &str,
    listener: &str,
    kind: LockKind,
    lease: Duration,
) -> Lease {
    match try_acquire(store, resource, listener, kind, lease).await {
        AcquireOutcome::Acquired(lease) => lease,
        AcquireOutcome::HeldByOther => panic!("{listener} expected to acquire {resource}"),
    }
}

async fn lease_of<S: LeaseStore>(store: &S, resource: &str) -> Lease {
    store
        .get(resource)
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("lease {resource} exists"))
}

/// Waits until the store's clock has passed `at`.
async fn wait_past<S: LeaseStore>(store: &S, at: DateTime<Utc>) {
    eventually(&format!("the server clock passes {at}"), || async {
        (store.server_now().await.expect("server_now") > at).then_some(())
    })
    .await
}

fn tenure(lease: &Lease) -> Tenure {
    Tenure::of(lease).expect("a held lease")
}

fn token_at(secs: u32) -> ResumeToken {
    ResumeToken::encode(
        ClusterTime::new(secs, 1),
        streamward::model::TokenKind::Event,
        1,
    )
}

fn audit_context(action: &str) -> AuditContext {
    AuditContext {
        operator: "contract@test".into(),
        action: action.into(),
        reason: Some(format!("contract check: {action}")),
    }
}

fn operator_change(resource: &str, expected_version: i64, holder: Option<&str>) -> OperatorChange {
    OperatorChange {
        resource: resource.into(),
        expected_version,
        holder: holder.map(str::to_string),
        expires_in: Duration::ZERO,
        kind: LockKind::Update,
        resume: ResumeChange::Keep,
        note: "contract".into(),
    }
}

/// A millisecond of slack for stores that keep dates in milliseconds.
fn within(at: Option<DateTime<Utc>>, low: DateTime<Utc>, high: DateTime<Utc>, what: &str) {
    let at = at.unwrap_or_else(|| panic!("{what} is set"));
    let ms = TimeDelta::milliseconds(1);
    assert!(
        at >= low - ms && at <= high + ms,
        "{what} = {at}, expected within [{low}, {high}]"
    );
}

fn plus(at: DateTime<Utc>, lease: Duration) -> DateTime<Utc> {
    at + TimeDelta::from_std(lease).expect("lease fits")
}

// ------------------------------------------------------------------ acquire

/// A new lease is inserted at version 0 for the caller, stamped with the server's
/// clock, and reads back exactly as returned.
pub async fn acquire_inserts_a_new_lease_at_version_zero<H: Harness>(h: &H) {
    let store = h.store();
    let before = store.server_now().await.unwrap();
    let watch = WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        pipeline: "[]".into(),
    };
    let mut req = request("new", "a", LockKind::Update, MINUTE);
    req.watch = Some(watch.clone());
    let AcquireOutcome::Acquired(lease) = store.acquire(&req).await.unwrap() else {
        panic!("a new lease goes to its first caller");
    };
    let after = store.server_now().await.unwrap();
    assert_eq!(lease.version, 0, "version 0 on insert");
    assert_eq!(lease.holder.as_deref(), Some("a"));
    assert_eq!(lease.kind, LockKind::Update);
    assert_eq!(lease.resume_token, None);
    assert_eq!(lease.resume_at, None);
    assert_eq!(lease.watch, Some(watch));
    within(lease.acquired_at, before, after, "acquiredAt");
    assert_eq!(lease.renewed_at, lease.acquired_at);
    assert_eq!(
        lease_of(store, "new").await,
        lease,
        "reads back as returned"
    );
    let listed = store.list().await.unwrap();
    assert_eq!(listed, vec![lease]);
    assert_eq!(store.get("absent").await.unwrap(), None);
}

/// The holder's refresh keeps the version and `acquiredAt` and moves `renewedAt`
/// and `expiresAt` on the server clock.
pub async fn a_refresh_keeps_version_and_acquired_at<H: Harness>(h: &H) {
    let store = h.store();
    let first = acquired(store, "r", "a", LockKind::Update, MINUTE).await;
    wait_past(store, first.renewed_at.unwrap()).await;
    let refreshed = acquired(store, "r", "a", LockKind::Update, MINUTE).await;
    assert_eq!(
        refreshed.version, first.version,
        "a refresh keeps the version"
    );
    assert_eq!(refreshed.acquired_at, first.acquired_at);
    assert!(refreshed.renewed_at > first.renewed_at, "renewedAt moves");
    assert!(refreshed.expires_at > first.expires_at, "expiresAt moves");
    assert_eq!(lease_of(store, "r").await, refreshed);
}

/// A live lease held by someone else is not taken, and the attempt changes nothing.
pub async fn a_lease_held_by_another_is_not_taken<H: Harness>(h: &H) {
    let store = h.store();
    let a = acquired(store, "r", "a", LockKind::Update, MINUTE).await;
    for kind in [LockKind::Update, LockKind::Bulk] {
        assert_eq!(
            try_acquire(store, "r", "b", kind, MINUTE).await,
            AcquireOutcome::HeldByOther,
            "{kind:?} request"
        );
    }
    assert_eq!(lease_of(store, "r").await, a, "the attempts wrote nothing");
}

/// N listeners inserting the same new lease at once: exactly one holds it, every
/// other is told it is held (no error); the same when they race for an expired one.
pub async fn racing_listeners_exactly_one_acquires<H: Harness>(h: &H) {
    const N: usize = 8;
    let store = h.store();
    async fn race<S: Store>(store: &S, lease: Duration, round: &str) -> Vec<String> {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..N {
            let store = store.clone();
            let listener = format!("{round}-{i}");
            set.spawn(async move {
                let outcome = store
                    .acquire(&request("race", &listener, LockKind::Update, lease))
                    .await;
                (listener, outcome)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (listener, outcome) = joined.expect("task");
            match outcome {
                Ok(AcquireOutcome::Acquired(_)) => winners.push(listener),
                Ok(AcquireOutcome::HeldByOther) => {}
                Err(e) => panic!("{listener}: a lost race is not an error: {e}"),
            }
        }
        winners
    }
    // Long enough that no racer can find it expired while the race is still on.
    let winners = race(store, Duration::from_secs(3), "new").await;
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {N} inserts wins: {winners:?}"
    );
    let first = lease_of(store, "race").await;
    assert_eq!(first.holder.as_ref(), Some(&winners[0]));
    assert_eq!(first.version, 0);

    wait_past(store, first.expires_at.unwrap()).await;
    let winners = race(store, MINUTE, "expired").await;
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {N} takeovers wins: {winners:?}"
    );
    let second = lease_of(store, "race").await;
    assert_eq!(second.holder.as_ref(), Some(&winners[0]));
    assert_eq!(second.version, 1, "one takeover, one version step");
}

/// Once its holder's lease has run out on the server clock, another listener takes
/// it with version + 1 and the resume token stays; the old holder's writes are refused.
pub async fn an_expired_lease_is_taken_over_with_the_next_version<H: Harness>(h: &H) {
    let store = h.store();
    let lease = Duration::from_secs(3);
    let a = acquired(store, "r", "a", LockKind::Update, lease).await;
    let token = token_at(1_700_000_000);
    assert_eq!(
        store.commit(&tenure(&a), &token, lease).await.unwrap(),
        TenureWrite::Done
    );
    let committed = lease_of(store, "r").await;
    let b = eventually("b takes the expired lease", || async {
        match try_acquire(store, "r", "b", LockKind::Update, MINUTE).await {
            AcquireOutcome::Acquired(lease) => Some(lease),
            AcquireOutcome::HeldByOther => None,
        }
    })
    .await;
    assert!(
        b.acquired_at >= committed.expires_at,
        "taken at {:?}, before the lease ran out at {:?}",
        b.acquired_at,
        committed.expires_at
    );
    assert_eq!(b.version, a.version + 1);
    assert_eq!(b.holder.as_deref(), Some("b"));
    assert_eq!(b.resume_token, Some(token.clone()), "the token survives");
    assert_eq!(
        store.commit(&tenure(&a), &token, lease).await.unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(
        store.renew(&tenure(&a), lease).await.unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(
        try_acquire(store, "r", "a", LockKind::Update, MINUTE).await,
        AcquireOutcome::HeldByOther,
        "the old holder cannot refresh its way back"
    );
    assert_eq!(lease_of(store, "r").await, b);
}

/// A bulk lease is never taken by an update listener, expired, released or not; a
/// bulk request may refresh it (its holder) or take it once expired (anyone).
pub async fn a_bulk_lease_is_never_taken_by_an_update_listener<H: Harness>(h: &H) {
    let store = h.store();
    let short = Duration::from_millis(300);
    let bulk = acquired(store, "r", "rebuild", LockKind::Bulk, short).await;
    assert_eq!((bulk.kind, bulk.version), (LockKind::Bulk, 0));
    wait_past(store, bulk.expires_at.unwrap()).await;
    assert_eq!(
        try_acquire(store, "r", "w", LockKind::Update, MINUTE).await,
        AcquireOutcome::HeldByOther,
        "an expired bulk lease is not taken by an update listener"
    );
    let refreshed = acquired(store, "r", "rebuild", LockKind::Bulk, short).await;
    assert_eq!(
        (refreshed.kind, refreshed.version),
        (LockKind::Bulk, 0),
        "its holder refreshes it"
    );
    wait_past(store, refreshed.expires_at.unwrap()).await;
    let taken = acquired(store, "r", "rebuild-2", LockKind::Bulk, MINUTE).await;
    assert_eq!(
        (taken.kind, taken.version),
        (LockKind::Bulk, 1),
        "another bulk request takes it once expired"
    );
    assert_eq!(
        store.release(&tenure(&taken)).await.unwrap(),
        TenureWrite::Done
    );
    assert_eq!(
        try_acquire(store, "r", "w", LockKind::Update, MINUTE).await,
        AcquireOutcome::HeldByOther,
        "released, expired, still bulk: still not taken"
    );
    let released = lease_of(store, "r").await;
    assert_eq!(
        (released.kind, released.holder.as_deref(), released.version),
        (LockKind::Bulk, None, 1)
    );
    // Only an operator gives it back to incremental listeners.
    let give_back = operator_change("r", released.version, None);
    let OperatorOutcome::Applied { before, .. } = store
        .operator_update(&give_back, &audit_context("abort-bulk"))
        .await
        .unwrap()
    else {
        panic!("abort-bulk applies");
    };
    assert_eq!(
        before, released,
        "abort-bulk's before is the bulk lease as read"
    );
    let w = acquired(store, "r", "w", LockKind::Update, MINUTE).await;
    assert_eq!((w.kind, w.version), (LockKind::Update, 3));
}

/// Through a whole life of the lease the version never decreases, and it moves by
/// exactly one on every change of holder (a new tenure, even the same listener's,
/// or an operator action) and on nothing else.
pub async fn the_version_bumps_only_on_a_change_of_holder<H: Harness>(h: &H) {
    let store = h.store();
    let long = MINUTE;
    let mut last = -1_i64;
    let mut step = |lease: &Lease, bumps: bool, what: &str| {
        assert!(lease.version >= last, "{what}: the version went back");
        let expected = if bumps { last + 1 } else { last };
        assert_eq!(lease.version, expected, "{what}");
        last = lease.version;
    };
    let a = acquired(store, "r", "a", LockKind::Update, long).await;
    step(&lease_of(store, "r").await, true, "insert");
    acquired(store, "r", "a", LockKind::Update, long).await;
    step(&lease_of(store, "r").await, false, "refresh");
    try_acquire(store, "r", "b", LockKind::Update, long).await;
    step(&lease_of(store, "r").await, false, "refused attempt");
    store
        .commit(&tenure(&a), &token_at(1_700_000_000), long)
        .await
        .unwrap();
    step(&lease_of(store, "r").await, false, "commit");
    store.renew(&tenure(&a), long).await.unwrap();
    step(&lease_of(store, "r").await, false, "renew");
    store.release(&tenure(&a)).await.unwrap();
    step(&lease_of(store, "r").await, false, "release");
    let again = acquired(store, "r", "a", LockKind::Update, long).await;
    step(&again, true, "the same listener's new tenure");
    let change = operator_change("r", again.version, None);
    store
        .operator_update(&change, &audit_context("release"))
        .await
        .unwrap();
    step(&lease_of(store, "r").await, true, "operator update");
    let b = acquired(store, "r", "b", LockKind::Update, long).await;
    step(&b, true, "b takes the released lease");
    acquired(store, "r", "b", LockKind::Update, long).await;
    step(&lease_of(store, "r").await, false, "b refreshes");
    let swap = operator_change("r", b.version, Some("op"));
    store.operator_swap(&swap).await.unwrap();
    step(&lease_of(store, "r").await, true, "operator swap");
    let stale = operator_change("r", b.version, None);
    store.operator_swap(&stale).await.unwrap();
    step(
        &lease_of(store, "r").await,
        false,
        "a swap planned on an old version",
    );
}

/// `expiresAt` is the server's now plus the lease, for acquire, commit and renew;
/// release sets it to the server's now. The server clock is close to ours.
pub async fn expiry_is_measured_on_the_server_clock<H: Harness>(h: &H) {
    let store = h.store();
    let lease = Duration::from_secs(90);
    let t0 = store.server_now().await.unwrap();
    let a = acquired(store, "r", "a", LockKind::Update, lease).await;
    let t1 = store.server_now().await.unwrap();
    within(
        a.expires_at,
        plus(t0, lease),
        plus(t1, lease),
        "acquire's expiresAt",
    );
    within(a.acquired_at, t0, t1, "acquiredAt");
    assert!(!a.is_expired(t1));

    let longer = Duration::from_secs(300);
    let t0 = store.server_now().await.unwrap();
    store
        .commit(&tenure(&a), &token_at(1_700_000_000), longer)
        .await
        .unwrap();
    let t1 = store.server_now().await.unwrap();
    let committed = lease_of(store, "r").await;
    within(
        committed.expires_at,
        plus(t0, longer),
        plus(t1, longer),
        "commit's expiresAt",
    );
    within(committed.committed_at, t0, t1, "committedAt");

    let t0 = store.server_now().await.unwrap();
    store.renew(&tenure(&a), lease).await.unwrap();
    let t1 = store.server_now().await.unwrap();
    let renewed = lease_of(store, "r").await;
    within(
        renewed.expires_at,
        plus(t0, lease),
        plus(t1, lease),
        "renew's expiresAt",
    );
    within(renewed.renewed_at, t0, t1, "renewedAt");

    let t0 = store.server_now().await.unwrap();
    store.release(&tenure(&a)).await.unwrap();
    let t1 = store.server_now().await.unwrap();
    let released = lease_of(store, "r").await;
    within(released.expires_at, t0, t1, "release's expiresAt");
    assert!(released.is_expired(t1));

    let skew = store.server_now().await.unwrap() - Utc::now();
    assert!(
        skew.num_seconds().abs() < 60,
        "server clock {skew} away from ours"
    );
}

// ------------------------------------------------------------------ tenure writes

/// Commit, renew and release write only for `{_id, listenerId, version}`: any other
/// listener or version is a lost lock that changes nothing.
pub async fn tenure_writes_are_filtered_on_holder_and_version<H: Harness>(h: &H) {
    let store = h.store();
    let lease = MINUTE;
    let a = acquired(store, "r", "a", LockKind::Update, lease).await;
    let mine = tenure(&a);
    let wrong = [
        Tenure {
            version: mine.version + 1,
            ..mine.clone()
        },
        Tenure {
            version: mine.version - 1,
            ..mine.clone()
        },
        Tenure {
            listener: "b".into(),
            ..mine.clone()
        },
        Tenure {
            resource: "absent".into(),
            ..mine.clone()
        },
    ];
    let token = token_at(1_700_000_000);
    for other in &wrong {
        assert_eq!(
            store.commit(other, &token, lease).await.unwrap(),
            TenureWrite::LostLock,
            "commit {other:?}"
        );
        assert_eq!(
            store.renew(other, lease).await.unwrap(),
            TenureWrite::LostLock,
            "renew {other:?}"
        );
        assert_eq!(
            store.release(other).await.unwrap(),
            TenureWrite::LostLock,
            "release {other:?}"
        );
    }
    assert_eq!(
        lease_of(store, "r").await,
        a,
        "refused writes changed nothing"
    );
    assert_eq!(
        store.get("absent").await.unwrap(),
        None,
        "nor created anything"
    );

    assert_eq!(
        store.commit(&mine, &token, lease).await.unwrap(),
        TenureWrite::Done
    );
    let committed = lease_of(store, "r").await;
    assert_eq!(committed.resume_token, Some(token.clone()));
    assert!(committed.committed_at.is_some());
    assert_eq!(
        (committed.holder.as_deref(), committed.version),
        (Some("a"), a.version)
    );

    assert_eq!(store.renew(&mine, lease).await.unwrap(), TenureWrite::Done);
    let renewed = lease_of(store, "r").await;
    assert_eq!(
        renewed.resume_token,
        Some(token.clone()),
        "renew keeps the token"
    );
    assert_eq!(renewed.committed_at, committed.committed_at);

    assert_eq!(store.release(&mine).await.unwrap(), TenureWrite::Done);
    let released = lease_of(store, "r").await;
    assert_eq!(released.holder, None);
    assert_eq!(released.version, a.version, "the next holder bumps it");
    assert_eq!(released.resume_token, Some(token.clone()));
    // The tenure is over: every write of it is now refused.
    assert_eq!(
        store.commit(&mine, &token, lease).await.unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(
        store.renew(&mine, lease).await.unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(store.release(&mine).await.unwrap(), TenureWrite::LostLock);
    assert_eq!(lease_of(store, "r").await, released);
}

/// A released lease goes at once to the next listener with version + 1 and the
/// committed token; the old holder has lost the lock, the new one commits.
pub async fn the_token_survives_a_hand_over<H: Harness>(h: &H) {
    let store = h.store();
    let lease = MINUTE;
    let a = acquired(store, "r", "a", LockKind::Update, lease).await;
    let token = token_at(1_700_000_000);
    store.commit(&tenure(&a), &token, lease).await.unwrap();
    store.release(&tenure(&a)).await.unwrap();
    let b = acquired(store, "r", "b", LockKind::Update, lease).await;
    assert_eq!(b.version, a.version + 1);
    assert_eq!(b.resume_token, Some(token.clone()), "the token survives");
    let later = token_at(1_700_000_100);
    assert_eq!(
        store.commit(&tenure(&a), &later, lease).await.unwrap(),
        TenureWrite::LostLock
    );
    assert_eq!(
        store.release(&tenure(&a)).await.unwrap(),
        TenureWrite::LostLock,
        "the old holder cannot release the new holder's lease"
    );
    assert_eq!(
        lease_of(store, "r").await,
        b,
        "the refused writes changed nothing"
    );
    assert_eq!(
        store.commit(&tenure(&b), &later, lease).await.unwrap(),
        TenureWrite::Done
    );
    assert_eq!(lease_of(store, "r").await.resume_token, Some(later));
}

async fn next_change<W: LeaseWatch>(watch: &mut W) -> streamward::store::LeaseChange {
    tokio::time::timeout(DEADLINE, watch.changed())
        .await
        .expect("a lease change within the deadline")
        .expect("watch")
}

/// The lease watch reports every hand-over of its resource, and nothing of others.
pub async fn a_lease_watch_sees_hand_overs<H: Harness>(h: &H) {
    let store = h.store();
    let mut watch = store.watch(LeaseScope::One("r".into())).await.unwrap();
    acquired(store, "other", "x", LockKind::Update, MINUTE).await;
    let a = acquired(store, "r", "a", LockKind::Update, MINUTE).await;
    let change = next_change(&mut watch).await;
    assert_eq!(change.resource, "r", "the other resource is not reported");
    assert_eq!(change.lease.unwrap().holder.as_deref(), Some("a"));
    store.release(&tenure(&a)).await.unwrap();
    let change = next_change(&mut watch).await;
    assert_eq!(change.resource, "r");
    assert_eq!(change.lease.unwrap().holder, None);
}

// ------------------------------------------------------------------ fenced writes

fn lease_fence(version: i64) -> WriteFence {
    WriteFence::Lease(Fence {
        resource: "r".into(),
        version,
    })
}

async fn find<S: DocumentStore>(store: &S, ns: &Namespace, id: &Bson) -> Option<Document> {
    store.find_one(ns, id).await.expect("find_one")
}

/// The lease fence admits a write where the stored `_fence` ≤ the lease version (the
/// same holder writes again) or there is none; an older version is stale and
/// changes nothing.
pub async fn a_lease_fenced_upsert_refuses_older_versions<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("outbox");
    let id = Bson::String("m1".into());
    // (lease version, value written, expected outcome), in order.
    for (version, x, expected) in [
        (2, 1, WriteOutcome::Applied),
        (2, 2, WriteOutcome::Applied),
        (2, 2, WriteOutcome::Applied),
        (1, 3, WriteOutcome::Stale),
        (3, 4, WriteOutcome::Applied),
        (2, 5, WriteOutcome::Stale),
    ] {
        let outcome = store
            .fenced_upsert(&ns, &id, &lease_fence(version), doc! {"x": x})
            .await
            .unwrap();
        assert_eq!(outcome, expected, "lease version {version} writing x = {x}");
    }
    assert_eq!(
        find(store, &ns, &id).await,
        Some(doc! {"_id": "m1", "x": 4, "_fence": 3_i64})
    );
    // A document written without a fence is admitted, and keeps its other fields.
    let plain = Bson::String("m2".into());
    store
        .put(&ns, doc! {"_id": "m2", "keep": true})
        .await
        .unwrap();
    assert_eq!(
        store
            .fenced_upsert(&ns, &plain, &lease_fence(0), doc! {"x": 1})
            .await
            .unwrap(),
        WriteOutcome::Applied
    );
    assert_eq!(
        find(store, &ns, &plain).await,
        Some(doc! {"_id": "m2", "keep": true, "x": 1, "_fence": 0_i64})
    );
}

/// The source-version fence admits a write only where the stored `_v` < the
/// version: a replay of the same version is stale, like an older one.
pub async fn a_source_versioned_upsert_refuses_replays<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("animals");
    let id = Bson::String("rex".into());
    // (source version, value written, expected outcome), in order.
    for (version, n, expected) in [
        (3, 3, WriteOutcome::Applied),
        (3, 9, WriteOutcome::Stale),
        (2, 9, WriteOutcome::Stale),
        (4, 4, WriteOutcome::Applied),
    ] {
        let outcome = store
            .fenced_upsert(&ns, &id, &WriteFence::SourceVersion(version), doc! {"n": n})
            .await
            .unwrap();
        assert_eq!(
            outcome, expected,
            "source version {version} writing n = {n}"
        );
    }
    assert_eq!(
        find(store, &ns, &id).await,
        Some(doc! {"_id": "rex", "n": 4, "_v": 4_i64})
    );
    // The two fences are separate fields: a lease fence ignores `_v`.
    assert_eq!(
        store
            .fenced_upsert(&ns, &id, &lease_fence(0), doc! {"n": 5})
            .await
            .unwrap(),
        WriteOutcome::Applied
    );
    assert_eq!(
        find(store, &ns, &id).await,
        Some(doc! {"_id": "rex", "n": 5, "_v": 4_i64, "_fence": 0_i64})
    );
}

/// `_id` belongs to the id argument: fields carrying one are refused and nothing is written.
pub async fn a_fenced_upsert_refuses_an_id_in_its_fields<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("outbox");
    let id = Bson::String("m1".into());
    let refused = store
        .fenced_upsert(&ns, &id, &lease_fence(1), doc! {"_id": "m2", "x": 1})
        .await;
    assert!(
        matches!(refused, Err(StoreError::InvalidArgument(_))),
        "{refused:?}"
    );
    assert_eq!(store.find_all(&ns).await.unwrap(), Vec::<Document>::new());
}

/// Each member carries its own source version (`v` < version admits; equal is a
/// replay); `counts` is recomputed from the members in the same write, members
/// without a value are not counted, and member names with `.` or `$` are safe.
pub async fn a_member_upsert_fences_each_member_and_recounts<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("aggregates");
    // (member, its version, its location, expected outcome), in order.
    for (member, version, location, expected) in [
        ("a.b$c", 1, Some("house"), WriteOutcome::Applied),
        ("rex", 1, Some("house"), WriteOutcome::Applied),
        ("rex", 1, Some("yard"), WriteOutcome::Stale),
        ("rex", 0, Some("yard"), WriteOutcome::Stale),
        ("rex", 2, Some("backyard"), WriteOutcome::Applied),
        ("kiki", 5, None, WriteOutcome::Applied),
    ] {
        let outcome = store
            .fenced_member_upsert(&ns, "cute", member, version, location)
            .await
            .unwrap();
        assert_eq!(outcome, expected, "{member} v{version} at {location:?}");
    }
    let id = Bson::String("cute".into());
    assert_eq!(
        find(store, &ns, &id).await,
        Some(doc! {
            "_id": "cute",
            "members": {
                "a.b$c": {"v": 1_i64, "value": "house"},
                "rex": {"v": 2_i64, "value": "backyard"},
                "kiki": {"v": 5_i64, "value": null},
            },
            "counts": {"house": 1, "backyard": 1},
        })
    );
    // Moving the last member away from a value drops it from the counts.
    assert_eq!(
        store
            .fenced_member_upsert(&ns, "cute", "rex", 3, None)
            .await
            .unwrap(),
        WriteOutcome::Applied
    );
    let tag = find(store, &ns, &id).await.unwrap();
    assert_eq!(tag.get_document("counts").unwrap(), &doc! {"house": 1});
    // Plain writes: replace_all leaves exactly the documents given.
    store
        .replace_all(&ns, vec![doc! {"_id": "z"}, doc! {"_id": "y", "n": 1}])
        .await
        .unwrap();
    assert_eq!(
        store.find_all(&ns).await.unwrap(),
        vec![doc! {"_id": "y", "n": 1}, doc! {"_id": "z"}],
        "sorted by _id"
    );
}

// ------------------------------------------------------------------ change feed

fn feed_options() -> FeedOptions {
    FeedOptions {
        batch_size: 10,
        max_await: Duration::from_millis(200),
    }
}

/// Reads until at least `n` events have arrived; every batch carries a resume token.
pub async fn read_events<S: ChangeStream>(stream: &mut S, n: usize) -> Vec<ChangeEvent> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {n} events, got {seen:?}"
        );
        let batch = stream.next_batch().await.expect("next_batch");
        assert!(
            batch.resume_token.is_some(),
            "every batch has a resume token"
        );
        if let Some(last) = batch.events.last() {
            assert_eq!(batch.resume_token.as_ref(), Some(&last.token));
        }
        seen.extend(batch.events);
    }
    seen
}

/// One more empty read: nothing else is waiting on the stream.
async fn assert_no_more<S: ChangeStream>(stream: &mut S, what: &str) {
    let batch = stream.next_batch().await.expect("next_batch");
    assert_eq!(batch.events, Vec::<ChangeEvent>::new(), "{what}");
}

/// Writes with `write` and returns the one event it produced on `stream`.
async fn event_of<S: ChangeStream, F: Future<Output = ()>>(
    stream: &mut S,
    write: F,
) -> ChangeEvent {
    write.await;
    let mut events = read_events(stream, 1).await;
    assert_eq!(events.len(), 1, "one write, one event: {events:?}");
    events.remove(0)
}

async fn put<S: DocumentStore>(store: &S, ns: &Namespace, document: Document) {
    store.put(ns, document).await.expect("put");
}

/// Events say what happened to which document of which namespace, with the
/// document after the change (none for a delete); tokens decode to their time and
/// times strictly increase. Writes elsewhere are not on the stream.
pub async fn change_events_carry_operation_key_and_document<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("events");
    let other = h.ns("elsewhere");
    let mut stream = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let mut events = Vec::new();
    events.push(event_of(&mut stream, put(store, &ns, doc! {"_id": 1, "n": 1})).await);
    // A write that changes nothing is no change: only the second put is an event.
    events.push(
        event_of(&mut stream, async {
            put(store, &ns, doc! {"_id": 1, "n": 1}).await;
            put(store, &ns, doc! {"_id": 1, "n": 2}).await;
        })
        .await,
    );
    events.push(
        event_of(&mut stream, async {
            put(store, &other, doc! {"_id": 1}).await;
            let id = Bson::Int32(1);
            let fence = WriteFence::SourceVersion(5);
            let outcome = store.fenced_upsert(&ns, &id, &fence, doc! {"n": 3}).await;
            assert_eq!(outcome.unwrap(), WriteOutcome::Applied);
        })
        .await,
    );
    events.push(
        event_of(&mut stream, async {
            let outcome = store
                .fenced_member_upsert(&ns, "tag", "rex", 1, Some("house"))
                .await;
            assert_eq!(outcome.unwrap(), WriteOutcome::Applied);
        })
        .await,
    );
    store
        .replace_all(&ns, vec![doc! {"_id": 2}, doc! {"_id": "tag"}])
        .await
        .unwrap();
    events.extend(read_events(&mut stream, 3).await);
    let seen: Vec<(OperationType, Document, Option<Document>)> = events
        .iter()
        .map(|e| {
            (
                e.operation.clone(),
                e.document_key.clone(),
                e.full_document.clone(),
            )
        })
        .collect();
    let member_doc = doc! {
        "_id": "tag",
        "members": {"rex": {"v": 1_i64, "value": "house"}},
        "counts": {"house": 1},
    };
    assert_eq!(
        seen,
        vec![
            (
                OperationType::Insert,
                doc! {"_id": 1},
                Some(doc! {"_id": 1, "n": 1})
            ),
            (
                OperationType::Replace,
                doc! {"_id": 1},
                Some(doc! {"_id": 1, "n": 2})
            ),
            (
                OperationType::Update,
                doc! {"_id": 1},
                Some(doc! {"_id": 1, "n": 3, "_v": 5_i64})
            ),
            (OperationType::Insert, doc! {"_id": "tag"}, Some(member_doc)),
            (
                OperationType::Insert,
                doc! {"_id": 2},
                Some(doc! {"_id": 2})
            ),
            (
                OperationType::Replace,
                doc! {"_id": "tag"},
                Some(doc! {"_id": "tag"})
            ),
            (OperationType::Delete, doc! {"_id": 1}, None),
        ]
    );
    for event in &events {
        assert_eq!(event.ns, ns);
        assert_eq!(
            event.token.time(),
            Some(event.cluster_time),
            "tokens decode"
        );
    }
    for pair in events.windows(2) {
        assert!(pair[0].cluster_time < pair[1].cluster_time);
    }
    assert_no_more(&mut stream, "nothing from the other namespace").await;
}

/// `After(token)` starts with the next event, `At(time)` with the event at that
/// time (inclusive), `At(oplog_window().first)` with the oldest; all three deliver
/// the same events with the same tokens.
pub async fn streams_open_after_a_token_at_a_time_and_at_the_oldest_entry<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("orders");
    let mut live = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let mut written = Vec::new();
    for i in 1..=3 {
        written.push(event_of(&mut live, put(store, &ns, doc! {"_id": i})).await);
    }
    let keys = |events: &[ChangeEvent]| -> Vec<(ResumeToken, Document)> {
        events
            .iter()
            .map(|e| (e.token.clone(), e.document_key.clone()))
            .collect()
    };
    let starts = [
        (StartPoint::After(written[0].token.clone()), &written[1..]),
        (StartPoint::At(written[1].cluster_time), &written[1..]),
        (StartPoint::At(written[0].cluster_time), &written[..]),
        (
            StartPoint::At(store.oplog_window().await.unwrap().first),
            &written[..],
        ),
    ];
    for (start, expected) in starts {
        let mut stream = store
            .open(&ns, start.clone(), feed_options())
            .await
            .unwrap();
        let got = read_events(&mut stream, expected.len()).await;
        assert_eq!(keys(&got), keys(expected), "opened {start:?}");
        assert_no_more(&mut stream, "nothing after the last write").await;
    }
    let mut stream = store
        .open(
            &ns,
            StartPoint::After(written[2].token.clone()),
            feed_options(),
        )
        .await
        .unwrap();
    assert_no_more(&mut stream, "after the last event").await;
}

/// An idle stream still returns a resume token with every empty batch, and it
/// advances past writes to other collections; resuming from it skips nothing new.
pub async fn an_idle_stream_returns_an_advancing_post_batch_token<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("quiet");
    let other = h.ns("busy");
    put(store, &ns, doc! {"_id": "before"}).await;
    let mut stream = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let first = stream.next_batch().await.unwrap();
    assert_eq!(first.events, Vec::<ChangeEvent>::new());
    let idle = first
        .resume_token
        .expect("an empty batch has a resume token");
    let idle_time = idle.time().expect("the post-batch token decodes");
    put(store, &other, doc! {"_id": 1}).await;
    let written = store.oplog_window().await.unwrap().last;
    assert!(written > idle_time, "the write is after the idle token");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let advanced = loop {
        let batch = stream.next_batch().await.expect("next_batch");
        assert_eq!(batch.events, Vec::<ChangeEvent>::new(), "nothing on {ns}");
        let token = batch.resume_token.expect("resume token");
        if token.time().expect("decodes") >= written {
            break token;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the post-batch token did not pass the other write at {written}"
        );
    };
    // Resuming from the idle token sees the next change and nothing before it.
    let mut resumed = store
        .open(&ns, StartPoint::After(advanced), feed_options())
        .await
        .unwrap();
    let event = event_of(&mut resumed, put(store, &ns, doc! {"_id": "after"})).await;
    assert_eq!(event.document_key, doc! {"_id": "after"});
}

/// The oplog window spans first ≤ last, its end and the cluster time move with every
/// write, and a write's time lies after the window read before it.
pub async fn the_oplog_window_and_cluster_time_follow_writes<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("w");
    put(store, &ns, doc! {"_id": 0}).await;
    let mut stream = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let before = store.oplog_window().await.unwrap();
    assert!(before.first <= before.last, "{before:?}");
    let event = event_of(&mut stream, put(store, &ns, doc! {"_id": 1})).await;
    assert!(
        event.cluster_time > before.last,
        "the write is after the window read before it"
    );
    let after = store.oplog_window().await.unwrap();
    assert!(after.first <= after.last, "{after:?}");
    assert!(
        after.last >= event.cluster_time,
        "the window's end moved with the write"
    );
    assert!(
        after.first <= event.cluster_time,
        "the write is inside the window"
    );
    let now = store.cluster_time().await.unwrap();
    assert!(
        now >= event.cluster_time,
        "cluster time {now:?} behind a write"
    );
}

/// `count_changes` counts only the namespace's entries in `from..=to`, at most `limit`.
pub async fn count_changes_is_bounded_by_namespace_range_and_limit<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("counted");
    let other = h.ns("ignored");
    let mut stream = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let mut times = Vec::new();
    for i in 0..4 {
        put(store, &other, doc! {"_id": i}).await;
        times.push(
            event_of(&mut stream, put(store, &ns, doc! {"_id": i}))
                .await
                .cluster_time,
        );
    }
    let before_first = ClusterTime::from_u64(times[0].as_u64() - 1);
    // A range that starts shortly before the writes: a real oplog has no index to
    // make a range from the beginning of time cheap.
    let earlier = ClusterTime::new(times[0].secs - 5, 0);
    let count = |from, to, limit| store.count_changes(&ns, from, to, limit);
    assert_eq!(
        count(times[0], times[3], 100).await.unwrap(),
        4,
        "both ends inclusive"
    );
    assert_eq!(count(times[1], times[2], 100).await.unwrap(), 2);
    assert_eq!(count(times[2], times[2], 100).await.unwrap(), 1);
    assert_eq!(
        count(times[0], times[3], 3).await.unwrap(),
        3,
        "capped at the limit"
    );
    assert_eq!(
        count(earlier, before_first, 100).await.unwrap(),
        0,
        "nothing before the first write"
    );
    let everything = store
        .count_changes(&ns, earlier, store.cluster_time().await.unwrap(), 100)
        .await
        .unwrap();
    assert_eq!(
        everything, 4,
        "the other namespace's writes are not counted"
    );
}

/// On a history that never lost an entry, a start before its first entry is not
/// history lost: the stream starts from the beginning (as a real replica set does).
pub async fn a_start_before_a_history_that_never_rolled_is_not_lost<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("early");
    put(store, &ns, doc! {"_id": 0}).await;
    assert!(
        h.history_never_rolled().await,
        "precondition: the history has never lost an entry"
    );
    let first = store.oplog_window().await.unwrap().first;
    let start = ClusterTime::new(first.secs.saturating_sub(60), 0);
    let mut stream = store
        .open(&ns, StartPoint::At(start), feed_options())
        .await
        .expect("a start before the first entry of a log that never rolled over opens");
    let events = read_events(&mut stream, 1).await;
    assert_eq!(
        events[0].document_key,
        doc! {"_id": 0},
        "from the beginning: the write made before opening"
    );
    let event = event_of(&mut stream, put(store, &ns, doc! {"_id": 1})).await;
    assert_eq!(event.document_key, doc! {"_id": 1});
}

// ------------------------------------------------------------------ history lost (small history)

fn is_lost<T>(result: &Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::HistoryLost { .. }))
}

/// A resume point whose history fell off is lost on opening (or the first read, as a
/// real server may report it on the first getMore), by token and by time; those
/// entries are no longer counted, and a start inside the window still opens.
pub async fn history_that_fell_off_is_lost_on_open<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("animals");
    let mut stream = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let event = event_of(&mut stream, put(store, &ns, doc! {"_id": 1})).await;
    drop(stream);
    assert_eq!(
        store
            .count_changes(&ns, event.cluster_time, event.cluster_time, 10)
            .await
            .unwrap(),
        1
    );
    h.roll_history_past(event.cluster_time).await;
    for start in [
        StartPoint::After(event.token.clone()),
        StartPoint::At(event.cluster_time),
    ] {
        let lost = match store.open(&ns, start.clone(), feed_options()).await {
            Err(e) => Err(e),
            Ok(mut stream) => stream.next_batch().await.map(|_| ()),
        };
        assert!(is_lost(&lost), "{start:?}: {lost:?}");
    }
    assert_eq!(
        store
            .count_changes(&ns, event.cluster_time, event.cluster_time, 10)
            .await
            .unwrap(),
        0,
        "entries that fell off are not counted"
    );
    assert!(store.oplog_window().await.unwrap().first > event.cluster_time);
    let now = store.cluster_time().await.unwrap();
    let mut inside = store
        .open(&ns, StartPoint::At(now), feed_options())
        .await
        .expect("a start inside the window opens");
    inside.next_batch().await.expect("and reads");
}

/// A stream that is not read while its position falls off the history reports
/// history lost on its next read, not a silent jump.
pub async fn history_lost_under_a_paused_stream_is_reported_on_the_next_read<H: Harness>(h: &H) {
    let store = h.store();
    let ns = h.ns("paused");
    put(store, &ns, doc! {"_id": 0}).await;
    let mut stream = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let idle = stream.next_batch().await.unwrap();
    assert_eq!(idle.events, Vec::<ChangeEvent>::new());
    let position = idle
        .resume_token
        .and_then(|t| t.time())
        .expect("a post-batch token that decodes");
    h.roll_history_past(position).await;
    put(store, &ns, doc! {"_id": 1}).await;
    let read = stream.next_batch().await;
    assert!(is_lost(&read), "{read:?}");
}

// ------------------------------------------------------------------ operator actions

/// An operator compare-and-swap on the planned version applies with version + 1,
/// its cluster time lies between the writes before and after it, and its audit
/// record (readable by id and newest in the log) holds the lease before and after.
pub async fn an_operator_update_applies_with_the_next_version_and_an_audit_record<H: Harness>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("data");
    let a = acquired(store, "r", "a", LockKind::Update, MINUTE).await;
    let token = token_at(1_700_000_000);
    store.commit(&tenure(&a), &token, MINUTE).await.unwrap();
    let planned = lease_of(store, "r").await;
    let mut stream = store
        .open(&ns, StartPoint::Now, feed_options())
        .await
        .unwrap();
    let before_write = event_of(&mut stream, put(store, &ns, doc! {"_id": 1})).await;

    let resume_at = ClusterTime::new(1_700_000_000, 7);
    let change = OperatorChange {
        resource: "r".into(),
        expected_version: planned.version,
        holder: Some("op".into()),
        expires_in: MINUTE,
        kind: LockKind::Bulk,
        resume: ResumeChange::Set {
            token: None,
            at: Some(resume_at),
        },
        note: "rebuild by contract".into(),
    };
    let context = audit_context("rebuild");
    let t0 = store.server_now().await.unwrap();
    let OperatorOutcome::Applied {
        operation_time,
        audit_id,
        ..
    } = store.operator_update(&change, &context).await.unwrap()
    else {
        panic!("the compare-and-swap on the current version applies");
    };
    let t1 = store.server_now().await.unwrap();
    let after_write = event_of(&mut stream, put(store, &ns, doc! {"_id": 2})).await;
    assert!(
        before_write.cluster_time < operation_time && operation_time < after_write.cluster_time,
        "the operator write's time {operation_time:?} lies strictly between {:?} and {:?}",
        before_write.cluster_time,
        after_write.cluster_time
    );

    let now = lease_of(store, "r").await;
    assert_eq!(now.version, planned.version + 1);
    assert_eq!(now.holder.as_deref(), Some("op"));
    assert_eq!(now.kind, LockKind::Bulk);
    assert_eq!(now.resume_token, None);
    assert_eq!(now.resume_at, Some(resume_at));
    assert_eq!(now.note.as_deref(), Some("rebuild by contract"));
    within(
        now.expires_at,
        plus(t0, MINUTE),
        plus(t1, MINUTE),
        "expiresAt",
    );
    within(now.acquired_at, t0, t1, "naming a holder acquires for it");
    assert_eq!(
        store.commit(&tenure(&a), &token, MINUTE).await.unwrap(),
        TenureWrite::LostLock,
        "the fenced-out holder's commit"
    );
    assert_eq!(
        store.renew(&tenure(&a), MINUTE).await.unwrap(),
        TenureWrite::LostLock
    );

    let record = store
        .audit_record(&audit_id)
        .await
        .unwrap()
        .expect("the audit record is readable by its id");
    assert_eq!(record.operator, context.operator);
    assert_eq!(record.action, context.action);
    assert_eq!(record.reason, context.reason);
    assert_eq!(record.resource, "r");
    assert_eq!(record.outcome, "applied");
    assert_eq!(
        record.before.as_ref(),
        Some(&planned),
        "before: the lease as read"
    );
    assert_eq!(
        record.after.as_ref(),
        Some(&now),
        "after: the lease as read"
    );
    within(
        Some(record.at),
        t0 - TimeDelta::seconds(5),
        t1 + TimeDelta::seconds(5),
        "at",
    );
    let log = store.audit_log(10).await.unwrap();
    assert_eq!(log.first().map(|r| &r.id), Some(&audit_id), "newest first");
    assert_eq!(log.len(), 1);
    assert_eq!(store.audit_record("no-such-record").await.unwrap(), None);
}

/// A compare-and-swap planned on a version that moved on (or a lease that does not
/// exist) writes nothing, no lease change and no audit record, and says what is there.
pub async fn an_operator_change_planned_on_an_old_version_writes_nothing<H: Harness>(h: &H) {
    let store = h.store();
    let a = acquired(store, "r", "a", LockKind::Update, MINUTE).await;
    store.release(&tenure(&a)).await.unwrap();
    let b = acquired(store, "r", "b", LockKind::Update, MINUTE).await;
    let stale = operator_change("r", a.version, None);
    let context = audit_context("release");
    assert_eq!(
        store.operator_update(&stale, &context).await.unwrap(),
        OperatorOutcome::Changed {
            current: Some(b.clone())
        }
    );
    assert_eq!(
        store.operator_swap(&stale).await.unwrap(),
        SwapOutcome::Changed {
            current: Some(b.clone())
        }
    );
    let ahead = operator_change("r", b.version + 1, None);
    assert!(matches!(
        store.operator_update(&ahead, &context).await.unwrap(),
        OperatorOutcome::Changed { .. }
    ));
    let missing = operator_change("absent", 0, None);
    assert_eq!(
        store.operator_update(&missing, &context).await.unwrap(),
        OperatorOutcome::Changed { current: None }
    );
    assert_eq!(
        store.operator_swap(&missing).await.unwrap(),
        SwapOutcome::Changed { current: None }
    );
    assert_eq!(lease_of(store, "r").await, b, "the lease is untouched");
    assert_eq!(
        store.get("absent").await.unwrap(),
        None,
        "nothing was created"
    );
    assert_eq!(
        store.audit_log(10).await.unwrap(),
        vec![],
        "and nothing audited"
    );
}

/// `operator_swap` applies like `operator_update` (version + 1, the change as
/// asked) and writes no audit record; `append_audit` then adds exactly one.
pub async fn an_operator_swap_applies_without_an_audit_record<H: Harness>(h: &H) {
    let store = h.store();
    let a = acquired(store, "r", "a", LockKind::Update, MINUTE).await;
    let change = OperatorChange {
        kind: LockKind::Bulk,
        ..operator_change("r", a.version, Some("rebuild"))
    };
    let SwapOutcome::Applied { before, after, .. } = store.operator_swap(&change).await.unwrap()
    else {
        panic!("the swap applies");
    };
    let now = lease_of(store, "r").await;
    assert_eq!(before, a, "before: the lease as it was");
    assert_eq!(after, now, "after: the lease as it is");
    assert_eq!(now.version, a.version + 1);
    assert_eq!(
        (now.holder.as_deref(), now.kind),
        (Some("rebuild"), LockKind::Bulk)
    );
    assert_eq!(
        store.audit_log(10).await.unwrap(),
        vec![],
        "no audit record"
    );

    let entry = streamward::store::AuditEntry {
        resource: "r".into(),
        context: audit_context("rebuild"),
        before: Some(a.clone()),
        after: Some(now.clone()),
        outcome: "applied: 3 documents".into(),
    };
    let id = store.append_audit(&entry).await.unwrap();
    let record = store.audit_record(&id).await.unwrap().expect("appended");
    assert_eq!(
        (record.before, record.after, record.outcome),
        (Some(a), Some(now), "applied: 3 documents".to_string())
    );
    assert_eq!(store.audit_log(10).await.unwrap().len(), 1);
}
