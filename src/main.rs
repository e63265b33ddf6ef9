use std::process::ExitCode;

use streamward::cli::{self, exit, output};

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    init_logging(cli.command.is_interactive());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            output::say(format_args!("error: cannot start the async runtime: {e}"));
            return ExitCode::from(exit::ERROR);
        }
    };
    // Errors are told by `run` (text on stderr, and JSON on stdout with --output json).
    runtime.block_on(cli::run(cli))
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
        Err(e) => output::say(format_args!(
            "warning: cannot open log file {path}: {e}; logging is off"
        )),
    }
}

fn default_log_path() -> Option<String> {
    let dir = dirs::state_dir()
        .or_else(dirs::cache_dir)?
        .join("streamward");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("streamward.log").to_string_lossy().into_owned())
}
