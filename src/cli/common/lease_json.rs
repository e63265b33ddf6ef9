//! A lease as `leases --output json` shows it, as `lease_table` is the table for
//! people: the document's fields and what the status rules make of them.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::{
    HealthThresholds, Lease, LeaseHealth, LossTime, OplogWindow, Pending, TimeToLoss,
};
use crate::ops::json::{ClusterTimeJson, LeaseJson};
use crate::store::LossReading;

/// A lease as `leases --output json` shows it: the document's fields ([`LeaseJson`])
/// and what the status rules make of them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaseRowJson<'a> {
    #[serde(flatten)]
    pub lease: LeaseJson<'a>,
    pub holder: Option<&'a str>,
    #[serde(rename = "liveHolder")]
    pub live_holder: Option<&'a str>,
    /// "stream" or "capped" as its listener recorded it; null before one has.
    pub source: Option<&'static str>,
    #[serde(rename = "tokenTime")]
    pub token_time: Option<ClusterTimeJson>,
    #[serde(rename = "lagSecs")]
    pub lag_secs: Option<u64>,
    pub pending: Option<PendingCountJson>,
    #[serde(rename = "pendingUnknown")]
    pub pending_unknown: Option<&'a str>,
    pub risk: Option<&'static str>,
    #[serde(rename = "headroomSecs")]
    pub headroom_secs: Option<u64>,
    #[serde(rename = "headroomShare")]
    pub headroom_share: Option<f64>,
    pub status: &'static str,
    #[serde(rename = "timeToLoss")]
    pub time_to_loss: Option<TimeToLossJson>,
    /// Why there is none, where a lease with a resume point was not predicted.
    #[serde(rename = "timeToLossUnknown")]
    pub time_to_loss_unknown: Option<&'a str>,
    /// A capped collection's lease only (absent otherwise): why its history could
    /// not be read, null when it could.
    #[serde(rename = "historyUnknown", skip_serializing_if = "Option::is_none")]
    pub history_unknown: Option<Option<&'a str>>,
}

impl<'a> LeaseRowJson<'a> {
    pub fn of(
        lease: &'a Lease,
        window: Option<&OplogWindow>,
        now: DateTime<Utc>,
        thresholds: &HealthThresholds,
        loss: &'a LossReading,
    ) -> Self {
        let predicted = loss.predicted.get(&lease.resource);
        let unknown = match predicted {
            Some(_) => None,
            None => loss
                .unpredicted
                .get(&lease.resource)
                .or(loss.unknown.as_ref())
                .filter(|_| lease.resume_point().time().is_some()),
        };
        let health = LeaseHealth::assess_with(
            lease,
            window,
            now,
            thresholds,
            &loss.evidence(&lease.resource),
        );
        Self {
            lease: LeaseJson::of(lease),
            holder: lease.holder.as_deref(),
            live_holder: lease.live_holder(now),
            source: lease.source().map(|s| s.as_str()),
            token_time: ClusterTimeJson::of_optional(health.token_time),
            lag_secs: health.lag.map(|d| d.as_secs()),
            pending: health.pending.map(PendingCountJson::of),
            pending_unknown: loss
                .pending_unknown
                .get(&lease.resource)
                .map(String::as_str),
            risk: health.risk.map(|r| r.label()),
            headroom_secs: health.headroom.map(|d| d.as_secs()),
            headroom_share: health.headroom_share,
            status: health.status.label(),
            time_to_loss: predicted.map(TimeToLossJson::of),
            time_to_loss_unknown: unknown.map(String::as_str),
            history_unknown: None,
        }
    }
}

/// What is left to process: `{count, bound}` with bound `exact`, `atLeast` (the count
/// stopped at its limit) or `atMost` (a pipeline or partition may filter some out).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingCountJson {
    pub count: u64,
    pub bound: &'static str,
}

impl PendingCountJson {
    fn of(pending: Pending) -> Self {
        let (count, bound) = match pending {
            Pending::Counted(n) => (n, "exact"),
            Pending::AtLeast(n) => (n, "atLeast"),
            Pending::AtMost(n) => (n, "atMost"),
        };
        Self { count, bound }
    }
}

/// A time to loss: its text, each estimate in seconds (0: lost; `latestSecs` null:
/// unknown; `"never"`), and the inputs that were missing with what that did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeToLossJson {
    pub text: String,
    #[serde(rename = "earliestSecs")]
    pub earliest_secs: LossSecsJson,
    #[serde(rename = "latestSecs")]
    pub latest_secs: Option<LossSecsJson>,
    pub missing: Vec<String>,
}

impl TimeToLossJson {
    fn of(loss: &TimeToLoss) -> Self {
        Self {
            text: loss.to_string(),
            earliest_secs: LossSecsJson::of(loss.earliest),
            latest_secs: loss.latest.map(LossSecsJson::of),
            missing: loss.missing.iter().map(ToString::to_string).collect(),
        }
    }
}

/// When the resume point leaves the oplog: in seconds (0: already), or `"never"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum LossSecsJson {
    Secs(u64),
    Never(&'static str),
}

impl LossSecsJson {
    fn of(at: LossTime) -> Self {
        match at {
            LossTime::AlreadyLost => LossSecsJson::Secs(0),
            LossTime::In(after) => LossSecsJson::Secs(after.as_secs()),
            LossTime::Never => LossSecsJson::Never("never"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{ClusterTime, Invalidation, WatchTarget};

    /// A lease row of `leases --output json`, pinned byte for byte (key order included).
    #[test]
    fn a_lease_row_in_json() {
        let at = |secs: u32| ClusterTime::new(1_700_000_000 + secs, 1);
        let now = at(3600).to_datetime().unwrap();
        let mut lease = Lease::vacant("shop.orders");
        lease.holder = Some("w1".into());
        lease.version = 12;
        lease.expires_at = Some(now + chrono::TimeDelta::seconds(8));
        lease.resume_token = Some(crate::model::ResumeToken::encode(
            at(3000),
            crate::model::TokenKind::Event,
            7,
        ));
        lease.watch = Some(WatchTarget {
            db: "shop".into(),
            coll: "orders".into(),
            ..Default::default()
        });
        lease.invalidated = Some(Invalidation {
            at: None,
            reason: "dropped".into(),
        });
        let window = OplogWindow::new(at(0), at(3600));
        let mut loss = LossReading::default();
        loss.predicted.insert(
            "shop.orders".into(),
            TimeToLoss {
                earliest: LossTime::In(Duration::from_secs(7200)),
                latest: Some(LossTime::Never),
                filling: false,
                missing: Vec::new(),
            },
        );
        loss.pending
            .insert("shop.orders".into(), Pending::AtLeast(40));
        let thresholds = HealthThresholds::default();
        let row = LeaseRowJson::of(&lease, Some(&window), now, &thresholds, &loss);
        insta::assert_snapshot!(serde_json::to_string_pretty(&row).unwrap());
        let unpredicted = LossReading {
            unknown: Some("measuring".into()),
            ..LossReading::default()
        };
        let row = LeaseRowJson::of(&lease, None, now, &thresholds, &unpredicted);
        insta::assert_snapshot!(
            "a_lease_row_without_a_window_in_json",
            serde_json::to_string_pretty(&row).unwrap()
        );
    }
}
