//! What can go wrong finding, reading or parsing a theme, and where it went wrong.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

/// Where a theme's text came from: compiled in, or a file in the user's theme directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThemeSource {
    /// `themes/<name>.toml` in this crate, compiled in.
    BuiltIn(&'static str),
    /// A file in the user's theme directory.
    User(PathBuf),
}

impl fmt::Display for ThemeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThemeSource::BuiltIn(name) => write!(f, "themes/{name}.toml (built in)"),
            ThemeSource::User(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A 1-based line and column (in characters) in a theme file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` in `text`; an offset past the end or inside a
    /// character counts up to there.
    pub fn of_offset(text: &str, offset: usize) -> Position {
        let before = &text.as_bytes()[..offset.min(text.len())];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |newline| newline + 1);
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        // Count characters, not bytes: skip UTF-8 continuation bytes.
        let column = 1 + before[line_start..]
            .iter()
            .filter(|&&b| b & 0xC0 != 0x80)
            .count();
        Position { line, column }
    }
}

/// Which setting chose a theme, so an error says where to fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    Flag,
    Env,
    Config,
}

impl fmt::Display for ChosenBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChosenBy::Flag => "--theme",
            ChosenBy::Env => "STREAMWARD_THEME",
            ChosenBy::Config => "the config file's theme",
        })
    }
}

/// Every way getting a theme can fail. None of them falls back to another theme.
#[derive(Debug, Error)]
pub enum ThemeError {
    /// The file does not parse, or says something invalid (an unknown colour, key or
    /// parent, a `name` that is not the file's).
    #[error("theme file {file}{}: {message}", at_position(.position))]
    Invalid {
        file: ThemeSource,
        position: Option<Position>,
        message: String,
    },
    /// No built-in or user theme has this name.
    #[error("unknown theme \"{name}\" (available: {})", .available.join(", "))]
    Unknown {
        name: String,
        available: Vec<String>,
    },
    /// Following `parent` came back to a theme already on the way.
    #[error("theme parents form a cycle: {}", .chain.join(" -> "))]
    ParentCycle { chain: Vec<String> },
    /// The user's theme file exists but cannot be read. The cause is in the message,
    /// not a `source`, so an error chain printed with `{:#}` says it once.
    #[error("cannot read theme file {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The theme named by `by` could not be had.
    #[error("theme from {by}: {error}")]
    Chosen {
        by: ChosenBy,
        error: Box<ThemeError>,
    },
}

fn at_position(position: &Option<Position>) -> String {
    match position {
        Some(Position { line, column }) => format!(", line {line}, column {column}"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_character_columns() {
        let text = "a = 1\nbé = \"x\"\n\nlast";
        assert_eq!(
            Position::of_offset(text, 0),
            Position { line: 1, column: 1 }
        );
        assert_eq!(
            Position::of_offset(text, 4),
            Position { line: 1, column: 5 }
        );
        // After "bé" (3 bytes), the column counts 2 characters.
        assert_eq!(
            Position::of_offset(text, 9),
            Position { line: 2, column: 3 }
        );
        assert_eq!(
            Position::of_offset(text, 16),
            Position { line: 3, column: 1 }
        );
        assert_eq!(
            Position::of_offset(text, 17),
            Position { line: 4, column: 1 }
        );
        // Past the end and inside a character do not panic.
        assert_eq!(
            Position::of_offset(text, 999),
            Position { line: 4, column: 5 }
        );
        assert_eq!(
            Position::of_offset(text, 8),
            Position { line: 2, column: 3 }
        );
    }
}
