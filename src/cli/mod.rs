//! The command line: clap definitions and the non-interactive subcommands.

pub mod cluster;
pub mod console;
pub mod demo;
pub mod exit;
pub mod lease_table;
pub mod settings;

use clap::{Parser, Subcommand};

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

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(args, &Settings::resolve(&cli.global)?).await,
        Command::Console(args) => console::run(args, &Settings::resolve(&cli.global)?).await,
        Command::Leases => cluster::leases(&Settings::resolve(&cli.global)?).await,
        Command::Oplog => cluster::oplog(&Settings::resolve(&cli.global)?).await,
    }
}
