//! Planning `skip`: exactly the one change, or a refusal that says why not.

use chrono::TimeDelta;

use super::tests::{at, counted as counted_up_to, facts as facts_of, live_lease, token, wall};
use super::*;
use crate::model::{ChangeFailure, FailureCause, ResumeToken, TokenKind};
use crate::ops::facts::SkippedEntry;
use crate::ops::transaction::{SteppedChange, TransactionChanges, TransactionId, TransactionMiss};

/// The plan tests' live lease (held by w1, resuming after +3000 s), its listeners
/// failing on the change at +3001 s.
fn failing_lease() -> Lease {
    let mut lease = live_lease();
    lease.failure = Some(ChangeFailure::first(
        Some(token(3001)),
        Some(at(3001)),
        "shop.orders",
        "insert",
        r#"{"_id":"x"}"#,
        "animal x has no valid \"tags\"",
        FailureCause::Handler,
        wall(3600) - TimeDelta::seconds(30),
    ));
    lease
}

fn facts(lease: Lease) -> PlanFacts {
    facts_of(Some(lease))
}

fn skip(to_token: Option<ResumeToken>) -> ActionRequest {
    ActionRequest::Skip {
        resource: "shop.orders".into(),
        to_token,
    }
}

/// `facts` with the count gather would make for `request`: `counted` changes.
fn counted(request: &ActionRequest, facts: PlanFacts, counted: u64) -> PlanFacts {
    counted_up_to(request, facts, counted, 1_000)
}

fn refused(plan: &Plan) -> (RefusalKind, String) {
    assert!(
        plan.change.is_none(),
        "a refused plan has nothing to execute"
    );
    let refusal = plan.refusal.clone().expect("refused");
    (refusal.kind, refusal.reason)
}

#[test]
fn a_skip_resumes_right_after_the_failing_change_and_says_which() {
    let request = skip(None);
    let p = plan(&request, &counted(&request, facts(failing_lease()), 1));
    assert_eq!(p.refusal, None);
    let change = p.change.as_ref().unwrap();
    assert_eq!(
        change.resume,
        ResumeChange::Set {
            token: Some(token(3001)),
            at: None
        }
    );
    assert_eq!(change.expected_version, 12);
    assert_eq!(change.holder, None, "the holder is fenced out");
    let after = p.after.as_ref().unwrap();
    assert_eq!((after.failure.as_ref(), after.version), (None, 13));
    let lines = p.effect.lines.join("\n");
    assert!(
        lines.contains("steps over one change: insert shop.orders {\"_id\":\"x\"}")
            && lines.contains("1 attempt (handler): animal x has no valid")
            && lines.contains("1 change on shop.orders will be skipped")
            && lines.contains("skipped collection"),
        "{lines}"
    );
    assert_eq!(p.effect.fences_out.as_deref(), Some("w1"));
    assert!(p.confirmation.is_some(), "typed confirmation");
    assert_eq!(p.action.name(), "skip");
}

#[test]
fn a_skip_with_nothing_to_step_over_is_refused() {
    let mut lease = failing_lease();
    lease.failure = None;
    let (kind, reason) = refused(&plan(&skip(None), &facts(lease.clone())));
    assert_eq!(kind, RefusalKind::NothingToSkip);
    assert!(reason.contains("--to-token"), "{reason}");

    let mut unnamed = failing_lease();
    unnamed.failure.as_mut().unwrap().token = None;
    let (kind, reason) = refused(&plan(&skip(None), &facts(unnamed)));
    assert_eq!(kind, RefusalKind::NothingToSkip);
    assert!(
        reason.contains("did not name") && reason.contains(&at(3001).to_string()),
        "{reason}"
    );
}

#[test]
fn a_skip_of_more_than_one_change_or_of_a_processed_one_is_refused() {
    let request = skip(None);
    let (kind, reason) = refused(&plan(
        &request,
        &counted(&request, facts(failing_lease()), 4),
    ));
    assert_eq!(kind, RefusalKind::NotOneChange);
    assert!(reason.contains("4 changes"), "{reason}");

    let back = skip(Some(token(2000)));
    let (kind, _) = refused(&plan(&back, &facts(failing_lease())));
    assert_eq!(
        kind,
        RefusalKind::NotOneChange,
        "a change before the resume point"
    );

    // By token with no failure: allowed when exactly one change lies up to it.
    let mut clean = failing_lease();
    clean.failure = None;
    let named = skip(Some(token(3005)));
    let p = plan(&named, &counted(&named, facts(clean.clone()), 1));
    assert_eq!(p.refusal, None);
    assert!(p.effect.lines[0].contains("steps over the change with token"));
    // Without the oplog nothing can be counted: only a recorded failure may be skipped.
    let mut blind = facts(clean);
    blind.window = None;
    let (kind, _) = refused(&plan(&named, &blind));
    assert_eq!(kind, RefusalKind::NotOneChange);
    let mut blind = facts(failing_lease());
    blind.window = None;
    assert_eq!(plan(&skip(None), &blind).refusal, None);
}

#[test]
fn a_skip_is_refused_read_only_and_on_a_bulk_lease() {
    let mut read_only = facts(failing_lease());
    read_only.read_only = true;
    assert_eq!(
        refused(&plan(&skip(None), &read_only)).0,
        RefusalKind::ReadOnly
    );
    let mut bulk = failing_lease();
    bulk.kind = crate::model::LockKind::Bulk;
    assert_eq!(
        refused(&plan(&skip(None), &facts(bulk))).0,
        RefusalKind::BulkHeld
    );
}

#[test]
fn a_change_of_a_transaction_says_so_and_a_move_within_one_entry_is_not_no_move() {
    // The lease resumes after the transaction's first change; its second fails: the
    // same cluster time.
    let mut lease = failing_lease();
    lease.resume_token = Some(ResumeToken::encode(
        at(3001),
        crate::model::TokenKind::Event,
        3,
    ));
    let request = skip(None);
    let mut facts = facts(lease);
    facts.skipped_entry = Some(SkippedEntry::of_entry(bson::doc! {
        "lsid": { "id": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![0xab; 16] } },
        "txnNumber": 7_i64,
        "op": "c",
        "ns": "admin.$cmd",
        "o": { "applyOps": [
            { "op": "i", "ns": "shop.orders", "o": { "_id": 1 } },
            { "op": "i", "ns": "shop.orders", "o": { "_id": "x" } },
            { "op": "i", "ns": "shop.orders", "o": { "_id": 3 } },
        ] },
        "prevOpTime": { "ts": bson::Timestamp { time: 0, increment: 0 }, "t": -1_i64 },
    }));
    let p = plan(&request, &facts);
    assert_eq!(p.refusal, None);
    let lines = p.effect.lines.join("\n");
    assert!(!lines.contains("does not move"), "{lines}");
    assert!(lines.contains("only this change is skipped"), "{lines}");
    let warning = p
        .warnings
        .iter()
        .find(|w| w.contains("multi-document transaction"))
        .unwrap_or_else(|| panic!("{:?}", p.warnings));
    assert!(
        warning.contains("txnNumber 7")
            && warning.contains("of 3 changes")
            && warning.contains(&"ab".repeat(16))
            && warning.contains("skip shop.orders --whole-transaction"),
        "{warning}"
    );
    // A plain insert with a session (a retryable write) is no transaction.
    facts.skipped_entry = Some(SkippedEntry::of_entry(bson::doc! {
        "lsid": { "id": 1 }, "txnNumber": 1_i64, "op": "i", "ns": "shop.orders", "o": { "_id": 2 },
    }));
    let p = plan(&request, &facts);
    assert!(
        !p.warnings.iter().any(|w| w.contains("transaction")),
        "{:?}",
        p.warnings
    );
}

/// The change of a transaction committed at +3001 s, `index`-th in its stream order.
fn txn_token(index: u64) -> ResumeToken {
    ResumeToken::encode(at(3001), TokenKind::Event, index)
}

fn stepped(index: u64, key: i32) -> SteppedChange {
    SteppedChange {
        token: txn_token(index),
        operation: "insert".into(),
        key: format!(r#"{{"_id":{key}}}"#),
        entry: bson::doc! { "op": "c", "ns": "admin.$cmd", "o": { "applyOps": [] } },
    }
}

/// The failing lease inside a transaction: it handled the first of its 3 changes on
/// shop.orders and fails on the second (token `txn_token(2)`); the transaction also
/// wrote once to shop.payments.
fn inside_a_transaction() -> (Lease, TransactionChanges) {
    let mut lease = failing_lease();
    lease.resume_token = Some(txn_token(1));
    let failure = lease.failure.as_mut().unwrap();
    failure.token = Some(txn_token(2));
    failure.document_key = r#"{"_id":2}"#.into();
    let txn = TransactionChanges {
        id: TransactionId {
            lsid: "ab".repeat(16),
            txn_number: 7,
        },
        at: at(3001),
        entries: 1,
        on_lease: 3,
        elsewhere: [("shop.payments".to_string(), 1)].into(),
        stepped: vec![stepped(2, 2), stepped(3, 3)],
        before: None,
    };
    (lease, txn)
}

fn whole(to_token: Option<ResumeToken>) -> ActionRequest {
    ActionRequest::SkipTransaction {
        resource: "shop.orders".into(),
        to_token,
    }
}

fn with_transaction(lease: Lease, txn: Result<TransactionChanges, TransactionMiss>) -> PlanFacts {
    let mut facts = facts(lease);
    facts.skipped_entry = Some(SkippedEntry {
        entry: Some(bson::doc! { "op": "c" }),
        transaction: Some(txn),
    });
    facts
}

#[test]
fn a_whole_transaction_skip_steps_over_its_changes_not_yet_handled_and_lists_them() {
    let (lease, txn) = inside_a_transaction();
    let p = plan(&whole(None), &with_transaction(lease, Ok(txn.clone())));
    assert_eq!(p.refusal, None);
    let change = p.change.as_ref().unwrap();
    assert_eq!(
        change.resume,
        ResumeChange::Set {
            token: Some(txn_token(3)),
            at: None
        },
        "resumes after the transaction's last change on the collection"
    );
    assert_eq!(
        (change.expected_version, change.holder.as_deref()),
        (12, None)
    );
    assert_eq!(p.effect.stepped_over, txn.stepped);
    let lines = p.effect.lines.join("\n");
    assert!(
        lines.contains("steps over 2 changes on shop.orders of the multi-document transaction")
            && lines.contains("txnNumber 7")
            && lines.contains(r#"1. insert shop.orders {"_id":2} — the failing one: 1 attempt (handler): animal x"#)
            && lines.contains(r#"2. insert shop.orders {"_id":3}"#)
            && lines.contains("1 on shop.payments")
            && lines.contains("one record per change")
            && !lines.contains("does not move"),
        "{lines}"
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("the first 1 of its 3 changes on shop.orders were handled")),
        "{:?}",
        p.warnings
    );
    assert!(p.confirmation.is_some());
    assert_eq!(p.effect.fences_out.as_deref(), Some("w1"));
    let json = serde_json::to_value(crate::ops::json::PlanJson::of(&p)).unwrap();
    assert_eq!(
        json["effect"]["steppedOver"].as_array().map(Vec::len),
        Some(2)
    );

    // From before the transaction: the move is counted as the stream's changes, not
    // as the oplog's count on the collection (which sees no transaction).
    let (mut lease, mut txn) = inside_a_transaction();
    lease.resume_token = Some(token(3000));
    txn.stepped.insert(0, stepped(1, 1));
    let request = whole(None);
    let facts = counted(&request, with_transaction(lease, Ok(txn)), 0);
    let p = plan(&request, &facts);
    assert_eq!(p.refusal, None);
    let lines = p.effect.lines.join("\n");
    assert!(
        lines.contains("steps over 3 changes") && !lines.contains("0 changes"),
        "{lines}"
    );
    assert_eq!(
        p.effect
            .resume
            .as_ref()
            .and_then(|m| m.count.as_ref())
            .map(|c| c.counted),
        Some(3)
    );
    assert!(
        !p.warnings.iter().any(|w| w.contains("were handled")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn a_whole_transaction_skip_is_refused_for_anything_but_the_transactions_changes() {
    let (lease, txn) = inside_a_transaction();
    let case = |txn: Result<TransactionChanges, TransactionMiss>, request: ActionRequest| {
        refused(&plan(&request, &with_transaction(lease.clone(), txn)))
    };

    let (kind, reason) = case(Err(TransactionMiss::NotATransaction), whole(None));
    assert_eq!(kind, RefusalKind::NotATransaction);
    assert!(
        reason.contains("not part of a multi-document transaction: plain skip steps over it"),
        "{reason}"
    );

    let mut first = txn.clone();
    first.before = Some(r#"update shop.orders {"_id":9} at 1700003000:5"#.into());
    let (kind, reason) = case(Ok(first), whole(None));
    assert_eq!(kind, RefusalKind::NotOneChange);
    assert!(
        reason.contains(r#"{"_id":9}"#) && reason.contains("--to-token"),
        "{reason}"
    );

    let mut done = txn.clone();
    done.stepped.clear();
    let (kind, reason) = case(Ok(done), whole(None));
    assert_eq!(kind, RefusalKind::NotOneChange);
    assert!(
        reason.contains("already resumes after every change"),
        "{reason}"
    );

    // A token that is none of the transaction's changes still to handle.
    let (kind, reason) = case(Ok(txn.clone()), whole(Some(token(3005))));
    assert_eq!(kind, RefusalKind::NotOneChange);
    assert!(
        reason.contains("is not one of the transaction's"),
        "{reason}"
    );
    // One of them, named: the same steps.
    let p = plan(
        &whole(Some(txn_token(3))),
        &with_transaction(lease.clone(), Ok(txn.clone())),
    );
    assert_eq!(p.refusal, None);

    let (kind, reason) = case(
        Err(TransactionMiss::Unresolved(
            "its oplog entry at 1700003000:1 is gone".into(),
        )),
        whole(None),
    );
    assert_eq!(kind, RefusalKind::TransactionUnknown);
    assert!(
        reason.contains("is gone") && reason.contains("plain skip"),
        "{reason}"
    );

    let (kind, reason) = case(
        Err(TransactionMiss::OplogUnreadable(
            "not authorized on local".into(),
        )),
        whole(None),
    );
    assert_eq!(kind, RefusalKind::NoOplogAccess);
    assert!(reason.contains("clusterMonitor"), "{reason}");

    // Nothing read at all (the entry could not be had).
    let mut unread = facts(lease.clone());
    unread.skipped_entry = None;
    assert_eq!(
        refused(&plan(&whole(None), &unread)).0,
        RefusalKind::TransactionUnknown
    );

    let mut read_only = with_transaction(lease.clone(), Ok(txn));
    read_only.read_only = true;
    assert_eq!(
        refused(&plan(&whole(None), &read_only)).0,
        RefusalKind::ReadOnly
    );

    // With no failure and no token: nothing names the change.
    let mut clean = lease;
    clean.failure = None;
    assert_eq!(
        refused(&plan(&whole(None), &facts(clean))).0,
        RefusalKind::NothingToSkip
    );
}
