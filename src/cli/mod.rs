//! The command line: clap definitions and the non-interactive subcommands.

pub mod demo;
pub mod exit;
pub mod lease_table;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "streamward",
    version,
    about = "Lease-fenced MongoDB change-stream listeners and their operations console"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the embedded sandbox with listeners and a workload, and show the leases.
    Demo(demo::DemoArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
    }
}
