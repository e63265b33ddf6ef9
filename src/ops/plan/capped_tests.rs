//! Planning for leases that tail a capped collection: positions are entries' `_id`s,
//! checked against the entries the collection holds, and counted in it.

use std::time::Duration;

use bson::oid::ObjectId;
use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::model::{
    entry_token, object_id_at, ClusterTime, HealthThresholds, OplogWindow, ResumeToken, SourceKind,
    TokenKind, WatchTarget,
};
use crate::ops::facts::{CappedHistory, ChangeCount};
use crate::ops::request::{ResetTarget, RewindTarget, TimeSpec};
use crate::ops::target::affected_range;
use crate::store::{CappedWindow, Namespace};

const BASE: i64 = 1_700_000_000;

fn wall(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(BASE + secs, 0).unwrap()
}

/// The `n`th entry: two per second from +100 s, one appender.
fn id(n: u32) -> ObjectId {
    object_id_at(wall(100 + i64::from(n / 2)), [7; 5], n)
}

fn events() -> Namespace {
    Namespace::new("app", "events")
}

/// Held by w1, after entry 40 (at +120 s).
fn capped_lease() -> Lease {
    let now = wall(200);
    let mut lease = Lease::vacant("app.events");
    lease.holder = Some("w1".into());
    lease.version = 5;
    lease.expires_at = Some(now + TimeDelta::seconds(8));
    lease.resume_token = Some(entry_token(id(40)));
    lease.watch = Some(WatchTarget {
        db: "app".into(),
        coll: "events".into(),
        source: SourceKind::Capped,
        ..Default::default()
    });
    lease
}

/// The collection holds entries 20 (at +110 s) to 80 (at +140 s).
fn facts(lease: Lease) -> PlanFacts {
    let entries = CappedWindow {
        oldest: id(20),
        newest: id(80),
    };
    PlanFacts {
        lease: Some(lease),
        window: Some(entries.times()),
        window_unknown: None,
        capped: Some(CappedHistory {
            ns: events(),
            entries: Some(entries),
        }),
        now: wall(200),
        changes: None,
        read_only: false,
        audit: None,
        rebuild: None,
        checkpoints: Vec::new(),
        operator: "ann@host".into(),
        handover_lease: Duration::from_secs(10),
        bulk_lease: Duration::from_secs(30),
        thresholds: HealthThresholds::default(),
        profile: Default::default(),
        skipped_entry: None,
        token_for_time: None,
        restart_hold: None,
    }
}

fn rewind(to: RewindTarget) -> ActionRequest {
    ActionRequest::Rewind {
        resource: "app.events".into(),
        to,
    }
}

fn reset(to: ResetTarget, accept_skip: bool) -> ActionRequest {
    ActionRequest::Reset {
        resource: "app.events".into(),
        to,
        accept_skip,
    }
}

fn set_to(plan: &Plan) -> (Option<ResumeToken>, Option<ClusterTime>) {
    assert!(plan.refusal.is_none(), "refused: {:?}", plan.refusal);
    match &plan.change.as_ref().expect("a change").resume {
        crate::store::ResumeChange::Set { token, at } => (token.clone(), *at),
        other => panic!("the resume point does not move: {other:?}"),
    }
}

fn refused(plan: &Plan) -> Refusal {
    assert!(
        plan.change.is_none(),
        "a refused plan has nothing to execute"
    );
    plan.refusal.clone().expect("refused")
}

/// With the count `gather` would make, in the collection, of the span moved over.
fn counted(request: &ActionRequest, mut facts: PlanFacts, counted: u64) -> PlanFacts {
    let range = affected_range(request, &facts).expect("a range to count");
    assert!(range.entries.is_some(), "counted by _id: {range:?}");
    facts.changes = Some(ChangeCount {
        range,
        counted,
        limit: 10_000,
    });
    facts
}

#[test]
fn a_rewind_to_an_entry_it_holds_resumes_after_it_and_counts_the_entries_between() {
    let request = rewind(RewindTarget::Token(entry_token(id(30))));
    let f = counted(&request, facts(capped_lease()), 10);
    let range = f.changes.as_ref().unwrap().range.clone();
    let span = range.entries.unwrap();
    // Entries 31 to 40 are replayed: after 30, up to and including 40.
    let replayed: Vec<u32> = (20..=80).filter(|&n| span.holds(&id(n))).collect();
    assert_eq!(replayed, (31..=40).collect::<Vec<_>>());
    let p = plan(&request, &f);
    assert_eq!(set_to(&p), (Some(entry_token(id(30))), None));
    let text = p.effect.lines.join("\n");
    assert!(
        text.contains("10 entries of capped collection app.events will be replayed"),
        "{text}"
    );
    assert!(
        text.contains(&format!("resumes after entry {}", id(30))),
        "{text}"
    );
}

#[test]
fn entries_of_one_second_are_told_apart_by_their_ids() {
    // Entries 40 and 41 share a second: their times alone would say nothing moves.
    let request = rewind(RewindTarget::Token(entry_token(id(39))));
    let p = plan(&request, &counted(&request, facts(capped_lease()), 1));
    assert!(
        p.effect.lines.join("\n").contains("1 entry of capped"),
        "{:?}",
        p.effect
    );
}

#[test]
fn an_entry_outside_the_collection_is_refused_naming_its_entries() {
    for outside in [id(10), id(90)] {
        let p = plan(
            &rewind(RewindTarget::Token(entry_token(outside))),
            &facts(capped_lease()),
        );
        let refusal = refused(&p);
        assert_eq!(refusal.kind, RefusalKind::OutsideWindow);
        assert!(
            refusal
                .reason
                .contains("is outside the entries of capped collection app.events (oldest"),
            "{}",
            refusal.reason
        );
        assert!(!refusal.reason.contains("oplog"), "{}", refusal.reason);
    }
}

#[test]
fn a_time_outside_the_collection_is_refused_and_one_inside_starts_there() {
    let before = rewind(RewindTarget::Time(TimeSpec::Wall(wall(105))));
    let refusal = refused(&plan(&before, &facts(capped_lease())));
    assert_eq!(refusal.kind, RefusalKind::OutsideWindow);
    assert!(refusal.reason.contains("capped collection app.events"));
    // In the second of the oldest entry: inside (entries carry whole seconds).
    let at_oldest = rewind(RewindTarget::Time(TimeSpec::Wall(wall(110))));
    let f = counted(&at_oldest, facts(capped_lease()), 21);
    let p = plan(&at_oldest, &f);
    assert_eq!(
        set_to(&p),
        (None, Some(ClusterTime::new((BASE + 110) as u32, 1)))
    );
    let span = f.changes.unwrap().range.entries.unwrap();
    assert!(span.holds(&id(20)) && span.holds(&id(40)) && !span.holds(&id(41)));
}

#[test]
fn positions_of_the_other_kind_of_source_are_refused() {
    let stream_token = ResumeToken::encode(
        ClusterTime::new((BASE + 120) as u32, 1),
        TokenKind::Event,
        7,
    );
    let refusal = refused(&plan(
        &rewind(RewindTarget::Token(stream_token)),
        &facts(capped_lease()),
    ));
    assert_eq!(refusal.kind, RefusalKind::WrongSource);
    assert!(!refusal.reason.contains("  "), "{}", refusal.reason);
    assert!(
        refusal.reason.contains("--to-id OBJECTID"),
        "{}",
        refusal.reason
    );

    // A change stream's lease refuses an entry's _id.
    let mut stream_lease = capped_lease();
    stream_lease.watch.as_mut().unwrap().source = SourceKind::ChangeStream;
    stream_lease.resume_token = Some(ResumeToken::encode(
        ClusterTime::new((BASE + 120) as u32, 1),
        TokenKind::Event,
        7,
    ));
    let stream_facts = PlanFacts {
        lease: Some(stream_lease),
        window: Some(OplogWindow::new(
            ClusterTime::new(BASE as u32, 1),
            ClusterTime::new((BASE + 200) as u32, 1),
        )),
        window_unknown: None,
        capped: None,
        ..facts(capped_lease())
    };
    let refusal = refused(&plan(
        &rewind(RewindTarget::Token(entry_token(id(30)))),
        &stream_facts,
    ));
    assert_eq!(refusal.kind, RefusalKind::WrongSource);
    assert!(
        refusal.reason.contains("reads a change stream"),
        "{}",
        refusal.reason
    );
}

#[test]
fn reset_to_now_resumes_after_the_newest_entry_and_counts_what_it_skips() {
    let unaccepted = plan(&reset(ResetTarget::Now, false), &facts(capped_lease()));
    assert_eq!(refused(&unaccepted).kind, RefusalKind::SkipNotAccepted);
    let request = reset(ResetTarget::Now, true);
    let f = counted(&request, facts(capped_lease()), 40);
    let p = plan(&request, &f);
    assert_eq!(set_to(&p), (Some(entry_token(id(80))), None));
    let span = f.changes.unwrap().range.entries.unwrap();
    let skipped: Vec<u32> = (20..=80).filter(|&n| span.holds(&id(n))).collect();
    assert_eq!(skipped, (41..=80).collect::<Vec<_>>());
    assert!(p
        .effect
        .lines
        .join("\n")
        .contains("40 entries of capped collection app.events will be skipped"));
}

#[test]
fn reset_to_oldest_reads_every_entry_held_even_of_an_empty_collection() {
    let request = reset(ResetTarget::Oldest, false);
    let f = counted(&request, facts(capped_lease()), 21);
    let p = plan(&request, &f);
    assert_eq!(set_to(&p), (None, None));
    assert!(p
        .warnings
        .join("\n")
        .contains("capped collection app.events overwrites"));

    let mut empty = facts(capped_lease());
    empty.window = None;
    empty.capped.as_mut().unwrap().entries = None;
    assert_eq!(set_to(&plan(&request, &empty)), (None, None));
    let refusal = refused(&plan(&reset(ResetTarget::Now, true), &empty));
    assert!(
        refusal.reason.contains("holds no entries"),
        "{}",
        refusal.reason
    );
}

#[test]
fn a_lost_capped_position_says_its_entries_were_overwritten() {
    let mut lost = capped_lease();
    lost.resume_token = Some(entry_token(id(4)));
    let request = reset(ResetTarget::Now, true);
    let p = plan(&request, &counted(&request, facts(lost), 61));
    let warnings = p.warnings.join("\n");
    assert!(
        warnings.contains("LOST: entries of app.events"),
        "{warnings}"
    );
    assert!(
        p.effect.lines.join("\n").contains("were overwritten"),
        "{:?}",
        p.effect
    );
}
