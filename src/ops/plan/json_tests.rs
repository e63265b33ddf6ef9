//! The JSON of plans, outcomes, leases and audit records, pinned byte for byte (key
//! order included): what `--output json` prints is a contract with scripts.

use std::time::Duration;

use bson::doc;
use chrono::TimeDelta;

use super::tests::{at, counted, facts, live_lease, token, wall};
use super::*;
use crate::model::{
    AuditRecord, AuditState, AuditStep, ChangeFailure, FailureCause, Invalidation, LeaseProtocol,
    PendingJudgment, PendingVerdict, SourceKind, WatchTarget,
};
use crate::ops::execute::Executed;
use crate::ops::json::{
    AuditJson, ClusterTimeJson, ExecutedJson, FailureJson, LeaseJson, MalformedJson, PlanJson,
};
use crate::ops::request::{ResetTarget, RewindTarget, TimeSpec};
use crate::store::MalformedDocument;

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).expect("JSON")
}

/// A lease with every field set: a failure too large, an invalidation, a capped watch.
fn full_lease() -> Lease {
    let mut lease = live_lease();
    lease.kind = LockKind::Bulk;
    lease.resume_at = Some(at(1000));
    lease.acquired_at = Some(wall(3000));
    lease.committed_at = Some(wall(3590));
    lease.note = Some("held by ann".into());
    lease.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        pipeline: "[]".into(),
        source: SourceKind::Capped,
    });
    lease.invalidated = Some(Invalidation {
        at: Some(at(3100)),
        reason: "shop.orders was dropped".into(),
    });
    lease.failure = Some(ChangeFailure {
        token: Some(token(3001)),
        at: Some(at(3001)),
        namespace: "shop.orders".into(),
        operation: "update".into(),
        document_key: r#"{"_id":7}"#.into(),
        error: "too large".into(),
        cause: FailureCause::TooLarge {
            size: Some(24_117_673),
            limit: None,
        },
        attempts: 4,
        first_at: wall(3002),
        last_at: wall(3009),
    });
    lease
}

#[test]
fn a_lease_in_json() {
    insta::assert_snapshot!(pretty(&LeaseJson::of(&full_lease())));
    insta::assert_snapshot!(
        "a_seed_lease_in_json",
        pretty(&LeaseJson::of(&Lease::seed("legacy")))
    );
}

#[test]
fn a_takeover_plan_in_json() {
    let request = ActionRequest::Takeover {
        resource: "shop.orders".into(),
        to: None,
        hold: Some(Duration::from_secs(300)),
    };
    let mut plan = plan(&request, &facts(Some(live_lease())));
    plan.effect
        .stepped_over
        .push(crate::ops::transaction::SteppedChange {
            token: token(3001),
            operation: "insert".into(),
            key: r#"{"_id":2}"#.into(),
            entry: doc! {},
        });
    insta::assert_snapshot!(pretty(&PlanJson::of(&plan)));
}

#[test]
fn a_counted_rewind_plan_in_json() {
    let request = ActionRequest::Rewind {
        resource: "shop.orders".into(),
        to: RewindTarget::Time(TimeSpec::Cluster(at(2400))),
    };
    let facts = counted(&request, facts(Some(live_lease())), 120, 100);
    let mut plan = plan(&request, &facts);
    if let Some(resume) = plan.effect.resume.as_mut() {
        resume.on = Some(crate::model::WatchedCollection::Collection([7; 16]));
    }
    insta::assert_snapshot!(pretty(&PlanJson::of(&plan)));
}

#[test]
fn seed_plans_in_json() {
    let mut seed = Lease::seed("shop.orders");
    seed.holder = Some("s1".into());
    seed.version = 3;
    seed.expires_at = Some(wall(3600) + TimeDelta::seconds(240));
    seed.resume_token = Some(token(3000));
    let oldest = ActionRequest::Reset {
        resource: "shop.orders".into(),
        to: ResetTarget::Oldest,
        accept_skip: false,
    };
    let plan_oldest = plan(&oldest, &facts(Some(seed.clone())));
    insta::assert_snapshot!(
        "a_seed_reset_to_oldest_in_json",
        pretty(&PlanJson::of(&plan_oldest))
    );
    let rewind = ActionRequest::Rewind {
        resource: "shop.orders".into(),
        to: RewindTarget::Token(token(2000)),
    };
    let plan_rewind = plan(&rewind, &facts(Some(seed)));
    insta::assert_snapshot!(
        "a_seed_rewind_to_a_token_in_json",
        pretty(&PlanJson::of(&plan_rewind))
    );
}

#[test]
fn a_refused_plan_in_json() {
    let request = ActionRequest::Reset {
        resource: "shop.orders".into(),
        to: ResetTarget::Now,
        accept_skip: false,
    };
    let plan = plan(&request, &facts(Some(live_lease())));
    assert!(plan.is_refused());
    insta::assert_snapshot!(pretty(&PlanJson::of(&plan)));
    let nothing = plan_for_missing_lease();
    insta::assert_snapshot!(
        "a_plan_for_no_lease_in_json",
        pretty(&PlanJson::of(&nothing))
    );
}

fn plan_for_missing_lease() -> Plan {
    let request = ActionRequest::Takeover {
        resource: "gone".into(),
        to: Some("w2".into()),
        hold: None,
    };
    plan(&request, &facts(None))
}

#[test]
fn an_executed_action_in_json() {
    let before = live_lease();
    let mut after = full_lease();
    after.version = 13;
    let done = Executed {
        action: ActionKind::Takeover,
        resource: "shop.orders".into(),
        before,
        after,
        audit_id: "665f1c2b9d1e8a0012345678".into(),
        operation_time: Some(at(3600)),
        remark: Some("the reply was lost; read back as applied".into()),
    };
    insta::assert_snapshot!(pretty(&ExecutedJson::of(&done)));
    let plain = Executed {
        operation_time: None,
        remark: None,
        ..done
    };
    insta::assert_snapshot!(
        "an_executed_action_without_a_time_in_json",
        pretty(&ExecutedJson::of(&plain))
    );
}

#[test]
fn audit_records_in_json() {
    let record = AuditRecord {
        id: "665f1c2b9d1e8a0012345678".into(),
        operator: "ann@host".into(),
        at: wall(3500),
        action: "takeover".into(),
        resource: "shop.orders".into(),
        state: AuditState::Pending,
        before: Some(live_lease()),
        intended: Some(full_lease()),
        after: None,
        steps: vec![AuditStep {
            at: wall(3501),
            what: "bulk swap applied".into(),
        }],
        reason: Some("stuck".into()),
        outcome: "pending".into(),
        finished_at: None,
    };
    let judged = PendingJudgment {
        verdict: PendingVerdict::NotApplied,
        recovery: "run it again".into(),
    };
    insta::assert_snapshot!(
        "a_pending_audit_record_in_json",
        pretty(&AuditJson::of(&record, Some(&judged)))
    );
    let mut finished = record;
    finished.state = AuditState::Applied;
    finished.after = Some(full_lease());
    finished.reason = None;
    finished.outcome = "applied".into();
    finished.finished_at = Some(wall(3502));
    finished.steps.clear();
    let mut seed = Lease::seed("shop.orders");
    seed.protocol = LeaseProtocol::Seed;
    finished.before = Some(seed);
    insta::assert_snapshot!(
        "a_finished_audit_record_in_json",
        pretty(&AuditJson::of(&finished, None))
    );
}

#[test]
fn a_malformed_document_and_times_in_json() {
    let malformed = MalformedDocument {
        id: Some("kind-shouted".into()),
        problem: "field kind: unknown lock kind \"BULK\"".into(),
    };
    let anonymous = MalformedDocument {
        id: None,
        problem: "field _id: missing".into(),
    };
    let shown = serde_json::json!([
        MalformedJson::of(&malformed),
        MalformedJson::of(&anonymous),
        ClusterTimeJson::of_optional(Some(at(5))),
        ClusterTimeJson::of_optional(None),
        FailureJson::of(&ChangeFailure {
            token: None,
            at: None,
            namespace: String::new(),
            operation: String::new(),
            document_key: String::new(),
            error: "boom".into(),
            cause: FailureCause::Handler,
            attempts: 1,
            first_at: wall(1),
            last_at: wall(2),
        }),
    ]);
    insta::assert_snapshot!(pretty(&shown));
}
