//! Planning an import without I/O.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::model::{ClusterTime, LockKind, OplogWindow, ResumeToken, TokenKind, WatchTarget};
use crate::ops::lease_transfer::format::{ExportOrigin, LeaseExport};

const BASE: u32 = 1_700_000_000;

fn at(secs: u32) -> ClusterTime {
    ClusterTime::new(BASE + secs, 1)
}

fn wall(secs: u32) -> DateTime<Utc> {
    at(secs).to_datetime().unwrap()
}

fn token(secs: u32) -> ResumeToken {
    ResumeToken::encode(at(secs), TokenKind::Event, 7)
}

#[allow(clippy::field_reassign_with_default)]
fn watching(db: &str, coll: &str) -> WatchTarget {
    let mut watch = WatchTarget::default();
    watch.db = db.into();
    watch.coll = coll.into();
    watch
}

/// Held by w1 (expires in 8 s), token at +3000 s, watching shop.orders.
fn lease_at(secs: u32) -> Lease {
    let mut lease = Lease::vacant("shop.orders");
    lease.holder = Some("w1".into());
    lease.version = 12;
    lease.expires_at = Some(wall(3600) + TimeDelta::seconds(8));
    lease.renewed_at = Some(wall(3600) - TimeDelta::seconds(3));
    lease.resume_token = Some(token(secs));
    lease.watch = Some(watching("shop", "orders"));
    lease
}

fn facts(lease: Option<Lease>) -> PlanFacts {
    PlanFacts {
        lease,
        window: Some(OplogWindow::new(at(0), at(3600))),
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
        window_unknown: None,
        token_for_time: None,
        restart_hold: None,
        capped: None,
    }
}

fn exported(secs: u32) -> ExportedLease {
    ExportedLease::of(&lease_at(secs))
}

fn item(file: &ExportedLease, lease: Option<Lease>, options: &ImportOptions) -> ImportItem {
    plan_item(file, &facts(lease), options, wall(1000))
}

#[test]
fn a_lease_at_the_files_point_is_unchanged_and_written_to_not_at_all() {
    let planned = item(
        &exported(2000),
        Some(lease_at(2000)),
        &ImportOptions::default(),
    );
    assert_eq!(planned.step, ImportStep::Unchanged);
    assert!(planned.move_plan().is_none() && planned.refusal().is_none());
    // Same for resumeAt only, and for neither.
    let mut by_time = lease_at(0);
    by_time.resume_token = None;
    by_time.resume_at = Some(at(100));
    let planned = item(
        &ExportedLease::of(&by_time),
        Some(by_time.clone()),
        &ImportOptions::default(),
    );
    assert_eq!(planned.step, ImportStep::Unchanged);
}

#[test]
fn a_lease_that_moved_on_is_planned_as_the_rewind_to_the_files_token() {
    let file = exported(2000);
    let planned = item(&file, Some(lease_at(3000)), &ImportOptions::default());
    let plan = planned.move_plan().expect("a move back is a rewind");
    assert_eq!(plan.action, crate::ops::ActionKind::Rewind);
    assert_eq!(
        plan.request,
        ActionRequest::Rewind {
            resource: "shop.orders".into(),
            to: RewindTarget::Token(token(2000)),
        }
    );
    let change = plan.change.as_ref().unwrap();
    assert_eq!(
        change.expected_version, 12,
        "compare-and-swap on the version read"
    );
    assert_eq!(
        change.resume,
        crate::store::ResumeChange::Set {
            token: Some(token(2000)),
            at: None
        }
    );
    assert!(change
        .note
        .starts_with("import of the resume point exported at"));
    let after = plan.after.as_ref().unwrap();
    assert_eq!(after.resume_token, Some(token(2000)));
    assert_eq!(after.note, Some(change.note.clone()));
    // As a rewind: the live holder is fenced out and warned about.
    assert_eq!(plan.effect.fences_out.as_deref(), Some("w1"));
    assert!(plan.warnings.iter().any(|w| w.contains("looks alive")));
}

#[test]
fn a_move_forward_is_refused_unless_the_skip_is_accepted() {
    let file = exported(3000);
    let refused = item(&file, Some(lease_at(1000)), &ImportOptions::default());
    assert_eq!(
        refused.refusal().map(|r| r.kind),
        Some(RefusalKind::WouldSkip)
    );
    let reason = &refused.refusal().unwrap().reason;
    assert!(reason.contains("import with --accept-skip"), "{reason}");
    assert!(!reason.contains("reset --to now"), "{reason}");
    let accepted = item(
        &file,
        Some(lease_at(1000)),
        &ImportOptions {
            accept_skip: true,
            ..ImportOptions::default()
        },
    );
    let plan = accepted.move_plan().expect("accepted");
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("skipping on purpose")),
        "{:?}",
        plan.warnings
    );
    assert_eq!(plan.after.as_ref().unwrap().resume_token, Some(token(3000)));
}

#[test]
fn the_rewinds_guards_hold_outside_the_window_on_a_bulk_lease_and_read_only() {
    // The file's token fell off the oplog since.
    let mut old = lease_at(0);
    old.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(BASE - 50, 1),
        TokenKind::Event,
        1,
    ));
    let planned = item(
        &ExportedLease::of(&old),
        Some(lease_at(3000)),
        &ImportOptions::default(),
    );
    assert_eq!(
        planned.refusal().map(|r| r.kind),
        Some(RefusalKind::OutsideWindow)
    );
    let mut bulk = lease_at(3000);
    bulk.kind = LockKind::Bulk;
    let planned = item(&exported(2000), Some(bulk), &ImportOptions::default());
    assert_eq!(
        planned.refusal().map(|r| r.kind),
        Some(RefusalKind::BulkHeld)
    );
    let mut read_only = facts(Some(lease_at(3000)));
    read_only.read_only = true;
    let planned = plan_item(
        &exported(2000),
        &read_only,
        &ImportOptions::default(),
        wall(0),
    );
    assert_eq!(
        planned.refusal().map(|r| r.kind),
        Some(RefusalKind::ReadOnly)
    );
}

#[test]
fn a_missing_lease_is_refused_saying_how_to_proceed() {
    let planned = item(&exported(2000), None, &ImportOptions::default());
    let refusal = planned.refusal().expect("refused");
    assert_eq!(refusal.kind, RefusalKind::UnknownResource);
    assert!(
        refusal.reason.contains("start its listener once"),
        "{refusal}"
    );
}

#[test]
fn a_file_without_token_or_time_resets_to_the_oldest_entry_and_resume_at_rewinds_to_it() {
    let mut none = lease_at(0);
    none.resume_token = None;
    let file = ExportedLease::of(&none);
    assert!(matches!(
        restore_request(&file),
        ActionRequest::Reset {
            to: ResetTarget::Oldest,
            ..
        }
    ));
    let planned = item(&file, Some(lease_at(3000)), &ImportOptions::default());
    let plan = planned.move_plan().expect("a reset to oldest");
    assert_eq!(
        plan.after.as_ref().unwrap().resume_point(),
        ResumePoint::Oldest
    );
    let mut timed = none.clone();
    timed.resume_at = Some(at(500));
    assert_eq!(
        restore_request(&ExportedLease::of(&timed)),
        ActionRequest::Rewind {
            resource: "shop.orders".into(),
            to: RewindTarget::Time(TimeSpec::Cluster(at(500))),
        }
    );
}

#[test]
fn another_watched_collection_is_warned_about() {
    let mut file = exported(2000);
    file.watch = Some(super::super::WatchedNamespace {
        db: "shop".into(),
        coll: "invoices".into(),
        source: crate::model::SourceKind::ChangeStream,
    });
    let planned = item(&file, Some(lease_at(3000)), &ImportOptions::default());
    let plan = planned.move_plan().unwrap();
    assert!(plan.warnings.iter().any(|w| w.contains("shop.invoices")));
}

#[test]
fn another_source_kind_is_warned_about() {
    let mut here = lease_at(3000);
    let mut file = exported(2000);
    let watch = |source| crate::model::WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        source,
        ..Default::default()
    };
    here.watch = Some(watch(crate::model::SourceKind::ChangeStream));
    let mut then = here.clone();
    then.watch = Some(watch(crate::model::SourceKind::Capped));
    file.watch = ExportedLease::of(&then).watch;
    let planned = item(&file, Some(here), &ImportOptions::default());
    let plan = planned.move_plan().unwrap();
    assert!(
        plan.warnings.iter().any(|w| w.contains("capped source")),
        "{:?}",
        plan.warnings
    );
}

fn origin(set: Option<&str>, leases: &str) -> ExportOrigin {
    ExportOrigin {
        uri: Some("mongodb://db1/".into()),
        leases: leases.into(),
        replica_set: set.map(str::to_string),
    }
}

#[test]
fn another_replica_set_is_refused_unless_accepted_another_collection_is_a_warning() {
    let here = origin(Some("rs0"), "streamward.leases");
    let (refusal, _) = judge_origin(
        &origin(Some("prod"), "streamward.leases"),
        &here,
        &ImportOptions::default(),
    );
    assert_eq!(refusal.map(|r| r.kind), Some(RefusalKind::OtherCluster));
    let accept = ImportOptions {
        accept_other_cluster: true,
        ..ImportOptions::default()
    };
    let (refusal, warnings) =
        judge_origin(&origin(Some("prod"), "streamward.leases"), &here, &accept);
    assert!(refusal.is_none());
    assert!(warnings[0].contains("means nothing here"));
    let (refusal, warnings) = judge_origin(
        &origin(Some("rs0"), "old.leases"),
        &here,
        &ImportOptions::default(),
    );
    assert!(refusal.is_none());
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("old.leases"));
    let (refusal, warnings) = judge_origin(
        &origin(None, "streamward.leases"),
        &here,
        &ImportOptions::default(),
    );
    assert!(refusal.is_none());
    assert!(warnings[0].contains("cannot be told"));
}

#[test]
fn only_selects_named_leases_and_refuses_names_not_in_the_file() {
    let mut other = lease_at(100);
    other.resource = "pets".into();
    let export = LeaseExport::new(
        wall(0),
        origin(Some("rs0"), "l.l"),
        &[lease_at(100), other],
        Vec::new(),
    );
    assert_eq!(select(&export, &[]).unwrap().len(), 2);
    let only = select(&export, &["pets".into()]).unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].resource, "pets");
    assert!(select(&export, &["nope".into()]).is_err());
}

#[test]
fn the_first_refusal_names_the_lease_and_counts_the_others() {
    let plan = ImportPlan {
        origin: origin(Some("rs0"), "l.l"),
        exported_at: wall(0),
        refusal: None,
        warnings: Vec::new(),
        items: vec![
            item(&exported(2000), None, &ImportOptions::default()),
            item(
                &exported(2000),
                Some(lease_at(3000)),
                &ImportOptions::default(),
            ),
            item(
                &exported(3000),
                Some(lease_at(100)),
                &ImportOptions::default(),
            ),
        ],
    };
    let refusal = plan.first_refusal().unwrap();
    assert!(refusal
        .reason
        .starts_with("lease shop.orders: there is no lease"));
    assert!(refusal.reason.contains("1 more leases are refused"));
    assert_eq!(plan.moves().count(), 1);
}
