//! Planning on a seed lease (written by another implementation): every rule of
//! `seed`, without a database.

use std::time::Duration;

use chrono::TimeDelta;

use super::tests::{at, counted, facts, token, wall};
use super::*;
use crate::model::{FieldSet, LeaseProtocol, ResumePoint, ResumeToken, TokenKind};
use crate::ops::request::{ResetTarget, RewindTarget, TimeSpec};

/// A lease as a seed listener leaves it: held by s1 (4 min of its 5 min lease left),
/// token at +3000 s, no streamward field.
fn seed_lease() -> Lease {
    let mut lease = Lease::seed("shop.orders");
    lease.holder = Some("s1".into());
    lease.version = 3;
    lease.expires_at = Some(wall(3600) + TimeDelta::seconds(240));
    lease.resume_token = Some(token(3000));
    lease
}

fn request_rewind(to: RewindTarget) -> ActionRequest {
    ActionRequest::Rewind {
        resource: "shop.orders".into(),
        to,
    }
}

fn names(plan: &Plan) -> Vec<&'static str> {
    plan.change
        .as_ref()
        .map(|c| c.write().sets.iter().map(FieldSet::name).collect())
        .unwrap_or_default()
}

fn text(plan: &Plan) -> String {
    plan.effect.lines.join("\n") + "\n" + &plan.warnings.join("\n")
}

#[test]
fn a_rewind_to_a_time_writes_the_token_for_that_time_and_never_null() {
    let lease = seed_lease();
    let mut f = facts(Some(lease));
    let hwm = ResumeToken::encode(at(1800), TokenKind::HighWaterMark, 0);
    f.token_for_time = Some(Ok((at(1800), hwm.clone())));
    let plan = plan(
        &request_rewind(RewindTarget::Time(TimeSpec::Cluster(at(1800)))),
        &f,
    );
    assert!(!plan.is_refused(), "{:?}", plan.refusal);
    let after = plan.after.as_ref().expect("after");
    assert_eq!(after.resume_token, Some(hwm));
    assert_eq!(
        after.resume_at, None,
        "resumeAt is not written for a seed lease"
    );
    assert_eq!(after.protocol, LeaseProtocol::Seed, "still a seed lease");
    assert_eq!(after.version, 4);
    let written = names(&plan);
    for own in LeaseProtocol::OWN_FIELDS.iter().chain(&["kind"]) {
        assert!(!written.contains(own), "{own} written: {written:?}");
    }
    let change = plan.change.as_ref().expect("change");
    assert!(
        change
            .write()
            .sets
            .iter()
            .all(|s| !matches!(s, FieldSet::ResumeToken(None) | FieldSet::ResumeAt(_))),
        "no null token, no resumeAt"
    );
    assert!(
        text(&plan).contains("changes at or after"),
        "{}",
        text(&plan)
    );
}

#[test]
fn a_time_with_no_token_for_it_is_refused_not_written_as_null() {
    let mut f = facts(Some(seed_lease()));
    let request = request_rewind(RewindTarget::By(Duration::from_secs(60)));
    assert_eq!(
        plan(&request, &f).refusal.map(|r| r.kind),
        Some(RefusalKind::SeedLease)
    );
    f.token_for_time = Some(Err("not permitted".into()));
    let refused = plan(&request, &f);
    assert!(refused
        .refusal
        .as_ref()
        .is_some_and(|r| r.reason.contains("not permitted") && r.reason.contains("--to-token")));
}

#[test]
fn reset_to_oldest_removes_the_token() {
    let plan = plan(
        &ActionRequest::Reset {
            resource: "shop.orders".into(),
            to: ResetTarget::Oldest,
            accept_skip: false,
        },
        &facts(Some(seed_lease())),
    );
    let change = plan.change.as_ref().expect("planned");
    let sets = change.write().sets;
    assert!(sets.contains(&FieldSet::ResumeTokenRemoved), "{sets:?}");
    assert!(sets.contains(&FieldSet::ResumeAtRemoved));
    let after = plan.after.as_ref().expect("after");
    assert_eq!(after.resume_point(), ResumePoint::Oldest);
    assert!(text(&plan).contains("resumeToken is removed"));
    let json = serde_json::to_value(crate::ops::json::PlanJson::of(&plan)).unwrap();
    assert_eq!(json["change"]["resume"]["resumeToken"], "removed", "{json}");
    assert_eq!(
        json["change"]["kind"],
        serde_json::Value::Null,
        "not written"
    );
    assert_eq!(json["after"]["protocol"], "seed");
}

#[test]
fn a_held_seed_lease_is_held_by_the_operator_long_enough_for_the_refresh_to_fail() {
    let lease = seed_lease();
    let f = facts(Some(lease.clone()));
    let request = request_rewind(RewindTarget::Token(token(2000)));
    let planned = plan(&request, &f);
    let change = planned.change.as_ref().expect("planned");
    assert_eq!(change.holder.as_deref(), Some("ann@host"));
    // 4 min left: twice that (8 min) is more than the 5 min default.
    assert_eq!(change.expires_in, Duration::from_secs(480));
    assert!(text(&planned).contains("next refresh finds the lease held by another and fails"));
    assert!(
        !text(&planned).contains("its next commit"),
        "{}",
        text(&planned)
    );
    // `--hold` overrides.
    let asked = PlanFacts {
        restart_hold: Some(Duration::from_secs(5)),
        ..f.clone()
    };
    assert_eq!(
        plan(&request, &asked).change.map(|c| c.expires_in),
        Some(Duration::from_secs(5))
    );
    // Little left: the 5 min default.
    let mut short = lease.clone();
    short.expires_at = Some(wall(3600) + TimeDelta::seconds(10));
    assert_eq!(
        super::seed::restart_hold(&short, wall(3600), None),
        super::seed::SEED_DEFAULT_LEASE
    );
    // Nobody holds it: released, nobody has a stream open.
    let mut free = lease;
    free.holder = None;
    let released = plan(&request, &facts(Some(free)));
    let change = released.change.as_ref().expect("planned");
    assert_eq!(
        (change.holder.as_deref(), change.expires_in),
        (None, Duration::ZERO)
    );
    // Held by the operator (an earlier hold): held again, with no listener to stop.
    let mut held = seed_lease();
    held.holder = Some("ann@host".into());
    let again = plan(&request, &facts(Some(held)));
    assert_eq!(
        again.change.as_ref().and_then(|c| c.holder.as_deref()),
        Some("ann@host")
    );
    assert!(
        text(&again).contains("no listener holds it now"),
        "{}",
        text(&again)
    );
}

#[test]
fn the_plan_table_of_a_seed_lease_leaves_out_the_fields_it_does_not_have() {
    let planned = plan(
        &request_rewind(RewindTarget::Token(token(2000))),
        &facts(Some(seed_lease())),
    );
    let (before, after) = (planned.before.as_ref(), planned.after.as_ref());
    let rows = crate::ops::describe::lease_diff(
        before.expect("before"),
        after.expect("after"),
        wall(3600),
    );
    let shown: Vec<&str> = rows.iter().map(|r| r.field).collect();
    for absent in ["kind", "acquiredAt", "renewedAt", "committedAt"] {
        assert!(!shown.contains(&absent), "{absent} in {shown:?}");
    }
    assert!(shown.contains(&"resumeToken") && shown.contains(&"listenerId"));
}

#[test]
fn a_plain_takeover_says_the_seed_holder_takes_it_back_and_offers_hold() {
    let planned = plan(
        &ActionRequest::Takeover {
            resource: "shop.orders".into(),
            to: None,
            hold: None,
        },
        &facts(Some(seed_lease())),
    );
    let said = text(&planned);
    assert!(said.contains("s1's next refresh takes it back"), "{said}");
    assert!(said.contains("--hold 8m"), "{said}");
    assert!(!said.contains("fences out"), "{said}");
    assert_eq!(planned.effect.fences_out, None);
    assert!(planned
        .confirmation
        .as_deref()
        .is_some_and(|c| c.contains("takes it back")));
    assert!(!names(&planned).contains(&"kind"));
}

#[test]
fn takeover_with_hold_or_to_keeps_it_long_enough_and_warns_on_a_short_hold() {
    let held = plan(
        &ActionRequest::Takeover {
            resource: "shop.orders".into(),
            to: None,
            hold: Some(Duration::from_secs(5)),
        },
        &facts(Some(seed_lease())),
    );
    let said = text(&held);
    assert!(
        said.contains("s1's next refresh") || said.contains("its next refresh"),
        "{said}"
    );
    assert!(
        said.contains("may be shorter than s1's refresh period"),
        "{said}"
    );
    let after = held.after.as_ref().expect("after");
    assert_eq!(after.protocol, LeaseProtocol::Seed);
    assert_eq!(after.acquired_at, None);
    let handed = plan(
        &ActionRequest::Takeover {
            resource: "shop.orders".into(),
            to: Some("s2".into()),
            hold: None,
        },
        &facts(Some(seed_lease())),
    );
    let change = handed.change.as_ref().expect("planned");
    assert_eq!(change.holder.as_deref(), Some("s2"));
    assert_eq!(change.expires_in, Duration::from_secs(480));
}

#[test]
fn a_rebuild_is_refused_on_a_seed_lease() {
    let mut f = facts(Some(seed_lease()));
    f.rebuild = Some(crate::ops::facts::RebuildTarget {
        name: "orders".into(),
        resource: "shop.orders".into(),
        description: "x".into(),
    });
    let planned = plan(
        &ActionRequest::Rebuild {
            name: "orders".into(),
        },
        &f,
    );
    assert_eq!(
        planned.refusal.map(|r| r.kind),
        Some(RefusalKind::SeedLease)
    );
    // A `kind: bulk` an earlier streamward left on it locks nothing for seed
    // listeners: abort-bulk is refused, and the other actions are not.
    let mut leftover = seed_lease();
    leftover.kind = crate::model::LockKind::Bulk;
    let f = facts(Some(leftover));
    let aborted = plan(
        &ActionRequest::AbortBulk {
            resource: "shop.orders".into(),
        },
        &f,
    );
    assert_eq!(
        aborted.refusal.map(|r| r.kind),
        Some(RefusalKind::SeedLease)
    );
    let rewound = plan(&request_rewind(RewindTarget::Token(token(2000))), &f);
    assert!(!rewound.is_refused(), "{:?}", rewound.refusal);
}

#[test]
fn a_streamward_lease_is_planned_as_before() {
    let mut lease = seed_lease();
    lease.protocol = LeaseProtocol::Streamward;
    let planned = plan(
        &request_rewind(RewindTarget::Time(TimeSpec::Cluster(at(1800)))),
        &facts(Some(lease)),
    );
    assert!(names(&planned).contains(&"kind"));
    let after = planned.after.expect("after");
    assert_eq!(
        (after.resume_token, after.resume_at),
        (None, Some(at(1800)))
    );
}

/// A seed lease has no `watch`: what a rewind replays is counted on the collection its
/// token names by UUID (the layout of a token a real MongoDB 6.0.5 sent), and the plan
/// says so instead of "cannot be counted".
#[test]
fn a_rewind_counts_the_changes_on_the_collection_its_token_names() {
    const UUID: &str = "bfc7e19092a340c8a88f71054c678744";
    let mut lease = seed_lease();
    lease.resume_token = Some(ResumeToken::from_document(bson::doc! {
        "_data": format!(
            "82{:016X}2B022C0100296E5A1004{}463C5F6964003C6B31000004",
            at(3000).as_u64(),
            UUID.to_uppercase()
        )
    }));
    let request = request_rewind(RewindTarget::By(Duration::from_secs(600)));
    let mut f = facts(Some(lease));
    let hwm = ResumeToken::encode(at(2400), TokenKind::HighWaterMark, 0);
    f.token_for_time = Some(Ok((at(2400), hwm)));
    let f = counted(&request, f, 7, 1000);
    let range = &f.changes.as_ref().expect("counted").range;
    let uuid: [u8; 16] = hex::decode(UUID).unwrap().try_into().unwrap();
    assert_eq!(range.on, crate::model::WatchedCollection::Collection(uuid));
    let plan = plan(&request, &f);
    assert!(!plan.is_refused(), "{:?}", plan.refusal);
    let text = text(&plan);
    assert!(
        text.contains(&format!(
            "7 changes on the collection with UUID {UUID} will be replayed"
        )),
        "{text}"
    );
    assert!(!text.contains("cannot be counted"), "{text}");
}
