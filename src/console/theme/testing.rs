//! A throwaway user theme directory for tests, removed when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct TempThemeDir {
    path: PathBuf,
}

impl TempThemeDir {
    pub fn new() -> TempThemeDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "streamward-theme-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // A leftover from an earlier process with the same id would hold stale files.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempThemeDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `<name>.toml` and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempThemeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
