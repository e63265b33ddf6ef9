//! `streamward demo`: the sandbox, listeners and workload in this process.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::cli::commands::console::{
    interactive, listener_source, require_terminal, resolve_theme, ViewArgs,
};
use crate::cli::common::lease_table::{render_failures, render_leases, render_listeners, LeaseRow};
use crate::cli::common::settings::{ActorArgs, ConfigArgs, Settings};
use crate::console::state::Mode;
use crate::demo::events::DEMO_EVENTS_KIB;
use crate::demo::rebuild::PetRebuild;
use crate::demo::runtime::{DemoConfig, DemoRuntime, DEMO_OPLOG_MIB};
use crate::demo::workload::WorkloadConfig;
use crate::model::text::short_duration;
use crate::model::HealthThresholds;
use crate::observe::ClusterSnapshot;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Headless mode: print a refreshed plain-text table instead of the console.
    #[arg(long)]
    pub plain: bool,
    #[command(flatten)]
    pub view: ViewArgs,
    /// Application writes per second.
    #[arg(long, default_value_t = 20.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Listeners per resource; all but one stand by.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub listeners: u16,
    /// How often the table is refreshed.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub refresh: Duration,
    /// Stop by itself after this long (default: run until Ctrl-C).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Holders release after this long so leases move between listeners ("0s" disables).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub rotate_after: Duration,
    /// How much the sandbox's oplog holds before its oldest changes fall off, like
    /// `--oplogSize` of mongod (e.g. 64MiB, 512KiB). A small one (1MiB) makes the window
    /// move so AT RISK, LOST and the time to loss show within a minute or two.
    #[arg(long, default_value = format!("{DEMO_OPLOG_MIB}MiB"), value_name = "SIZE", value_parser = crate::cli::common::limits::oplog_size)]
    pub oplog_size: u64,
    /// How much the shop.events capped collection (the event store the shop.events
    /// resource tails) holds before its oldest events are overwritten (e.g. 1MiB,
    /// 64KiB). At the default about seven events a second fill it in a few minutes; a
    /// small one (16KiB) moves its window by the second.
    #[arg(long, default_value = format!("{DEMO_EVENTS_KIB}KiB"), value_name = "SIZE", value_parser = crate::cli::common::limits::events_size)]
    pub events_size: u64,
    /// Each message of the shop.mailer resource takes this long. At the default it keeps
    /// up; at 1s it falls behind and, with a small --oplog-size, loses its history
    /// ("0s" leaves the mailer out).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub mailer_delay: Duration,
    /// Once, this long after the start, write an animal the pets listeners can never
    /// process (its tags is a string): pet-aggregates goes FAILING, to practise `skip`
    /// (K in the console) and `undo`.
    #[arg(long, value_name = "DURATION", value_parser = crate::cli::common::limits::poison_after)]
    pub poison_after: Option<Duration>,
    /// Read-only removes the console's actions; the operator names you in the audit.
    #[command(flatten)]
    pub actor: ActorArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub metrics: crate::cli::common::settings::MetricsArgs,
    /// Not offered: accepted only to say that the demo takes no cluster.
    #[arg(long, hide = true)]
    pub uri: Option<String>,
}

impl DemoArgs {
    fn config(&self) -> anyhow::Result<DemoConfig> {
        Ok(DemoConfig {
            listeners_per_resource: usize::from(self.listeners),
            workload: WorkloadConfig {
                rate_per_sec: self.rate,
                poison_after: self.poison_after,
                ..WorkloadConfig::default()
            },
            oplog_bytes: usize::try_from(self.oplog_size)
                .context("--oplog-size is too large for this machine")?,
            events_bytes: self.events_size,
            rotate_after: (!self.rotate_after.is_zero()).then_some(self.rotate_after),
            mailer_delay: (!self.mailer_delay.is_zero()).then_some(self.mailer_delay),
            ..DemoConfig::default()
        })
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if rate.is_finite() && rate > 0.0 && rate <= 100_000.0 {
        Ok(rate)
    } else {
        Err(format!(
            "must be above 0 and at most 100000 writes per second, got {rate}"
        ))
    }
}

pub async fn run(args: DemoArgs, settings: &Settings, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut config = args.config()?;
    // Kept to the end: dropping it stops the endpoint.
    let served =
        crate::cli::commands::exporter::serve_engine_metrics(args.metrics.metrics.as_deref())
            .await?;
    config.metrics = served.as_ref().map(|(metrics, _)| metrics.clone());
    if args.plain {
        return plain(args, &config, settings, out).await;
    }
    let theme = resolve_theme(&args.view, settings)?;
    require_terminal()?;
    let demo = DemoRuntime::start(&config);
    // A pause per document so the rebuild's progress gauge can be watched.
    let rebuild = PetRebuild {
        step_delay: Duration::from_millis(300),
        fail_after: None,
        namespaces: Default::default(),
    };
    let outcome = interactive(
        demo.store.clone(),
        Mode::Demo,
        Some(listener_source(&demo)),
        &args.view,
        theme,
        settings,
        vec![(PetRebuild::target(), std::sync::Arc::new(rebuild))],
    )
    .await;
    demo.stop().await;
    outcome
}

async fn plain(
    args: DemoArgs,
    config: &DemoConfig,
    settings: &Settings,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let demo = DemoRuntime::start(config);
    let clear = std::io::stdout().is_terminal();
    let started = tokio::time::Instant::now();
    let mut ticker = tokio::time::interval(args.refresh.max(Duration::from_millis(100)));
    // Statuses from the same evidence as the console's and `leases`': what is left, the
    // time to loss (rates from the reads before).
    let mut tracker = crate::model::LossTracker::default();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let result = loop {
        tokio::select! {
            biased;
            _ = &mut ctrl_c => break Ok(()),
            _ = ticker.tick() => {
                let shown = match render_frame(&demo, started.elapsed(), &settings.thresholds, &mut tracker).await {
                    Ok(frame) => print_frame(out, &frame, clear),
                    Err(e) => Err(e),
                };
                // A reader that went away (`| head`) ends the demo like Ctrl-C, quietly.
                if shown.is_err() {
                    break shown;
                }
                if args.duration.is_some_and(|d| started.elapsed() >= d) {
                    break Ok(());
                }
            }
        }
    };
    demo.stop().await;
    result
}

fn print_frame(out: &mut dyn Write, frame: &str, clear: bool) -> anyhow::Result<()> {
    if clear {
        write!(out, "\x1b[H\x1b[2J")?;
    }
    writeln!(out, "{frame}")?;
    out.flush()?;
    Ok(())
}

async fn render_frame(
    demo: &DemoRuntime,
    elapsed: Duration,
    thresholds: &HealthThresholds,
    tracker: &mut crate::model::LossTracker,
) -> anyhow::Result<String> {
    let store = &demo.store;
    // As `streamward leases` reads a cluster: the same snapshot, the same statuses.
    let snapshot = ClusterSnapshot::read(store)
        .await
        .context("reading the sandbox")?;
    let losses = snapshot.time_to_loss(store, tracker).await;
    // shop.events is measured against its capped collection, the others the oplog.
    let windows = snapshot.windows();
    let (leases, now) = (&snapshot.leases, snapshot.now);
    let rows: Vec<LeaseRow> = leases
        .iter()
        .map(|l| {
            LeaseRow::new(
                l,
                windows.for_lease(l),
                now,
                thresholds,
                &losses.evidence(&l.resource),
            )
        })
        .collect();
    let snapshots: Vec<_> = demo.listeners.iter().map(|l| l.snapshot()).collect();
    let workload = demo
        .workload_status
        .borrow()
        .headline(chrono::Utc::now())
        .map(|line| format!("! {line}\n"))
        .unwrap_or_default();
    let window = match snapshot.window {
        Some(window) => format!(
            "window {} from {} to {}",
            short_duration(window.length()),
            window.first,
            window.last
        ),
        None => "window unknown".to_string(),
    };
    Ok(format!(
        "streamward demo (embedded sandbox) — up {} — {window}\n{workload}\n{}{}\n{}",
        short_duration(elapsed),
        render_leases(&rows),
        render_failures(leases),
        render_listeners(&snapshots)
    ))
}
