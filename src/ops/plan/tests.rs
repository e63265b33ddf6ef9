// Long: unit tests of planning, one per action and refusal, sharing their fixtures.
//! Planning without I/O: every action, every refusal.

use std::time::Duration;

use bson::doc;
use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::model::text::group_digits;
use crate::model::{
    AuditRecord, AuditState, ClusterTime, OplogWindow, ResumeToken, TokenKind, WatchTarget,
};
use crate::ops::describe;
use crate::ops::facts::{ChangeCount, ChangeRange, RebuildTarget};
use crate::ops::request::{ResetTarget, RewindTarget, TimeSpec};
use crate::ops::resume::Direction;
use crate::ops::target::affected_range;

const BASE: u32 = 1_700_000_000;

pub(super) fn at(secs: u32) -> ClusterTime {
    ClusterTime::new(BASE + secs, 1)
}

pub(super) fn wall(secs: u32) -> DateTime<Utc> {
    at(secs).to_datetime().unwrap()
}

pub(super) fn token(secs: u32) -> ResumeToken {
    ResumeToken::encode(at(secs), TokenKind::Event, 7)
}

fn orders_collection() -> crate::model::WatchedCollection {
    crate::store::Namespace::new("shop", "orders").whole()
}

/// A lease held by w1 (renewed 3 s ago, expires in 8 s), token at +3000 s.
pub(super) fn live_lease() -> Lease {
    let now = wall(3600);
    let mut lease = Lease::vacant("shop.orders");
    lease.holder = Some("w1".into());
    lease.version = 12;
    lease.expires_at = Some(now + TimeDelta::seconds(8));
    lease.renewed_at = Some(now - TimeDelta::seconds(3));
    lease.resume_token = Some(token(3000));
    lease.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        pipeline: String::new(),
        ..Default::default()
    });
    lease
}

fn expired(mut lease: Lease) -> Lease {
    lease.expires_at = Some(wall(3600) - TimeDelta::seconds(300));
    lease
}

pub(super) fn facts(lease: Option<Lease>) -> PlanFacts {
    PlanFacts {
        lease,
        window: Some(OplogWindow::new(at(0), at(3600))),
        window_unknown: None,
        capped: None,
        now: wall(3600),
        changes: None,
        read_only: false,
        audit: None,
        rebuild: None,
        checkpoints: Vec::new(),
        operator: "ann@host".into(),
        handover_lease: Duration::from_secs(10),
        bulk_lease: Duration::from_secs(30),
        thresholds: crate::model::HealthThresholds::default(),
        profile: Default::default(),
        skipped_entry: None,
        token_for_time: None,
        restart_hold: None,
    }
}

/// Facts with the count `gather` would have made for `request`.
pub(super) fn counted(
    request: &ActionRequest,
    mut facts: PlanFacts,
    counted: u64,
    limit: u64,
) -> PlanFacts {
    let range = affected_range(request, &facts).expect("a range to count");
    facts.changes = Some(ChangeCount {
        range,
        counted,
        limit,
    });
    facts
}

fn takeover(to: Option<&str>, hold: Option<Duration>) -> ActionRequest {
    ActionRequest::Takeover {
        resource: "shop.orders".into(),
        to: to.map(str::to_string),
        hold,
    }
}

fn rewind(to: RewindTarget) -> ActionRequest {
    ActionRequest::Rewind {
        resource: "shop.orders".into(),
        to,
    }
}

fn reset(to: ResetTarget, accept_skip: bool) -> ActionRequest {
    ActionRequest::Reset {
        resource: "shop.orders".into(),
        to,
        accept_skip,
    }
}

fn refusal(plan: &Plan) -> RefusalKind {
    assert!(
        plan.change.is_none(),
        "a refused plan has nothing to execute"
    );
    assert!(plan.after.is_none());
    plan.refusal.as_ref().expect("refused").kind
}

fn accepted(plan: &Plan) -> &OperatorChange {
    assert!(plan.refusal.is_none(), "refused: {:?}", plan.refusal);
    plan.change.as_ref().expect("a change")
}

fn rebuild_target() -> RebuildTarget {
    RebuildTarget {
        name: "orders-rollup".into(),
        resource: "shop.orders".into(),
        description: "a pipeline".into(),
    }
}

fn record(before: Option<Lease>) -> AuditRecord {
    AuditRecord {
        id: "a1".into(),
        operator: "bob".into(),
        at: wall(3500),
        action: "rewind".into(),
        resource: "shop.orders".into(),
        state: AuditState::Applied,
        intended: None,
        before,
        after: None,
        steps: Vec::new(),
        reason: None,
        outcome: "applied".into(),
        finished_at: None,
    }
}

// ------------------------------------------------------------------ takeover

#[test]
fn takeover_of_a_live_holder_fences_it_out_and_needs_typing() {
    let p = plan(&takeover(None, None), &facts(Some(live_lease())));
    let change = accepted(&p);
    assert_eq!(change.expected_version, 12, "CAS on the captured version");
    assert_eq!(change.holder, None);
    assert_eq!(change.expires_in, Duration::ZERO);
    assert_eq!(change.kind, LockKind::Update);
    assert_eq!(change.resume, ResumeChange::Keep);
    assert_eq!(
        p.captured,
        Some(Captured {
            holder: Some("w1".into()),
            version: 12
        })
    );
    let after = p.after.as_ref().unwrap();
    assert_eq!(after.version, 13);
    assert_eq!(after.holder, None);
    assert_eq!(after.expires_at, Some(wall(3600)));
    assert_eq!(after.resume_token, Some(token(3000)), "resume point kept");
    assert_eq!(after.note.as_deref(), Some("takeover by ann@host"));
    assert_eq!(p.effect.fences_out.as_deref(), Some("w1"));
    assert!(
        p.warnings
            .iter()
            .any(|w| w == "holder w1 renewed 3s ago: it looks alive"),
        "{:?}",
        p.warnings
    );
    assert!(p.confirmation.is_some());
    assert_eq!(p.confirm_text(), Some("shop.orders"));
}

#[test]
fn the_holder_warning_names_the_field_its_time_comes_from() {
    // Renewed 14 s ago, committed just now: "renewed 0s ago" would contradict the
    // renewedAt row of the same plan.
    let mut lease = live_lease();
    lease.renewed_at = Some(wall(3600) - TimeDelta::seconds(14));
    lease.committed_at = Some(wall(3600));
    let p = plan(&takeover(None, None), &facts(Some(lease.clone())));
    assert!(
        p.warnings
            .iter()
            .any(|w| w == "holder w1 committed 0s ago: it looks alive"),
        "{:?}",
        p.warnings
    );
    let renewed = describe::lease_diff(&lease, p.after.as_ref().unwrap(), p.planned_at)
        .into_iter()
        .find(|row| row.field == "renewedAt")
        .unwrap();
    assert!(renewed.before.ends_with("(14s ago)"), "{renewed:?}");
}

#[test]
fn takeover_of_an_expired_holder_needs_no_typing() {
    let p = plan(&takeover(None, None), &facts(Some(expired(live_lease()))));
    accepted(&p);
    assert_eq!(p.effect.fences_out, None);
    assert_eq!(p.confirmation, None);
    assert!(p
        .warnings
        .iter()
        .any(|w| w == "holder w1 expired 5m00s ago"));
}

#[test]
fn takeover_to_a_listener_or_held_by_the_operator() {
    let to = plan(&takeover(Some("w2"), None), &facts(Some(live_lease())));
    let change = accepted(&to);
    assert_eq!(change.holder.as_deref(), Some("w2"));
    assert_eq!(change.expires_in, Duration::from_secs(10));
    let after = to.after.as_ref().unwrap();
    assert_eq!(after.acquired_at, Some(wall(3600)), "an acquire for w2");
    assert_eq!(after.expires_at, Some(wall(3610)));

    let hold = plan(
        &takeover(None, Some(Duration::from_secs(600))),
        &facts(Some(live_lease())),
    );
    let change = accepted(&hold);
    assert_eq!(change.holder.as_deref(), Some("ann@host"));
    assert_eq!(change.expires_in, Duration::from_secs(600));
    assert_eq!(change.note, "hold 10m00s by ann@host");
}

#[test]
fn takeover_refuses_both_options_and_a_bulk_lease() {
    let both = plan(
        &takeover(Some("w2"), Some(Duration::from_secs(1))),
        &facts(Some(live_lease())),
    );
    assert_eq!(refusal(&both), RefusalKind::ConflictingOptions);
    let mut bulk = live_lease();
    bulk.kind = LockKind::Bulk;
    let p = plan(&takeover(None, None), &facts(Some(bulk)));
    assert_eq!(refusal(&p), RefusalKind::BulkHeld);
}

#[test]
fn takeover_of_a_lost_lease_warns_that_it_will_not_help() {
    let mut lease = live_lease();
    lease.resume_token = None;
    lease.resume_at = Some(ClusterTime::new(BASE - 10, 1));
    let p = plan(&takeover(None, None), &facts(Some(lease)));
    accepted(&p);
    assert!(
        p.warnings.iter().any(|w| w.contains("LOST")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn takeover_of_a_lease_nobody_took_says_no_standby_took_it() {
    // Expired 5m ago (`expired`), and nobody took it: releasing it again changes nothing.
    for request in [
        takeover(None, None),
        takeover(None, Some(Duration::from_secs(60))),
    ] {
        let p = plan(&request, &facts(Some(expired(live_lease()))));
        accepted(&p);
        assert!(
            p.warnings.iter().any(|w| w
                .starts_with("no live holder for 5m00s: no listener took it when it became free")),
            "{:?}",
            p.warnings
        );
        // And the effect does not promise a standby that is not there.
        assert!(
            p.effect
                .lines
                .iter()
                .any(|l| l.ends_with("but none took it when it was last free")),
            "{:?}",
            p.effect.lines
        );
        assert!(!p.effect.lines.iter().any(|l| l.contains("any standby")));
    }
    // Expired a moment ago: a standby may be about to take it; nothing to say.
    let mut lease = live_lease();
    lease.expires_at = Some(wall(3600 - 5));
    let p = plan(&takeover(None, None), &facts(Some(lease)));
    assert!(p
        .effect
        .lines
        .iter()
        .any(|l| l == "releases the lease now: any standby takes it over"));
    assert!(
        !p.warnings.iter().any(|w| w.contains("no listener took it")),
        "{:?}",
        p.warnings
    );
    // Handing it to a named listener is the one takeover that can help: no warning.
    let p = plan(
        &takeover(Some("w9"), None),
        &facts(Some(expired(live_lease()))),
    );
    assert!(!p.warnings.iter().any(|w| w.contains("no listener took it")));
}

// ------------------------------------------------------------------ rewind

#[test]
fn rewind_by_ten_minutes_replays_from_the_resume_point_back() {
    let request = rewind(RewindTarget::By(Duration::from_secs(600)));
    let f = counted(&request, facts(Some(live_lease())), 1234, 10_000);
    let range = f.changes.as_ref().unwrap().range.clone();
    assert_eq!(
        range,
        ChangeRange {
            on: orders_collection(),
            from: at(2400),
            to: at(3000),
            entries: None,
        },
        "from the target to the committed change, both inclusive"
    );
    let p = plan(&request, &f);
    let change = accepted(&p);
    assert_eq!(
        change.resume,
        ResumeChange::Set {
            token: None,
            at: Some(at(2400))
        }
    );
    assert_eq!(change.holder, None, "fences out");
    let after = p.after.as_ref().unwrap();
    assert_eq!(
        (after.resume_token.clone(), after.resume_at),
        (None, Some(at(2400)))
    );
    let moved = p.effect.resume.as_ref().unwrap();
    assert_eq!(moved.direction, Direction::Replay);
    assert_eq!(moved.span, Duration::from_secs(600));
    assert_eq!(moved.count.as_ref().unwrap().counted, 1234);
    assert!(
        moved
            .describe()
            .starts_with("1 234 changes on shop.orders will be replayed, 10m00s of history"),
        "{}",
        moved.describe()
    );
    assert!(p.confirmation.is_some(), "moves a resume point");
}

#[test]
fn a_count_that_hit_its_bound_says_at_least() {
    let request = rewind(RewindTarget::Time(TimeSpec::Cluster(at(100))));
    let p = plan(
        &request,
        &counted(&request, facts(Some(live_lease())), 10_000, 10_000),
    );
    accepted(&p);
    assert!(p
        .warnings
        .iter()
        .any(|w| w == "counted at least 10 000 changes: the count stops there"));
    assert!(p
        .effect
        .resume
        .unwrap()
        .describe()
        .starts_with("at least 10 000 changes"));
}

#[test]
fn a_count_for_another_range_is_not_shown_as_this_one() {
    let request = rewind(RewindTarget::Time(TimeSpec::Cluster(at(100))));
    let mut f = facts(Some(live_lease()));
    f.changes = Some(ChangeCount {
        range: ChangeRange {
            on: orders_collection(),
            from: at(5),
            to: at(6),
            entries: None,
        },
        counted: 3,
        limit: 10,
    });
    let p = plan(&request, &f);
    assert_eq!(p.effect.resume.unwrap().count, None);
    assert!(p.warnings.iter().any(|w| w.contains("not counted")));
}

#[test]
fn rewind_outside_the_oplog_window_is_refused() {
    for target in [
        TimeSpec::Cluster(ClusterTime::new(BASE - 1, 1)),
        TimeSpec::Cluster(at(3601)),
        TimeSpec::Wall(wall(0) - TimeDelta::seconds(60)),
    ] {
        let p = plan(
            &rewind(RewindTarget::Time(target)),
            &facts(Some(live_lease())),
        );
        assert_eq!(refusal(&p), RefusalKind::OutsideWindow, "{target:?}");
        assert!(p
            .refusal
            .unwrap()
            .reason
            .contains("outside the oplog window"));
    }
    let too_far = plan(
        &rewind(RewindTarget::By(Duration::from_secs(4000))),
        &facts(Some(live_lease())),
    );
    assert_eq!(refusal(&too_far), RefusalKind::OutsideWindow);
    let old_token = plan(
        &rewind(RewindTarget::Token(ResumeToken::encode(
            ClusterTime::new(BASE - 5, 1),
            TokenKind::Event,
            0,
        ))),
        &facts(Some(live_lease())),
    );
    assert_eq!(refusal(&old_token), RefusalKind::OutsideWindow);
}

#[test]
fn rewind_forward_is_a_skip_and_refused() {
    let p = plan(
        &rewind(RewindTarget::Time(TimeSpec::Cluster(at(3500)))),
        &facts(Some(live_lease())),
    );
    assert_eq!(refusal(&p), RefusalKind::WouldSkip);
    assert!(p.refusal.unwrap().reason.contains("--accept-skip"));
}

/// A rewind to a checkpoint is a rewind to its token, found by number or by id among
/// the lease's checkpoints, and the note names it; one the lease does not have is
/// refused, saying how many there are.
#[test]
fn rewind_to_a_checkpoint_is_a_rewind_to_its_token() {
    use crate::model::Checkpoint;
    use crate::ops::CheckpointRef;
    let lease = live_lease();
    let checkpoint = |id: &str, secs: u32, version: i64| Checkpoint {
        id: id.into(),
        resource: lease.resource.clone(),
        at: wall(3000),
        token: token(secs),
        version,
        holder: "w1".into(),
    };
    let mut f = facts(Some(lease.clone()));
    f.checkpoints = vec![
        checkpoint("00000000000000000000000b", 2000, 7),
        checkpoint("00000000000000000000000a", 1000, 6),
    ];
    for which in [
        CheckpointRef::Newest(2),
        CheckpointRef::Id("00000000000000000000000a".into()),
    ] {
        let p = plan(&rewind(RewindTarget::Checkpoint(which)), &f);
        assert_eq!(
            accepted(&p).resume,
            ResumeChange::Set {
                token: Some(token(1000)),
                at: None
            }
        );
        let note = format!("{:?}", p.after.as_ref().and_then(|l| l.note.clone()));
        assert!(
            note.contains("checkpoint 00000000000000000000000a"),
            "{note}"
        );
    }
    let p = plan(
        &rewind(RewindTarget::Checkpoint(CheckpointRef::Newest(3))),
        &f,
    );
    assert_eq!(refusal(&p), RefusalKind::UnknownCheckpoint);
    let reason = p.refusal.unwrap().reason;
    assert!(
        reason.contains("has 2 checkpoints, so there is no checkpoint 3"),
        "{reason}"
    );
}

#[test]
fn rewind_to_a_token_sets_the_token_and_clears_resume_at() {
    let mut lease = live_lease();
    lease.resume_at = Some(at(3100));
    let p = plan(
        &rewind(RewindTarget::Token(token(1000))),
        &facts(Some(lease)),
    );
    assert_eq!(
        accepted(&p).resume,
        ResumeChange::Set {
            token: Some(token(1000)),
            at: None
        }
    );
    let moved = p.effect.resume.unwrap();
    assert_eq!(
        (moved.from, moved.to),
        (ClusterTime::from_u64(at(1000).as_u64() + 1), at(3000))
    );
    let garbage = ResumeToken::from_document(doc! {"_data": "zz"});
    let p = plan(
        &rewind(RewindTarget::Token(garbage)),
        &facts(Some(live_lease())),
    );
    assert_eq!(refusal(&p), RefusalKind::UndecodableToken);
}

#[test]
fn without_the_oplog_window_a_rewind_to_a_named_point_goes_unchecked_and_says_so() {
    let mut f = facts(Some(live_lease()));
    f.window = None;
    // Back a minute from the token's time (3000 s): accepted, with the warning.
    let request = rewind(RewindTarget::By(Duration::from_secs(60)));
    let p = plan(&request, &f);
    let change = accepted(&p);
    assert_eq!(
        change.resume,
        ResumeChange::Set {
            token: None,
            at: Some(ClusterTime::new(BASE + 3000 - 60, 1))
        }
    );
    assert!(
        p.warnings.iter().any(|w| w.starts_with(
            "the oplog window cannot be read, so the new resume point is not checked"
        )),
        "{:?}",
        p.warnings
    );
    assert!(p
        .effect
        .lines
        .contains(&"what is replayed cannot be counted without the oplog window".to_string()));
    assert_eq!(affected_range(&request, &f), None, "nothing to count");

    // Forward is a skip, told from the two times even without the window.
    let p = plan(&rewind(RewindTarget::Time(TimeSpec::Cluster(at(3500)))), &f);
    assert_eq!(refusal(&p), RefusalKind::WouldSkip);

    // A reset needs the window's ends; --by needs something to go back from.
    let p = plan(&reset(ResetTarget::Oldest, false), &f);
    assert_eq!(refusal(&p), RefusalKind::NoOplogAccess);
    let mut at_oldest = live_lease();
    at_oldest.resume_token = None;
    let p = plan(
        &rewind(RewindTarget::By(Duration::from_secs(60))),
        &PlanFacts {
            lease: Some(at_oldest),
            ..f.clone()
        },
    );
    assert_eq!(refusal(&p), RefusalKind::NoOplogAccess);
    assert!(p.refusal.unwrap().reason.contains("--to-token works"));
}

/// Where the read said why the window is unknown (an oplog that shows no entry, a
/// refusal), every plan that meets the unknown window names that reason: the one
/// refused for it, the one refused for want of a point to go back from, and the
/// one that goes ahead unchecked.
#[test]
fn a_plan_without_the_window_names_why_it_is_unknown() {
    let why = "local.oplog.rs shows this user no startable (op != \"n\") entry";
    let mut f = facts(Some(live_lease()));
    f.window = None;
    f.window_unknown = Some(why.into());
    let named = |text: &str| {
        text.contains(&format!(
            "the oplog window cannot be read ({})",
            crate::model::text::escape_control(why)
        ))
    };

    let p = plan(&reset(ResetTarget::Oldest, false), &f);
    assert_eq!(refusal(&p), RefusalKind::NoOplogAccess);
    let reason = p.refusal.unwrap().reason;
    assert!(named(&reason), "{reason}");

    let p = plan(&rewind(RewindTarget::By(Duration::from_secs(60))), &f);
    accepted(&p);
    assert!(p.warnings.iter().any(|w| named(w)), "{:?}", p.warnings);

    let mut at_oldest = live_lease();
    at_oldest.resume_token = None;
    let f = PlanFacts {
        lease: Some(at_oldest),
        ..f
    };
    let p = plan(&rewind(RewindTarget::By(Duration::from_secs(60))), &f);
    let reason = p.refusal.unwrap().reason;
    assert!(named(&reason), "{reason}");

    // A takeover needs no window: planned as it would be with one.
    let f = PlanFacts {
        lease: Some(expired(live_lease())),
        ..f
    };
    accepted(&plan(&takeover(None, None), &f));
}

// ------------------------------------------------------------------ reset

#[test]
fn reset_to_now_needs_accept_skip_and_says_what_is_skipped() {
    let refused = reset(ResetTarget::Now, false);
    let p = plan(
        &refused,
        &counted(&refused, facts(Some(live_lease())), 42, 10_000),
    );
    assert_eq!(refusal(&p), RefusalKind::SkipNotAccepted);
    let reason = p.refusal.unwrap().reason;
    assert!(
        reason.contains("42 changes on shop.orders will be skipped"),
        "{reason}"
    );
    assert!(reason.contains("--accept-skip"));

    let request = reset(ResetTarget::Now, true);
    let f = counted(&request, facts(Some(live_lease())), 42, 10_000);
    let p = plan(&request, &f);
    assert_eq!(
        accepted(&p).resume,
        ResumeChange::Set {
            token: None,
            at: Some(at(3600))
        }
    );
    let moved = p.effect.resume.as_ref().unwrap();
    assert_eq!(moved.direction, Direction::Skip);
    assert_eq!(
        (moved.from, moved.to),
        (
            ClusterTime::from_u64(at(3000).as_u64() + 1),
            ClusterTime::from_u64(at(3600).as_u64() - 1)
        )
    );
}

#[test]
fn reset_to_oldest_clears_both_fields_and_replays_the_window() {
    let request = reset(ResetTarget::Oldest, false);
    let p = plan(
        &request,
        &counted(&request, facts(Some(live_lease())), 9, 100),
    );
    assert_eq!(
        accepted(&p).resume,
        ResumeChange::Set {
            token: None,
            at: None
        }
    );
    let moved = p.effect.resume.unwrap();
    assert_eq!(moved.direction, Direction::Replay);
    assert_eq!(moved.from, at(0));
    assert!(
        p.warnings.iter().any(|w| {
            w.starts_with(
            "the oldest entry is the next the oplog drops: starting there the lease has no headroom"
        ) && w.contains("(the window is 1h00m)")
            && w.ends_with("reset to now instead")
        }),
        "{:?}",
        p.warnings
    );
}

#[test]
fn reset_of_a_lost_lease_warns_that_history_is_gone() {
    let mut lease = live_lease();
    lease.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(BASE - 100, 1),
        TokenKind::Event,
        0,
    ));
    let p = plan(&reset(ResetTarget::Oldest, false), &facts(Some(lease)));
    accepted(&p);
    assert!(
        p.warnings.iter().any(|w| w.contains("LOST")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn a_reset_of_a_lost_lease_says_the_lost_changes_cannot_be_counted() {
    let mut lease = live_lease();
    lease.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(BASE - 100, 1),
        TokenKind::Event,
        0,
    ));
    // To the oldest entry: everything passed over fell off the oplog. The count over
    // that range reads 0, which is not how many changes were lost.
    let request = reset(ResetTarget::Oldest, false);
    let p = plan(
        &request,
        &counted(&request, facts(Some(lease.clone())), 0, 100),
    );
    let moved = p.effect.resume.as_ref().unwrap();
    assert_eq!(
        moved.count, None,
        "no count is shown for a range that is gone"
    );
    let text = p.effect.lines.join("\n");
    assert!(!text.contains("0 changes"), "{text}");
    assert!(
        text.contains("fell off the oplog: they cannot be counted, nor skipped (they are gone); no change still in the oplog is skipped"),
        "{text}"
    );

    // To now: the lost part is uncountable, what is still in the oplog is counted.
    let request = reset(ResetTarget::Now, true);
    let p = plan(&request, &counted(&request, facts(Some(lease)), 42, 10_000));
    let text = p.effect.lines.join("\n");
    assert!(text.contains("they cannot be counted"), "{text}");
    assert!(
        text.contains(&format!(
            "42 changes on shop.orders will be skipped, 1h00m of history ({} to",
            at(0)
        )),
        "{text}"
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.starts_with("skipping on purpose (accepted)")),
        "{:?}",
        p.warnings
    );
    assert!(
        !p.warnings.iter().any(|w| w.contains("cannot be counted")),
        "the warning does not repeat the effect: {:?}",
        p.warnings
    );
}

// ------------------------------------------------------------------ rebuild and abort-bulk

#[test]
fn rebuild_with_no_definition_is_refused() {
    let p = plan(
        &ActionRequest::Rebuild {
            name: "nope".into(),
        },
        &facts(Some(live_lease())),
    );
    assert_eq!(refusal(&p), RefusalKind::NoRebuildDefinition);
    assert!(p.refusal.unwrap().reason.contains("[rebuilds.nope]"));
}

#[test]
fn rebuild_takes_the_lease_bulk_for_the_operator() {
    let mut f = facts(Some(live_lease()));
    f.rebuild = Some(rebuild_target());
    let request = ActionRequest::Rebuild {
        name: "orders-rollup".into(),
    };
    let p = plan(&request, &f);
    let change = accepted(&p);
    assert_eq!(change.kind, LockKind::Bulk);
    assert_eq!(change.holder.as_deref(), Some("ann@host"));
    assert_eq!(change.expires_in, Duration::from_secs(30));
    assert_eq!(
        change.resume,
        ResumeChange::Keep,
        "resumeAt = T0 only at the end"
    );
    assert_eq!(p.resource.as_deref(), Some("shop.orders"));
    assert!(p.confirmation.is_some());
    assert!(p.effect.lines.iter().any(|l| l.contains("resumeAt = T0")));

    let mut running = live_lease();
    running.kind = LockKind::Bulk;
    f.lease = Some(running.clone());
    assert_eq!(refusal(&plan(&request, &f)), RefusalKind::RebuildRunning);

    f.lease = Some(expired(running));
    let stuck = plan(&request, &f);
    accepted(&stuck);
    assert!(stuck.warnings.iter().any(|w| w.contains("STUCK BULK")));
}

#[test]
fn abort_bulk_gives_the_lease_back_and_warns() {
    let request = ActionRequest::AbortBulk {
        resource: "shop.orders".into(),
    };
    assert_eq!(
        refusal(&plan(&request, &facts(Some(live_lease())))),
        RefusalKind::NotBulk
    );
    let mut stuck = expired(live_lease());
    stuck.kind = LockKind::Bulk;
    let p = plan(&request, &facts(Some(stuck)));
    let change = accepted(&p);
    assert_eq!(
        (change.kind, change.holder.as_ref()),
        (LockKind::Update, None)
    );
    assert_eq!(change.resume, ResumeChange::Keep);
    assert!(p
        .warnings
        .iter()
        .any(|w| w.starts_with("the aggregate may be inconsistent after abort-bulk")));
    assert_eq!(p.confirmation, None, "nobody live is fenced out");
}

// ------------------------------------------------------------------ undo

#[test]
fn undo_restores_the_recorded_resume_point() {
    let mut before = live_lease();
    before.resume_token = Some(token(2000));
    let mut f = facts(Some(live_lease()));
    f.audit = Some(record(Some(before)));
    let request = ActionRequest::Undo {
        audit_id: "a1".into(),
    };
    let p = plan(&request, &f);
    assert_eq!(
        accepted(&p).resume,
        ResumeChange::Set {
            token: Some(token(2000)),
            at: None
        }
    );
    assert_eq!(p.resource.as_deref(), Some("shop.orders"));
    assert_eq!(
        p.effect.resume.as_ref().unwrap().direction,
        Direction::Replay
    );
    assert!(p.effect.lines[0].contains("recorded before rewind by bob"));

    // Undoing a rewind goes forward: said, not refused.
    let mut later = live_lease();
    later.resume_token = Some(token(3500));
    f.audit = Some(record(Some(later)));
    let p = plan(&request, &f);
    accepted(&p);
    assert!(p.warnings.iter().any(|w| w.contains("forward")));
}

#[test]
fn undo_refusals() {
    let request = ActionRequest::Undo {
        audit_id: "a1".into(),
    };
    let mut f = facts(Some(live_lease()));
    assert_eq!(
        refusal(&plan(&request, &f)),
        RefusalKind::UnknownAuditRecord
    );

    f.audit = Some(record(None));
    assert_eq!(refusal(&plan(&request, &f)), RefusalKind::NothingToRestore);
    let mut no_point = live_lease();
    no_point.resume_token = None;
    f.audit = Some(record(Some(no_point)));
    assert_eq!(refusal(&plan(&request, &f)), RefusalKind::NothingToRestore);

    let mut gone = live_lease();
    gone.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(BASE - 1, 1),
        TokenKind::Event,
        0,
    ));
    f.audit = Some(record(Some(gone)));
    assert_eq!(refusal(&plan(&request, &f)), RefusalKind::OutsideWindow);

    let mut fine = live_lease();
    fine.resume_at = Some(at(10));
    for state in [AuditState::NotApplied, AuditState::Failed] {
        let mut unapplied = record(Some(fine.clone()));
        unapplied.state = state;
        f.audit = Some(unapplied);
        assert_eq!(
            refusal(&plan(&request, &f)),
            RefusalKind::NotApplied,
            "{state}"
        );
    }
    // A pending record: undoable only when the lease reads back as it intended.
    let mut pending = record(Some(fine.clone()));
    pending.state = AuditState::Pending;
    pending.before = Some(Lease {
        version: live_lease().version,
        ..fine.clone()
    });
    f.audit = Some(pending.clone());
    assert_eq!(refusal(&plan(&request, &f)), RefusalKind::NotApplied);
    let mut moved = live_lease();
    moved.version += 1;
    pending.before = Some(Lease {
        version: live_lease().version,
        ..fine.clone()
    });
    pending.intended = Some(moved.clone());
    f.audit = Some(pending);
    f.lease = Some(moved);
    accepted(&plan(&request, &f));
    f.lease = Some(live_lease());

    f.audit = Some(record(Some(fine)));
    f.lease = None;
    assert_eq!(refusal(&plan(&request, &f)), RefusalKind::UnknownResource);
}

#[test]
fn undo_of_a_fold_of_increments_is_refused_without_a_lease() {
    let request = ActionRequest::Undo {
        audit_id: "a1".into(),
    };
    let mut fold = record(None);
    fold.action = crate::model::FOLD_INCREMENTS_ACTION.into();
    fold.resource = "shop.counts".into();
    for state in [AuditState::Applied, AuditState::Pending] {
        fold.state = state;
        let mut f = facts(None);
        f.audit = Some(fold.clone());
        let p = plan(&request, &f);
        assert_eq!(refusal(&p), RefusalKind::NothingToRestore, "{state}");
        let reason = &p.refusal.as_ref().unwrap().reason;
        assert_eq!(
            reason,
            "a fold of increments has no resume point to restore: run `streamward increments fold` again"
        );
    }
}

#[test]
fn undo_of_an_action_that_did_not_move_the_resume_point_has_nothing_to_undo() {
    // A takeover recorded before and after at the same resume point; since then the
    // new holder processed on to the token at +3000 s. Restoring the recorded point
    // would replay everything since: a rewind nobody asked for.
    let mut before = live_lease();
    before.resume_token = Some(token(2000));
    let mut after = before.clone();
    after.holder = None;
    after.version += 1;
    let mut taken_over = record(Some(before.clone()));
    taken_over.action = "takeover".into();
    taken_over.after = Some(after);
    let mut f = facts(Some(live_lease()));
    f.audit = Some(taken_over);
    let request = ActionRequest::Undo {
        audit_id: "a1".into(),
    };
    let p = plan(&request, &f);
    assert_eq!(refusal(&p), RefusalKind::NothingToRestore);
    let reason = p.refusal.unwrap().reason;
    assert!(
        reason.starts_with("nothing to undo: takeover did not move the resume point"),
        "{reason}"
    );
    assert!(p.effect.resume.is_none(), "nothing is replayed");

    // The holder committed between the plan's read and the swap (which is on the
    // version only): the record's after has a later token, and it is still a takeover.
    let mut committed_meanwhile = f.audit.clone().unwrap();
    committed_meanwhile.after.as_mut().unwrap().resume_token = Some(token(2100));
    f.audit = Some(committed_meanwhile);
    assert_eq!(refusal(&plan(&request, &f)), RefusalKind::NothingToRestore);

    // A rewind moved it: its undo restores the point before it.
    let mut rewound = before.clone();
    rewound.resume_token = None;
    rewound.resume_at = Some(at(1000));
    let mut rewind_record = record(Some(before));
    rewind_record.after = Some(rewound);
    f.audit = Some(rewind_record);
    accepted(&plan(&request, &f));
}

// ------------------------------------------------------------------ every action

fn every_request() -> Vec<ActionRequest> {
    vec![
        takeover(None, None),
        takeover(Some("w2"), None),
        takeover(None, Some(Duration::from_secs(60))),
        rewind(RewindTarget::By(Duration::from_secs(60))),
        reset(ResetTarget::Oldest, false),
        reset(ResetTarget::Now, true),
        ActionRequest::Rebuild {
            name: "orders-rollup".into(),
        },
        ActionRequest::AbortBulk {
            resource: "shop.orders".into(),
        },
        ActionRequest::Undo {
            audit_id: "a1".into(),
        },
    ]
}

#[test]
fn read_only_refuses_every_action() {
    let mut before = live_lease();
    before.resume_token = Some(token(2000));
    for request in every_request() {
        let mut f = facts(Some(live_lease()));
        f.read_only = true;
        f.rebuild = Some(rebuild_target());
        f.audit = Some(record(Some(before.clone())));
        let p = plan(&request, &f);
        assert_eq!(refusal(&p), RefusalKind::ReadOnly, "{request:?}");
    }
}

#[test]
fn an_unknown_resource_refuses_every_action_that_names_one() {
    for request in every_request() {
        let mut f = facts(None);
        f.rebuild = Some(rebuild_target());
        f.audit = Some(record(Some(live_lease())));
        let p = plan(&request, &f);
        assert_eq!(refusal(&p), RefusalKind::UnknownResource, "{request:?}");
        assert!(p
            .refusal
            .unwrap()
            .reason
            .contains("no lease \"shop.orders\""));
    }
}

#[test]
fn every_accepted_plan_predicts_version_plus_one_and_keeps_the_id() {
    let mut before = live_lease();
    before.resume_token = Some(token(2000));
    for request in every_request() {
        let mut f = facts(Some(live_lease()));
        f.rebuild = Some(rebuild_target());
        f.audit = Some(record(Some(before.clone())));
        if matches!(request, ActionRequest::AbortBulk { .. }) {
            let mut bulk = expired(live_lease());
            bulk.kind = LockKind::Bulk;
            f.lease = Some(bulk);
        }
        let p = plan(&request, &f);
        let change = accepted(&p);
        assert_eq!(change.expected_version, 12, "{request:?}");
        let after = p.after.as_ref().unwrap();
        assert_eq!(after.version, 13);
        assert_eq!(after.resource, "shop.orders");
        assert_eq!(after.note.as_deref(), Some(change.note.as_str()));
        assert!(change.note.contains("ann@host"), "{}", change.note);
    }
}

#[test]
fn digits_are_grouped_by_thousands() {
    assert_eq!(group_digits(0), "0");
    assert_eq!(group_digits(999), "999");
    assert_eq!(group_digits(1000), "1 000");
    assert_eq!(group_digits(1_234_567), "1 234 567");
}

// ------------------------------------------------------------------ a closed stream (INVALIDATED)

/// The orders collection was dropped at +3100 s, after the listener committed +3000 s
/// (its last change); it recorded that and gave the lease back.
fn invalidated_lease() -> Lease {
    let mut lease = expired(live_lease());
    lease.holder = None;
    lease.invalidated = Some(crate::model::Invalidation {
        at: Some(ClusterTime::new(BASE + 3100, 4)),
        reason: "shop.orders was dropped\u{1b}[2J".into(),
    });
    lease
}

fn rewind_to(time: ClusterTime) -> ActionRequest {
    rewind(RewindTarget::Time(TimeSpec::Cluster(time)))
}

#[test]
fn takeover_of_an_invalidated_lease_says_it_will_meet_the_closed_stream_again() {
    let p = plan(&takeover(None, None), &facts(Some(invalidated_lease())));
    accepted(&p);
    let warning = p
        .warnings
        .iter()
        .find(|w| w.contains("INVALIDATED"))
        .unwrap_or_else(|| panic!("{:?}", p.warnings));
    assert!(warning.contains("dropped\\u{1b}[2J"), "escaped: {warning}");
    assert!(
        warning.contains(&format!("rewind shop.orders --to {}:5", BASE + 3100)),
        "names the way out: {warning}"
    );
    assert!(
        p.after.as_ref().unwrap().invalidated.is_some(),
        "a takeover keeps the record"
    );
}

#[test]
fn rewind_to_right_after_the_closed_stream_skips_nothing_and_clears_the_record() {
    let after_drop = ClusterTime::new(BASE + 3100, 5);
    let p = plan(&rewind_to(after_drop), &facts(Some(invalidated_lease())));
    let change = accepted(&p);
    assert_eq!(
        change.resume,
        ResumeChange::Set {
            token: None,
            at: Some(after_drop)
        }
    );
    assert_eq!(p.after.as_ref().unwrap().invalidated, None);
    assert!(
        p.effect
            .lines
            .iter()
            .any(|l| l.starts_with("clears the INVALIDATED record")),
        "{:?}",
        p.effect.lines
    );
    assert!(
        p.effect
            .lines
            .iter()
            .any(|l| l.starts_with("starts right after")),
        "{:?}",
        p.effect.lines
    );
    assert!(
        !p.warnings.iter().any(|w| w.contains("meets it again")),
        "{:?}",
        p.warnings
    );

    // One tick further passes over changes made after the drop: a skip, refused.
    let later = plan(
        &rewind_to(ClusterTime::new(BASE + 3100, 6)),
        &facts(Some(invalidated_lease())),
    );
    assert_eq!(refusal(&later), RefusalKind::WouldSkip);
    // Without the record, the same move is a skip like any other.
    let mut plain = invalidated_lease();
    plain.invalidated = None;
    assert_eq!(
        refusal(&plan(&rewind_to(after_drop), &facts(Some(plain)))),
        RefusalKind::WouldSkip
    );
}

#[test]
fn moving_an_invalidated_lease_to_before_the_closed_stream_warns_it_meets_it_again() {
    for request in [
        rewind_to(at(2000)),
        reset(ResetTarget::Oldest, false),
        rewind_to(ClusterTime::new(BASE + 3100, 4)),
    ] {
        let p = plan(&request, &facts(Some(invalidated_lease())));
        accepted(&p);
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("meets it again")
                    && w.contains(&format!("--to {}:5", BASE + 3100))),
            "{request:?}: {:?}",
            p.warnings
        );
    }
    let now = plan(
        &reset(ResetTarget::Now, true),
        &facts(Some(invalidated_lease())),
    );
    accepted(&now);
    assert!(!now.warnings.iter().any(|w| w.contains("meets it again")));
    assert_eq!(now.after.as_ref().unwrap().invalidated, None);
}

/// On Azure Cosmos DB a stream starts at now or after a token: a rewind to a time (or
/// back by a duration) and a rebuild (which hands back a time) are refused in planning,
/// whoever asks (the binary or the console); a rewind to a token, which tells no time
/// there, is planned unchecked.
#[test]
fn on_cosmos_db_only_token_moves_are_planned() {
    let mut f = facts(Some(live_lease()));
    f.window = None;
    f.profile = crate::model::StreamProfile::CosmosDb;
    f.rebuild = Some(rebuild_target());
    for to in [
        RewindTarget::Time(TimeSpec::Cluster(at(1000))),
        RewindTarget::By(Duration::from_secs(60)),
    ] {
        let p = plan(&rewind(to.clone()), &f);
        assert_eq!(refusal(&p), RefusalKind::NotOnThisDeployment, "{to:?}");
        assert!(p.refusal.unwrap().reason.contains("--to-token"));
    }
    let rebuild = ActionRequest::Rebuild {
        name: "orders-rollup".into(),
    };
    assert_eq!(
        refusal(&plan(&rebuild, &f)),
        RefusalKind::NotOnThisDeployment
    );
    let cosmos_token = ResumeToken::from_document(doc! {"_data": "AeARBpQ/AAAA"});
    let p = plan(&rewind(RewindTarget::Token(cosmos_token.clone())), &f);
    assert_eq!(
        accepted(&p).resume,
        ResumeChange::Set {
            token: Some(cosmos_token.clone()),
            at: None
        }
    );
    // The same token on MongoDB cannot be checked, and is refused as before.
    f.profile = crate::model::StreamProfile::MongoDb;
    assert_eq!(
        refusal(&plan(&rewind(RewindTarget::Token(cosmos_token)), &f)),
        RefusalKind::UndecodableToken
    );
}

#[test]
fn no_action_wraps_a_fencing_version_at_its_largest_value() {
    let mut lease = live_lease();
    lease.version = i64::MAX;
    let mut bulk = lease.clone();
    bulk.kind = LockKind::Bulk;
    let requests = [
        (takeover(None, None), lease.clone()),
        (takeover(None, Some(Duration::from_secs(60))), lease.clone()),
        (
            rewind(RewindTarget::By(Duration::from_secs(600))),
            lease.clone(),
        ),
        (reset(ResetTarget::Oldest, false), lease.clone()),
        (
            ActionRequest::AbortBulk {
                resource: "shop.orders".into(),
            },
            bulk,
        ),
    ];
    for (request, lease) in requests {
        let p = plan(&request, &facts(Some(lease)));
        assert_eq!(refusal(&p), RefusalKind::VersionExhausted, "{request:?}");
        assert!(p.change.is_none() && p.after.is_none(), "{request:?}");
        let reason = p.refusal.map(|r| r.reason).unwrap_or_default();
        assert!(reason.contains("9223372036854775807"), "{reason}");
    }
    // One below the largest value still moves, to the largest value.
    lease.version = i64::MAX - 1;
    let p = plan(&takeover(None, None), &facts(Some(lease)));
    assert_eq!(p.after.map(|a| a.version), Some(i64::MAX));
}

/// A rebuild writes two versions: the bulk swap, then the give-back after the run. One
/// below the largest value, the give-back would wrap after the whole run and leave the
/// lease STUCK BULK at a version no abort-bulk can move: refused before anything runs.
#[test]
fn a_rebuild_is_refused_when_its_give_back_would_pass_the_largest_version() {
    let request = ActionRequest::Rebuild {
        name: "orders-rollup".into(),
    };
    let mut lease = live_lease();
    lease.version = i64::MAX - 1;
    let mut f = facts(Some(lease.clone()));
    f.rebuild = Some(rebuild_target());
    let p = plan(&request, &f);
    assert_eq!(refusal(&p), RefusalKind::VersionExhausted);
    assert!(p.change.is_none() && p.after.is_none());
    let reason = p.refusal.map(|r| r.reason).unwrap_or_default();
    assert!(
        reason.contains("9223372036854775806") && reason.contains("two"),
        "{reason}"
    );
    // Two below, both writes fit: the give-back reaches the largest value.
    lease.version = i64::MAX - 2;
    f.lease = Some(lease);
    let p = plan(&request, &f);
    assert_eq!(p.after.map(|a| a.version), Some(i64::MAX - 1));
}
