//! One theme file: its TOML shape, read strictly, with errors that name the file and line.

use ratatui::style::Style;
use serde::Deserialize;
use toml::Spanned;

use super::error::{Position, ThemeError, ThemeSource};
use super::spec::{ColourSpec, ModifierSpec};
use super::Theme;

/// One `[key]` table: everything optional; an empty table is the terminal's plain text.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StyleSpec {
    pub fg: Option<ColourSpec>,
    pub bg: Option<ColourSpec>,
    #[serde(default)]
    pub modifiers: Vec<ModifierSpec>,
}

impl StyleSpec {
    pub fn style(&self) -> Style {
        let style = Style {
            fg: self.fg.map(|c| c.0),
            bg: self.bg.map(|c| c.0),
            ..Style::default()
        };
        self.modifiers
            .iter()
            .fold(style, |style, modifier| style.add_modifier(modifier.0))
    }
}

/// A theme file as written. Keys must be the field names of [`Theme`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThemeFile {
    /// Optional; when given it must be the file's name without `.toml`.
    pub name: Option<Spanned<String>>,
    /// The theme that supplies every key this file does not set.
    pub parent: Option<Spanned<String>>,
    pub base: Option<StyleSpec>,
    pub muted: Option<StyleSpec>,
    pub title: Option<StyleSpec>,
    pub border: Option<StyleSpec>,
    pub border_focused: Option<StyleSpec>,
    pub accent: Option<StyleSpec>,
    pub header: Option<StyleSpec>,
    pub selection: Option<StyleSpec>,
    pub ok: Option<StyleSpec>,
    pub warn: Option<StyleSpec>,
    pub danger: Option<StyleSpec>,
    pub stale: Option<StyleSpec>,
    pub notice: Option<StyleSpec>,
    pub gauge_filled: Option<StyleSpec>,
    pub gauge_empty: Option<StyleSpec>,
    pub key_hint: Option<StyleSpec>,
}

/// A parsed theme file with what is needed to report a later problem in it.
#[derive(Debug, Clone)]
pub struct LoadedFile {
    pub source: ThemeSource,
    pub text: String,
    pub file: ThemeFile,
}

impl LoadedFile {
    /// Parses `text`, read from `source`, as the theme called `name`.
    pub fn parse(name: &str, source: ThemeSource, text: String) -> Result<LoadedFile, ThemeError> {
        let file: ThemeFile = match toml::from_str(&text) {
            Ok(file) => file,
            Err(error) => {
                return Err(ThemeError::Invalid {
                    position: error
                        .span()
                        .map(|span| Position::of_offset(&text, span.start)),
                    message: one_line(error.message()),
                    file: source,
                })
            }
        };
        let loaded = LoadedFile { source, text, file };
        if let Some(declared) = &loaded.file.name {
            if declared.get_ref() != name {
                return Err(loaded.error_at(
                    declared,
                    format!(
                        "name \"{}\" is not the file's name; this theme is called \"{name}\" \
                         after its file (change or remove `name`)",
                        declared.get_ref()
                    ),
                ));
            }
        }
        Ok(loaded)
    }

    /// An error about `value` in this file.
    pub fn error_at<T>(&self, value: &Spanned<T>, message: String) -> ThemeError {
        ThemeError::Invalid {
            file: self.source.clone(),
            position: Some(Position::of_offset(&self.text, value.span().start)),
            message,
        }
    }

    /// Sets on `theme` every key this file sets, replacing the whole style of that key;
    /// keys it does not set keep what `theme` already has (its parent's).
    pub fn apply_to(&self, theme: &mut Theme) {
        let f = &self.file;
        let t = theme;
        for (spec, style) in [
            (&f.base, &mut t.base),
            (&f.muted, &mut t.muted),
            (&f.title, &mut t.title),
            (&f.border, &mut t.border),
            (&f.border_focused, &mut t.border_focused),
            (&f.accent, &mut t.accent),
            (&f.header, &mut t.header),
            (&f.selection, &mut t.selection),
            (&f.ok, &mut t.ok),
            (&f.warn, &mut t.warn),
            (&f.danger, &mut t.danger),
            (&f.stale, &mut t.stale),
            (&f.notice, &mut t.notice),
            (&f.gauge_filled, &mut t.gauge_filled),
            (&f.gauge_empty, &mut t.gauge_empty),
            (&f.key_hint, &mut t.key_hint),
        ] {
            if let Some(spec) = spec {
                *style = spec.style();
            }
        }
    }
}

/// The TOML reader's message on one line, so it fits a status line: syntax errors
/// come as "invalid string\nexpected `\"`, `'`".
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use ratatui::style::{Color, Modifier};

    use super::*;

    fn user(path: &str) -> ThemeSource {
        ThemeSource::User(PathBuf::from(path))
    }

    fn parse(text: &str) -> Result<LoadedFile, ThemeError> {
        LoadedFile::parse("mine", user("/home/u/themes/mine.toml"), text.to_string())
    }

    fn error_text(text: &str) -> String {
        match parse(text) {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn a_table_becomes_a_style() {
        let loaded = parse(
            "name = \"mine\"\n[selection]\nfg = \"black\"\nbg = \"#00ff80\"\nmodifiers = [\"bold\", \"reversed\"]\n",
        )
        .unwrap();
        let mut theme = Theme::plain("mine");
        loaded.apply_to(&mut theme);
        assert_eq!(
            theme.selection,
            Style::default()
                .fg(Color::Black)
                .bg(Color::Rgb(0, 0xff, 0x80))
                .add_modifier(Modifier::BOLD | Modifier::REVERSED)
        );
        assert_eq!(theme.base, Style::default());
    }

    #[test]
    fn every_key_lands_in_the_field_of_its_name() {
        let text: String = Theme::KEYS
            .iter()
            .enumerate()
            .map(|(i, key)| format!("[{key}]\nfg = \"ansi:{i}\"\n"))
            .collect();
        let mut theme = Theme::plain("mine");
        parse(&text).unwrap().apply_to(&mut theme);
        for (i, (key, style)) in theme.styles().into_iter().enumerate() {
            assert_eq!(key, Theme::KEYS[i]);
            assert_eq!(style.fg, Some(Color::Indexed(i as u8)), "{key}");
        }
    }

    #[test]
    fn a_bad_colour_names_the_file_line_and_column() {
        let error = error_text("name = \"mine\"\n[danger]\nfg = \"purpel\"\n");
        assert!(
            error.starts_with(
                "theme file /home/u/themes/mine.toml, line 3, column 6: unknown colour \"purpel\" \
                 (expected one of black,"
            ),
            "{error}"
        );
    }

    #[test]
    fn bad_syntax_names_the_file_and_line() {
        let error = error_text("[ok]\nfg = \"green\"\nbg = = \"red\"\n");
        assert!(
            error.starts_with("theme file /home/u/themes/mine.toml, line 3"),
            "{error}"
        );
        assert!(
            error.ends_with("invalid string; expected `\"`, `'`"),
            "{error}"
        );
    }

    #[test]
    fn unknown_keys_modifiers_and_types_are_errors_with_lines() {
        let error = error_text("[ok]\n\n[sparkle]\nfg = \"red\"\n");
        assert!(error.contains("line 3"), "{error}");
        assert!(error.contains("sparkle"), "{error}");

        let error = error_text("[ok]\nfg = \"red\"\nfgg = \"red\"\n");
        assert!(error.contains("line 3"), "{error}");
        assert!(error.contains("fgg"), "{error}");

        let error = error_text("[ok]\nfg = \"red\"\nmodifiers = [\"bold\", \"blink\"]\n");
        assert!(error.contains("line 3"), "{error}");
        assert!(error.contains("unknown modifier \"blink\""), "{error}");

        let error = error_text("[ok]\n\nfg = 3\n");
        assert!(error.contains("line 3"), "{error}");
        assert!(error.contains("colour name"), "{error}");
    }

    #[test]
    fn a_name_that_is_not_the_files_is_an_error() {
        let error = error_text("\n\nname = \"dark\"\n");
        assert!(error.contains("line 3"), "{error}");
        assert!(error.contains("called \"mine\""), "{error}");
    }
}
