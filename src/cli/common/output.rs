//! Where a command's result goes, and how a failure is told.
//!
//! - Table output streams to stdout; a failure is one line `error: …` on stderr.
//! - `--output json` prints exactly one JSON document on stdout: the result, or on a
//!   failure an object with an `error` member, `{"error": {"message", "exit", "kind"}}`
//!   — merged into the document the command had to show, e.g. a refused plan
//!   (`{"plan": …, "written": false, "error": …}`). The same error is also written to
//!   stderr as a line of text, for people. The exit code is never 0 then.
//! - `--output json` on a command that streams (`leases --watch`) prints one compact
//!   document per line; a failure is a last line `{"error": …}`.
//! - A reader that goes away (`streamward … | head -1`) ends the command quietly with
//!   exit 141, as a program stopped by SIGPIPE: no panic, no message.

use std::io::{self, Write};
use std::process::ExitCode;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::cli::common::exit;
use crate::cli::common::json::{ActionJson, ErrorDocumentJson, ErrorJson};
use crate::cli::common::settings::OutputFormat;
use crate::model::text::escape_control;
use crate::store::mongo::redact_message;

/// Standard output for a command; with `--output json` (one document) held until the
/// command ends, so that a failure can be merged into it.
pub struct Out {
    format: OutputFormat,
    /// `Some` while the document is held.
    held: Option<Vec<u8>>,
    stdout: io::Stdout,
}

impl Out {
    /// `format` is the command's output format; `streams` says it prints one document
    /// per line as it goes (`leases --watch`), so nothing is held.
    pub fn new(format: OutputFormat, streams: bool) -> Self {
        let hold = format == OutputFormat::Json && !streams;
        Self {
            format,
            held: hold.then(Vec::new),
            stdout: io::stdout(),
        }
    }

    /// For commands whose output is not a result (`demo`, `console`, `completions`,
    /// `man`): written as it comes, and a failure is text.
    pub fn text() -> Self {
        Self::new(OutputFormat::Table, true)
    }

    /// Ends the command: prints what was held, or tells the failure; the exit code.
    pub fn finish(mut self, result: anyhow::Result<()>) -> ExitCode {
        let result = result.and_then(|()| {
            if let Some(held) = self.held.take() {
                self.stdout.write_all(&held)?;
            }
            self.stdout.flush()?;
            Ok(())
        });
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => self.fail(&error),
        }
    }

    fn fail(&mut self, error: &anyhow::Error) -> ExitCode {
        let code = exit::code_of(error);
        if code == exit::BROKEN_PIPE {
            return ExitCode::from(code);
        }
        let message = error_message(error);
        // A config file's parse error is the parser's lines about the user's own file:
        // each is escaped, the line breaks kept. Any other message is one line.
        let shown = match error.chain().any(|e| e.is::<exit::InvalidConfig>()) {
            true => message
                .lines()
                .map(escape_control)
                .collect::<Vec<_>>()
                .join("\n"),
            false => escape_control(&message),
        };
        say(format_args!("error: {shown}"));
        if self.format == OutputFormat::Json {
            let error = ErrorJson::new(&message, code);
            let text = match self.held.take() {
                Some(held) => {
                    let document = merge_error(&held, &error);
                    serde_json::to_string_pretty(&document).unwrap_or_default()
                }
                None => serde_json::to_string(&ErrorDocumentJson { error }).unwrap_or_default(),
            };
            let _ = writeln!(self.stdout, "{text}").and_then(|()| self.stdout.flush());
        }
        ExitCode::from(code)
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.held {
            Some(held) => held.write(buf),
            None => self.stdout.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.held {
            Some(_) => Ok(()),
            None => self.stdout.flush(),
        }
    }
}

/// One JSON document, pretty-printed, on a line of its own.
pub fn print_json(out: &mut dyn Write, value: impl Serialize) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    Ok(())
}

/// `refused`, and when it is a refusal found before anything was read, with `--output
/// json` the document a refused action shows: no plan (nothing was read) and
/// `written: false` (the error is merged in when the command ends).
pub fn tell_early_refusal(
    refused: anyhow::Result<()>,
    output: OutputFormat,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if refused.is_err() && output == OutputFormat::Json {
        print_json(out, ActionJson::refused_early())?;
    }
    refused
}

/// The document held so far with `error` added: into it when it is an object (a
/// refused plan, a failed check), beside it otherwise.
fn merge_error(held: &[u8], error: &ErrorJson) -> Value {
    let shown = if held.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        serde_json::from_slice::<Value>(held).ok()
    };
    let mut document = match shown {
        Some(Value::Object(map)) => map,
        Some(other) => Map::from_iter([("output".to_string(), other)]),
        None => Map::new(),
    };
    document.insert(
        "error".into(),
        serde_json::to_value(error).unwrap_or_default(),
    );
    Value::Object(document)
}

/// The failure as one line of text: its chain, URI secrets masked, and no driver
/// topology dump (an unreachable cluster is already said in a sentence).
pub fn error_message(error: &anyhow::Error) -> String {
    let message = redact_message(&format!("{error:#}"));
    match message.find(" Topology: {") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}

/// A line on stderr; a stderr that is gone is not worth a panic.
pub fn say(line: impl std::fmt::Display) {
    let _ = writeln!(io::stderr(), "{line}");
}

/// A usage error found by clap. With `--output json` among the arguments it is also
/// told as JSON on stdout; help and `--version` print as usual.
pub fn clap_failure(error: clap::Error, args: &[String]) -> ExitCode {
    use clap::error::ErrorKind;
    let asked_json = args
        .windows(2)
        .any(|pair| pair[0] == "--output" && pair[1] == "json")
        || args.iter().any(|a| a == "--output=json");
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if informational || !asked_json {
        // clap swallows a broken pipe itself.
        let _ = error.print();
        return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(exit::USAGE));
    }
    let _ = error.print();
    let rendered = error.render().to_string();
    let message = rendered
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_string();
    let document = ErrorDocumentJson {
        error: ErrorJson::new(&message, exit::USAGE),
    };
    let text = serde_json::to_string(&document).unwrap_or_default();
    let mut stdout = io::stdout();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
    ExitCode::from(exit::USAGE)
}

/// One warning line on stderr per document that could not be read; the rest are shown.
pub fn warn_malformed(what: &str, malformed: &[crate::store::MalformedDocument]) {
    for document in malformed {
        say(format_args!(
            "warning: malformed {what} {} (not shown; fix or remove the document)",
            escape_control(&document.to_string())
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    #[test]
    fn an_error_merges_into_the_document_held() {
        let error = ErrorJson::new("m", exit::REFUSED);
        let shown = json!({"message": "m", "exit": 3, "kind": "refused"});
        let plan = br#"{"plan": {"action": "reset"}, "written": false}"#;
        let merged = merge_error(plan, &error);
        assert_eq!(merged["plan"]["action"], "reset");
        assert_eq!(merged["written"], false);
        assert_eq!(merged["error"]["exit"], 3);
        assert_eq!(merge_error(b"", &error), json!({ "error": shown }));
        let list = merge_error(b"[1, 2]", &error);
        assert_eq!(list["output"], json!([1, 2]));
        assert_eq!(list["error"], shown);
    }

    #[test]
    fn a_driver_topology_dump_is_cut() {
        let error = anyhow::anyhow!(
            "cannot reach the database: Server selection timeout: No available servers. Topology: {{ Type: Single, Servers: [ ... ] }}"
        )
        .context("reading the audit log");
        assert_eq!(
            error_message(&error),
            "reading the audit log: cannot reach the database: Server selection timeout: No available servers."
        );
    }
}
