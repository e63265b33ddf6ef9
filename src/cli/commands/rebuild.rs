//! `streamward rebuild NAME`: a rebuild the config file defines, under the `bulk` lock
//! kind, with its progress on standard error. A dry run by default that prints the
//! plan; `--execute` runs it.

use std::io::{IsTerminal, Write};

use anyhow::Context;
use clap::Args;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cli::common::json::ActionJson;
use crate::cli::common::output::{print_json, say};
use crate::cli::common::settings::{ActingArgs, OutputFormat, Settings};

use super::actions::{print_failed, print_plan, refused_early, ActionOptions, ActionSettings};
use crate::model::text::escape_control;
use crate::ops::json::ExecutedJson;
use crate::ops::{
    self, describe, ActionRequest, OpsError, Progress, RebuildDefinition, RebuildProgress,
    RebuildTarget,
};
use crate::store::OpsStore;

#[derive(Debug, Args)]
pub struct RebuildArgs {
    /// The rebuild's name: a [rebuilds.NAME] table of the config file.
    pub name: String,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

/// How a rebuild shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressDisplay {
    /// A progress bar on standard error (a terminal).
    Bar,
    /// One plain line per step on standard error (pipes, logs, CI).
    Lines,
    Off,
}

impl ProgressDisplay {
    pub fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            ProgressDisplay::Bar
        } else {
            ProgressDisplay::Lines
        }
    }
}

/// Plans a rebuild of `name` (`definition` is `None` when no such rebuild is defined:
/// the plan is refused); with `--execute` runs it under the bulk lock, showing progress;
/// Ctrl-C cancels it (the lease then stays STUCK BULK, and the error says how to recover).
#[allow(clippy::too_many_arguments)]
pub async fn run_rebuild<S, D>(
    store: &S,
    name: &str,
    definition: Option<(&D, RebuildTarget)>,
    settings: &ActionSettings,
    options: &ActionOptions,
    display: ProgressDisplay,
    cancel: &CancellationToken,
    out: &mut dyn Write,
) -> anyhow::Result<()>
where
    S: OpsStore,
    D: RebuildDefinition<S>,
{
    let request = ActionRequest::Rebuild { name: name.into() };
    let mut gather = settings.gather.clone();
    gather.rebuild = definition.as_ref().map(|(_, target)| target.clone());
    let facts = ops::gather(store, &request, &gather)
        .await
        .context("reading what the rebuild needs")?;
    let plan = ops::plan(&request, &facts);
    print_plan(out, &plan, settings.output)?;
    if let Some(refusal) = &plan.refusal {
        if settings.output == OutputFormat::Json {
            print_json(out, ActionJson::not_written(&plan))?;
        }
        return Err(OpsError::Refused(refusal.clone()).into());
    }
    let Some((definition, _)) = definition else {
        return Err(OpsError::WrongPlan(format!("no rebuild named {name}")).into());
    };
    if !options.execute {
        match settings.output {
            OutputFormat::Table => {
                writeln!(out, "\nnothing written; re-run with --execute to apply")?
            }
            OutputFormat::Json => print_json(out, ActionJson::not_written(&plan))?,
        }
        return Ok(());
    }
    out.flush()?;
    let (progress, receiver) = Progress::channel();
    let shown = tokio::spawn(show_progress(receiver, display, name.to_string()));
    let result = ops::rebuild(
        store,
        &plan,
        definition,
        &progress,
        cancel,
        options.reason.clone(),
    )
    .await;
    drop(progress);
    let _ = shown.await;
    let done = match result {
        Ok(done) => done,
        Err(error) => return Err(print_failed(out, &plan, settings.output, error)?),
    };
    match settings.output {
        OutputFormat::Table => write!(
            out,
            "\n{}rebuilt: {}; listeners replay from {}\n",
            describe::executed_text(&done.executed),
            escape_control(&done.report.summary),
            done.t0
        )?,
        OutputFormat::Json => print_json(
            out,
            ActionJson::applied(&plan, ExecutedJson::of(&done.executed))
                .rebuilt(done.t0, &done.report.summary),
        )?,
    }
    Ok(())
}

/// Draws progress until the sender is dropped.
async fn show_progress(
    mut receiver: watch::Receiver<RebuildProgress>,
    display: ProgressDisplay,
    name: String,
) {
    let bar = (display == ProgressDisplay::Bar).then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("rebuild {}", escape_control(&name)));
        bar
    });
    let mut last_line = String::new();
    while receiver.changed().await.is_ok() {
        let p = receiver.borrow_and_update().clone();
        match (&bar, display) {
            (Some(bar), _) => {
                bar.set_length(p.total.unwrap_or(0));
                bar.set_position(p.done);
                bar.set_message(escape_control(&p.stage));
            }
            (None, ProgressDisplay::Lines) => {
                let total = p.total.map_or_else(|| "?".into(), |t| t.to_string());
                let line = format!(
                    "rebuild {}: {}/{total} {}",
                    escape_control(&name),
                    p.done,
                    escape_control(&p.stage)
                );
                if line != last_line {
                    say(&line);
                    last_line = line;
                }
            }
            _ => {}
        }
    }
    if let Some(bar) = bar {
        bar.finish();
    }
}

pub async fn rebuild(
    settings: &Settings,
    args: &RebuildArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    refused_early(
        settings,
        &ActionRequest::Rebuild {
            name: args.name.clone(),
        },
        out,
    )?;
    let store = crate::cli::common::connect::connect(settings).await?;
    let definition = settings.rebuilds.get(&args.name).map(|r| {
        (
            &r.definition,
            RebuildTarget {
                name: args.name.clone(),
                resource: r.resource.clone(),
                description: r.definition.describe(),
            },
        )
    });
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    let watcher = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    let result = run_rebuild(
        &store,
        &args.name,
        definition,
        &ActionSettings::from(settings),
        &args.options,
        ProgressDisplay::for_stderr(),
        &cancel,
        out,
    )
    .await;
    watcher.abort();
    result
}
