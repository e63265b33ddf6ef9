//! The console's themes (DESIGN §6): named sets of semantic styles.
//!
//! A theme file (`themes/*.toml`, compiled in, or `<config dir>/streamward/themes/NAME.toml`)
//! has an optional `name`, an optional `parent`, and one table per semantic key:
//!
//! ```toml
//! name = "mine"
//! parent = "default"   # every key not set here comes from the parent
//!
//! [selection]
//! fg = "black"         # a named colour, "reset", "#rrggbb" or "ansi:NNN"
//! bg = "cyan"
//! modifiers = ["bold"] # bold, dim, italic, underlined, reversed, crossed_out, slow_blink
//! ```
//!
//! A table replaces the parent's style for that key as a whole. A key that neither the
//! file nor any parent sets is plain text. Anything unknown is an error naming the file
//! and line; no theme ever falls back to another one silently.

mod catalog;
mod error;
mod file;
mod spec;
#[cfg(test)]
mod testing;

use std::path::Path;

use ratatui::style::Style;

pub use catalog::available;
pub use error::{Position, ThemeError, ThemeSource};

/// A theme: one style per meaning. Widgets patch these over [`Theme::base`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Theme {
    /// The theme's name, as `:theme NAME` and `--theme` take it.
    pub name: String,
    /// Everything's starting point: the screen's text and background.
    pub base: Style,
    /// Secondary text: units, column separators, empty-state hints.
    pub muted: Style,
    /// Block and screen titles.
    pub title: Style,
    /// Borders of blocks that do not have focus.
    pub border: Style,
    /// The border of the block that has focus.
    pub border_focused: Style,
    /// Things to notice at a glance: the current view's tab, a matched filter.
    pub accent: Style,
    /// Table column headings and the labels of the header lines.
    pub header: Style,
    /// The selected row.
    pub selection: Style,
    /// Healthy status.
    pub ok: Style,
    /// Status that needs a look: behind, at risk.
    pub warn: Style,
    /// Status that needs action, and dangerous actions in dialogs.
    pub danger: Style,
    /// Data that is no longer live (the connection is lost).
    pub stale: Style,
    /// Messages in the status line.
    pub notice: Style,
    /// The filled part of a bar (headroom against the oplog window).
    pub gauge_filled: Style,
    /// The empty part of a bar.
    pub gauge_empty: Style,
    /// Keys in hints and help.
    pub key_hint: Style,
}

impl Theme {
    /// The semantic keys, as theme files spell them, in the order of [`Theme::styles`].
    pub const KEYS: [&'static str; 16] = [
        "base",
        "muted",
        "title",
        "border",
        "border_focused",
        "accent",
        "header",
        "selection",
        "ok",
        "warn",
        "danger",
        "stale",
        "notice",
        "gauge_filled",
        "gauge_empty",
        "key_hint",
    ];

    /// The theme called `name`: the user's `<user_dir>/<name>.toml` if there is one,
    /// else the built-in. For `:theme NAME`.
    pub fn by_name(name: &str, user_dir: Option<&Path>) -> Result<Theme, ThemeError> {
        catalog::load(name, user_dir)
    }

    /// Every style with its key, in the order of [`Theme::KEYS`].
    pub fn styles(&self) -> [(&'static str, Style); 16] {
        let s = self;
        let styles = [
            s.base,
            s.muted,
            s.title,
            s.border,
            s.border_focused,
            s.accent,
            s.header,
            s.selection,
            s.ok,
            s.warn,
            s.danger,
            s.stale,
            s.notice,
            s.gauge_filled,
            s.gauge_empty,
            s.key_hint,
        ];
        std::array::from_fn(|i| (Self::KEYS[i], styles[i]))
    }

    /// A theme called `name` whose every style is plain text.
    fn plain(name: &str) -> Theme {
        let plain = Style::default();
        Theme {
            name: name.to_string(),
            base: plain,
            muted: plain,
            title: plain,
            border: plain,
            border_focused: plain,
            accent: plain,
            header: plain,
            selection: plain,
            ok: plain,
            warn: plain,
            danger: plain,
            stale: plain,
            notice: plain,
            gauge_filled: plain,
            gauge_empty: plain,
            key_hint: plain,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_styles_agree() {
        let theme = Theme::by_name("default", None).unwrap();
        let styles = theme.styles();
        assert_eq!(styles.map(|(key, _)| key), Theme::KEYS);
        assert_eq!(styles[7].1, theme.selection);
        assert_eq!(styles[15].1, theme.key_hint);
    }
}
