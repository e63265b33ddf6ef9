//! Files of the repository, as tests that read the source or the docs walk them.

use std::path::{Path, PathBuf};

/// Every file under `dir` whose name ends in `.{extension}`, at any depth, in path order.
pub fn with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    walk(dir, extension, &mut found);
    found
}

fn walk(dir: &Path, extension: &str, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, extension, found);
        } else if path.extension().is_some_and(|e| e == extension) {
            found.push(path);
        }
    }
}
