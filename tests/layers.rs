//! The house's walls, read from the source: which top-level module may import which,
//! no import circle between the files of one module, and no long file without its
//! reason. The cargo features enforce what can be compiled apart (`.ci/run` builds each
//! documented feature set); these check the rest (docs/architecture.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module and what it may import, lowest first.
const LAYERS: [(&str, &[&str]); 9] = [
    ("model", &[]),
    ("store", &["model"]),
    ("engine", &["model", "store"]),
    ("ops", &["model", "store"]),
    ("observe", &["model", "store"]),
    ("metrics", &["model", "store", "engine"]),
    ("demo", &["model", "store", "engine", "ops", "metrics"]),
    (
        "console",
        &[
            "model", "store", "engine", "ops", "observe", "metrics", "demo",
        ],
    ),
    (
        "cli",
        &[
            "model", "store", "engine", "ops", "observe", "metrics", "demo", "console",
        ],
    ),
];

/// The circles between files of one module that are there today, each listed whole: the
/// list may only shrink (a circle broken must leave it; a new one fails the test).
const KNOWN_CIRCLES: [&[&str]; 7] = [
    &["model::balance", "model::membership"],
    &[
        "model::failure",
        "model::lease",
        "model::resume_token",
        "model::source",
    ],
    &["model::health", "model::time_to_loss"],
    &[
        "ops::audited",
        "ops::describe",
        "ops::execute",
        "ops::plan",
        "ops::skip",
    ],
    &["store::capped_loss", "store::oplog_figures"],
    &["store::checkpoints", "store::leases", "store::skipped"],
    &[
        "store::error",
        "store::event_details",
        "store::feed",
        "store::raw_event",
    ],
];

/// A file over this many lines says why at its top (a line starting `// Long:`).
const LONG_FILE: usize = 700;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The file's code as built outside tests: comments dropped, and everything from its
/// unit-test module on (tests may use what the module may not).
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a source file");
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod tests"))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line.split(" // ").next().unwrap_or(line));
        code.push('\n');
    }
    code
}

/// The module path of a file under src/: `engine/listener.rs` is `["engine", "listener"]`,
/// `console/state/mod.rs` is `["console", "state"]`.
fn module_path(path: &Path) -> Vec<String> {
    let relative = path.strip_prefix(src()).expect("under src");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The paths a use tree at the start of `text` names (`a::b::{c, d::e}` names `a::b::c`
/// and `a::b::d::e`), as module segments; a path used in an expression names one.
fn use_tree(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        let segment: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !segment.is_empty() {
            rest = &rest[segment.len()..];
            prefix.push(segment);
            match rest.strip_prefix("::") {
                Some(after) => rest = after,
                None => return vec![prefix],
            }
            continue;
        }
        let Some(inner) = rest.strip_prefix('{') else {
            return if prefix.is_empty() {
                vec![]
            } else {
                vec![prefix]
            };
        };
        // The group's items, split at its own commas.
        let (mut depth, mut from, mut items) = (0usize, 0usize, Vec::new());
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&inner[from..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[from..i]);
                    from = i + 1;
                }
                _ => {}
            }
        }
        return items
            .into_iter()
            .flat_map(|item| use_tree(item.trim_start()))
            .map(|tail| prefix.iter().cloned().chain(tail).collect())
            .collect();
    }
}

/// The paths `code` names after `crate::`, as module segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `$crate::` in a macro, or part of a longer name
        }
        found.extend(use_tree(&code[at + "crate::".len()..]));
    }
    found
}

/// The paths `code` names after `super::` (any number of them), resolved from `module`.
fn super_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("::") || code[..at].ends_with(|c: char| c.is_alphanumeric()) {
            continue; // counted from the first `super::` of a chain
        }
        let mut rest = &code[at..];
        // `engine/listener.rs`'s `super` is `engine`; `engine/mod.rs`'s is the crate.
        let mut base: Vec<String> = module.to_vec();
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
        }
        for tail in use_tree(rest) {
            found.push(base.iter().cloned().chain(tail).collect());
        }
    }
    found
}

#[test]
fn each_top_level_module_imports_only_the_layers_below_it() {
    let layers: BTreeMap<&str, &[&str]> = LAYERS.into_iter().collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut wrong = Vec::new();
    for path in &files {
        let module = module_path(path);
        let Some(top) = module.first() else { continue };
        let Some(allowed) = layers.get(top.as_str()) else {
            continue; // lib.rs and main.rs
        };
        let code = production_code(path);
        let mut named_paths = crate_paths(&code);
        named_paths.extend(super_paths(&module, &code));
        for named in named_paths {
            let Some(target) = named.first().map(String::as_str) else {
                continue;
            };
            if target != top && layers.contains_key(target) && !allowed.contains(&target) {
                wrong.push(format!(
                    "{} imports crate::{}",
                    path.strip_prefix(src()).unwrap().display(),
                    named.join("::")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "upward or sideways imports (see LAYERS):\n{}",
        wrong.join("\n")
    );
}

/// What each module re-exports from its children (`pub use feed::ChangeEvent;` in
/// `store/mod.rs`): `(["store"], "ChangeEvent")` → `["store", "feed"]`, so that a sibling
/// naming `super::ChangeEvent` is counted as importing `feed`.
fn re_exports(files: &[PathBuf]) -> BTreeMap<(Vec<String>, String), Vec<String>> {
    let mut found = BTreeMap::new();
    for path in files {
        let module = module_path(path);
        let code = production_code(path);
        // Each statement whole, whatever lines it spans.
        for statement in code.split(';') {
            let statement = statement.trim_start();
            let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
                .iter()
                .find_map(|prefix| statement.strip_prefix(prefix))
            else {
                continue;
            };
            if rest.starts_with("crate::") || rest.starts_with("super::") {
                continue;
            }
            let rest: String = rest.split_whitespace().collect();
            for used in use_tree(&rest) {
                if let (Some(child), Some(name)) = (used.first(), used.last()) {
                    let mut from = module.clone();
                    from.push(child.clone());
                    found.insert((module.clone(), name.clone()), from);
                }
            }
        }
    }
    found
}

#[test]
fn no_two_files_of_one_module_import_each_other() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|p| module_path(p)).collect();
    let exported = re_exports(&files);
    // Which sibling module each module's code names, counting a nested file's imports
    // as its ancestors' (`ops/plan/skip.rs` naming `ops::describe` is `ops::plan`
    // importing `ops::describe`).
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for path in &files {
        let module = module_path(path);
        let code = production_code(path);
        let mut named = crate_paths(&code);
        named.extend(super_paths(&module, &code));
        for mut target in named {
            // A name the target's parent re-exports from one of its children.
            for depth in (1..target.len()).rev() {
                let key = (target[..depth].to_vec(), target[depth].clone());
                if !modules.contains(&target[..=depth]) {
                    if let Some(child) = exported.get(&key) {
                        let mut resolved = child.clone();
                        resolved.extend(target[depth + 1..].iter().cloned());
                        target = resolved;
                        break;
                    }
                }
            }
            for level in 2..=module.len() {
                if target.len() < level || target[..level - 1] != module[..level - 1] {
                    continue;
                }
                let (from, to) = (module[..level].to_vec(), target[..level].to_vec());
                if from != to && modules.contains(&to) {
                    edges.entry(from).or_default().insert(to);
                }
            }
        }
    }
    // A circle: the files that reach one another through their imports.
    let reaches = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&Vec<String>> = edges.get(from).into_iter().flatten().collect();
        while let Some(next) = stack.pop() {
            if seen.insert(next.clone()) {
                stack.extend(edges.get(next).into_iter().flatten());
            }
        }
        seen
    };
    let mut circles: BTreeSet<Vec<String>> = BTreeSet::new();
    for from in edges.keys() {
        let reached = reaches(from);
        if reached.contains(from) {
            let circle: Vec<String> = reached
                .iter()
                .filter(|other| reaches(other).contains(from))
                .map(|m| m.join("::"))
                .collect();
            circles.insert(circle);
        }
    }
    let known: BTreeSet<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| c.iter().map(|m| m.to_string()).collect())
        .collect();
    let new: Vec<String> = circles.difference(&known).map(|c| c.join(", ")).collect();
    let gone: Vec<String> = known.difference(&circles).map(|c| c.join(", ")).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "files of one module that import each other, not in KNOWN_CIRCLES:\n{}\n\
         in KNOWN_CIRCLES and no longer a circle (take them out):\n{}",
        new.join("\n"),
        gone.join("\n")
    );
}

#[test]
fn a_long_file_says_why_at_its_top() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut unexplained = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a source file");
        let lines = text.lines().count();
        let says_why = text.lines().take(5).any(|l| l.starts_with("// Long:"));
        if lines > LONG_FILE && !says_why {
            unexplained.push(format!(
                "{} ({lines} lines)",
                path.strip_prefix(src()).unwrap().display()
            ));
        }
    }
    assert!(
        unexplained.is_empty(),
        "files over {LONG_FILE} lines with no `// Long:` line at their top:\n{}",
        unexplained.join("\n")
    );
}
