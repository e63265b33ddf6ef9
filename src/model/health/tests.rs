use super::*;
use crate::model::Invalidation;
use chrono::TimeDelta;
use proptest::prelude::*;

const BASE: u32 = 1_700_000_000;

/// Listeners that run and fail before they take the lease leave the trace of none:
/// the text says what the lease shows, never that nothing runs (issue 26).
#[test]
fn unclaimed_says_what_the_lease_shows_and_never_that_nothing_runs() {
    let text = unclaimed_explanation("shop.orders", Duration::from_secs(300));
    assert!(text.starts_with("no live holder for 5m00s: "), "{text}");
    assert!(text.contains("shop.orders"), "{text}");
    for claim in [
        "no listener of",
        "is running",
        "none runs",
        "none is running",
        "not running",
        "no standby",
    ] {
        assert!(!text.contains(claim), "says {claim:?}: {text}");
    }
}

fn at(secs: u32) -> ClusterTime {
    ClusterTime::new(BASE + secs, 1)
}

fn held_lease(token_secs: Option<u32>, now: DateTime<Utc>) -> Lease {
    let mut lease = Lease::vacant("r");
    lease.holder = Some("me".into());
    lease.expires_at = Some(now + TimeDelta::seconds(10));
    lease.resume_at = token_secs.map(at);
    lease
}

fn now_at(secs: u32) -> DateTime<Utc> {
    at(secs).to_datetime().unwrap()
}

fn status(lease: &Lease, window: &OplogWindow, now: DateTime<Utc>) -> LeaseStatus {
    LeaseHealth::assess(lease, Some(window), now, &HealthThresholds::default()).status
}

#[test]
fn lost_when_token_is_before_the_first_entry() {
    let window = OplogWindow::new(at(1000), at(2000));
    let now = now_at(2000);
    assert_eq!(
        status(&held_lease(Some(999), now), &window, now),
        LeaseStatus::Lost
    );
    // Exactly at the first entry: still startable, no headroom at all, and whether
    // that is a risk only its time to loss (or a full oplog) can say.
    assert_eq!(
        status(&held_lease(Some(1000), now), &window, now),
        LeaseStatus::Behind
    );
}

fn status_with(
    lease: &Lease,
    window: &OplogWindow,
    now: DateTime<Utc>,
    evidence: &HealthEvidence<'_>,
) -> LeaseStatus {
    LeaseHealth::assess_with(
        lease,
        Some(window),
        now,
        &HealthThresholds::default(),
        evidence,
    )
    .status
}

fn loss_in(earliest: LossTime) -> TimeToLoss {
    TimeToLoss {
        earliest,
        latest: None,
        filling: false,
        missing: Vec::new(),
    }
}

/// Without a time to loss the share of the window decides, and only in a full oplog.
#[test]
fn the_share_of_the_window_counts_only_in_a_full_oplog_without_a_time_to_loss() {
    let window = OplogWindow::new(at(1000), at(2000));
    let now = now_at(2000);
    let full = HealthEvidence {
        oplog_full: Some(true),
        ..HealthEvidence::default()
    };
    assert_eq!(
        status_with(&held_lease(Some(1199), now), &window, now, &full),
        LeaseStatus::AtRisk
    );
    // 200 s of 1000 s is exactly 20 %: not below, so not at risk (but 800 s behind).
    assert_eq!(
        status_with(&held_lease(Some(1200), now), &window, now, &full),
        LeaseStatus::Behind
    );
    // An oplog not full (or not known to be) says nothing by its share: unknown.
    for oplog_full in [Some(false), None] {
        let evidence = HealthEvidence {
            oplog_full,
            ..HealthEvidence::default()
        };
        let health = LeaseHealth::assess_with(
            &held_lease(Some(1001), now),
            Some(&window),
            now,
            &HealthThresholds::default(),
            &evidence,
        );
        assert_eq!(health.risk, Some(Risk::Unknown));
        assert_eq!(health.status, LeaseStatus::Behind);
    }
}

/// AT RISK follows the time to loss, whatever the share of the window says.
#[test]
fn at_risk_follows_the_time_to_loss() {
    // A young oplog: a token 45 s into a 50 s window is 10 % short of the head.
    let window = OplogWindow::new(at(1000), at(1050));
    let now = now_at(1050);
    let lease = held_lease(Some(1005), now);
    for (earliest, expected) in [
        (
            LossTime::In(Duration::from_secs(29 * 60)),
            LeaseStatus::AtRisk,
        ),
        (LossTime::In(Duration::from_secs(30 * 60)), LeaseStatus::Ok),
        (LossTime::Never, LeaseStatus::Ok),
    ] {
        let loss = loss_in(earliest);
        for oplog_full in [Some(true), Some(false), None] {
            let evidence = HealthEvidence {
                loss: Some(&loss),
                oplog_full,
                pending: None,
            };
            assert_eq!(
                status_with(&lease, &window, now, &evidence),
                expected,
                "{earliest:?} {oplog_full:?}"
            );
        }
    }
}

/// The lag says what is left beside the time; in a cell too narrow for both, "0 left"
/// or the time alone.
#[test]
fn the_lag_says_what_is_left_beside_the_time_where_it_fits() {
    let health = |pending: Option<Pending>, lag: Option<u64>| LeaseHealth {
        token_time: None,
        lag: lag.map(Duration::from_secs),
        pending,
        headroom: None,
        headroom_share: None,
        risk: None,
        status: LeaseStatus::Ok,
    };
    let cases = [
        (Some(Pending::Counted(0)), Some(0), "0 left", "0 left"),
        (Some(Pending::Counted(12)), Some(45), "12 left · 45s", "45s"),
        (
            Some(Pending::AtLeast(1000)),
            Some(187),
            "≥1000 left · 3m07s",
            "3m07s",
        ),
        (Some(Pending::AtMost(3)), None, "≤3 left", "≤3 left"),
        (None, Some(45), "45s", "45s"),
        (None, None, "-", "-"),
    ];
    for (pending, lag, whole, narrow) in cases {
        let h = health(pending, lag);
        assert_eq!(h.lag_text(), whole);
        assert_eq!(h.lag_text_within(18), whole, "fits in 18");
        assert_eq!(h.lag_text_within(8), narrow, "in 8");
    }
}

/// A caught-up, quiet listener is IDLE by what is left to process, not by the age of
/// its token: one that commits only when a change arrives (no heartbeats) too.
#[test]
fn nothing_pending_is_caught_up_whatever_the_tokens_age() {
    let window = OplogWindow::new(at(0), at(2000));
    let now = now_at(2000);
    // Its last change was 11 minutes ago; the oplog moved on with other writes.
    let lease = held_lease(Some(2000 - 660), now);
    let with_pending = |pending| {
        let evidence = HealthEvidence {
            pending: Some(pending),
            ..HealthEvidence::default()
        };
        let health = LeaseHealth::assess_with(
            &lease,
            Some(&window),
            now,
            &HealthThresholds::default(),
            &evidence,
        );
        (health.status, health.lag)
    };
    assert_eq!(
        with_pending(Pending::Counted(0)),
        (LeaseStatus::Idle, Some(Duration::ZERO))
    );
    // A change just arrived and waits: behind by the time since its token.
    assert_eq!(
        with_pending(Pending::Counted(1)),
        (LeaseStatus::Behind, Some(Duration::from_secs(660)))
    );
    let none_left = HealthEvidence {
        pending: Some(Pending::Counted(0)),
        ..HealthEvidence::default()
    };
    // Caught up and its last change a moment ago: OK, not yet IDLE.
    let recent = held_lease(Some(1995), now);
    assert_eq!(
        status_with(&recent, &window, now, &none_left),
        LeaseStatus::Ok
    );
}

#[test]
fn behind_edge_is_the_lag_threshold() {
    let window = OplogWindow::new(at(0), at(2000));
    let now = now_at(2000);
    assert_eq!(
        status(&held_lease(Some(1940), now), &window, now),
        LeaseStatus::Ok
    );
    assert_eq!(
        status(&held_lease(Some(1939), now), &window, now),
        LeaseStatus::Behind
    );
}

#[test]
fn stuck_bulk_beats_expired_and_lost_beats_everything() {
    let window = OplogWindow::new(at(1000), at(2000));
    let now = now_at(2000);
    let mut lease = held_lease(Some(1990), now);
    lease.kind = LockKind::Bulk;
    assert_eq!(
        status(&lease, &window, now),
        LeaseStatus::Ok,
        "a live bulk holder is fine"
    );
    lease.expires_at = Some(now);
    assert_eq!(status(&lease, &window, now), LeaseStatus::StuckBulk);
    lease.resume_at = Some(at(10));
    assert_eq!(status(&lease, &window, now), LeaseStatus::Lost);
}

#[test]
fn invalidated_ranks_below_lost_and_above_stuck_bulk() {
    let window = OplogWindow::new(at(1000), at(2000));
    let now = now_at(2000);
    let mut lease = held_lease(Some(1990), now);
    lease.kind = LockKind::Bulk;
    lease.expires_at = Some(now);
    assert_eq!(status(&lease, &window, now), LeaseStatus::StuckBulk);
    lease.invalidated = Some(Invalidation {
        at: Some(at(1995)),
        reason: "db.c was dropped".into(),
    });
    assert_eq!(status(&lease, &window, now), LeaseStatus::Invalidated);
    lease.resume_at = Some(at(10));
    assert_eq!(status(&lease, &window, now), LeaseStatus::Lost);
    // Without a window there is no LOST, but the record still says INVALIDATED.
    let health = LeaseHealth::assess(&lease, None, now, &HealthThresholds::default());
    assert_eq!(health.status, LeaseStatus::Invalidated);
    assert!(LeaseStatus::Lost < LeaseStatus::Invalidated);
    assert!(LeaseStatus::Invalidated < LeaseStatus::StuckBulk);
}

#[test]
fn expired_then_idle_then_ok() {
    let window = OplogWindow::new(at(0), at(2000));
    let mut lease = held_lease(Some(2000), now_at(2030));
    assert_eq!(
        status(&lease, &window, now_at(2010)),
        LeaseStatus::Ok,
        "quiet for 10 s only"
    );
    assert_eq!(
        status(&lease, &window, now_at(2000 + 30)),
        LeaseStatus::Idle
    );
    lease.holder = None;
    assert_eq!(status(&lease, &window, now_at(2030)), LeaseStatus::Expired);
}

#[test]
fn unclaimed_once_free_for_the_taking_longer_than_the_threshold() {
    let window = OplogWindow::new(at(0), at(2000));
    let mut lease = held_lease(Some(1990), now_at(2000));
    lease.expires_at = Some(now_at(2000));
    assert_eq!(status(&lease, &window, now_at(2010)), LeaseStatus::Expired);
    assert_eq!(status(&lease, &window, now_at(2029)), LeaseStatus::Expired);
    assert_eq!(
        status(&lease, &window, now_at(2030)),
        LeaseStatus::Unclaimed
    );
    // Released (no holder) counts from the release; AT RISK and BEHIND rank below.
    lease.holder = None;
    lease.resume_at = Some(at(100));
    assert_eq!(
        status(&lease, &window, now_at(2030)),
        LeaseStatus::Unclaimed
    );
    // A bulk lease left behind is STUCK BULK, and history lost is LOST, first.
    lease.kind = LockKind::Bulk;
    assert_eq!(
        status(&lease, &window, now_at(2030)),
        LeaseStatus::StuckBulk
    );
    lease.resume_at = Some(ClusterTime::new(BASE - 1, 1));
    assert_eq!(status(&lease, &window, now_at(2030)), LeaseStatus::Lost);
    // Never expired (no expiry recorded): not known to be unclaimed.
    let mut fresh = Lease::vacant("r");
    fresh.resume_at = Some(at(1990));
    assert_eq!(status(&fresh, &window, now_at(9000)), LeaseStatus::Expired);
}

#[test]
fn a_lease_at_the_oldest_entry_has_the_whole_window_to_go_and_no_headroom() {
    let window = OplogWindow::new(at(1000), at(2000));
    let now = now_at(2000);
    let mut lease = held_lease(None, now);
    lease.resume_token = None;
    // Held, not yet committed: it may have started at now; unknown until it commits.
    let health = LeaseHealth::assess(&lease, Some(&window), now, &HealthThresholds::default());
    assert_eq!((health.token_time, health.lag), (None, None));
    // Reset to the oldest entry and not yet taken: it starts there.
    lease.holder = None;
    let health = LeaseHealth::assess(&lease, Some(&window), now, &HealthThresholds::default());
    assert_eq!(health.token_time, Some(at(1000)));
    assert_eq!(health.lag, Some(Duration::from_secs(1000)));
    assert_eq!(health.headroom, Some(Duration::ZERO));
    assert_eq!(health.status, LeaseStatus::Behind);
    // Without a window its position is unknown, as before (held again).
    lease.holder = Some("me".into());
    let health = LeaseHealth::assess(&lease, None, now, &HealthThresholds::default());
    assert_eq!((health.token_time, health.status), (None, LeaseStatus::Ok));
}

#[test]
fn no_window_means_lag_from_the_clock_and_no_history_status() {
    let now = now_at(20);
    let health = LeaseHealth::assess(
        &held_lease(Some(5), now),
        None,
        now,
        &HealthThresholds::default(),
    );
    assert_eq!(
        health.lag,
        Some(Duration::from_secs(15)),
        "clock − token time"
    );
    assert_eq!((health.headroom, health.headroom_share), (None, None));
    assert_eq!(health.status, LeaseStatus::Ok);
    // BEHIND still applies; LOST and AT RISK cannot be told.
    let now = now_at(500);
    let health = LeaseHealth::assess(
        &held_lease(Some(5), now),
        None,
        now,
        &HealthThresholds::default(),
    );
    assert_eq!(health.status, LeaseStatus::Behind);
    // A token from the future (clock skew) is no lag, not a panic.
    let health = LeaseHealth::assess(
        &held_lease(Some(900), now),
        None,
        now,
        &HealthThresholds::default(),
    );
    assert_eq!(health.lag, Some(Duration::ZERO));
}

proptest! {
    #[test]
    fn lag_plus_headroom_is_the_window(first in 0u32..10_000, len in 0u32..10_000, pos in 0u32..10_000) {
        let window = OplogWindow::new(at(first), at(first + len));
        let token = first + pos.min(len);
        let now = now_at(first + len);
        let h = LeaseHealth::assess(&held_lease(Some(token), now), Some(&window), now, &HealthThresholds::default());
        prop_assert_eq!(h.lag.unwrap() + h.headroom.unwrap(), window.length());
        let share = h.headroom_share.unwrap();
        prop_assert!((0.0..=1.0).contains(&share));
    }

    /// No lease is ever AT RISK while its own time to loss says it is not, and every
    /// lease whose time to loss ends within the horizon is AT RISK unless a worse
    /// status applies.
    #[test]
    fn at_risk_never_contradicts_the_time_to_loss(
        first in 1u32..10_000,
        len in 0u32..10_000,
        pos in 0u32..10_000,
        earliest_secs in proptest::option::of(0u64..7_200),
        full in proptest::option::of(any::<bool>()),
        pending in proptest::option::of(0u64..3),
        held in any::<bool>(),
    ) {
        let window = OplogWindow::new(at(first), at(first + len));
        let now = now_at(first + len);
        let mut lease = held_lease(Some(first + pos.min(len)), now);
        if !held {
            lease.holder = None;
        }
        let loss = loss_in(earliest_secs.map_or(LossTime::Never, |s| LossTime::In(Duration::from_secs(s))));
        let evidence = HealthEvidence { loss: Some(&loss), oplog_full: full, pending: pending.map(Pending::Counted) };
        let thresholds = HealthThresholds::default();
        let health = LeaseHealth::assess_with(&lease, Some(&window), now, &thresholds, &evidence);
        let within = matches!(loss.earliest, LossTime::In(d) if d < thresholds.at_risk_within);
        prop_assert_eq!(health.status == LeaseStatus::AtRisk, within, "{:?}", health);
    }

    #[test]
    fn status_is_lost_exactly_when_token_precedes_window(first in 1u32..10_000, token in 0u32..20_000) {
        let window = OplogWindow::new(at(first), at(first + 10_000));
        let now = now_at(first + 10_000);
        let s = status(&held_lease(Some(token), now), &window, now);
        prop_assert_eq!(s == LeaseStatus::Lost, token < first);
    }
}

/// A lost position has no headroom left, also in a window of zero length (a capped
/// collection whose entries were all made in one second): not "0s (100%)".
#[test]
fn a_lost_position_has_no_share_of_a_zero_length_window() {
    let mut lease = Lease::vacant("r");
    lease.resume_token = Some(crate::model::ResumeToken::encode(
        crate::model::ClusterTime::new(1_800_000_000, 1),
        crate::model::TokenKind::Event,
        1,
    ));
    let window = OplogWindow::new(
        crate::model::ClusterTime::new(1_800_000_005, 1),
        crate::model::ClusterTime::new(1_800_000_005, 1),
    );
    let now = DateTime::from_timestamp(1_800_000_006, 0).unwrap();
    let health = LeaseHealth::assess(&lease, Some(&window), now, &HealthThresholds::default());
    assert_eq!(health.status, LeaseStatus::Lost);
    assert_eq!(health.headroom_share, Some(0.0));
}
