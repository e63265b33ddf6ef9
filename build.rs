//! Puts the commit the binary was built from into `--version`: `STREAMWARD_COMMIT` is
//! `git rev-parse --short HEAD`, or "unknown" outside a git checkout or without git.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=STREAMWARD_COMMIT={commit}");
    println!("cargo:rerun-if-env-changed=GIT_DIR");
    // Rebuild when HEAD moves: HEAD itself (another branch checked out), the branch it
    // points at (a commit), and packed refs. A path that does not exist would make
    // cargo rerun this script on every build, so only existing ones are named; outside
    // a checkout nothing is named and the script runs once.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if commit == "unknown" {
        println!("cargo:rerun-if-changed=build.rs");
    }
}
