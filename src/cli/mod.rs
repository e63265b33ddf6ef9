//! The command line: clap definitions and the non-interactive subcommands.
//!
//! Each command takes the options that apply to it (`demo --help` offers no `--uri`).
//! The same options typed before the command's name are accepted for every command, as
//! settings for the whole run (like the config file's keys); typed after it they win.

pub mod commands;
pub mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use common::output::Out;
use common::settings::{
    ActorArgs, ClusterArgs, ConfigArgs, GlobalArgs, OutputArgs, OutputFormat, ReaderArgs, Settings,
};

/// `--version`: the package version and the commit it was built from (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("STREAMWARD_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "streamward",
    version = VERSION,
    about = "Lease-fenced MongoDB change-stream listeners and their operations console",
    after_help = "The options above are accepted before any command, for the whole run; \
                  `streamward COMMAND --help` lists the ones each command takes."
)]
pub struct Cli {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub actor: ActorArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(subcommand)]
    pub command: Command,
    /// The options typed before and after the command's name, merged by [`parse`].
    #[arg(skip)]
    pub global: GlobalArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the embedded sandbox with listeners and a workload, in the console.
    Demo(commands::demo::DemoArgs),
    /// Open the console on a cluster (--run also runs the demo listeners here).
    Console(commands::console::ConsoleArgs),
    /// List the leases of a cluster: holder, version, token time, lag, headroom, status;
    /// `leases export` / `leases import` save and restore their resume points.
    Leases(commands::leases::LeasesArgs),
    /// Show the oplog window, the cluster time and the replica set members.
    Oplog(OplogArgs),
    /// List the processes of a fleet: fair share, leases held, handing over, standby (reads only).
    Processes(commands::processes::ProcessesArgs),
    /// Serve the cluster's leases, lag, headroom and oplog window as Prometheus metrics (reads only).
    Exporter(commands::exporter::ExporterArgs),
    /// Fence out a lease's holder: release it to any standby, hand it to one (--to), or hold it (--hold).
    Takeover(commands::actions::TakeoverArgs),
    /// Move a lease's resume point back to a time in the oplog window; the changes since are replayed.
    Rewind(commands::actions::RewindArgs),
    /// Restart a lease from the oldest oplog entry, or skip to now (--accept-skip).
    Reset(commands::actions::ResetArgs),
    /// Recompute derived data under the bulk lock, then let listeners replay from its start.
    Rebuild(commands::rebuild::RebuildArgs),
    /// Step over the one change a lease's listeners fail on (FAILING): kept in the skipped
    /// collection, undone by `undo`.
    Skip(commands::actions::SkipArgs),
    /// Give a bulk lease back without rebuilding (recovers STUCK BULK).
    AbortBulk(commands::actions::AbortBulkArgs),
    /// Restore the resume point recorded before an audited action.
    Undo(commands::actions::UndoArgs),
    /// List the most recent operator actions.
    Audit(commands::audit::AuditArgs),
    /// List a resource's checkpoints: the resume points its listeners committed, newest first.
    Checkpoints(commands::checkpoints::CheckpointsArgs),
    /// The two-step idempotent increment's cleanup (fold).
    Increments(commands::increments::IncrementsArgs),
    /// Print a shell completion script, e.g. `streamward completions bash > /etc/bash_completion.d/streamward`.
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or write one per command into a directory (--dir).
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct OplogArgs {
    #[command(flatten)]
    pub common: ReaderArgs,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write streamward.1 and streamward-COMMAND.1 into this directory instead of
    /// printing streamward.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

impl Command {
    /// Commands that take over the terminal, and so must log to a file.
    pub fn is_interactive(&self) -> bool {
        match self {
            Command::Demo(args) => !args.plain,
            Command::Console(_) => true,
            _ => false,
        }
    }

    /// Adds the options typed after the command's name to those typed before it.
    fn merge_into(&self, global: &mut GlobalArgs) {
        match self {
            Command::Demo(args) => {
                global.actor(&args.actor);
                global.config(&args.config);
                // Only to refuse it: the demo runs on its sandbox.
                if args.uri.is_some() {
                    global.uri_on_command_line = true;
                }
            }
            Command::Console(args) => {
                global.cluster(&args.cluster);
                global.actor(&args.actor);
                global.config(&args.config);
            }
            Command::Leases(args) => {
                global.reader(&args.common);
                match &args.action {
                    Some(commands::lease_transfer::LeasesAction::Export(export)) => {
                        global.reader(&export.common)
                    }
                    Some(commands::lease_transfer::LeasesAction::Import(import)) => {
                        global.acting(&import.common)
                    }
                    None => {}
                }
            }
            Command::Oplog(args) => global.reader(&args.common),
            Command::Processes(args) => global.reader(&args.common),
            Command::Exporter(args) => {
                global.cluster(&args.cluster);
                global.config(&args.config);
            }
            Command::Audit(args) => global.reader(&args.common),
            Command::Checkpoints(args) => global.reader(&args.common),
            Command::Takeover(args) => global.acting(&args.common),
            Command::Rewind(args) => global.acting(&args.common),
            Command::Reset(args) => global.acting(&args.common),
            Command::Rebuild(args) => global.acting(&args.common),
            Command::AbortBulk(args) => global.acting(&args.common),
            Command::Skip(args) => global.acting(&args.common),
            Command::Undo(args) => global.acting(&args.common),
            Command::Increments(args) => global.acting(args.acting()),
            Command::Completions(_) | Command::Man(_) => {}
        }
    }

    /// Whether the command prints a result in the `--output` format (else its output
    /// and its errors are text).
    fn takes_output(&self) -> bool {
        !matches!(
            self,
            Command::Demo(_)
                | Command::Console(_)
                | Command::Exporter(_)
                | Command::Completions(_)
                | Command::Man(_)
        )
    }

    /// Whether its result is a stream of documents, one per line.
    fn streams(&self) -> bool {
        matches!(self, Command::Leases(args) if args.watch)
    }
}

/// Parses the process's arguments and merges the options typed before and after the
/// command's name. A usage error is told (as JSON too when `--output json` was asked
/// for) and becomes the exit code.
pub fn parse() -> Result<Cli, ExitCode> {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let mut cli = match parsed {
        Ok(cli) => cli,
        Err(error) => return Err(common::output::clap_failure(error, &args)),
    };
    let mut global = GlobalArgs::default();
    global.cluster(&cli.cluster);
    global.output(&cli.output);
    global.actor(&cli.actor);
    global.config(&cli.config);
    cli.command.merge_into(&mut global);
    cli.global = global;
    Ok(cli)
}

/// Runs the command and tells how it ended: the process's exit code.
pub async fn run(cli: Cli) -> ExitCode {
    let Cli {
        command, global, ..
    } = cli;
    match &command {
        Command::Completions(args) => return Out::text().finish(completions(args.shell)),
        Command::Man(args) => return Out::text().finish(man(args.dir.as_deref())),
        _ => {}
    }
    let format = |output: OutputFormat| match command.takes_output() {
        true => output,
        false => OutputFormat::Table,
    };
    // Resolved once, before anything connects: a bad config file is a usage error.
    let settings = match Settings::resolve(&global) {
        Ok(settings) => settings,
        Err(error) => {
            let asked = format(global.output.unwrap_or_default());
            return Out::new(asked, command.streams()).finish(Err(error));
        }
    };
    let mut out = Out::new(format(settings.output), command.streams());
    let result = dispatch(command, &global, &settings, &mut out).await;
    out.finish(result)
}

async fn dispatch(
    command: Command,
    global: &GlobalArgs,
    settings: &Settings,
    out: &mut Out,
) -> anyhow::Result<()> {
    match command {
        Command::Demo(args) => {
            if global.uri_on_command_line {
                return Err(anyhow::Error::new(common::exit::UsageError(
                    "demo runs on its embedded sandbox and takes no --uri; to run the demo's \
                     listeners and workload on a cluster use `streamward --uri URI --leases DB.COLL \
                     console --run` (add --demo-db NAME to keep its collections in one database)"
                        .into(),
                )));
            }
            commands::demo::run(args, settings, out).await
        }
        Command::Console(args) => commands::console::run(args, settings).await,
        Command::Leases(args) => match &args.action {
            Some(commands::lease_transfer::LeasesAction::Export(export)) => {
                commands::lease_transfer::export(settings, export, out).await
            }
            Some(commands::lease_transfer::LeasesAction::Import(import)) => {
                commands::lease_transfer::import(settings, import, out).await
            }
            None => commands::leases::leases(settings, &args, out).await,
        },
        Command::Oplog(_) => commands::oplog::oplog(settings, out).await,
        Command::Processes(_) => commands::processes::list(settings, out).await,
        Command::Exporter(args) => commands::exporter::run(&args, settings).await,
        Command::Takeover(args) => {
            commands::actions::action(settings, args.request(), &args.options, None, out).await
        }
        Command::Rewind(args) => {
            let request = args.request()?;
            commands::actions::action(settings, request, &args.options, args.restart.hold, out)
                .await
        }
        Command::Reset(args) => {
            let request = args.request();
            commands::actions::action(settings, request, &args.options, args.restart.hold, out)
                .await
        }
        Command::Rebuild(args) => commands::rebuild::rebuild(settings, &args, out).await,
        Command::Skip(args) => {
            commands::actions::action(settings, args.request(), &args.options, None, out).await
        }
        Command::AbortBulk(args) => {
            let request = crate::ops::ActionRequest::AbortBulk {
                resource: args.resource.clone(),
            };
            commands::actions::action(settings, request, &args.options, None, out).await
        }
        Command::Undo(args) => {
            let request = crate::ops::ActionRequest::Undo {
                audit_id: args.audit_id.clone(),
            };
            commands::actions::action(settings, request, &args.options, args.restart.hold, out)
                .await
        }
        Command::Audit(args) => commands::audit::audit(settings, &args, out).await,
        Command::Checkpoints(args) => commands::checkpoints::list(settings, &args, out).await,
        Command::Increments(args) => commands::increments::run(settings, &args, out).await,
        Command::Completions(_) | Command::Man(_) => Ok(()),
    }
}

/// The completion script for `shell`, on stdout.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    // Generated in memory: the generators panic on a failed write.
    clap_complete::generate(shell, &mut Cli::command(), "streamward", &mut script);
    let mut out = std::io::stdout();
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}

/// The manual page on stdout, or one page per command in `dir`.
pub fn man(dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    let command = Cli::command();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command).render(&mut page)?;
        let mut out = std::io::stdout();
        out.write_all(&page)?;
        out.flush()?;
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the directory {}", dir.display()))?;
    let mut pages = vec![("streamward.1".to_string(), command.clone())];
    for sub in command.get_subcommands() {
        let name = format!("streamward-{}", sub.get_name());
        pages.push((format!("{name}.1"), sub.clone().name(name).version(VERSION)));
    }
    for (file, page) in pages {
        let mut text = Vec::new();
        clap_mangen::Man::new(page).render(&mut text)?;
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
