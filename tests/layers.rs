//! The house's walls, read from the source: which top-level module may import which,
//! no import circle between the files of one module, and no long file without its
//! reason. The cargo features enforce what can be compiled apart (`.ci/run` builds each
//! documented feature set); these check the rest (docs/architecture.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod support;

/// Each top-level module and what it may import, lowest first.
const LAYERS: [(&str, &[&str]); 10] = [
    ("model", &[]),
    ("store", &["model"]),
    ("contract", &["model", "store"]),
    ("engine", &["model", "store"]),
    ("ops", &["model", "store"]),
    ("observe", &["model", "store"]),
    ("metrics", &["model", "store", "engine"]),
    (
        "demo",
        &["model", "store", "engine", "ops", "metrics", "contract"],
    ),
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

/// A file over this many lines says why at its top (a line starting `// Long:`).
const LONG_FILE: usize = 700;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Whether `line` is a `#[cfg(...)]` that holds only under test (`#[cfg(test)]`,
/// `#[cfg(all(test, feature = "sandbox"))]`).
fn is_test_cfg(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("#[cfg(") && line.contains("test") && !line.contains("not(test")
}

/// The module a `mod` line declares, if it is one.
fn declared_module(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = ["mod ", "pub mod ", "pub(crate) mod ", "pub(super) mod "]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix))?;
    Some(rest.trim_end_matches(|c: char| c == ';' || c == '{' || c.is_whitespace()))
}

/// The code of a file as built outside tests: comments dropped, and every module that
/// exists only under test left out (an inline `mod tests { … }` here; one in a file of
/// its own is left out by [`production_files`]).
fn production_code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a source file");
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if is_test_cfg(line) {
            let Some(next) = lines.peek().copied() else {
                break;
            };
            if declared_module(next).is_some() {
                lines.next();
                if next.trim_end().ends_with('{') {
                    // Skip the inline module to its closing brace.
                    let mut depth = 1i32;
                    for inner in lines.by_ref() {
                        depth += inner.matches('{').count() as i32;
                        depth -= inner.matches('}').count() as i32;
                        if depth <= 0 {
                            break;
                        }
                    }
                }
                continue;
            }
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line.split(" // ").next().unwrap_or(line));
        code.push('\n');
    }
    code
}

/// Every source file that is built outside tests: not one a `#[cfg(test)] mod name;`
/// declares, nor any file below such a module.
fn production_files() -> Vec<PathBuf> {
    let files = support::files::with_extension(&src(), "rs");
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a source file");
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if !is_test_cfg(line) {
                continue;
            }
            if let Some(name) = lines.peek().copied().and_then(declared_module) {
                let mut module = module_path(path);
                module.push(name.to_string());
                test_only.insert(module);
            }
        }
    }
    files
        .into_iter()
        .filter(|path| {
            let module = module_path(path);
            !test_only
                .iter()
                .any(|test| module.len() >= test.len() && module[..test.len()] == test[..])
        })
        .collect()
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
    let files = production_files();
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
    let files = production_files();
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
    assert!(
        circles.is_empty(),
        "files of one module that import each other:\n{}",
        circles
            .iter()
            .map(|c| c.join(", "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn a_long_file_says_why_at_its_top() {
    let files = support::files::with_extension(&src(), "rs");
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
