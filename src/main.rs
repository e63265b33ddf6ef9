use std::process::ExitCode;

use clap::Parser;
use streamward::cli::{self, exit, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ERROR);
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            exit::code_for(&error)
        }
    }
}

/// Logs go to a file named by `STREAMWARD_LOG`, never to the screen the tables draw on.
fn init_logging() {
    let Ok(path) = std::env::var("STREAMWARD_LOG") else {
        return;
    };
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(file) => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("STREAMWARD_LOG_LEVEL")
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .with_writer(std::sync::Mutex::new(file))
                .with_ansi(false)
                .try_init();
        }
        Err(e) => eprintln!("warning: cannot open log file {path}: {e}; logging is off"),
    }
}
