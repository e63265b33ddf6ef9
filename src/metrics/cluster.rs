//! The cluster as `streamward exporter` sees it, as Prometheus series: per lease lag,
//! headroom, fencing version, holder, status and time since the last commit; per
//! cluster the oplog window (per shard through mongos), its write rate, size and fill
//! rate, and whether the last read succeeded. Every series is labelled by `resource` (one
//! per lease), by `status` (the nine statuses), by `shard` (one per shard) or by `bound`
//! (low, high) and nothing else, so the number of series grows with the leases and
//! shards only.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use prometheus::{Gauge, GaugeVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::MetricsError;
use crate::model::{
    HealthThresholds, Lease, LeaseHealth, LeaseStatus, LossTime, OplogWindow, Topology,
};
use crate::store::{CappedReading, LossReading};

/// What one read of the cluster found.
#[derive(Debug, Clone, Copy)]
pub struct ClusterSample<'a> {
    pub leases: &'a [Lease],
    /// Documents in the lease collection that are not readable leases.
    pub malformed: usize,
    /// The window every shard holds on a sharded cluster; `None` when unknown.
    pub window: Option<OplogWindow>,
    pub topology: Option<&'a Topology>,
    /// The server's clock.
    pub now: DateTime<Utc>,
    /// Oplog entries written per second since the previous read.
    pub ops_per_sec: Option<f64>,
    pub thresholds: &'a HealthThresholds,
    /// The time to loss of each lease that has one, and the oplog's figures it came from.
    pub loss: &'a LossReading,
    /// The entries of the capped collections capped leases tail: what those leases'
    /// lag, headroom and status are measured against instead of the oplog.
    pub capped: &'a CappedReading,
}

/// The series of the cluster view, registered in their own registry.
#[derive(Clone)]
pub struct ClusterMetrics {
    registry: Registry,
    lag: GaugeVec,
    pending: GaugeVec,
    headroom: GaugeVec,
    headroom_ratio: GaugeVec,
    version: IntGaugeVec,
    holder: IntGaugeVec,
    status: IntGaugeVec,
    failure_attempts: IntGaugeVec,
    since_commit: GaugeVec,
    loss_earliest: GaugeVec,
    loss_latest: GaugeVec,
    leases: IntGauge,
    malformed: IntGauge,
    window: Gauge,
    window_known: IntGauge,
    shard_window: GaugeVec,
    ops_rate: Gauge,
    oplog_size: Gauge,
    oplog_max: Gauge,
    fill_rate: GaugeVec,
    up: IntGauge,
    last_read: Gauge,
    /// The leases and shards the series were last set for.
    shown: Arc<Mutex<Shown>>,
}

#[derive(Debug, Default)]
struct Shown {
    leases: BTreeSet<String>,
    shards: BTreeSet<String>,
}

fn gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<GaugeVec, MetricsError> {
    let vec = GaugeVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(vec.clone()))?;
    Ok(vec)
}

fn int_gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, MetricsError> {
    let vec = IntGaugeVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(vec.clone()))?;
    Ok(vec)
}

fn gauge(registry: &Registry, name: &str, help: &str) -> Result<Gauge, MetricsError> {
    let gauge = Gauge::new(name, help)?;
    registry.register(Box::new(gauge.clone()))?;
    Ok(gauge)
}

fn int_gauge(registry: &Registry, name: &str, help: &str) -> Result<IntGauge, MetricsError> {
    let gauge = IntGauge::new(name, help)?;
    registry.register(Box::new(gauge.clone()))?;
    Ok(gauge)
}

impl ClusterMetrics {
    pub fn new() -> Result<ClusterMetrics, MetricsError> {
        let registry = Registry::new();
        let r = &registry;
        let resource = &["resource"];
        Ok(ClusterMetrics {
            lag: gauge_vec(
                r,
                "streamward_lease_lag_seconds",
                "How far the lease's resume point is behind the newest oplog entry (without a readable oplog: behind the server's clock).",
                resource,
            )?,
            pending: gauge_vec(
                r,
                "streamward_lease_pending_changes",
                "Changes on the lease's collection after its resume point in the oplog: what is left to process, counted up to 1000 (1000 means at least). Absent where not counted, or where a pipeline or partition makes the count only an upper bound.",
                resource,
            )?,
            headroom: gauge_vec(
                r,
                "streamward_lease_headroom_seconds",
                "How far the lease's resume point is ahead of the oldest oplog entry; 0 once its history is lost.",
                resource,
            )?,
            headroom_ratio: gauge_vec(
                r,
                "streamward_lease_headroom_ratio",
                "Headroom as a share of the oplog window, 0 to 1.",
                resource,
            )?,
            version: int_gauge_vec(
                r,
                "streamward_lease_fencing_version",
                "The lease's fencing version: it grows with every change of holder.",
                resource,
            )?,
            holder: int_gauge_vec(
                r,
                "streamward_lease_holder_present",
                "1 while a holder's lease has not expired, else 0.",
                resource,
            )?,
            status: int_gauge_vec(
                r,
                "streamward_lease_status",
                &format!(
                    "1 for the lease's status, 0 for every other status ({}).",
                    LeaseStatus::ALL.map(LeaseStatus::label).join(", ")
                ),
                &["resource", "status"],
            )?,
            failure_attempts: int_gauge_vec(
                r,
                "streamward_lease_failure_attempts",
                "Attempts on the change the lease's listeners keep failing on; 0 when none fails.",
                resource,
            )?,
            since_commit: gauge_vec(
                r,
                "streamward_lease_seconds_since_commit",
                "Seconds since the lease's last commit, by the server's clock.",
                resource,
            )?,
            loss_earliest: gauge_vec(
                r,
                "streamward_lease_history_loss_earliest_seconds",
                "The earliest the lease's resume point may leave the oplog, from now, at the rates seen (0: lost already; +Inf: not at these rates).",
                resource,
            )?,
            loss_latest: gauge_vec(
                r,
                "streamward_lease_history_loss_latest_seconds",
                "By when the lease's resume point has surely left the oplog at the rates seen (+Inf: it may never); absent when unknown.",
                resource,
            )?,
            leases: int_gauge(r, "streamward_leases", "Readable leases in the lease collection.")?,
            malformed: int_gauge(
                r,
                "streamward_leases_malformed",
                "Documents in the lease collection that are not readable leases.",
            )?,
            window: gauge(
                r,
                "streamward_oplog_window_seconds",
                "Length of the oplog history every shard still holds (a replica set: its oplog window).",
            )?,
            window_known: int_gauge(
                r,
                "streamward_oplog_window_known",
                "1 when the oplog window could be read, 0 when it is unknown (a missing privilege, a shard out of reach, no oplog).",
            )?,
            shard_window: gauge_vec(
                r,
                "streamward_shard_oplog_window_seconds",
                "Length of each shard's own oplog window (sharded clusters).",
                &["shard"],
            )?,
            ops_rate: gauge(
                r,
                "streamward_oplog_entries_per_second",
                "Oplog entries written per second between the last two reads.",
            )?,
            oplog_size: gauge(
                r,
                "streamward_oplog_size_bytes",
                "Bytes of entries the oplog holds (NaN when its statistics cannot be read).",
            )?,
            oplog_max: gauge(
                r,
                "streamward_oplog_max_bytes",
                "The oplog's configured maximum size (NaN when its statistics cannot be read).",
            )?,
            fill_rate: gauge_vec(
                r,
                "streamward_oplog_fill_bytes_per_second",
                "Bytes written to the oplog per second: the lowest (bound=low) and highest (bound=high) over the last 5 minutes of reads, widened to take in the window's average.",
                &["bound"],
            )?,
            up: int_gauge(
                r,
                "streamward_cluster_up",
                "1 when the last read of the cluster succeeded, else 0.",
            )?,
            last_read: gauge(
                r,
                "streamward_cluster_last_read_timestamp_seconds",
                "When the last successful read of the cluster was taken, as Unix time.",
            )?,
            registry,
            shown: Arc::default(),
        })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Sets every series to what `sample` says. A series is never cleared and refilled
    /// (a scrape in between would see it missing): values are overwritten in place,
    /// one that became unknown is removed, and a lease or shard gone takes its series.
    pub fn record(&self, sample: &ClusterSample<'_>) {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let now_resources: BTreeSet<String> =
            sample.leases.iter().map(|l| l.resource.clone()).collect();
        for gone in shown.leases.difference(&now_resources) {
            self.forget_lease(gone);
        }
        let windows = sample.capped.source_windows(sample.window);
        for lease in sample.leases {
            let resource = lease.resource.as_str();
            let health = LeaseHealth::assess_with(
                lease,
                windows.for_lease(lease),
                sample.now,
                sample.thresholds,
                &sample.loss.evidence(&lease.resource),
            );
            let loss = sample.loss.predicted.get(&lease.resource);
            let since_commit = lease
                .committed_at
                .map(|at| (sample.now - at).to_std().unwrap_or_default().as_secs_f64());
            for (vec, value) in [
                (&self.lag, health.lag.map(|d| d.as_secs_f64())),
                (
                    &self.pending,
                    health
                        .pending
                        .and_then(crate::model::Pending::lower_bound)
                        .map(|n| n as f64),
                ),
                (&self.headroom, health.headroom.map(|d| d.as_secs_f64())),
                (&self.headroom_ratio, health.headroom_share),
                (&self.since_commit, since_commit),
                (&self.loss_earliest, loss.map(|l| loss_seconds(l.earliest))),
                (
                    &self.loss_latest,
                    loss.and_then(|l| l.latest).map(loss_seconds),
                ),
            ] {
                set_or_remove(vec, resource, value);
            }
            self.version
                .with_label_values(&[resource])
                .set(lease.version);
            self.holder
                .with_label_values(&[resource])
                .set(i64::from(lease.live_holder(sample.now).is_some()));
            self.failure_attempts
                .with_label_values(&[resource])
                .set(lease.failure.as_ref().map_or(0, |f| i64::from(f.attempts)));
            for status in LeaseStatus::ALL {
                self.status
                    .with_label_values(&[resource, status.label()])
                    .set(i64::from(status == health.status));
            }
        }
        shown.leases = now_resources;
        let shards: BTreeSet<String> = sample
            .topology
            .map(|t| t.shards.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|s| s.name.clone())
            .collect();
        for gone in shown.shards.difference(&shards) {
            let _ = self.shard_window.remove_label_values(&[gone.as_str()]);
        }
        for shard in sample
            .topology
            .map(|t| t.shards.as_slice())
            .unwrap_or_default()
        {
            let length = shard.window.as_ref().ok().map(|w| w.length().as_secs_f64());
            set_or_remove(&self.shard_window, &shard.name, length);
        }
        shown.shards = shards;
        self.leases
            .set(i64::try_from(sample.leases.len()).unwrap_or(i64::MAX));
        self.malformed
            .set(i64::try_from(sample.malformed).unwrap_or(i64::MAX));
        self.window_known.set(i64::from(sample.window.is_some()));
        self.window
            .set(sample.window.map_or(0.0, |w| w.length().as_secs_f64()));
        // NaN, not the last figure, when the rate could not be counted this time.
        self.ops_rate.set(
            sample
                .ops_per_sec
                .filter(|r| r.is_finite())
                .unwrap_or(f64::NAN),
        );
        let stats = sample.loss.oplog.as_ref();
        self.oplog_size
            .set(stats.map_or(f64::NAN, |s| s.size_bytes as f64));
        self.oplog_max
            .set(stats.map_or(f64::NAN, |s| s.max_bytes as f64));
        let fill = sample.loss.fill_rate;
        set_or_remove(&self.fill_rate, "low", fill.map(|r| r.low));
        set_or_remove(&self.fill_rate, "high", fill.map(|r| r.high));
        self.up.set(1);
        self.last_read
            .set(sample.now.timestamp_millis() as f64 / 1000.0);
    }

    /// Removes every series of `resource`.
    fn forget_lease(&self, resource: &str) {
        for vec in [
            &self.lag,
            &self.pending,
            &self.headroom,
            &self.headroom_ratio,
            &self.since_commit,
            &self.loss_earliest,
            &self.loss_latest,
        ] {
            let _ = vec.remove_label_values(&[resource]);
        }
        let _ = self.version.remove_label_values(&[resource]);
        let _ = self.holder.remove_label_values(&[resource]);
        let _ = self.failure_attempts.remove_label_values(&[resource]);
        for status in LeaseStatus::ALL {
            let _ = self.status.remove_label_values(&[resource, status.label()]);
        }
    }

    /// The last read failed: `streamward_cluster_up` is 0; the other series keep what
    /// the last successful read said (`..._last_read_timestamp_seconds` says when).
    pub fn record_failure(&self) {
        self.up.set(0);
    }
}

/// `value` as the series of `label`, or no series when it is unknown.
fn set_or_remove(vec: &GaugeVec, label: &str, value: Option<f64>) {
    match value {
        Some(value) => vec.with_label_values(&[label]).set(value),
        // Absent already is fine.
        None => {
            let _ = vec.remove_label_values(&[label]);
        }
    }
}

/// A loss time as a gauge: 0 when lost already, +Inf for never.
fn loss_seconds(at: LossTime) -> f64 {
    match at {
        LossTime::AlreadyLost => 0.0,
        LossTime::In(after) => after.as_secs_f64(),
        LossTime::Never => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::encode;
    use crate::model::{
        ClusterTime, OplogStats, Pending, Rate, ResumeToken, TimeToLoss, TokenKind,
    };
    use chrono::TimeZone;
    use std::collections::HashMap;

    fn reading(predicted: HashMap<String, TimeToLoss>) -> LossReading {
        LossReading {
            predicted,
            unknown: None,
            unpredicted: HashMap::new(),
            pending: HashMap::new(),
            pending_unknown: HashMap::new(),
            oplog: Some(OplogStats {
                size_bytes: 990_000,
                max_bytes: 1_048_576,
                entries: 4_000,
                written_bytes: Some(50_000_000),
                checkpoint_interval: None,
                min_retention: None,
                largest_entry_bytes: None,
                truncation_bytes: None,
            }),
            fill_rate: Rate::between(40_000.0, 52_500.0),
        }
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
    }

    fn lease(resource: &str, token_secs_ago: i64) -> Lease {
        let mut lease = Lease::vacant(resource);
        lease.holder = Some("w1".into());
        lease.version = 7;
        lease.expires_at = Some(now() + chrono::TimeDelta::seconds(10));
        lease.committed_at = Some(now() - chrono::TimeDelta::seconds(3));
        let secs = u32::try_from(now().timestamp() - token_secs_ago).unwrap();
        lease.resume_token = Some(ResumeToken::encode(
            ClusterTime::new(secs, 1),
            TokenKind::Event,
            1,
        ));
        lease
    }

    fn window() -> OplogWindow {
        let now = u32::try_from(now().timestamp()).unwrap();
        OplogWindow::new(ClusterTime::new(now - 3600, 1), ClusterTime::new(now, 1))
    }

    fn series(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn one_lease_shows_its_lag_headroom_version_holder_and_status() {
        let metrics = ClusterMetrics::new().unwrap();
        let leases = [lease("shop.orders", 120)];
        let thresholds = HealthThresholds::default();
        metrics.record(&ClusterSample {
            capped: &CappedReading::default(),
            leases: &leases,
            malformed: 0,
            window: Some(window()),
            topology: None,
            now: now(),
            ops_per_sec: Some(12.5),
            thresholds: &thresholds,
            loss: &LossReading {
                pending: HashMap::from([("shop.orders".to_string(), Pending::Counted(12))]),
                ..reading(HashMap::from([(
                    "shop.orders".to_string(),
                    TimeToLoss {
                        earliest: LossTime::In(std::time::Duration::from_secs(900)),
                        latest: Some(LossTime::Never),
                        filling: false,
                        missing: Vec::new(),
                    },
                )]))
            },
        });
        let text = encode(metrics.registry()).unwrap();
        for line in [
            "streamward_lease_lag_seconds{resource=\"shop.orders\"} 120",
            "streamward_lease_pending_changes{resource=\"shop.orders\"} 12",
            "streamward_lease_headroom_seconds{resource=\"shop.orders\"} 3480",
            "streamward_lease_fencing_version{resource=\"shop.orders\"} 7",
            "streamward_lease_holder_present{resource=\"shop.orders\"} 1",
            // Its time to loss may end in 15 minutes: AT RISK, whatever the share.
            "streamward_lease_status{resource=\"shop.orders\",status=\"AT RISK\"} 1",
            "streamward_lease_status{resource=\"shop.orders\",status=\"BEHIND\"} 0",
            "streamward_lease_status{resource=\"shop.orders\",status=\"OK\"} 0",
            "streamward_lease_seconds_since_commit{resource=\"shop.orders\"} 3",
            "streamward_lease_history_loss_earliest_seconds{resource=\"shop.orders\"} 900",
            // Never: +Inf, which the crate writes `inf` (Prometheus and promtool read it).
            "streamward_lease_history_loss_latest_seconds{resource=\"shop.orders\"} inf",
            "streamward_oplog_window_seconds 3600",
            "streamward_oplog_window_known 1",
            "streamward_oplog_entries_per_second 12.5",
            "streamward_oplog_size_bytes 990000",
            "streamward_oplog_max_bytes 1048576",
            "streamward_oplog_fill_bytes_per_second{bound=\"low\"} 40000",
            "streamward_oplog_fill_bytes_per_second{bound=\"high\"} 52500",
            "streamward_cluster_up 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    /// Only a count an alert can compare against is exported: an exact one or "at
    /// least"; the upper bound a filtering watch gives is left out.
    #[test]
    fn what_is_left_is_exported_only_as_a_count_or_a_lower_bound() {
        let metrics = ClusterMetrics::new().unwrap();
        let leases = [
            lease("exact", 5),
            lease("at-least", 5),
            lease("at-most", 5),
            lease("uncounted", 5),
        ];
        let thresholds = HealthThresholds::default();
        metrics.record(&ClusterSample {
            capped: &CappedReading::default(),
            leases: &leases,
            malformed: 0,
            window: Some(window()),
            topology: None,
            now: now(),
            ops_per_sec: None,
            thresholds: &thresholds,
            loss: &LossReading {
                pending: HashMap::from([
                    ("exact".to_string(), Pending::Counted(0)),
                    ("at-least".to_string(), Pending::AtLeast(1000)),
                    ("at-most".to_string(), Pending::AtMost(3)),
                ]),
                ..reading(HashMap::new())
            },
        });
        let text = encode(metrics.registry()).unwrap();
        let pending: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("streamward_lease_pending_changes{"))
            .collect();
        assert_eq!(
            pending,
            [
                "streamward_lease_pending_changes{resource=\"at-least\"} 1000",
                "streamward_lease_pending_changes{resource=\"exact\"} 0",
            ],
            "{text}"
        );
    }

    /// The series count depends on the leases (and shards) only: reading again, with
    /// other lags, other statuses, other versions, adds none; a lease gone takes its
    /// series with it.
    #[test]
    fn the_series_count_grows_with_the_leases_only() {
        let metrics = ClusterMetrics::new().unwrap();
        let thresholds = HealthThresholds::default();
        let count = |leases: &[Lease], ops: f64| {
            let loss: HashMap<String, TimeToLoss> = leases
                .iter()
                .map(|l| {
                    let prediction = TimeToLoss {
                        earliest: LossTime::In(std::time::Duration::from_secs(ops as u64)),
                        latest: None,
                        filling: false,
                        missing: Vec::new(),
                    };
                    (l.resource.clone(), prediction)
                })
                .collect();
            metrics.record(&ClusterSample {
                capped: &CappedReading::default(),
                loss: &reading(loss),
                leases,
                malformed: 0,
                window: Some(window()),
                topology: None,
                now: now(),
                ops_per_sec: Some(ops),
                thresholds: &thresholds,
            });
            series(&encode(metrics.registry()).unwrap()).len()
        };
        let per_cluster = count(&[], 1.0);
        let one = count(&[lease("a", 5)], 2.0);
        let per_lease = one - per_cluster;
        assert_eq!(per_lease, 8 + LeaseStatus::ALL.len(), "series per lease");
        for (i, ago) in [1, 50, 4000, 100_000].into_iter().enumerate() {
            let mut other = lease("a", ago);
            other.version = 100 + i as i64;
            other.holder = None;
            assert_eq!(count(&[other], 3.0 + i as f64), one, "lag {ago}s");
        }
        let many: Vec<Lease> = (0..50).map(|i| lease(&format!("r{i}"), i)).collect();
        assert_eq!(count(&many, 9.0), per_cluster + 50 * per_lease);
        assert_eq!(
            count(&many[..3], 9.0),
            per_cluster + 3 * per_lease,
            "gone leases leave no series"
        );
    }

    #[test]
    fn a_failed_read_says_so_and_keeps_the_last_figures() {
        let metrics = ClusterMetrics::new().unwrap();
        let thresholds = HealthThresholds::default();
        let leases = [lease("a", 5)];
        metrics.record(&ClusterSample {
            capped: &CappedReading::default(),
            leases: &leases,
            malformed: 2,
            window: None,
            topology: None,
            now: now(),
            ops_per_sec: None,
            thresholds: &thresholds,
            loss: &LossReading::default(),
        });
        metrics.record_failure();
        let text = encode(metrics.registry()).unwrap();
        assert!(text.contains("streamward_cluster_up 0"), "{text}");
        assert!(text.contains("streamward_oplog_window_known 0"), "{text}");
        assert!(text.contains("streamward_leases_malformed 2"), "{text}");
        assert!(
            text.contains("streamward_lease_fencing_version{resource=\"a\"} 7"),
            "{text}"
        );
    }
}
