use std::process::ExitCode;

use streamward::cli::{self, exit};

fn main() -> ExitCode {
    let cli = cli::parse();
    init_logging(cli.command.is_interactive());
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
            // Errors can quote database strings (a holder, a resource): escape them. A
            // driver message can quote a connection string: mask its secrets.
            let message = streamward::store::mongo::redact_message(&format!("{error:#}"));
            eprintln!(
                "error: {}",
                streamward::model::text::escape_control(&message)
            );
            exit::code_for(&error)
        }
    }
}

/// Logs go to a file named by `STREAMWARD_LOG`, never to the screen the tables draw
/// on. The console logs to `<state dir>/streamward/streamward.log` unless told otherwise.
fn init_logging(interactive: bool) {
    let path = match std::env::var("STREAMWARD_LOG") {
        Ok(path) => path,
        Err(_) if interactive => match default_log_path() {
            Some(path) => path,
            None => return,
        },
        Err(_) => return,
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

fn default_log_path() -> Option<String> {
    let dir = dirs::state_dir()
        .or_else(dirs::cache_dir)?
        .join("streamward");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("streamward.log").to_string_lossy().into_owned())
}
