//! The docs against the code: a sentence that stopped being true is a failing test.
//!
//! - every `streamward …` command line in a shell code block of README.md and docs/
//!   parses with the real clap definitions;
//! - every relative link, and every repository path the docs name, exists;
//! - docs/metrics.md names exactly the series the exporter and the engine register;
//! - docs/reference/cli.md is what the clap definitions generate
//!   (`STREAMWARD_BLESS=1 cargo test --test docs_drift` rewrites it);
//! - docs/reference/streamward.toml sets every key the config loader knows, to its
//!   default where it has one, and loads;
//! - the README's test command (scripts/test.sh) asks for every feature a test crate
//!   requires, so "the whole test suite" builds them all.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use clap::{CommandFactory, FromArgMatches};
use streamward::cli::common::settings::{ConfigFile, GlobalArgs, OutputFormat, Settings};
use streamward::cli::Cli;
use streamward::engine::ListenerObserver;
use streamward::metrics::{encode, ClusterMetrics, ClusterSample, EngineMetrics};
use streamward::model::{
    ClusterTime, HealthThresholds, Lease, LossTime, OplogWindow, ResumeToken, TimeToLoss, TokenKind,
};
use streamward::ops::PipelineRebuild;
use streamward::store::mongo::MongoSettings;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/, as paths relative to the root.
fn doc_files() -> Vec<PathBuf> {
    let docs = support::files::with_extension(&root().join("docs"), "md");
    let relative = docs
        .into_iter()
        .map(|path| path.strip_prefix(root()).unwrap().to_path_buf());
    std::iter::once(PathBuf::from("README.md"))
        .chain(relative)
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fenced code block: its info string, its first line's number, its lines.
struct Block {
    info: String,
    line: usize,
    lines: Vec<String>,
}

/// The fenced code blocks of a Markdown text, and the text outside them (code blocks
/// replaced by empty lines, so line numbers stay).
fn split_blocks(text: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut open: Option<(String, Block)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None if trimmed.starts_with("```") || trimmed.starts_with("~~~") => {
                let fence: String = trimmed
                    .chars()
                    .take_while(|c| *c == '`' || *c == '~')
                    .collect();
                let info = trimmed[fence.len()..].trim().to_string();
                open = Some((
                    fence,
                    Block {
                        info,
                        line: n + 2,
                        lines: Vec::new(),
                    },
                ));
                prose.push('\n');
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
            }
            Some((fence, block)) => {
                if trimmed.starts_with(fence.as_str())
                    && trimmed.trim_matches(|c| c == '`' || c == '~').is_empty()
                {
                    blocks.push(std::mem::replace(
                        block,
                        Block {
                            info: String::new(),
                            line: 0,
                            lines: Vec::new(),
                        },
                    ));
                    open = None;
                } else {
                    block.lines.push(line.to_string());
                }
                prose.push('\n');
            }
        }
    }
    (blocks, prose)
}

fn is_shell(info: &str) -> bool {
    matches!(
        info.split([' ', ',']).next().unwrap_or(""),
        "sh" | "bash" | "shell" | "console" | "zsh"
    )
}

/// Splits a shell line into words: quotes removed, `#` comments and anything after a
/// pipe, redirection or command separator dropped.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            '|' | '>' | '<' | ';' | '&' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The command lines of a shell block, continuation lines joined, as argument lists
/// starting at `streamward` (`cargo run … -- ARGS` counts as `streamward ARGS`).
fn streamward_commands(block: &Block) -> Vec<(usize, String, Vec<String>)> {
    let mut commands = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in block.lines.iter().enumerate() {
        let (start, mut joined) = match pending.take() {
            Some((start, text)) => (start, text),
            None => (block.line + i, String::new()),
        };
        let line = line.trim();
        if let Some(head) = line.strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            pending = Some((start, joined));
            continue;
        }
        joined.push_str(line);
        let text = joined.trim().trim_start_matches("$ ").to_string();
        let mut words = shell_words(&text);
        // Leading environment assignments: `STREAMWARD_URI=… streamward …`.
        while words
            .first()
            .is_some_and(|w| w.contains('=') && !w.starts_with('-'))
        {
            words.remove(0);
        }
        let args = match words.first().map(String::as_str) {
            Some("streamward") => words,
            Some("cargo") if words.get(1).is_some_and(|w| w == "run") => {
                match words.iter().position(|w| w == "--") {
                    Some(at) => std::iter::once("streamward".to_string())
                        .chain(words[at + 1..].iter().cloned())
                        .collect(),
                    None => continue,
                }
            }
            _ => continue,
        };
        commands.push((start, text, args));
    }
    commands
}

#[test]
fn every_command_line_in_the_docs_parses() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let (blocks, _) = split_blocks(&read(&file));
        for block in blocks.iter().filter(|b| is_shell(&b.info)) {
            for (line, text, args) in streamward_commands(block) {
                checked += 1;
                let parsed = Cli::command()
                    .try_get_matches_from(&args)
                    .and_then(|m| Cli::from_arg_matches(&m));
                if let Err(error) = parsed {
                    use clap::error::ErrorKind;
                    if matches!(
                        error.kind(),
                        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                    ) {
                        continue;
                    }
                    let why = error.render().to_string();
                    let why = why.lines().next().unwrap_or_default().to_string();
                    failures.push(format!("{}:{line}: {text}\n    {why}", file.display()));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} command lines found: is the scan broken?"
    );
    assert!(
        failures.is_empty(),
        "{} command lines in the docs do not parse:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The `streamward …` spans of inline code in a Markdown text outside code blocks.
fn inline_commands(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    // Inline code may wrap onto the next line: joined, numbered by its first line.
    let lines: Vec<&str> = prose.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        let mut rest: &str = line;
        let mut next_line = lines.get(n + 1).copied().unwrap_or("");
        while let Some(at) = rest.find("`streamward ") {
            let after = &rest[at + 1..];
            let span = match after.find('`') {
                Some(end) => after[..end].to_string(),
                None => {
                    let end = next_line.find('`').unwrap_or(0);
                    let joined = format!("{after} {}", &next_line[..end]);
                    next_line = "";
                    joined
                }
            };
            rest = &after[span.len().min(after.len())..];
            rest = rest.strip_prefix('`').unwrap_or(rest);
            found.push((n + 1, span));
        }
    }
    found
}

/// Whether the commands and `--options` an inline mention names exist: a mention in
/// prose may leave out required values (`streamward rebuild`), so it is not parsed
/// whole; but `streamward leases --check` must name a real command and option.
fn check_mention(mention: &str) -> Result<(), String> {
    let mut command = Cli::command();
    command.build();
    let mut current = &command;
    let mut words = shell_words(mention).into_iter().skip(1).peekable();
    while let Some(word) = words.peek() {
        match current.find_subcommand(word) {
            Some(sub) => {
                current = sub;
                words.next();
            }
            None => break,
        }
    }
    for word in words {
        let Some(long) = word.strip_prefix("--") else {
            continue;
        };
        let long = long.split('=').next().unwrap_or_default();
        let known = long == "help"
            || long == "version"
            || current.get_arguments().any(|a| a.get_long() == Some(long));
        if !known {
            return Err(format!("`{}` takes no --{long}", current.get_name()));
        }
    }
    Ok(())
}

#[test]
fn every_command_mentioned_in_the_docs_prose_exists() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        if file == Path::new(CLI_REFERENCE) {
            continue;
        }
        let (_, prose) = split_blocks(&read(&file));
        for (line, mention) in inline_commands(&prose) {
            let first = mention.split_whitespace().nth(1).unwrap_or_default();
            // `streamward COMMAND --help`, `streamward <command>`, `streamward …`: placeholders.
            if first.chars().all(|c| c.is_uppercase()) || first.starts_with(['<', '…']) {
                continue;
            }
            checked += 1;
            let known = Cli::command()
                .get_subcommands()
                .any(|s| s.get_name() == first);
            let result = match known {
                true => check_mention(&mention),
                false => Err(format!("no command {first}")),
            };
            if let Err(why) = result {
                failures.push(format!("{}:{line}: `{mention}`: {why}", file.display()));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} mentions found: is the scan broken?"
    );
    assert!(
        failures.is_empty(),
        "{} commands mentioned in the docs do not exist:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every `[text](target)` of a Markdown text outside code blocks, with its line.
fn links(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((n + 1, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// The anchors GitHub gives a Markdown file's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = split_blocks(text);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for line in prose.lines() {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(match *count {
            0 => slug.clone(),
            n => format!("{slug}-{n}"),
        });
        *count += 1;
    }
    anchors
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = read(&file);
        let (_, prose) = split_blocks(&text);
        let dir = file.parent().unwrap_or(Path::new(""));
        for (line, target) in links(&prose) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let at = format!("{}:{line}: ({target})", file.display());
            if !root().join(&linked).exists() {
                failures.push(format!("{at}: {} does not exist", linked.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                if linked.extension().is_some_and(|e| e == "md")
                    && !anchors(&read(&linked)).contains(anchor)
                {
                    failures.push(format!(
                        "{at}: no heading #{anchor} in {}",
                        linked.display()
                    ));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the scan broken?"
    );
    assert!(
        failures.is_empty(),
        "{} links in the docs are broken:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The top-level directories whose paths the docs name.
const TREES: [&str; 9] = [
    "src/",
    "tests/",
    "docs/",
    "benches/",
    "scripts/",
    "themes/",
    ".ci/",
    "proptest-regressions/",
    "build.rs",
];

/// Every repository path named anywhere in a text (prose and code): a word that starts
/// with one of [`TREES`], as far as path characters go.
fn named_paths(text: &str) -> Vec<(usize, String)> {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "_./*-{},".contains(c);
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (at, _) in line.char_indices() {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_./-~$".contains(c)) {
                continue;
            }
            let Some(tree) = TREES.iter().find(|t| line[at..].starts_with(**t)) else {
                continue;
            };
            let len = line[at..]
                .find(|c: char| !path_char(c))
                .unwrap_or(line.len() - at);
            let mut path = &line[at..at + len];
            // Sentence punctuation after a path is not part of it.
            while path.len() > tree.len()
                && path.ends_with(['.', ',', '}'])
                && !path.ends_with(".{")
            {
                if path.ends_with('}') && path.contains('{') {
                    break;
                }
                path = &path[..path.len() - 1];
            }
            found.push((n + 1, path.to_string()));
        }
    }
    found
}

/// `{a,b}` alternatives expanded.
fn expand_braces(path: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (path.find('{'), path.find('}')) else {
        return vec![path.to_string()];
    };
    path[open + 1..close]
        .split(',')
        .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &path[..open], &path[close + 1..])))
        .collect()
}

/// Whether `pattern` (a path, `*` matching within one name) names at least one file
/// or directory.
fn path_exists(pattern: &str) -> bool {
    if !pattern.contains('*') {
        return root().join(pattern).exists();
    }
    let (dir, name) = pattern.rsplit_once('/').unwrap_or(("", pattern));
    if dir.contains('*') {
        return false;
    }
    let (head, tail) = name.split_once('*').unwrap();
    std::fs::read_dir(root().join(dir)).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            file.len() >= head.len() + tail.len() && file.starts_with(head) && file.ends_with(tail)
        })
    })
}

/// The modules under src/ the docs name without the `src/` prefix (`store/mongo/feed.rs`).
const MODULES: [&str; 9] = [
    "model/",
    "store/",
    "engine/",
    "ops/",
    "cli/",
    "console/",
    "demo/",
    "metrics/",
    "contract/",
];

/// Paths named relative to src/: a word starting with one of [`MODULES`] that names a
/// Rust file or a directory (`store/mongo/`), outside links.
fn named_source_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (at, _) in line.char_indices() {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || "_./-~$(:".contains(c)) {
                continue;
            }
            if !MODULES.iter().any(|m| line[at..].starts_with(m)) {
                continue;
            }
            let len = line[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || "_./".contains(c)))
                .unwrap_or(line.len() - at);
            let path = line[at..at + len].trim_end_matches('.');
            if path.ends_with(".rs") || path.ends_with('/') {
                found.push((n + 1, format!("src/{path}")));
            }
        }
    }
    found
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = read(&file);
        let named = named_paths(&text)
            .into_iter()
            .chain(named_source_paths(&text));
        for (line, path) in named {
            for path in expand_braces(&path) {
                checked += 1;
                if !path_exists(&path) {
                    failures.push(format!("{}:{line}: {path}", file.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the scan broken?"
    );
    assert!(
        failures.is_empty(),
        "{} paths named in the docs do not exist:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The series names in a rendering in the Prometheus text format (`# TYPE` lines).
fn rendered_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every series the exporter and the engine register, from their registries rendered
/// with every series present (a vector with no labels set renders nothing).
fn registered_series() -> BTreeSet<String> {
    let engine = EngineMetrics::new().unwrap();
    let listener = engine.listener("shop.orders", "w1");
    listener.committed(Duration::from_millis(3), 0, 0);
    listener.lag(Duration::from_secs(2));
    let mut names = rendered_names(&encode(engine.registry()).unwrap());

    let cluster = ClusterMetrics::new().unwrap();
    let now = Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap();
    let secs = u32::try_from(now.timestamp()).unwrap();
    let mut lease = Lease::vacant("shop.orders");
    lease.holder = Some("w1".into());
    lease.version = 7;
    lease.expires_at = Some(now + chrono::TimeDelta::seconds(10));
    lease.committed_at = Some(now - chrono::TimeDelta::seconds(3));
    lease.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(secs - 120, 1),
        TokenKind::Event,
        1,
    ));
    let window = OplogWindow::new(ClusterTime::new(secs - 3600, 1), ClusterTime::new(secs, 1));
    let shards = vec![streamward::model::ShardOplog {
        name: "shard0".into(),
        ..shard_oplog(window)
    }];
    let topology = streamward::model::Topology {
        shards,
        ..streamward::model::Topology::new(
            streamward::model::Deployment::Sharded,
            streamward::model::OplogAccess::Readable,
        )
    };
    let loss = streamward::store::LossReading {
        predicted: HashMap::from([(
            "shop.orders".to_string(),
            TimeToLoss {
                earliest: LossTime::In(Duration::from_secs(900)),
                latest: Some(LossTime::Never),
                filling: false,
                missing: Vec::new(),
            },
        )]),
        unknown: None,
        unpredicted: HashMap::new(),
        pending: HashMap::from([(
            "shop.orders".to_string(),
            streamward::model::Pending::Counted(3),
        )]),
        pending_unknown: HashMap::new(),
        oplog: Some(streamward::model::OplogStats {
            size_bytes: 990_000,
            max_bytes: 1_048_576,
            entries: 4_000,
            written_bytes: Some(50_000_000),
            checkpoint_interval: None,
            min_retention: None,
            largest_entry_bytes: None,
            truncation_bytes: None,
        }),
        fill_rate: streamward::model::Rate::between(40_000.0, 52_500.0),
    };
    cluster.record(&ClusterSample {
        leases: &[lease],
        malformed: 0,
        window: Some(window),
        topology: Some(&topology),
        now,
        ops_per_sec: Some(12.5),
        thresholds: &HealthThresholds::default(),
        loss: &loss,
        capped: &Default::default(),
    });
    names.extend(rendered_names(&encode(cluster.registry()).unwrap()));
    names
}

fn shard_oplog(window: OplogWindow) -> streamward::model::ShardOplog {
    streamward::model::ShardOplog {
        name: String::new(),
        hosts: "rs0/db1:27017".into(),
        window: Ok(window),
    }
}

#[test]
fn docs_metrics_names_exactly_the_registered_series() {
    let registered = registered_series();
    assert!(registered.len() > 20, "{registered:?}");
    let doc = read(Path::new("docs/metrics.md"));
    let mut documented = BTreeSet::new();
    for (at, _) in doc.match_indices("streamward_") {
        if doc[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = doc[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // A histogram's series carry suffixes on its name.
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| registered.contains(*b)))
            .map_or(name.clone(), str::to_string);
        documented.insert(base);
    }
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&registered).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/metrics.md against the registries:\n  registered, not documented: \
         {undocumented:?}\n  documented, not registered: {unknown:?}"
    );
}

// ---------------------------------------------------------------- generated CLI reference

const CLI_REFERENCE: &str = "docs/reference/cli.md";
const BLESS: &str = "STREAMWARD_BLESS=1 cargo test --test docs_drift";

/// The CLI reference: every command's `--help`, from the same clap `Command` the man
/// page and the completions are generated from.
fn cli_reference() -> String {
    let mut command = Cli::command();
    command.build();
    let mut page = String::from(
        "# Command-line reference\n\n\
         <!-- Generated from the clap definitions (src/cli/) by tests/docs_drift.rs: do not \
         edit. Regenerate with `STREAMWARD_BLESS=1 cargo test --test docs_drift`. -->\n\n\
         Every command's `--help`, as `streamward COMMAND --help` prints it. The same \
         definitions give the man pages (`streamward man`) and the shell completions \
         (`streamward completions SHELL`). Exit codes are in [exit-codes.md](exit-codes.md), \
         the config file's keys in [streamward.toml](streamward.toml).\n\n",
    );
    let mut sections = Vec::new();
    collect_sections(&mut command, "streamward", &mut sections);
    for (name, _) in &sections {
        let depth = name.matches(' ').count();
        page.push_str(&format!(
            "{}- [`{name}`](#{})\n",
            "  ".repeat(depth.saturating_sub(1)),
            name.replace(' ', "-")
        ));
    }
    for (name, help) in sections {
        page.push_str(&format!(
            "\n## {name}\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
    }
    page
}

fn collect_sections(command: &mut clap::Command, name: &str, out: &mut Vec<(String, String)>) {
    let help = command.render_long_help().to_string();
    let help: String = help
        .lines()
        .map(|l| format!("{}\n", l.trim_end()))
        .collect();
    out.push((name.to_string(), help));
    let names: Vec<String> = command
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .map(|s| s.get_name().to_string())
        .collect();
    for sub in names {
        let command = command.find_subcommand_mut(&sub).unwrap();
        collect_sections(command, &format!("{name} {sub}"), out);
    }
}

#[test]
fn the_cli_reference_is_what_the_clap_definitions_generate() {
    let generated = cli_reference();
    let path = root().join(CLI_REFERENCE);
    if std::env::var_os("STREAMWARD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(generated.lines().count()));
        panic!(
            "{CLI_REFERENCE} is stale (first difference at line {}): regenerate it with\n\n    \
             {BLESS}\n\nand commit it.",
            first + 1
        );
    }
}

// ---------------------------------------------------------------- config file reference

const CONFIG_REFERENCE: &str = "docs/reference/streamward.toml";

#[test]
fn the_config_reference_sets_every_key_the_loader_knows() {
    let text = read(Path::new(CONFIG_REFERENCE));
    // The real parser: an unknown or misspelt key is an error (deny_unknown_fields).
    let file = ConfigFile::parse(&text).unwrap_or_else(|e| panic!("{CONFIG_REFERENCE}: {e}"));
    // A key the loader knows that the reference leaves out is a `None` in the parsed
    // file (every key is optional); a table counts once all its keys are set.
    let shown = format!("{file:?}");
    assert!(
        !shown.contains("None"),
        "{CONFIG_REFERENCE} leaves keys out (each None below):\n{file:#?}"
    );
    assert!(file.rebuilds.as_ref().is_some_and(|r| !r.is_empty()));
}

#[test]
fn the_config_reference_loads_and_shows_the_defaults() {
    let args = GlobalArgs {
        config: Some(root().join(CONFIG_REFERENCE)),
        ..GlobalArgs::default()
    };
    let settings = Settings::resolve(&args).unwrap_or_else(|e| panic!("{CONFIG_REFERENCE}: {e:#}"));
    // The keys with a default are set to it: the reference says what leaving one out means.
    assert_eq!(settings.leases, MongoSettings::default().leases, "leases");
    assert_eq!(
        settings.connect_timeout,
        MongoSettings::DEFAULT_SERVER_SELECTION_TIMEOUT,
        "connect_timeout"
    );
    assert_eq!(settings.output, OutputFormat::default(), "output");
    assert!(!settings.read_only, "read_only");
    assert_eq!(
        settings.thresholds,
        HealthThresholds::default(),
        "[thresholds]"
    );
    for (name, rebuild) in &settings.rebuilds {
        assert_eq!(
            rebuild.definition.limit,
            PipelineRebuild::DEFAULT_LIMIT,
            "rebuilds.{name}.timeout"
        );
    }
    // Unset, the theme is `default` (monochrome under NO_COLOR) and the profile is told
    // from the host names (MongoDB for any but Cosmos DB's): the reference shows those,
    // and they are ones the console and the store take.
    let theme = settings.theme.as_deref().expect("the reference sets theme");
    assert_eq!(theme, "default", "theme");
    streamward::console::theme::Theme::by_name(theme, None)
        .unwrap_or_else(|e| panic!("theme {theme:?} is not a built-in: {e}"));
    assert_eq!(
        settings.profile,
        Some(streamward::model::StreamProfile::MongoDb),
        "profile"
    );
}

// ---------------------------------------------------------------- statuses

#[test]
fn the_status_reference_lists_every_status_in_the_order_they_are_judged() {
    let text = read(Path::new("docs/reference/statuses.md"));
    let documented: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(label, _)| label.to_string())
        .collect();
    let statuses: Vec<String> = streamward::model::LeaseStatus::ALL
        .iter()
        .map(|s| s.label().to_string())
        .collect();
    assert_eq!(
        documented, statuses,
        "docs/reference/statuses.md's table, against LeaseStatus::ALL (worst first)"
    );
}

// ---------------------------------------------------------------- lengths

/// The entry pages stay short enough to read: facts go to the page they belong on
/// (docs/README.md maps them) and are linked from here.
#[test]
fn the_entry_pages_stay_short() {
    for (page, most) in [
        ("README.md", 200),
        ("docs/protocol.md", 500),
        ("docs/architecture.md", 300),
    ] {
        let lines = read(Path::new(page)).lines().count();
        assert!(
            lines <= most,
            "{page} has {lines} lines, more than {most}: move the detail to the page it \
             belongs on (docs/README.md) and link to it"
        );
    }
}

/// The README calls `bash scripts/test.sh` the whole test suite: a test crate that
/// needs a feature outside the default (its `required-features` in Cargo.toml) is
/// built only when the script's `cargo test` asks for that feature, so it must.
#[test]
fn the_test_command_builds_every_test_crate() {
    let manifest: toml::Table = read(Path::new("Cargo.toml")).parse().expect("Cargo.toml");
    let list = |value: Option<&toml::Value>| -> Vec<String> {
        value
            .and_then(toml::Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let features = manifest["features"].as_table().expect("[features]");
    let default = list(features.get("default"));
    let script = read(Path::new("scripts/test.sh"));
    let command = script
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with("cargo test"))
        .expect("scripts/test.sh runs cargo test");
    let words: Vec<&str> = command.split_whitespace().collect();
    let asked: Vec<&str> = words
        .windows(2)
        .filter(|w| w[0] == "--features")
        .flat_map(|w| w[1].split(','))
        .collect();
    let every = words.contains(&"--all-features");
    let tests = manifest
        .get("test")
        .and_then(toml::Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut left_out = Vec::new();
    for test in &tests {
        let name = test
            .get("name")
            .and_then(toml::Value::as_str)
            .unwrap_or("?");
        for feature in list(test.get("required-features")) {
            if !every && !default.contains(&feature) && !asked.contains(&feature.as_str()) {
                left_out.push(format!("{name} needs `{feature}`"));
            }
        }
    }
    assert!(
        left_out.is_empty(),
        "scripts/test.sh ({command}) does not build: {}",
        left_out.join(", ")
    );
}
