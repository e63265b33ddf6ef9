//! The command line: clap definitions and the non-interactive subcommands.

pub mod cluster;
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
    /// Run the embedded sandbox with listeners and a workload, and show the leases.
    Demo(demo::DemoArgs),
    /// List the leases of a cluster: holder, version, token time, lag, headroom, status.
    Leases,
    /// Show the oplog window, the cluster time and the replica set members.
    Oplog,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Leases => cluster::leases(&Settings::resolve(&cli.global)?).await,
        Command::Oplog => cluster::oplog(&Settings::resolve(&cli.global)?).await,
    }
}
