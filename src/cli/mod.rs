//! The command line: clap definitions and the non-interactive subcommands.

pub mod cluster;
pub mod console;
pub mod demo;
pub mod exit;
pub mod guarded;
pub mod lease_table;
pub mod limits;
pub mod settings;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use settings::{GlobalArgs, Settings};

#[derive(Debug, Parser)]
#[command(
    name = "streamward",
    version,
    about = "Lease-fenced MongoDB change-stream listeners and their operations console"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the embedded sandbox with listeners and a workload, in the console.
    Demo(demo::DemoArgs),
    /// Open the console on a cluster (--run also runs the demo listeners here).
    Console(console::ConsoleArgs),
    /// List the leases of a cluster: holder, version, token time, lag, headroom, status.
    Leases,
    /// Show the oplog window, the cluster time and the replica set members.
    Oplog,
    /// Fence out a lease's holder: release it to any standby, hand it to one (--to), or hold it (--hold).
    Takeover(guarded::TakeoverArgs),
    /// Move a lease's resume point back to a time in the oplog window; the changes since are replayed.
    Rewind(guarded::RewindArgs),
    /// Restart a lease from the oldest oplog entry, or skip to now (--accept-skip).
    Reset(guarded::ResetArgs),
    /// Recompute derived data under the bulk lock, then let listeners replay from its start.
    Rebuild(guarded::RebuildArgs),
    /// Give a bulk lease back without rebuilding (recovers STUCK BULK).
    AbortBulk(guarded::AbortBulkArgs),
    /// Restore the resume point recorded before an audited action.
    Undo(guarded::UndoArgs),
    /// List the most recent operator actions.
    Audit(guarded::AuditArgs),
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
}

/// Parses the process's arguments (exits with clap's message on an error), noting
/// where `--uri` came from.
pub fn parse() -> Cli {
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // A global option typed after the subcommand is recorded in the subcommand's matches.
    let typed = |m: &clap::ArgMatches| m.value_source("uri") == Some(ValueSource::CommandLine);
    cli.global.uri_on_command_line =
        typed(&matches) || matches.subcommand().is_some_and(|(_, sub)| typed(sub));
    cli
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    // Resolved once, before anything connects: a bad config file is a usage error.
    let settings = Settings::resolve(&cli.global)?;
    let settings = &settings;
    match cli.command {
        Command::Demo(args) => {
            if cli.global.uri_on_command_line {
                return Err(anyhow::Error::new(exit::UsageError(
                    "demo runs on its embedded sandbox and takes no --uri; to run the demo's \
                     listeners and workload on a cluster use `streamward --uri URI --leases DB.COLL \
                     console --run` (add --demo-db NAME to keep its collections in one database)"
                        .into(),
                )));
            }
            demo::run(args, settings).await
        }
        Command::Console(args) => console::run(args, settings).await,
        Command::Leases => cluster::leases(settings).await,
        Command::Oplog => cluster::oplog(settings).await,
        Command::Takeover(args) => guarded::action(settings, args.request(), &args.options).await,
        Command::Rewind(args) => guarded::action(settings, args.request()?, &args.options).await,
        Command::Reset(args) => guarded::action(settings, args.request(), &args.options).await,
        Command::Rebuild(args) => guarded::rebuild(settings, &args).await,
        Command::AbortBulk(args) => {
            let request = crate::ops::ActionRequest::AbortBulk {
                resource: args.resource.clone(),
            };
            guarded::action(settings, request, &args.options).await
        }
        Command::Undo(args) => {
            let request = crate::ops::ActionRequest::Undo {
                audit_id: args.audit_id.clone(),
            };
            guarded::action(settings, request, &args.options).await
        }
        Command::Audit(args) => guarded::audit(settings, &args).await,
    }
}
