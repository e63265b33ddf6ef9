//! Lag, headroom and status of a lease against the oplog window (statuses: docs/console.md "Screen", thresholds: docs/runbook.md).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{
    ClusterTime, Lease, LockKind, LossTime, OplogWindow, Pending, ResumePoint, TimeToLoss,
};

/// Where the status rules draw their lines; all configurable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthThresholds {
    /// Lag above this is BEHIND.
    pub behind_after: Duration,
    /// A lease whose time to loss may end sooner than this is AT RISK (the shipped
    /// alert's 30 minutes by default).
    pub at_risk_within: Duration,
    /// Headroom below this share of the window length is AT RISK, but only where no
    /// time to loss is known and the oplog is known to be full ([`Risk`]).
    pub at_risk_share: f64,
    /// A caught-up lease whose stream has had no entry for this long is IDLE.
    pub quiet_after: Duration,
    /// A lease free for the taking this long that nobody took is UNCLAIMED: a waiting
    /// standby takes a lease at its expiry, so none is waiting for it (listeners may
    /// run and fail before they take it).
    pub unclaimed_after: Duration,
    /// A lease whose listeners failed this many times on one change is FAILING.
    pub failing_after: u32,
}

impl Default for HealthThresholds {
    fn default() -> Self {
        Self {
            behind_after: Duration::from_secs(60),
            at_risk_within: super::LOSS_WARNING_WITHIN,
            at_risk_share: 0.20,
            quiet_after: Duration::from_secs(30),
            unclaimed_after: Duration::from_secs(30),
            failing_after: 3,
        }
    }
}

impl HealthThresholds {
    /// How long `lease` has been free for the taking without a taker, once that is long
    /// enough to mean no standby is waiting for it (UNCLAIMED).
    pub fn unclaimed_for(&self, lease: &Lease, now: DateTime<Utc>) -> Option<Duration> {
        lease
            .unclaimed_for(now)
            .filter(|d| *d >= self.unclaimed_after)
    }

    /// The change `lease`'s listeners keep failing on, once they failed on it
    /// [`Self::failing_after`] times (FAILING).
    pub fn failing<'a>(&self, lease: &'a Lease) -> Option<&'a super::ChangeFailure> {
        lease
            .failure
            .as_ref()
            .filter(|f| f.attempts >= self.failing_after.max(1))
    }
}

/// Worst first: sorting by status puts the leases that need a human on top.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaseStatus {
    Lost,
    /// The watched collection was dropped or renamed: its stream was closed for good.
    Invalidated,
    /// Its listeners failed on one change again and again (`failing_after` times):
    /// the resume point stays before it until it goes through or is skipped.
    Failing,
    StuckBulk,
    /// Free for the taking for a while and nobody took it: no listener waits for it
    /// (whether any runs, failing before it takes the lease, the lease cannot show).
    Unclaimed,
    AtRisk,
    Behind,
    Expired,
    Idle,
    Ok,
}

impl LeaseStatus {
    /// Every status, worst first.
    pub const ALL: [LeaseStatus; 10] = [
        LeaseStatus::Lost,
        LeaseStatus::Invalidated,
        LeaseStatus::Failing,
        LeaseStatus::StuckBulk,
        LeaseStatus::Unclaimed,
        LeaseStatus::AtRisk,
        LeaseStatus::Behind,
        LeaseStatus::Expired,
        LeaseStatus::Idle,
        LeaseStatus::Ok,
    ];

    pub fn label(self) -> &'static str {
        match self {
            LeaseStatus::Lost => "LOST",
            LeaseStatus::Invalidated => "INVALIDATED",
            LeaseStatus::Failing => "FAILING",
            LeaseStatus::StuckBulk => "STUCK BULK",
            LeaseStatus::Unclaimed => "UNCLAIMED",
            LeaseStatus::AtRisk => "AT RISK",
            LeaseStatus::Behind => "BEHIND",
            LeaseStatus::Expired => "EXPIRED",
            LeaseStatus::Idle => "IDLE",
            LeaseStatus::Ok => "OK",
        }
    }
}

/// What UNCLAIMED means for `resource`, free for the taking for `unclaimed` and not
/// taken. Only what the lease shows: a listener that runs but fails before it holds
/// (backing off after an error) leaves the same trace as none at all, so whether any
/// runs is not said.
pub fn unclaimed_explanation(resource: &str, unclaimed: Duration) -> String {
    format!(
        "no live holder for {}: no listener took it when it became free (one waiting \
         for it takes it at once). Listeners of {resource} may run and fail before they \
         take it, which looks the same: their last error says why; until one takes it, \
         releasing it changes nothing",
        super::text::short_duration(unclaimed)
    )
}

impl fmt::Display for LeaseStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The token-time cell of a lease table (`leases` and the console): `oldest` for a
/// lease that starts at the oldest entry, its time as `clock` writes it, or
/// `undecodable` for a token that tells no time.
pub fn token_time_cell(
    lease: &Lease,
    token_time: Option<ClusterTime>,
    clock: impl Fn(ClusterTime) -> String,
) -> String {
    match (&lease.resume_token, token_time) {
        (None, _) if lease.resume_at.is_none() => "oldest".into(),
        (_, Some(time)) => clock(time),
        (_, None) => "undecodable".into(),
    }
}

/// The collection whose changes are counted for a lease: what is left to process, and
/// what a move of its resume point replays or skips.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchedCollection {
    /// Its `watch` names one collection: the changes on it. With a pipeline or a
    /// partition filtering them the count is only an upper bound.
    Namespace {
        db: String,
        coll: String,
        filtered: bool,
    },
    /// No `watch` (a lease another implementation wrote): the collection its resume
    /// token's change was on, by the UUID the token carries (oplog entries carry it
    /// as `ui`).
    Collection([u8; 16]),
}

impl WatchedCollection {
    /// `None` where neither tells: a whole-database watch, a capped collection (its
    /// own history, not the oplog's), or a token that names no collection.
    pub fn of(lease: &Lease) -> Option<WatchedCollection> {
        match &lease.watch {
            Some(watch) if watch.source == super::SourceKind::Capped => None,
            Some(watch) if watch.db.is_empty() || watch.coll.is_empty() => None,
            Some(watch) => Some(WatchedCollection::Namespace {
                db: watch.db.clone(),
                coll: watch.coll.clone(),
                filtered: !watch.pipeline.trim().is_empty()
                    || super::Partition::parse_lease_id(&lease.resource).is_some(),
            }),
            None => lease
                .resume_token
                .as_ref()
                .and_then(super::ResumeToken::collection_uuid)
                .map(WatchedCollection::Collection),
        }
    }

    /// The collection's namespace as `(db, coll)`, when the lease names it.
    pub fn namespace(&self) -> Option<(&str, &str)> {
        match self {
            WatchedCollection::Namespace { db, coll, .. } => Some((db, coll)),
            WatchedCollection::Collection(_) => None,
        }
    }

    /// What a count of `count` entries, stopped at `limit`, says is left.
    pub fn pending(&self, count: u64, limit: u64) -> Pending {
        match self {
            WatchedCollection::Namespace { filtered: true, .. } if count > 0 => {
                Pending::AtMost(count.min(limit))
            }
            _ => Pending::from_count(count, limit),
        }
    }
}

/// `shop.orders`, or `the collection with UUID 0f1e…` for a lease without `watch`.
impl fmt::Display for WatchedCollection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchedCollection::Namespace { db, coll, .. } => write!(f, "{db}.{coll}"),
            WatchedCollection::Collection(uuid) => {
                write!(f, "the collection with UUID {}", hex::encode(uuid))
            }
        }
    }
}

/// What a status is assessed from beyond the lease and the window, each `None` where
/// it was not read: the status then follows the rules that need less, and says
/// nothing it cannot know.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HealthEvidence<'a> {
    /// The lease's time to loss ([`super::predict`]).
    pub loss: Option<&'a TimeToLoss>,
    /// Whether the oplog is full (drops history as it is written).
    pub oplog_full: Option<bool>,
    /// What is left to process on its watched collection.
    pub pending: Option<Pending>,
}

/// Whether a lease's history may be gone soon, and what says so: the one rule for
/// AT RISK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Risk {
    /// Its time to loss may end within [`HealthThresholds::at_risk_within`].
    Soon,
    /// Its time to loss says not within that horizon.
    NotSoon,
    /// No time to loss, the oplog full, and the headroom below
    /// [`HealthThresholds::at_risk_share`] of the window.
    ShortHeadroom,
    /// No time to loss, the oplog full, and headroom above that share.
    EnoughHeadroom,
    /// No time to loss and the oplog not known to be full: the share of a window says
    /// nothing about when history goes, so nothing is guessed.
    Unknown,
}

impl Risk {
    /// The rule: the time to loss where there is one (earliest within the horizon);
    /// without one, the share of the window only where the oplog is known to be full.
    pub fn assess(
        loss: Option<&TimeToLoss>,
        oplog_full: Option<bool>,
        headroom_share: Option<f64>,
        thresholds: &HealthThresholds,
    ) -> Risk {
        match loss.map(|l| l.earliest) {
            Some(LossTime::AlreadyLost) => Risk::Soon,
            Some(LossTime::In(d)) if d < thresholds.at_risk_within => Risk::Soon,
            Some(_) => Risk::NotSoon,
            None => match (oplog_full, headroom_share) {
                (Some(true), Some(share)) if share < thresholds.at_risk_share => {
                    Risk::ShortHeadroom
                }
                (Some(true), Some(_)) => Risk::EnoughHeadroom,
                _ => Risk::Unknown,
            },
        }
    }

    pub fn is_at_risk(self) -> bool {
        matches!(self, Risk::Soon | Risk::ShortHeadroom)
    }

    /// As JSON and the detail view name it.
    pub fn label(self) -> &'static str {
        match self {
            Risk::Soon => "loss within the horizon",
            Risk::NotSoon => "no loss within the horizon",
            Risk::ShortHeadroom => "short headroom in a full oplog",
            Risk::EnoughHeadroom => "enough headroom in a full oplog",
            Risk::Unknown => "unknown",
        }
    }
}

/// Everything the console shows about one lease's position in history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseHealth {
    pub token_time: Option<ClusterTime>,
    /// What is left to process: zero when nothing is pending on its collection;
    /// otherwise last − token time; without a window (the oplog cannot be read), the
    /// server's clock − token time; `None` without a token time.
    pub lag: Option<Duration>,
    /// Changes left to process, when counted.
    pub pending: Option<Pending>,
    /// token time − first; zero once history is lost.
    pub headroom: Option<Duration>,
    /// headroom as a share of the window length, 0.0..=1.0.
    pub headroom_share: Option<f64>,
    /// What decides AT RISK ([`Risk::assess`]); `None` for a lease whose history is
    /// lost already or whose position is unknown.
    pub risk: Option<Risk>,
    pub status: LeaseStatus,
}

impl LeaseHealth {
    /// The lag as people read it: what is left where it was counted ("0 left",
    /// "12 left · 45s"), else the time behind; `-` with neither.
    pub fn lag_text(&self) -> String {
        let time = self.lag.map(super::text::short_duration);
        match (self.pending, time) {
            (Some(Pending::Counted(0)), _) => "0 left".to_string(),
            (Some(pending), Some(time)) => format!("{pending} left · {time}"),
            (Some(pending), None) => format!("{pending} left"),
            (None, Some(time)) => time,
            (None, None) => "-".to_string(),
        }
    }

    /// [`LeaseHealth::lag_text`] for a cell of `width` characters: where the whole
    /// text does not fit, "0 left" or the time alone (the count is in the detail view).
    pub fn lag_text_within(&self, width: usize) -> String {
        let whole = self.lag_text();
        if whole.chars().count() <= width {
            return whole;
        }
        match (self.pending, self.lag) {
            (Some(Pending::Counted(0)), _) => "0 left".to_string(),
            (_, Some(lag)) => super::text::short_duration(lag),
            (_, None) => whole,
        }
    }

    /// [`LeaseHealth::assess_with`] with nothing but the lease and the window.
    pub fn assess(
        lease: &Lease,
        window: Option<&OplogWindow>,
        now: DateTime<Utc>,
        thresholds: &HealthThresholds,
    ) -> Self {
        Self::assess_with(lease, window, now, thresholds, &HealthEvidence::default())
    }

    /// Applies the status rules (docs/runbook.md names each status). `now` is the
    /// server's (or sandbox's) wall clock.
    pub fn assess_with(
        lease: &Lease,
        window: Option<&OplogWindow>,
        now: DateTime<Utc>,
        thresholds: &HealthThresholds,
        evidence: &HealthEvidence<'_>,
    ) -> Self {
        // A lease reset to (or never past) the oldest entry, and not yet taken, starts
        // there: the whole window to process and no headroom. Once a listener holds
        // it, it may have started elsewhere (`Bootstrap::Now`) and not committed yet:
        // unknown until its first commit.
        let token_time = match lease.resume_point() {
            ResumePoint::Oldest if lease.live_holder(now).is_none() => window.map(|w| w.first),
            point => point.time(),
        };
        let nothing_pending = evidence.pending.is_some_and(Pending::is_none_left);
        let lag = token_time.map(|t| match window {
            // Nothing left to process is no lag, however old its token.
            _ if nothing_pending => Duration::ZERO,
            Some(w) => w.last.saturating_since(t),
            // On MongoDB a caught-up listener's token keeps up with the cluster's clock
            // (its heartbeat commits move it), so this is lag too, to the second. On
            // Cosmos DB the time is the newest document's: a quiet stream grows it.
            None => t
                .to_datetime()
                .and_then(|at| (now - at).to_std().ok())
                .unwrap_or_default(),
        });
        let headroom = token_time
            .zip(window)
            .map(|(t, w)| t.saturating_since(w.first));
        let lost = token_time.zip(window).is_some_and(|(t, w)| t < w.first);
        let headroom_share = headroom.zip(window).map(|(h, w)| {
            let length = w.length().as_secs_f64();
            if lost {
                // Nothing of its history is left, however short the window is.
                0.0
            } else if length <= 0.0 {
                1.0
            } else {
                (h.as_secs_f64() / length).clamp(0.0, 1.0)
            }
        });
        let expired = lease.live_holder(now).is_none();
        let unclaimed = thresholds.unclaimed_for(lease, now).is_some();
        // Caught up: nothing pending where that was counted, else a token at the newest entry.
        let counted = evidence.pending.and_then(Pending::lower_bound);
        let caught_up = Pending::caught_up(evidence.pending, token_time, window);
        // Quiet: where pending was counted, its own last change is old (whoever wrote
        // the lease, heartbeats or not); else the whole oplog had no entry for a while.
        let quiet_since = match counted {
            Some(_) => token_time.and_then(|t| t.to_datetime()),
            None => window.and_then(|w| w.last.to_datetime()),
        };
        let quiet = quiet_since
            .is_some_and(|at| (now - at).to_std().unwrap_or_default() >= thresholds.quiet_after);
        let risk = (token_time.is_some() && !lost).then(|| {
            Risk::assess(
                evidence.loss,
                evidence.oplog_full,
                headroom_share,
                thresholds,
            )
        });

        let status = if lost {
            LeaseStatus::Lost
        } else if lease.invalidated.is_some() {
            LeaseStatus::Invalidated
        } else if thresholds.failing(lease).is_some() {
            LeaseStatus::Failing
        } else if lease.kind == LockKind::Bulk && expired {
            LeaseStatus::StuckBulk
        } else if unclaimed {
            LeaseStatus::Unclaimed
        } else if risk.is_some_and(Risk::is_at_risk) {
            LeaseStatus::AtRisk
        } else if lag.is_some_and(|l| l > thresholds.behind_after) {
            LeaseStatus::Behind
        } else if expired {
            LeaseStatus::Expired
        } else if caught_up && quiet {
            LeaseStatus::Idle
        } else {
            LeaseStatus::Ok
        };
        Self {
            token_time,
            lag,
            pending: evidence.pending,
            headroom,
            headroom_share,
            risk,
            status,
        }
    }
}

#[cfg(test)]
mod tests;
