//! The listener engine's own series, for a service that embeds it: events, batches,
//! commits and their latency, acquires, lost locks, history lost, state and fencing
//! version, labelled by `resource` and `listener` (the listener's id: several listeners
//! of one resource may run in one process, a holder and its standbys).
//!
//! [`EngineMetrics`] owns its series; [`EngineMetrics::register`] puts them into the
//! host application's registry, or [`EngineMetrics::registry`] serves them alone. A
//! listener records into them through the observer [`EngineMetrics::observer`] makes
//! for it (`ListenerHandle::spawn_observed`): the engine tells, this module counts.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

use super::MetricsError;
use crate::engine::{ListenerConfig, ListenerObserver, ListenerState};

/// Every state a listener reports, for the `state` label.
const STATES: [ListenerState; 11] = [
    ListenerState::Starting,
    ListenerState::Standby,
    ListenerState::Acquiring,
    ListenerState::Streaming,
    ListenerState::Committing,
    ListenerState::LostLock,
    ListenerState::HistoryLost,
    ListenerState::Invalidated,
    ListenerState::Failing,
    ListenerState::Refused,
    ListenerState::Stopped,
];

/// Commit latencies from a millisecond to ten seconds (a majority write's `wtimeout`
/// is ten seconds by default).
const COMMIT_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Clone)]
pub struct EngineMetrics {
    registry: Registry,
    events: IntCounterVec,
    batches: IntCounterVec,
    commits: IntCounterVec,
    commit_seconds: HistogramVec,
    acquires: IntCounterVec,
    lost_locks: IntCounterVec,
    history_lost: IntCounterVec,
    change_failures: IntCounterVec,
    failure_attempts: IntGaugeVec,
    lag: GaugeVec,
    state: IntGaugeVec,
    version: IntGaugeVec,
}

impl std::fmt::Debug for EngineMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineMetrics").finish_non_exhaustive()
    }
}

const LABELS: [&str; 2] = ["resource", "listener"];

fn counter(name: &str, help: &str) -> Result<IntCounterVec, MetricsError> {
    Ok(IntCounterVec::new(Opts::new(name, help), &LABELS)?)
}

impl EngineMetrics {
    pub fn new() -> Result<EngineMetrics, MetricsError> {
        let metrics = EngineMetrics {
            registry: Registry::new(),
            events: counter(
                "streamward_listener_events_total",
                "Change events handed to the handler and committed.",
            )?,
            batches: counter(
                "streamward_listener_batches_total",
                "Batches handled and committed.",
            )?,
            commits: counter(
                "streamward_listener_commits_total",
                "Resume points committed (batches and idle heartbeats).",
            )?,
            commit_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "streamward_listener_commit_duration_seconds",
                    "How long a commit of the resume point took (the conditional write, majority acknowledged).",
                )
                .buckets(COMMIT_BUCKETS.to_vec()),
                &LABELS,
            )?,
            acquires: counter(
                "streamward_listener_acquires_total",
                "Times this listener acquired its lease (each a new fencing version).",
            )?,
            lost_locks: counter(
                "streamward_listener_lost_locks_total",
                "Times this listener found its lease taken away (fenced out).",
            )?,
            history_lost: counter(
                "streamward_listener_history_lost_total",
                "Times this listener's resume point was found off the oplog.",
            )?,
            change_failures: counter(
                "streamward_listener_change_failures_total",
                "Times this listener failed on a change and recorded it on its lease.",
            )?,
            failure_attempts: IntGaugeVec::new(
                Opts::new(
                    "streamward_listener_failure_attempts",
                    "Attempts, by every listener of the lease, on the change this listener's lease records as failing, as this listener last saw it; 0 once past it.",
                ),
                &LABELS,
            )?,
            lag: GaugeVec::new(
                Opts::new(
                    "streamward_listener_lag_seconds",
                    "Seconds from the last change this listener handled (or the post-batch token of an empty read) to the cluster time its stream's latest reply carried, as of its last read: a change that keeps failing holds it where it is while the cluster moves on. By cluster time, so whole seconds. Present only while the listener reads its stream (streaming, committing, failing), and never for a capped collection.",
                ),
                &LABELS,
            )?,
            state: IntGaugeVec::new(
                Opts::new(
                    "streamward_listener_state",
                    "1 for the listener's state, 0 for every other state.",
                ),
                &["resource", "listener", "state"],
            )?,
            version: IntGaugeVec::new(
                Opts::new(
                    "streamward_listener_fencing_version",
                    "The fencing version of the listener's current tenure (the last one while not holding).",
                ),
                &LABELS,
            )?,
        };
        metrics.register(&metrics.registry)?;
        Ok(metrics)
    }

    /// Registers every series into `registry` too (the host application's).
    pub fn register(&self, registry: &Registry) -> Result<(), MetricsError> {
        registry.register(Box::new(self.events.clone()))?;
        registry.register(Box::new(self.batches.clone()))?;
        registry.register(Box::new(self.commits.clone()))?;
        registry.register(Box::new(self.commit_seconds.clone()))?;
        registry.register(Box::new(self.acquires.clone()))?;
        registry.register(Box::new(self.lost_locks.clone()))?;
        registry.register(Box::new(self.history_lost.clone()))?;
        registry.register(Box::new(self.change_failures.clone()))?;
        registry.register(Box::new(self.failure_attempts.clone()))?;
        registry.register(Box::new(self.lag.clone()))?;
        registry.register(Box::new(self.state.clone()))?;
        registry.register(Box::new(self.version.clone()))?;
        Ok(())
    }

    /// The registry holding only these series.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// What to give the listener `config` describes (`ListenerHandle::spawn_observed`):
    /// its series, labelled by its resource and id.
    pub fn observer(&self, config: &ListenerConfig) -> Arc<dyn ListenerObserver> {
        Arc::new(self.listener(&config.resource, &config.listener_id))
    }

    /// The series of one listener.
    pub fn listener(&self, resource: &str, listener: &str) -> ListenerMetrics {
        let labels = [resource, listener];
        ListenerMetrics {
            events: self.events.with_label_values(&labels),
            batches: self.batches.with_label_values(&labels),
            commits: self.commits.with_label_values(&labels),
            commit_seconds: self.commit_seconds.with_label_values(&labels),
            acquires: self.acquires.with_label_values(&labels),
            lost_locks: self.lost_locks.with_label_values(&labels),
            history_lost: self.history_lost.with_label_values(&labels),
            change_failures: self.change_failures.with_label_values(&labels),
            failure_attempts: self.failure_attempts.with_label_values(&labels),
            lag: self.lag.clone(),
            labels: [resource.to_string(), listener.to_string()],
            states: STATES
                .iter()
                .map(|s| {
                    (
                        *s,
                        self.state
                            .with_label_values(&[resource, listener, s.label()]),
                    )
                })
                .collect(),
            version: self.version.with_label_values(&labels),
        }
    }
}

/// One listener's series.
#[derive(Clone)]
pub struct ListenerMetrics {
    events: IntCounter,
    batches: IntCounter,
    commits: IntCounter,
    commit_seconds: prometheus::Histogram,
    acquires: IntCounter,
    lost_locks: IntCounter,
    history_lost: IntCounter,
    change_failures: IntCounter,
    failure_attempts: IntGauge,
    /// A series only while the listener reads its stream: a standby's last reading
    /// would say a lease it no longer reads is caught up.
    lag: GaugeVec,
    labels: [String; 2],
    states: Vec<(ListenerState, IntGauge)>,
    version: IntGauge,
}

impl ListenerObserver for ListenerMetrics {
    fn committed(&self, took: Duration, batches: usize, events: usize) {
        self.commits.inc();
        self.commit_seconds.observe(took.as_secs_f64());
        if events > 0 {
            self.batches
                .inc_by(u64::try_from(batches).unwrap_or(u64::MAX));
            self.events
                .inc_by(u64::try_from(events).unwrap_or(u64::MAX));
        }
    }

    fn acquired(&self, version: i64) {
        self.acquires.inc();
        self.version.set(version);
    }

    fn lost_lock(&self) {
        self.lost_locks.inc();
    }

    fn history_lost(&self) {
        self.history_lost.inc();
    }

    fn change_failed(&self, attempts: u32) {
        self.change_failures.inc();
        self.failure_attempts.set(i64::from(attempts));
    }

    fn failure_attempts(&self, attempts: u32) {
        self.failure_attempts.set(i64::from(attempts));
    }

    fn lag(&self, lag: Duration) {
        self.lag
            .with_label_values(&self.label_refs())
            .set(lag.as_secs_f64());
    }

    fn state(&self, state: ListenerState) {
        for (s, gauge) in &self.states {
            gauge.set(i64::from(*s == state));
        }
        let reading = matches!(
            state,
            ListenerState::Streaming | ListenerState::Committing | ListenerState::Failing
        );
        if !reading {
            // Absent, not a stale figure: an error only means there was none.
            let _ = self.lag.remove_label_values(&self.label_refs());
        }
    }
}

impl ListenerMetrics {
    fn label_refs(&self) -> [&str; 2] {
        [self.labels[0].as_str(), self.labels[1].as_str()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::encode;

    #[test]
    fn a_listeners_series_carry_its_resource_and_id() {
        let metrics = EngineMetrics::new().unwrap();
        let one = metrics.listener("shop.orders", "w1");
        one.acquired(4);
        one.state(ListenerState::Streaming);
        one.committed(Duration::from_millis(7), 1, 3);
        one.lost_lock();
        let text = encode(metrics.registry()).unwrap();
        for line in [
            "streamward_listener_events_total{listener=\"w1\",resource=\"shop.orders\"} 3",
            "streamward_listener_batches_total{listener=\"w1\",resource=\"shop.orders\"} 1",
            "streamward_listener_commits_total{listener=\"w1\",resource=\"shop.orders\"} 1",
            "streamward_listener_acquires_total{listener=\"w1\",resource=\"shop.orders\"} 1",
            "streamward_listener_lost_locks_total{listener=\"w1\",resource=\"shop.orders\"} 1",
            "streamward_listener_fencing_version{listener=\"w1\",resource=\"shop.orders\"} 4",
            "streamward_listener_state{listener=\"w1\",resource=\"shop.orders\",state=\"streaming\"} 1",
            "streamward_listener_state{listener=\"w1\",resource=\"shop.orders\",state=\"standby\"} 0",
            "streamward_listener_commit_duration_seconds_bucket{listener=\"w1\",resource=\"shop.orders\",le=\"0.01\"} 1",
            "streamward_listener_commit_duration_seconds_bucket{listener=\"w1\",resource=\"shop.orders\",le=\"0.005\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn the_series_register_into_the_host_applications_registry() {
        let host = Registry::new();
        let own = prometheus::IntCounter::new("app_requests_total", "the host's own").unwrap();
        host.register(Box::new(own.clone())).unwrap();
        let metrics = EngineMetrics::new().unwrap();
        metrics.register(&host).unwrap();
        metrics
            .listener("r", "w")
            .committed(Duration::from_millis(1), 1, 2);
        let text = encode(&host).unwrap();
        assert!(text.contains("app_requests_total 0"), "{text}");
        assert!(
            text.contains("streamward_listener_events_total{listener=\"w\",resource=\"r\"} 2"),
            "{text}"
        );
        // Twice into one registry is an error, not a panic.
        assert!(matches!(
            metrics.register(&host),
            Err(MetricsError::Registry(_))
        ));
    }
}
