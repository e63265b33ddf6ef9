//! Operator compare-and-swap and the audit log, intent first (docs/protocol.md §3.5).

use std::time::Duration;

use crate::model::{AuditState, ClusterTime, Lease, LockKind, ResumeToken, TokenKind};
use crate::store::AuditLog;
use crate::store::OperatorStore;
use crate::store::{
    AuditContext, AuditFinish, AuditIntent, ChangeFeed, DocumentStore, LeaseStore, OperatorChange,
    ResumeChange, SkippedChange, SkippedLog, StartPoint, StoreError, SwapOutcome, Tenure,
};
use bson::doc;

use super::audited::{apply_audited, Audited};
use super::support::*;
use super::Harness;

const LONG: Duration = Duration::from_secs(60);

fn context(action: &str) -> AuditContext {
    AuditContext {
        operator: "op@host".into(),
        action: action.into(),
        reason: Some(format!("contract check: {action}")),
    }
}

/// A held lease with a committed token, the usual target of an operator action.
async fn held_lease(store: &impl LeaseStore) -> Lease {
    let lease = acquired(store, &update("res", "a", LONG)).await;
    let token = ResumeToken::encode(ClusterTime::new(1_000, 1), TokenKind::Event, 1);
    store
        .commit(&Tenure::of(&lease).unwrap(), &token, LONG)
        .await
        .unwrap();
    lease_of(store, "res").await
}

fn rewind_to(expected_version: i64, holder: Option<&str>, at: ClusterTime) -> OperatorChange {
    OperatorChange {
        resource: "res".into(),
        expected_version,
        holder: holder.map(str::to_string),
        expires_in: LONG,
        kind: LockKind::Update,
        resume: ResumeChange::Set {
            token: None,
            at: Some(at),
        },
        note: "rewind".into(),
        protocol: Default::default(),
    }
}

pub async fn an_operator_change_applies_with_the_next_version_then_its_audit<
    H: Harness<Store: OperatorStore + LeaseStore + ChangeFeed + SkippedLog + AuditLog + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let lease = held_lease(store).await;
    let at = ClusterTime::new(2_000, 3);
    let change = rewind_to(lease.version, Some("b"), at);
    let audits_before = store.audit_log(100).await.unwrap().items.len();
    let time_before = store.cluster_time().await.unwrap();
    let now_before = server_now(store).await;
    let Audited { swap, audit_id } =
        apply_audited(store, &change, Some(&lease), &context("rewind")).await;
    let now_after = server_now(store).await;
    let time_after = store.cluster_time().await.unwrap();
    let SwapOutcome::Applied {
        before,
        after,
        operation_time: Some(operation_time),
    } = swap
    else {
        panic!(
            "the compare-and-swap on the current version applies, with its cluster time: {swap:?}"
        );
    };
    assert_eq!(before, lease, "before is the lease as it was");
    let stored = lease_of(store, "res").await;
    assert_eq!(after, stored, "after is the lease as stored");
    assert_eq!(after.version, lease.version + 1, "always version + 1");
    assert_eq!(
        (
            after.holder.as_deref(),
            &after.resume_token,
            after.resume_at
        ),
        (Some("b"), &None, Some(at))
    );
    assert_eq!(after.note.as_deref(), Some("rewind"));
    assert_between(
        "acquiredAt of the named holder",
        after.acquired_at,
        now_before,
        now_after,
    );
    assert_eq!(after.renewed_at, after.acquired_at);
    assert_eq!(after.expires_at, after.acquired_at.map(|t| plus(t, LONG)));
    assert_eq!(after.committed_at, lease.committed_at, "not a commit");
    assert!(
        time_before < operation_time && operation_time <= time_after,
        "the operation time {operation_time:?} is the write's cluster time, between {time_before:?} and {time_after:?}"
    );

    let record = store
        .audit_record(&audit_id)
        .await
        .unwrap()
        .expect("the audit record is readable by its id");
    assert_eq!(record.id, audit_id);
    assert_eq!(
        (
            record.operator.as_str(),
            record.action.as_str(),
            record.resource.as_str(),
            record.reason.as_deref(),
            record.outcome.as_str()
        ),
        (
            "op@host",
            "rewind",
            "res",
            Some("contract check: rewind"),
            "applied"
        )
    );
    assert_eq!(
        (record.before.as_ref(), record.after.as_ref()),
        (Some(&before), Some(&after)),
        "the record keeps the full prior resume point, so it can be undone"
    );
    assert_eq!(record.state, AuditState::Applied);
    let intended = record.intended.as_ref().expect("the intended lease");
    assert_eq!(
        (
            intended.version,
            intended.holder.as_deref(),
            intended.resume_at
        ),
        (after.version, after.holder.as_deref(), after.resume_at),
        "the pending record said what the write meant to leave"
    );
    assert!(
        record.at <= now_after,
        "written before the swap's reply: {} vs {now_after}",
        record.at
    );
    let log = store.audit_log(100).await.unwrap().items;
    assert_eq!(log.len(), audits_before + 1, "one record per action");
    assert_eq!(log[0], record, "newest first");
}

pub async fn operator_swap_applies_without_an_audit_record<
    H: Harness<Store: OperatorStore + LeaseStore + ChangeFeed + SkippedLog + AuditLog + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let lease = held_lease(store).await;
    let bulk = OperatorChange {
        resource: "res".into(),
        expected_version: lease.version,
        holder: Some("operator".into()),
        expires_in: LONG,
        kind: LockKind::Bulk,
        resume: ResumeChange::Keep,
        note: "rebuild".into(),
        protocol: Default::default(),
    };
    let SwapOutcome::Applied {
        before,
        after,
        operation_time: Some(operation_time),
    } = store.operator_swap(&bulk).await.unwrap()
    else {
        panic!("the swap on the current version applies, with its cluster time");
    };
    assert_eq!(before, lease);
    assert_eq!(after, lease_of(store, "res").await);
    assert_eq!(
        (after.kind, after.version, after.holder.as_deref()),
        (LockKind::Bulk, lease.version + 1, Some("operator"))
    );
    assert_eq!(
        (&after.resume_token, after.resume_at),
        (&lease.resume_token, lease.resume_at),
        "Keep keeps the resume point"
    );
    assert!(
        store.audit_log(10).await.unwrap().items.is_empty(),
        "no audit record"
    );

    // Every change after the swap is after its operation time (a rebuild's T0).
    let ns = h.ns("animals");
    store.put(&ns, doc! {"_id": "after-t0"}).await.unwrap();
    let mut stream = store
        .open(&ns, StartPoint::At(operation_time), options())
        .await
        .unwrap();
    let events = read_through(&mut stream, "after-t0").await;
    assert!(
        events
            .iter()
            .all(|e| e.cluster_time.unwrap() > operation_time),
        "a write made after the swap has a later cluster time than {operation_time:?}: {events:?}"
    );
}

pub async fn a_changed_lease_makes_operator_writes_write_nothing<
    H: Harness<Store: OperatorStore + LeaseStore + ChangeFeed + SkippedLog + AuditLog + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let lease = held_lease(store).await;
    let stale = rewind_to(lease.version - 1, None, ClusterTime::new(3, 0));
    let Audited { swap, audit_id } = apply_audited(store, &stale, None, &context("rewind")).await;
    assert!(
        matches!(&swap, SwapOutcome::Changed { current: Some(current), .. } if *current == lease),
        "a version that moved on since planning: nothing written, the current lease reported: {swap:?}"
    );
    let record = store.audit_record(&audit_id).await.unwrap();
    assert_eq!(
        record.map(|r| r.state),
        Some(AuditState::NotApplied),
        "its record is finalized as not applied"
    );
    // Nothing written: the lease as it is, and the time the swap was answered at (the
    // T0 a resend of a lost swap uses), not before the lease's own last write.
    let asked_after = store.cluster_time().await.unwrap();
    let SwapOutcome::Changed {
        current,
        operation_time,
    } = store.operator_swap(&stale).await.unwrap()
    else {
        panic!("a stale swap changes nothing")
    };
    assert_eq!(current, Some(lease.clone()));
    let answered = operation_time.expect("the reply's operation time");
    assert!(
        answered >= asked_after,
        "answered at {answered}, before the cluster time read first ({asked_after})"
    );
    let ahead = rewind_to(lease.version + 1, None, ClusterTime::new(3, 0));
    assert!(matches!(
        apply_audited(store, &ahead, None, &context("rewind"))
            .await
            .swap,
        SwapOutcome::Changed { .. }
    ));
    let missing = OperatorChange {
        resource: "nothing".into(),
        ..rewind_to(0, None, ClusterTime::new(3, 0))
    };
    assert!(matches!(
        apply_audited(store, &missing, None, &context("rewind"))
            .await
            .swap,
        SwapOutcome::Changed { current: None, .. }
    ));
    assert_eq!(store.get("nothing").await.unwrap(), None, "never inserted");
    assert_eq!(
        lease_of(store, "res").await,
        lease,
        "the lease is untouched"
    );
    let log = store.audit_log(10).await.unwrap().items;
    assert_eq!(
        log.iter().map(|r| r.state).collect::<Vec<_>>(),
        [AuditState::NotApplied; 3],
        "each attempt is recorded, as not applied"
    );
    assert!(
        log.iter().all(|r| r.outcome.starts_with("not applied: ")),
        "{log:?}"
    );

    // Applied once, the same planned change finds the version moved.
    let change = rewind_to(lease.version, None, ClusterTime::new(3, 0));
    assert!(matches!(
        apply_audited(store, &change, None, &context("rewind"))
            .await
            .swap,
        SwapOutcome::Applied { .. }
    ));
    let applied = lease_of(store, "res").await;
    assert!(matches!(
        apply_audited(store, &change, None, &context("rewind"))
            .await
            .swap,
        SwapOutcome::Changed { current: Some(current), .. } if current == applied
    ));
    let states: Vec<AuditState> = store
        .audit_log(10)
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(
        states[..2],
        [AuditState::NotApplied, AuditState::Applied],
        "newest first"
    );
}

pub async fn the_audit_log_is_newest_first_and_limited<
    H: Harness<Store: OperatorStore + LeaseStore + ChangeFeed + SkippedLog + AuditLog + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let lease = held_lease(store).await;
    let mut ids = Vec::new();
    for action in ["first", "second", "third"] {
        let intent = AuditIntent {
            resource: "res".into(),
            context: context(action),
            before: Some(lease.clone()),
            intended: None,
        };
        ids.push(store.begin_audit(&intent).await.unwrap());
    }
    let log = store.audit_log(2).await.unwrap().items;
    assert_eq!(
        log.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [ids[2].as_str(), ids[1].as_str()],
        "the two newest, newest first"
    );
    assert_eq!(
        (
            log[0].action.as_str(),
            log[0].state,
            log[0].outcome.as_str(),
            &log[0].after
        ),
        ("third", AuditState::Pending, "pending", &None)
    );
    let first = store.audit_record(&ids[0]).await.unwrap().expect("by id");
    assert_eq!(first.before, Some(lease));
    assert_eq!(store.audit_record("no-such-record").await.unwrap(), None);
}

/// `keep_skipped` keeps one record per change an action stepped over (its audit id and
/// the change's token: `skip --whole-transaction` keeps several under one id); written
/// again with the same two, it is the same record. `skipped_changes` reads a
/// resource's, newest first.
pub async fn skipped_changes_are_kept_one_per_audit_id_and_token<
    H: Harness<Store: OperatorStore + LeaseStore + ChangeFeed + SkippedLog + AuditLog + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let now = store.server_now().await.unwrap();
    let record = |audit_id: &str, n: u64, resource: &str| SkippedChange {
        audit_id: audit_id.into(),
        resource: resource.into(),
        operator: "ann@host".into(),
        at: now,
        token: ResumeToken::encode(ClusterTime::new(1_700_000_000, 5), TokenKind::Event, n),
        failure: None,
        entry: Some(doc! { "op": "c", "o": { "applyOps": [ { "op": "i" } ] } }),
        entry_missing: None,
    };
    let (first, second) = (
        record("a1", 1, "skipped-res"),
        record("a1", 2, "skipped-res"),
    );
    store.keep_skipped(&first).await.unwrap();
    store.keep_skipped(&second).await.unwrap();
    store.keep_skipped(&second).await.unwrap();
    store
        .keep_skipped(&record("b1", 1, "another-res"))
        .await
        .unwrap();
    let kept = store.skipped_changes("skipped-res", 10).await.unwrap();
    assert_eq!(kept.len(), 2, "both changes, the second once: {kept:?}");
    let mut tokens: Vec<_> = kept.iter().map(|k| k.token.clone()).collect();
    tokens.sort_by_key(|t| t.to_string());
    assert_eq!(tokens, [first.token.clone(), second.token.clone()]);
    assert!(kept
        .iter()
        .all(|k| k.audit_id == "a1" && k.entry == first.entry));
    assert_eq!(
        store.skipped_changes("skipped-res", 1).await.unwrap().len(),
        1
    );
}

pub async fn an_audit_record_is_pending_then_gains_steps_then_is_finalized_once<
    H: Harness<Store: OperatorStore + LeaseStore + ChangeFeed + SkippedLog + AuditLog + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let lease = held_lease(store).await;
    let mut intended = lease.clone();
    intended.version += 1;
    intended.kind = LockKind::Bulk;
    let id = store
        .begin_audit(&AuditIntent {
            resource: "res".into(),
            context: context("rebuild"),
            before: Some(lease.clone()),
            intended: Some(intended.clone()),
        })
        .await
        .unwrap();
    let pending = store.audit_record(&id).await.unwrap().expect("by id");
    assert_eq!(
        (
            pending.state,
            pending.intended.as_ref(),
            pending.steps.len()
        ),
        (AuditState::Pending, Some(&intended), 0)
    );

    store
        .audit_step(&id, "bulk swap applied", Some(&intended), None)
        .await
        .unwrap();
    store
        .audit_step(&id, "bulk swap applied", Some(&intended), None)
        .await
        .expect("the same step again (a retry) is no error");
    let mut given_back = intended.clone();
    given_back.version += 1;
    given_back.kind = LockKind::Update;
    store
        .audit_step(&id, "ran", None, Some(&given_back))
        .await
        .unwrap();
    let stepped = store.audit_record(&id).await.unwrap().expect("by id");
    assert_eq!(
        stepped
            .steps
            .iter()
            .map(|s| s.what.as_str())
            .collect::<Vec<_>>(),
        ["bulk swap applied", "ran"],
        "each step once, in order"
    );
    assert_eq!(
        stepped.after.as_ref(),
        Some(&intended),
        "a step without a lease keeps after, and a repeated step changes nothing"
    );
    assert_eq!(stepped.state, AuditState::Pending);

    let done = AuditFinish {
        state: AuditState::Applied,
        after: Some(lease.clone()),
        outcome: "applied: rebuilt".into(),
    };
    store.finish_audit(&id, &done).await.unwrap();
    store
        .finish_audit(&id, &done)
        .await
        .expect("the same finish again (a retry) is no error");
    let finished = store.audit_record(&id).await.unwrap().expect("by id");
    assert_eq!(
        (
            finished.state,
            finished.outcome.as_str(),
            finished.after.as_ref()
        ),
        (AuditState::Applied, "applied: rebuilt", Some(&lease))
    );
    assert_eq!(finished.steps.len(), 2, "the steps stay");

    let otherwise = AuditFinish {
        state: AuditState::Failed,
        after: None,
        outcome: "failed: x".into(),
    };
    let refused = store.finish_audit(&id, &otherwise).await.unwrap_err();
    assert!(
        matches!(
            refused,
            StoreError::AuditNotPending {
                found: Some(AuditState::Applied),
                ..
            }
        ),
        "{refused:?}"
    );
    assert!(matches!(
        store.audit_step(&id, "late", None, None).await.unwrap_err(),
        StoreError::AuditNotPending { .. }
    ));
    assert_eq!(
        store.audit_record(&id).await.unwrap(),
        Some(finished),
        "a refused write changes nothing"
    );
    for unknown in ["no-such-record", "000000000000000000000000"] {
        assert!(matches!(
            store.finish_audit(unknown, &done).await.unwrap_err(),
            StoreError::AuditNotPending { found: None, .. }
        ));
    }
}
