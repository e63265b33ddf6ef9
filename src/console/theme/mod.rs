//! The console's themes: named sets of semantic styles.
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
//!
//! Which theme: see [`ThemeChoice`]. Under `NO_COLOR` every theme is shown through
//! [`Theme::without_colour`].

mod catalog;
mod choice;
mod error;
mod file;
mod spec;
#[cfg(test)]
mod testing;

use std::path::Path;

use ratatui::style::{Color, Modifier, Style};

pub use catalog::available;
pub use choice::ThemeChoice;
pub use error::{ChosenBy, Position, ThemeError, ThemeSource};

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
    /// The selected row. Must stay visible without colour (see `without_colour`).
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

    /// The same theme for a terminal that must not show colour (`NO_COLOR`): every
    /// colour becomes `Color::Reset` and the modifiers stay, and the selection is
    /// `REVERSED` so it stays visible.
    ///
    /// Why Reset and not just fewer colours: under `NO_COLOR` crossterm writes every
    /// colour change as a full SGR reset, and ratatui writes modifiers before colours,
    /// so any colour change would wipe the reverse and bold just written. With every
    /// colour `Reset`, ratatui never writes a colour at all.
    pub fn without_colour(&self) -> Theme {
        let mut theme = Theme::plain(&self.name);
        let styles = self.styles();
        for (i, style) in theme.styles_mut().into_iter().enumerate() {
            *style = colourless(styles[i].1);
        }
        // `add_modifier` also drops REVERSED from the modifiers the style removes.
        theme.selection = theme.selection.add_modifier(Modifier::REVERSED);
        theme
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

    fn styles_mut(&mut self) -> [&mut Style; 16] {
        let s = self;
        [
            &mut s.base,
            &mut s.muted,
            &mut s.title,
            &mut s.border,
            &mut s.border_focused,
            &mut s.accent,
            &mut s.header,
            &mut s.selection,
            &mut s.ok,
            &mut s.warn,
            &mut s.danger,
            &mut s.stale,
            &mut s.notice,
            &mut s.gauge_filled,
            &mut s.gauge_empty,
            &mut s.key_hint,
        ]
    }
}

/// `style` with its modifiers and with `Reset` for every colour it set.
fn colourless(style: Style) -> Style {
    let reset = |colour: Option<Color>| colour.map(|_| Color::Reset);
    Style {
        fg: reset(style.fg),
        bg: reset(style.bg),
        add_modifier: style.add_modifier,
        sub_modifier: style.sub_modifier,
        // The underline colour, where ratatui has one, is left unset.
        ..Style::default()
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

    #[test]
    fn without_colour_keeps_only_modifiers_and_reverses_the_selection() {
        for name in available(None) {
            let theme = Theme::by_name(&name, None).unwrap();
            let plain = theme.without_colour();
            assert_eq!(plain.name, theme.name);
            for ((key, before), (_, after)) in theme.styles().into_iter().zip(plain.styles()) {
                for colour in [after.fg, after.bg].into_iter().flatten() {
                    assert_eq!(colour, Color::Reset, "{name}.{key}");
                }
                assert_eq!(after.fg.is_some(), before.fg.is_some(), "{name}.{key}");
                assert_eq!(after.bg.is_some(), before.bg.is_some(), "{name}.{key}");
                let mut expected = before.add_modifier;
                if key == "selection" {
                    expected |= Modifier::REVERSED;
                }
                assert_eq!(after.add_modifier, expected, "{name}.{key}");
            }
            assert_eq!(plain.without_colour(), plain, "{name}: idempotent");
        }
    }

    /// Draws `base`-patched rows through the real crossterm backend and returns the bytes.
    fn crossterm_bytes(theme: &Theme) -> Vec<u8> {
        use ratatui::backend::{Backend, CrosstermBackend};
        use ratatui::buffer::Buffer;
        use ratatui::layout::Rect;

        let mut buffer = Buffer::empty(Rect::new(0, 0, 12, 3));
        let rows = [
            ("title", theme.title),
            ("selected", theme.selection),
            ("danger", theme.danger),
        ];
        for (y, (text, style)) in (0..).zip(rows) {
            buffer.set_string(0, y, text, theme.base.patch(style));
        }
        let mut bytes = Vec::new();
        {
            let mut backend = CrosstermBackend::new(&mut bytes);
            let cells = buffer.content.iter().enumerate().map(|(i, cell)| {
                let (x, y) = buffer.pos_of(i);
                (x, y, cell)
            });
            backend.draw(cells).unwrap();
            Backend::flush(&mut backend).unwrap();
        }
        bytes
    }

    /// The SGR parameters that set or reset a foreground, background or underline colour
    /// before the last printed text. (ratatui ends every draw with colour and attribute
    /// resets; with nothing printed after them, they wipe nothing.)
    fn colour_commands(bytes: &[u8]) -> Vec<String> {
        let mut text = String::from_utf8_lossy(bytes).into_owned();
        while let Some(start) = text.rfind("\x1b[") {
            let params = &text[start + 2..];
            let Some(params) = params.strip_suffix('m') else {
                break;
            };
            if !params.bytes().all(|b| b.is_ascii_digit() || b == b';') {
                break;
            }
            text.truncate(start);
        }
        text.split("\x1b[")
            .filter_map(|sequence| sequence.split_once('m').map(|(params, _)| params))
            .filter(|params| params.bytes().all(|b| b.is_ascii_digit() || b == b';'))
            .filter(|params| {
                params
                    .split(';')
                    .any(|p| matches!(p, "38" | "39" | "48" | "49" | "58" | "59"))
            })
            .map(str::to_string)
            .collect()
    }

    /// Under NO_COLOR crossterm writes every colour command as a full reset (`ESC[m`)
    /// after ratatui has written the modifiers. A theme that makes ratatui write no
    /// colour command at all has nothing to be wiped: checked here on the bytes, and
    /// the selection checked as a terminal would show it.
    #[test]
    fn colourless_themes_write_no_colour_commands_and_a_visible_selection() {
        let dark = Theme::by_name("dark", None).unwrap();
        assert!(
            !colour_commands(&crossterm_bytes(&dark)).is_empty(),
            "the check sees colours"
        );

        let mut themes: Vec<Theme> = available(None)
            .iter()
            .map(|name| Theme::by_name(name, None).unwrap().without_colour())
            .collect();
        themes.push(Theme::by_name("monochrome", None).unwrap());
        for theme in themes {
            let bytes = crossterm_bytes(&theme);
            assert_eq!(
                colour_commands(&bytes),
                Vec::<String>::new(),
                "{}",
                theme.name
            );
            let mut terminal = vt100::Parser::new(3, 12, 0);
            terminal.process(&bytes);
            let screen = terminal.screen();
            assert_eq!(screen.contents_between(1, 0, 1, 8), "selected");
            for column in 0..8 {
                let cell = screen.cell(1, column).unwrap();
                assert!(
                    cell.inverse(),
                    "{}: column {column} not reversed",
                    theme.name
                );
            }
        }
        let monochrome = crossterm_bytes(&Theme::by_name("monochrome", None).unwrap());
        let mut terminal = vt100::Parser::new(3, 12, 0);
        terminal.process(&monochrome);
        let danger = terminal.screen().cell(2, 0).unwrap();
        assert!(danger.bold() && danger.underline() && !danger.inverse());
    }

    #[test]
    fn without_colour_undoes_a_removed_reverse_on_the_selection() {
        let mut theme = Theme::plain("odd");
        theme.selection = Style::default()
            .fg(Color::Rgb(1, 2, 3))
            .remove_modifier(Modifier::REVERSED | Modifier::BOLD);
        let plain = theme.without_colour();
        assert_eq!(plain.selection.fg, Some(Color::Reset));
        assert_eq!(plain.selection.add_modifier, Modifier::REVERSED);
        assert_eq!(plain.selection.sub_modifier, Modifier::BOLD);
    }
}
