//! Operator compare-and-swap and the audit log (DESIGN §5).

use std::time::Duration;

use bson::doc;
use streamward::model::{ClusterTime, Lease, LockKind, ResumeToken, TokenKind};
use streamward::ops::apply_audited;
use streamward::ops::OperatorOutcome;
use streamward::store::AuditLog;
use streamward::store::OperatorStore;
use streamward::store::{
    AuditContext, AuditEntry, ChangeFeed, DocumentStore, LeaseStore, OperatorChange, ResumeChange,
    StartPoint, SwapOutcome, Tenure,
};

use super::*;

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
    }
}

pub async fn an_operator_change_applies_with_the_next_version_then_its_audit<H: Harness>(h: &H) {
    let store = h.store();
    let lease = held_lease(store).await;
    let at = ClusterTime::new(2_000, 3);
    let change = rewind_to(lease.version, Some("b"), at);
    let audits_before = store.audit_log(100).await.unwrap().items.len();
    let time_before = store.cluster_time().await.unwrap();
    let now_before = server_now(store).await;
    let outcome = apply_audited(store, &change, &context("rewind"))
        .await
        .unwrap();
    let now_after = server_now(store).await;
    let time_after = store.cluster_time().await.unwrap();
    let OperatorOutcome::Applied {
        before,
        after,
        operation_time,
        audit_id,
    } = outcome
    else {
        panic!("the compare-and-swap on the current version applies: {outcome:?}");
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
    let log = store.audit_log(100).await.unwrap().items;
    assert_eq!(log.len(), audits_before + 1, "one record per action");
    assert_eq!(log[0], record, "newest first");
}

pub async fn operator_swap_applies_without_an_audit_record<H: Harness>(h: &H) {
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
    };
    let SwapOutcome::Applied {
        before,
        after,
        operation_time,
    } = store.operator_swap(&bulk).await.unwrap()
    else {
        panic!("the swap on the current version applies");
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
        events.iter().all(|e| e.cluster_time > operation_time),
        "a write made after the swap has a later cluster time than {operation_time:?}: {events:?}"
    );
}

pub async fn a_changed_lease_makes_operator_writes_write_nothing<H: Harness>(h: &H) {
    let store = h.store();
    let lease = held_lease(store).await;
    let stale = rewind_to(lease.version - 1, None, ClusterTime::new(3, 0));
    assert_eq!(
        apply_audited(store, &stale, &context("rewind"))
            .await
            .unwrap(),
        OperatorOutcome::Changed {
            current: Some(lease.clone())
        },
        "a version that moved on since planning: nothing written, the current lease reported"
    );
    assert_eq!(
        store.operator_swap(&stale).await.unwrap(),
        SwapOutcome::Changed {
            current: Some(lease.clone())
        }
    );
    let ahead = rewind_to(lease.version + 1, None, ClusterTime::new(3, 0));
    assert!(matches!(
        apply_audited(store, &ahead, &context("rewind"))
            .await
            .unwrap(),
        OperatorOutcome::Changed { .. }
    ));
    let missing = OperatorChange {
        resource: "nothing".into(),
        ..rewind_to(0, None, ClusterTime::new(3, 0))
    };
    assert_eq!(
        apply_audited(store, &missing, &context("rewind"))
            .await
            .unwrap(),
        OperatorOutcome::Changed { current: None }
    );
    assert_eq!(store.get("nothing").await.unwrap(), None, "never inserted");
    assert_eq!(
        lease_of(store, "res").await,
        lease,
        "the lease is untouched"
    );
    assert!(
        store.audit_log(10).await.unwrap().items.is_empty(),
        "no audit record for what was not done"
    );

    // Applied once, the same planned change finds the version moved.
    let change = rewind_to(lease.version, None, ClusterTime::new(3, 0));
    assert!(matches!(
        apply_audited(store, &change, &context("rewind"))
            .await
            .unwrap(),
        OperatorOutcome::Applied { .. }
    ));
    let applied = lease_of(store, "res").await;
    assert_eq!(
        apply_audited(store, &change, &context("rewind"))
            .await
            .unwrap(),
        OperatorOutcome::Changed {
            current: Some(applied)
        }
    );
    assert_eq!(store.audit_log(10).await.unwrap().items.len(), 1);
}

pub async fn the_audit_log_is_newest_first_and_limited<H: Harness>(h: &H) {
    let store = h.store();
    let lease = held_lease(store).await;
    let mut ids = Vec::new();
    for action in ["first", "second", "third"] {
        let entry = AuditEntry {
            resource: "res".into(),
            context: context(action),
            before: Some(lease.clone()),
            after: None,
            outcome: format!("failed: {action}"),
        };
        ids.push(store.append_audit(&entry).await.unwrap());
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
            log[0].outcome.as_str(),
            &log[0].after
        ),
        ("third", "failed: third", &None)
    );
    let first = store.audit_record(&ids[0]).await.unwrap().expect("by id");
    assert_eq!(first.before, Some(lease));
    assert_eq!(store.audit_record("no-such-record").await.unwrap(), None);
}
