use std::process::ExitCode;

use streamward::cli;
use streamward::cli::common::{exit, output};
use streamward::model::text::escape_control;

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    init_logging(cli.command.is_interactive());
    quiet_driver_teardown_panics();
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

/// mongodb 3.9 can panic in its own background tasks while a client is torn down: a
/// connection request to a pool worker that is already gone (`cmap/connection_requester.rs`,
/// an `unwrap` on a closed channel; mongo-rust-driver issues 498, 615, 847). Seen about
/// once in 100 runs of `leases | head -c 1`. The task only dies, after the command's
/// outcome is decided on the main thread, so that panic goes to the log instead of the
/// operator's terminal; every other panic is printed as before.
fn quiet_driver_teardown_panics() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_pool_teardown = info.location().is_some_and(|at| {
            let file = at.file().replace('\\', "/");
            file.contains("/mongodb-") && file.ends_with("src/cmap/connection_requester.rs")
        });
        if in_pool_teardown {
            tracing::warn!(panic = %info, "the MongoDB driver panicked tearing down a connection pool; ignored");
        } else {
            print(info);
        }
    }));
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
            use tracing_subscriber::layer::SubscriberExt;
            use tracing_subscriber::util::SubscriberInitExt;
            let _ = tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::sync::Mutex::new(file))
                        .with_ansi(false),
                )
                .with(log_filter())
                .try_init();
        }
        Err(e) => output::say(format_args!(
            "warning: cannot open log file {path}: {e}; logging is off"
        )),
    }
}

/// `STREAMWARD_LOG_LEVEL`: a level (`debug`) or `target=level` pairs
/// (`info,streamward::engine=debug`); `info` when unset, and when it does not parse
/// (said on stderr).
fn log_filter() -> tracing_subscriber::filter::Targets {
    let default = tracing_subscriber::filter::Targets::new()
        .with_default(tracing_subscriber::filter::LevelFilter::INFO);
    match std::env::var("STREAMWARD_LOG_LEVEL") {
        Ok(text) => text.parse().unwrap_or_else(|e| {
            output::say(format_args!(
                "warning: STREAMWARD_LOG_LEVEL={:?} is not a level or a list of target=level ({e}); logging at info",
                escape_control(&text)
            ));
            default
        }),
        Err(_) => default,
    }
}

fn default_log_path() -> Option<String> {
    let dir = dirs::state_dir()
        .or_else(dirs::cache_dir)?
        .join("streamward");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("streamward.log").to_string_lossy().into_owned())
}
