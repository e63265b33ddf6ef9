//! Which theme the console starts with.

use std::path::PathBuf;

use super::error::{ChosenBy, ThemeError};
use super::Theme;

/// Everything that decides the theme, gathered so that [`ThemeChoice::resolve`] is a
/// pure function of it (and testable without touching the process environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThemeChoice {
    /// `--theme NAME`.
    pub flag: Option<String>,
    /// `STREAMWARD_THEME`.
    pub env: Option<String>,
    /// `theme = "NAME"` in the config file.
    pub config: Option<String>,
    /// `NO_COLOR` is set and not empty (<https://no-color.org>).
    pub no_color: bool,
    /// Where user themes live: `<config dir>/streamward/themes`.
    pub user_dir: Option<PathBuf>,
}

impl ThemeChoice {
    /// Gathers the choice from the flag and config values given and from the process:
    /// `STREAMWARD_THEME` (an empty value counts as unset), `NO_COLOR` and the user's
    /// config directory.
    pub fn from_env(flag: Option<String>, config: Option<String>) -> ThemeChoice {
        let env = std::env::var_os("STREAMWARD_THEME")
            .filter(|value| !value.is_empty())
            .map(|value| value.to_string_lossy().into_owned());
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        let user_dir = dirs::config_dir().map(|dir| dir.join("streamward").join("themes"));
        ThemeChoice {
            flag,
            env,
            config,
            no_color,
            user_dir,
        }
    }

    /// The theme to use. The name comes from the flag, else `STREAMWARD_THEME`, else
    /// the config file; with none of them it is `monochrome` under `NO_COLOR` and
    /// `default` otherwise.
    ///
    /// Under `NO_COLOR` an explicitly chosen theme is still honoured, but shown through
    /// [`Theme::without_colour`]: its colours become `Reset` and only its modifiers
    /// remain, with a reversed selection. Any colour would be written as a reset that
    /// wipes the modifiers, so this is the only way the theme stays readable.
    ///
    /// An unknown or broken theme is an error saying which setting chose it; there is
    /// no fallback to another theme.
    pub fn resolve(&self) -> Result<Theme, ThemeError> {
        let chosen = [
            (ChosenBy::Flag, &self.flag),
            (ChosenBy::Env, &self.env),
            (ChosenBy::Config, &self.config),
        ]
        .into_iter()
        .find_map(|(by, name)| name.as_deref().map(|name| (by, name)));
        let theme = match chosen {
            Some((by, name)) => {
                Theme::by_name(name, self.user_dir.as_deref()).map_err(|error| {
                    ThemeError::Chosen {
                        by,
                        error: Box::new(error),
                    }
                })?
            }
            None if self.no_color => Theme::by_name("monochrome", self.user_dir.as_deref())?,
            None => Theme::by_name("default", self.user_dir.as_deref())?,
        };
        Ok(if self.no_color {
            theme.without_colour()
        } else {
            theme
        })
    }
}

#[cfg(test)]
mod tests {
    use ratatui::style::{Color, Modifier};

    use super::super::testing::TempThemeDir;
    use super::*;

    fn choice(flag: Option<&str>, env: Option<&str>, config: Option<&str>) -> ThemeChoice {
        ThemeChoice {
            flag: flag.map(str::to_string),
            env: env.map(str::to_string),
            config: config.map(str::to_string),
            no_color: false,
            user_dir: None,
        }
    }

    fn name_of(choice: &ThemeChoice) -> String {
        choice
            .resolve()
            .unwrap_or_else(|error| panic!("{error}"))
            .name
    }

    #[test]
    fn flag_beats_env_beats_config_beats_default() {
        assert_eq!(
            name_of(&choice(Some("dark"), Some("light"), Some("monochrome"))),
            "dark"
        );
        assert_eq!(
            name_of(&choice(None, Some("light"), Some("monochrome"))),
            "light"
        );
        assert_eq!(
            name_of(&choice(None, None, Some("monochrome"))),
            "monochrome"
        );
        assert_eq!(name_of(&choice(None, None, None)), "default");
        assert_eq!(
            choice(None, None, None).resolve().unwrap(),
            Theme::by_name("default", None).unwrap(),
            "no NO_COLOR: colours untouched"
        );
    }

    #[test]
    fn no_color_alone_means_monochrome() {
        let choice = ThemeChoice {
            no_color: true,
            ..choice(None, None, None)
        };
        assert_eq!(
            choice.resolve().unwrap(),
            Theme::by_name("monochrome", None).unwrap()
        );
    }

    #[test]
    fn no_color_keeps_the_chosen_theme_without_its_colours() {
        for (flag, env, config) in [
            (Some("dark"), None, None),
            (None, Some("dark"), None),
            (None, None, Some("dark")),
        ] {
            let choice = ThemeChoice {
                no_color: true,
                ..choice(flag, env, config)
            };
            let theme = choice.resolve().unwrap();
            assert_eq!(
                theme,
                Theme::by_name("dark", None).unwrap().without_colour()
            );
            assert_eq!(theme.name, "dark");
            for (key, style) in theme.styles() {
                for colour in [style.fg, style.bg].into_iter().flatten() {
                    assert_eq!(colour, Color::Reset, "{key}");
                }
            }
            assert!(theme.selection.add_modifier.contains(Modifier::REVERSED));
        }
    }

    #[test]
    fn an_unknown_theme_says_which_setting_chose_it() {
        let cases = [
            (choice(Some("nope"), Some("dark"), None), "--theme"),
            (choice(None, Some("nope"), Some("dark")), "STREAMWARD_THEME"),
            (choice(None, None, Some("nope")), "the config file's theme"),
        ];
        for (choice, by) in cases {
            let error = choice.resolve().unwrap_err().to_string();
            assert_eq!(
                error,
                format!(
                    "theme from {by}: unknown theme \"nope\" \
                     (available: dark, default, high-contrast, light, monochrome)"
                )
            );
        }
    }

    #[test]
    fn user_themes_take_part() {
        let dir = TempThemeDir::new();
        dir.write(
            "monochrome",
            "parent = \"monochrome\"\n[selection]\nmodifiers = [\"underlined\"]\n",
        );
        dir.write("mine", "parent = \"default\"\n");
        let base = ThemeChoice {
            user_dir: Some(dir.path().to_path_buf()),
            ..choice(None, Some("mine"), None)
        };
        assert_eq!(name_of(&base), "mine");

        // NO_COLOR's monochrome is the user's, and its selection is still reversed.
        let no_color = ThemeChoice {
            no_color: true,
            env: None,
            ..base
        };
        let theme = no_color.resolve().unwrap();
        assert_eq!(
            theme.selection.add_modifier,
            Modifier::UNDERLINED | Modifier::REVERSED
        );
    }
}
