//! The alert rules shipped in docs/alerts: `promtool check rules` accepts them,
//! `promtool test rules` passes their unit tests (Debian's `prometheus` package, which
//! `.ci/run` installs), and every series they name is one streamward exports.

use std::collections::BTreeSet;
use std::path::Path;

mod support;

use streamward::engine::ListenerObserver;
use streamward::metrics::{ClusterMetrics, ClusterSample, EngineMetrics};
use streamward::model::{
    ClusterTime, Deployment, HealthThresholds, Lease, LossTime, OplogAccess, OplogStats,
    OplogWindow, Rate, ShardOplog, TimeToLoss, Topology, LOSS_WARNING_WITHIN,
};
use streamward::store::LossReading;
use support::http::promtool;

const RULES: &str = "docs/alerts/streamward.rules.yml";
const TESTS: &str = "docs/alerts/streamward.test.yml";
const DASHBOARD: &str = "docs/alerts/grafana-dashboard.json";

#[test]
fn promtool_accepts_the_rules() {
    if let Some((ok, said)) = promtool(&["check", "rules", RULES], None) {
        assert!(ok, "{said}");
    }
}

#[test]
fn the_rules_unit_tests_pass() {
    if let Some((ok, said)) = promtool(&["test", "rules", TESTS], None) {
        assert!(ok, "{said}");
    }
}

/// The console warns about a time to loss below the threshold the shipped alert pages on.
#[test]
fn the_console_warns_where_the_loss_alert_pages() {
    let rules = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(RULES))
        .expect("the rules");
    let expected = format!(
        "streamward_lease_history_loss_earliest_seconds < {}",
        LOSS_WARNING_WITHIN.as_secs()
    );
    assert!(rules.contains(&expected), "{expected} in {RULES}");
}

/// A rule that names a series nobody exports never fires, and a panel shows nothing:
/// every `streamward_…` name in the rules and the dashboard is a family of the
/// exporter's or the engine's registry (a histogram's `_bucket`, `_sum` and `_count`
/// are its family's).
#[test]
fn every_series_the_rules_and_the_dashboard_name_is_exported() {
    let read = |file: &str| {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
            .unwrap_or_else(|e| panic!("read {file}: {e}"))
    };
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|target| target["expr"].as_str().map(str::to_string))
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    let rules = format!("{}\n{}", read(RULES), exprs.join("\n"));
    let mut exported: BTreeSet<String> = BTreeSet::new();
    // A family with labels is listed once it has a series: one lease, one listener.
    let cluster = ClusterMetrics::new().expect("cluster metrics");
    let now = chrono::Utc::now();
    let secs = u32::try_from(now.timestamp()).expect("a 32-bit time");
    let mut lease = Lease::vacant("r");
    lease.holder = Some("w".into());
    lease.expires_at = Some(now);
    lease.committed_at = Some(now);
    lease.resume_at = Some(ClusterTime::new(secs - 60, 1));
    let leases = [lease];
    let window = OplogWindow::new(ClusterTime::new(secs - 3600, 1), ClusterTime::new(secs, 1));
    // A sharded cluster, for the per-shard series.
    let topology = Topology {
        deployment: Deployment::Sharded,
        oplog: OplogAccess::Readable,
        shards: vec![ShardOplog {
            name: "s0".into(),
            hosts: "s0/db:27018".into(),
            window: Ok(window),
        }],
    };
    cluster.record(&ClusterSample {
        capped: &streamward::store::CappedReading::default(),
        leases: &leases,
        malformed: 0,
        window: Some(window),
        topology: Some(&topology),
        now,
        ops_per_sec: Some(1.0),
        thresholds: &HealthThresholds::default(),
        loss: &LossReading {
            predicted: std::collections::HashMap::from([(
                "r".to_string(),
                TimeToLoss {
                    earliest: LossTime::In(std::time::Duration::from_secs(600)),
                    latest: None,
                    filling: false,
                    missing: Vec::new(),
                },
            )]),
            unknown: None,
            unpredicted: Default::default(),
            pending: Default::default(),
            pending_unknown: Default::default(),
            oplog: Some(OplogStats {
                size_bytes: 1,
                max_bytes: 2,
                entries: 1,
                written_bytes: Some(1),
                checkpoint_interval: None,
                min_retention: None,
                largest_entry_bytes: None,
                truncation_bytes: None,
            }),
            fill_rate: Rate::between(1.0, 2.0),
        },
    });
    let engine = EngineMetrics::new().expect("engine metrics");
    let listener = engine.listener("r", "w");
    listener.acquired(1);
    listener.state(streamward::engine::ListenerState::Streaming);
    listener.committed(std::time::Duration::from_millis(3), 0, 0);
    for registry in [cluster.registry(), engine.registry()] {
        exported.extend(registry.gather().iter().map(|f| f.name().to_string()));
    }
    let named: BTreeSet<String> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("streamward_"))
        .map(|word| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix))
                .unwrap_or(word)
                .to_string()
        })
        .collect();
    assert!(!named.is_empty());
    let missing: Vec<&String> = named.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the rules name series nobody exports: {missing:?}; exported: {exported:?}"
    );
}
