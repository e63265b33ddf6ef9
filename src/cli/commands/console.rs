//! `streamward console` and the interactive `demo`: resolve the theme, start the
//! data tasks, take over the terminal, and give it back however the console ends.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use crossterm::event::EventStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cli::common::settings::{ActorArgs, ClusterArgs, ConfigArgs, Settings};
use std::sync::Arc;

use crate::console::action_runner::{ActionCommand, ActionRunner};
use crate::console::app::{self, AppContext};
use crate::console::data::DataEvent;
use crate::console::feed::{self, FeedIntervals, ListenerSource};
use crate::console::state::{ConsoleSetup, ConsoleState, Mode};
use crate::console::terminal::{self, TerminalGuard};
use crate::console::theme::ThemeChoice;
use crate::demo::rebuild::PetRebuild;
use crate::demo::runtime::{DemoConfig, DemoRuntime};
use crate::demo::DemoNamespaces;
use crate::model::text::escape_control;
use crate::observe::ClusterProbe;
use crate::ops::{GatherOptions, RebuildDefinition, RebuildTarget};

/// How the interactive console looks and behaves.
#[derive(Debug, Clone, Args, Default)]
pub struct ViewArgs {
    /// Theme: default, dark, light, high-contrast, monochrome, or a file NAME.toml in
    /// the user theme directory [env: STREAMWARD_THEME; config: theme].
    #[arg(long, value_name = "NAME")]
    pub theme: Option<String>,
    /// Do not capture the mouse (the terminal keeps its own text selection).
    #[arg(long)]
    pub no_mouse: bool,
}

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    #[command(flatten)]
    pub view: ViewArgs,
    /// Also run the demo application's listeners and workload in this process,
    /// against the cluster (they write to the demo and shop databases, or to --demo-db).
    #[arg(long)]
    pub run: bool,
    /// With --run: keep all of the demo's collections in this one database instead
    /// of demo and shop, e.g. to run it on a shared cluster without touching those.
    #[arg(long, requires = "run", value_name = "DB", value_parser = parse_database)]
    pub demo_db: Option<String>,
    /// With --run: serve the in-process listeners' metrics at http://HOST:PORT/metrics.
    #[arg(long, requires = "run", value_name = "HOST:PORT")]
    pub metrics: Option<String>,
    /// With --run: once, this long after the start, write an animal the pets listeners
    /// can never process (its tags is a string), to practise `skip` and `undo`.
    #[arg(long, requires = "run", value_name = "DURATION", value_parser = crate::cli::common::limits::poison_after)]
    pub poison_after: Option<std::time::Duration>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub actor: ActorArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// A database name MongoDB accepts: 1 to 63 bytes without `/`, `\`, `.`, space, `"`, `$` or NUL.
fn parse_database(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 63 {
        return Err("a database name has 1 to 63 bytes".into());
    }
    if let Some(c) = text.chars().find(|c| "/\\. \"$\0".contains(*c)) {
        return Err(format!("a database name cannot contain {c:?}"));
    }
    Ok(text.to_string())
}

/// Channel depth between the data tasks and the UI; a slow UI slows the readers, not the reverse.
const DATA_CHANNEL: usize = 1024;

pub async fn run(args: ConsoleArgs, settings: &Settings) -> anyhow::Result<()> {
    if args.run && settings.read_only {
        return Err(anyhow::Error::new(crate::cli::common::exit::UsageError(
            "--run writes (it runs listeners and a workload), but read-only mode is on: drop --run or --read-only".into(),
        )));
    }
    let theme = resolve_theme(&args.view, settings)?;
    require_terminal()?;
    let store = crate::cli::common::connect::connect(settings).await?;
    let mode = if args.run {
        Mode::InProcess
    } else {
        Mode::Attached
    };
    let namespaces = match &args.demo_db {
        Some(db) => DemoNamespaces::in_database(db),
        None => DemoNamespaces::default(),
    };
    // Kept to the end: dropping it stops the endpoint.
    let served =
        crate::cli::commands::exporter::serve_engine_metrics(args.metrics.as_deref()).await?;
    let demo = args.run.then(|| {
        DemoRuntime::start_on(
            store.clone(),
            &DemoConfig {
                namespaces: namespaces.clone(),
                metrics: served.as_ref().map(|(metrics, _)| metrics.clone()),
                workload: crate::demo::workload::WorkloadConfig {
                    poison_after: args.poison_after,
                    ..Default::default()
                },
                ..DemoConfig::default()
            },
        )
    });
    let listeners = demo.as_ref().map(listener_source);
    let outcome = if args.run {
        let rebuild = PetRebuild {
            namespaces,
            ..PetRebuild::default()
        };
        let rebuilds = vec![(rebuild.target_of(), Arc::new(rebuild))];
        interactive(
            store, mode, listeners, &args.view, theme, settings, rebuilds,
        )
        .await
    } else {
        let rebuilds = settings
            .rebuilds
            .iter()
            .map(|(name, r)| {
                let target = RebuildTarget {
                    name: name.clone(),
                    resource: r.resource.clone(),
                    description: r.definition.describe(),
                };
                (target, Arc::new(r.definition.clone()))
            })
            .collect();
        interactive(
            store, mode, listeners, &args.view, theme, settings, rebuilds,
        )
        .await
    };
    if let Some(demo) = demo {
        demo.stop().await;
    }
    outcome
}

/// The console draws on stdout and reads keys from stdin; say so before starting anything.
pub fn require_terminal() -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "the console needs a terminal; for scripts use `streamward leases` or `streamward demo --plain`"
        );
    }
    Ok(())
}

/// Runs the console on `store` until the operator quits. Call [`require_terminal`] first.
pub async fn interactive<S, D>(
    store: S,
    mode: Mode,
    listeners: Option<ListenerSource>,
    view: &ViewArgs,
    theme: ResolvedTheme,
    settings: &Settings,
    rebuilds: Vec<(RebuildTarget, Arc<D>)>,
) -> anyhow::Result<()>
where
    S: ClusterProbe,
    D: RebuildDefinition<S> + 'static,
{
    let (events, data) = mpsc::channel(DATA_CHANNEL);
    let runner = ActionRunner {
        store: store.clone(),
        options: GatherOptions {
            thresholds: settings.thresholds,
            ..GatherOptions::new(settings.operator.clone())
        },
        rebuilds,
        reason: "from the console".into(),
    };
    let rebuild_names = runner.rebuild_names();
    // Read-only: no runner exists, so nothing the console does can write.
    let (actions, runner_task) = if settings.read_only {
        (None, None)
    } else {
        let (actions, commands) = mpsc::channel(16);
        (Some(actions), Some(runner.spawn(commands, events.clone())))
    };
    let state = ConsoleState::new(ConsoleSetup {
        mode,
        cluster: store.describe(),
        read_only: settings.read_only,
        thresholds: settings.thresholds,
        theme: theme.theme.name.clone(),
        mouse: !view.no_mouse,
        now: chrono::Utc::now(),
        rebuilds: rebuild_names,
    });
    let cancel = CancellationToken::new();
    let (detail, shown_in_detail) = tokio::sync::watch::channel(None);
    let mut tasks = vec![feed::spawn_checkpoints(
        store.clone(),
        FeedIntervals::default(),
        events.clone(),
        shown_in_detail,
        cancel.clone(),
    )];
    tasks.extend(feed::spawn(
        store,
        listeners,
        FeedIntervals::default(),
        events,
        cancel.clone(),
    ));
    let result = drive(state, theme, !view.no_mouse, data, actions, detail).await;
    cancel.cancel();
    for task in tasks {
        let _ = task.await;
    }
    // The runner ends when the console's sender is dropped; a rebuild still running is
    // cancelled and awaited first (its lease stays STUCK BULK, audited), and what it
    // said is printed here, on the restored terminal.
    if let Some(task) = runner_task {
        if let Ok(Some(last_word)) = task.await {
            crate::cli::common::output::say(escape_control(&last_word));
        }
    }
    result
}

async fn drive(
    mut state: ConsoleState,
    theme: ResolvedTheme,
    mouse: bool,
    data: mpsc::Receiver<DataEvent>,
    actions: Option<mpsc::Sender<ActionCommand>>,
    detail: tokio::sync::watch::Sender<Option<String>>,
) -> anyhow::Result<()> {
    let mut guard = TerminalGuard::enter(mouse).context("setting up the terminal")?;
    let mut context = AppContext {
        theme: theme.theme,
        user_theme_dir: theme.user_dir,
        no_color: theme.no_color,
        actions,
        set_mouse: terminal::set_mouse,
        detail,
    };
    let ended = tokio::select! {
        ended = app::run(&mut guard.terminal, &mut state, &mut context, EventStream::new(), data) => ended.map(|_| ()),
        () = crate::cli::common::signals::terminate_signal() => Ok(()),
    };
    drop(guard);
    ended.context("drawing the console")
}

pub struct ResolvedTheme {
    pub theme: crate::console::theme::Theme,
    pub user_dir: Option<PathBuf>,
    pub no_color: bool,
}

/// The theme from flag, environment, config or NO_COLOR; a broken theme file is an
/// error here, before the terminal is taken over, so the message stays readable.
pub fn resolve_theme(view: &ViewArgs, settings: &Settings) -> anyhow::Result<ResolvedTheme> {
    let choice = ThemeChoice::from_env(view.theme.clone(), settings.theme.clone());
    let theme = choice.resolve().context("choosing the console theme")?;
    Ok(ResolvedTheme {
        theme,
        user_dir: choice.user_dir.clone(),
        no_color: choice.no_color,
    })
}

pub fn listener_source<S>(demo: &DemoRuntime<S>) -> ListenerSource {
    let statuses: Vec<_> = demo.listeners.iter().map(|l| l.status.clone()).collect();
    let workload = demo.workload_status.clone();
    std::sync::Arc::new(move || crate::console::feed::InProcess {
        listeners: statuses.iter().map(|s| s.borrow().clone()).collect(),
        workload: Some(workload.borrow().clone()),
    })
}
