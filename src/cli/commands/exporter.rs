//! `streamward exporter`: reads the cluster every `--interval` (reads only) and serves
//! what it found at `http://LISTEN/metrics` for Prometheus (series: docs/metrics.md).

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::cli::common::connect::{connect, reading_the_cluster};
use crate::cli::common::output::say;
use crate::cli::common::settings::{ClusterArgs, ConfigArgs, Settings};
use crate::metrics::serve::{serve, MetricsServer};
use crate::metrics::{ClusterMetrics, ClusterSample, EngineMetrics};
use crate::model::text::escape_control;
use crate::model::LossTracker;
use crate::observe::{ClusterSnapshot, WriteRate};

/// Where the endpoint listens unless told otherwise: this host only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9716";

#[derive(Debug, Args)]
pub struct ExporterArgs {
    /// Where to serve /metrics, as HOST:PORT (0.0.0.0:9716 for every interface).
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "HOST:PORT")]
    pub listen: String,
    /// How often to read the cluster (at least 1s, at most 1h).
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = parse_interval)]
    pub interval: Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// With `--metrics ADDR`: the engine's series, served at ADDR until the returned
/// server is dropped; the address is said on stderr and in the log.
pub async fn serve_engine_metrics(
    address: Option<&str>,
) -> anyhow::Result<Option<(EngineMetrics, MetricsServer)>> {
    let Some(address) = address else {
        return Ok(None);
    };
    let metrics = EngineMetrics::new().context("making the metrics")?;
    let server = serve(
        address,
        vec![metrics.registry().clone()],
        CancellationToken::new(),
    )
    .await
    .map_err(|e| anyhow::Error::new(crate::cli::common::exit::UsageError(e.to_string())))?;
    tracing::info!(address = %server.address(), "serving the listeners' metrics");
    say(format_args!(
        "serving the listeners' metrics at http://{}/metrics",
        server.address()
    ));
    Ok(Some((metrics, server)))
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = crate::cli::common::limits::duration_at_most(text, Duration::from_secs(3600))?;
    if interval < Duration::from_secs(1) {
        return Err(format!("{text} is shorter than the least allowed, 1s"));
    }
    Ok(interval)
}

pub async fn run(args: &ExporterArgs, settings: &Settings) -> anyhow::Result<()> {
    let store = connect(settings).await?;
    let metrics = ClusterMetrics::new().context("making the metrics")?;
    let stop = CancellationToken::new();
    let server = serve(&args.listen, vec![metrics.registry().clone()], stop.clone())
        .await
        .map_err(|e| anyhow::Error::new(crate::cli::common::exit::UsageError(e.to_string())))?;
    say(format_args!(
        "serving the metrics of {} at http://{}/metrics, read every {}; Ctrl-C stops",
        store.redacted_uri(),
        server.address(),
        humantime::format_duration(args.interval)
    ));
    let mut ticker = tokio::time::interval(args.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rate = WriteRate::default();
    let mut tracker = LossTracker::default();
    let ended = tokio::signal::ctrl_c();
    tokio::pin!(ended);
    let terminated = crate::cli::common::signals::terminate_signal();
    tokio::pin!(terminated);
    loop {
        tokio::select! {
            _ = &mut ended => break,
            _ = &mut terminated => break,
            _ = ticker.tick() => {}
        }
        match ClusterSnapshot::read(&store).await {
            Ok(snapshot) => {
                // NaN, not the last figure, when the rate could not be counted this time.
                let ops_per_sec = match snapshot.window {
                    Some(window) => rate.sample(&store, window.last).await.unwrap_or(None),
                    None => None,
                };
                let loss = snapshot.time_to_loss(&store, &mut tracker).await;
                metrics.record(&ClusterSample {
                    loss: &loss,
                    capped: &snapshot.capped,
                    leases: &snapshot.leases,
                    malformed: snapshot.malformed.len(),
                    window: snapshot.window,
                    topology: snapshot.topology.as_ref(),
                    now: snapshot.now,
                    ops_per_sec,
                    thresholds: &settings.thresholds,
                });
            }
            Err(error) => {
                let error = anyhow::Error::new(error).context(reading_the_cluster(settings));
                // Redacted: a driver error may quote the connection string.
                let message = crate::cli::common::output::error_message(&error);
                tracing::warn!(error = %message, "reading the cluster failed");
                say(format_args!("warning: {}", escape_control(&message)));
                metrics.record_failure();
            }
        }
    }
    stop.cancel();
    Ok(())
}
