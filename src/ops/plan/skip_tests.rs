//! Planning `skip`: exactly the one change, or a refusal that says why not.

use chrono::TimeDelta;

use super::tests::{at, counted as counted_up_to, facts as facts_of, live_lease, token, wall};
use super::*;
use crate::model::{ChangeFailure, FailureCause, ResumeToken};

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
    facts.skipped_entry = Some(bson::doc! {
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
    });
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
            && warning.contains(&"ab".repeat(16)),
        "{warning}"
    );
    // A plain insert with a session (a retryable write) is no transaction.
    facts.skipped_entry = Some(bson::doc! {
        "lsid": { "id": 1 }, "txnNumber": 1_i64, "op": "i", "ns": "shop.orders", "o": { "_id": 2 },
    });
    let p = plan(&request, &facts);
    assert!(
        !p.warnings.iter().any(|w| w.contains("transaction")),
        "{:?}",
        p.warnings
    );
}
