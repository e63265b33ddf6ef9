//! Where themes come from, and how a theme and its parents become one [`Theme`].
//!
//! The built-ins in `themes/*.toml` are compiled in. A file `<user_dir>/<name>.toml`
//! adds a theme, or replaces the built-in of that name. `parent = "NAME"` finds its
//! parent the same way, except that a user theme whose parent is its own name (a user
//! `default.toml` with `parent = "default"`) extends the built-in of that name.

use std::io::ErrorKind;
use std::path::Path;

use super::error::{ThemeError, ThemeSource};
use super::file::LoadedFile;
use super::Theme;

macro_rules! built_in {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/themes/",
                $name,
                ".toml"
            )),
        )
    };
}

/// The themes compiled in: name and text.
pub(super) const BUILT_INS: [(&str, &str); 5] = [
    built_in!("default"),
    built_in!("dark"),
    built_in!("light"),
    built_in!("high-contrast"),
    built_in!("monochrome"),
];

/// Every theme name there is: the built-ins and the user's `*.toml` files, sorted, each
/// once. A user directory that is missing or unreadable adds nothing here; choosing a
/// theme from it reports the problem.
pub fn available(user_dir: Option<&Path>) -> Vec<String> {
    let mut names: Vec<String> = BUILT_INS.iter().map(|(name, _)| name.to_string()).collect();
    if let Some(entries) = user_dir.and_then(|dir| std::fs::read_dir(dir).ok()) {
        for path in entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path())
        {
            if path.extension().is_none_or(|ext| ext != "toml") || !path.is_file() {
                continue;
            }
            if let Some(name) = path.file_stem().and_then(|stem| stem.to_str()) {
                if is_valid_name(name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Theme names are file names without `.toml`: ASCII letters, digits, `-` and `_`, so a
/// name can never reach outside the theme directory.
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The theme called `name`, with everything its parents supply.
pub fn load(name: &str, user_dir: Option<&Path>) -> Result<Theme, ThemeError> {
    let Some(first) = find(name, user_dir, false)? else {
        return Err(ThemeError::Unknown {
            name: name.to_string(),
            available: available(user_dir),
        });
    };
    // Child first; every file's parent follows it.
    let mut chain: Vec<(String, LoadedFile)> = vec![(name.to_string(), first)];
    while let Some((child_name, child)) = chain.last() {
        let Some(parent) = &child.file.parent else {
            break;
        };
        let parent_name = parent.get_ref();
        let extends_built_in =
            matches!(child.source, ThemeSource::User(_)) && parent_name == child_name;
        let Some(found) = find(parent_name, user_dir, extends_built_in)? else {
            return Err(child.error_at(
                parent,
                format!(
                    "parent \"{parent_name}\" is not a theme (available: {})",
                    available(user_dir).join(", ")
                ),
            ));
        };
        if chain.iter().any(|(_, file)| file.source == found.source) {
            let mut names: Vec<String> = chain.iter().map(|(name, _)| name.clone()).collect();
            names.push(parent_name.clone());
            return Err(ThemeError::ParentCycle { chain: names });
        }
        chain.push((parent_name.clone(), found));
    }
    let mut theme = Theme::plain(name);
    for (_, file) in chain.iter().rev() {
        file.apply_to(&mut theme);
    }
    Ok(theme)
}

/// The file for `name`: the user's if there is one (unless `built_in_only`), else the
/// built-in; `None` when neither exists.
fn find(
    name: &str,
    user_dir: Option<&Path>,
    built_in_only: bool,
) -> Result<Option<LoadedFile>, ThemeError> {
    if !is_valid_name(name) {
        return Ok(None);
    }
    if let Some(dir) = user_dir.filter(|_| !built_in_only) {
        let path = dir.join(format!("{name}.toml"));
        match std::fs::read_to_string(&path) {
            Ok(text) => return LoadedFile::parse(name, ThemeSource::User(path), text).map(Some),
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(ThemeError::Read { path, error }),
        }
    }
    match BUILT_INS.iter().find(|(built_in, _)| *built_in == name) {
        Some((built_in, text)) => {
            LoadedFile::parse(name, ThemeSource::BuiltIn(built_in), text.to_string()).map(Some)
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use ratatui::style::{Color, Modifier, Style};

    use super::super::testing::TempThemeDir;
    use super::*;

    fn colours(theme: &Theme) -> Vec<(&'static str, Color)> {
        theme
            .styles()
            .into_iter()
            .flat_map(|(key, style)| {
                [style.fg, style.bg]
                    .into_iter()
                    .flatten()
                    .map(move |c| (key, c))
            })
            .collect()
    }

    #[test]
    fn every_built_in_parses_and_sets_every_key() {
        for (name, text) in BUILT_INS {
            let loaded = LoadedFile::parse(name, ThemeSource::BuiltIn(name), text.to_string())
                .unwrap_or_else(|error| panic!("{error}"));
            let f = &loaded.file;
            let set = [
                &f.base,
                &f.muted,
                &f.title,
                &f.border,
                &f.border_focused,
                &f.accent,
                &f.header,
                &f.selection,
                &f.ok,
                &f.warn,
                &f.danger,
                &f.stale,
                &f.notice,
                &f.gauge_filled,
                &f.gauge_empty,
                &f.key_hint,
            ];
            assert!(
                f.parent.is_some() || set.iter().all(|spec| spec.is_some()),
                "{name}"
            );
            let theme = load(name, None).unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(theme.name, name);
        }
    }

    #[test]
    fn default_uses_only_named_colours() {
        let theme = load("default", None).unwrap();
        let colours = colours(&theme);
        assert!(!colours.is_empty());
        for (key, colour) in colours {
            assert!(
                !matches!(colour, Color::Rgb(..) | Color::Indexed(_)),
                "default.{key} is {colour:?}"
            );
        }
    }

    #[test]
    fn dark_and_light_use_true_colour() {
        for name in ["dark", "light"] {
            let theme = load(name, None).unwrap();
            for (key, colour) in colours(&theme) {
                assert!(
                    matches!(colour, Color::Rgb(..)),
                    "{name}.{key} is {colour:?}"
                );
            }
            assert!(theme.base.bg.is_some(), "{name} paints its background");
        }
    }

    #[test]
    fn monochrome_has_no_colour_and_a_reversed_selection() {
        let theme = load("monochrome", None).unwrap();
        for (key, colour) in colours(&theme) {
            assert_eq!(colour, Color::Reset, "monochrome.{key}");
        }
        assert!(theme.selection.add_modifier.contains(Modifier::REVERSED));
        assert!(theme.danger.add_modifier.contains(Modifier::BOLD));
        assert!(theme.muted.add_modifier.contains(Modifier::DIM));
    }

    #[test]
    fn a_parent_supplies_the_keys_a_theme_does_not_set() {
        let dir = TempThemeDir::new();
        dir.write("mine", "parent = \"dark\"\n[danger]\nfg = \"light_red\"\n");
        dir.write("child", "name = \"child\"\nparent = \"mine\"\n[ok]\n");
        let dark = load("dark", None).unwrap();

        let mine = load("mine", Some(dir.path())).unwrap();
        assert_eq!(mine.name, "mine");
        assert_eq!(mine.danger, Style::default().fg(Color::LightRed));
        assert_eq!(mine.selection, dark.selection);
        assert_eq!(mine.base, dark.base);

        // Two levels; an empty table replaces the parent's style with plain text.
        let child = load("child", Some(dir.path())).unwrap();
        assert_eq!(child.ok, Style::default());
        assert_eq!(child.danger, mine.danger);
        assert_eq!(child.title, dark.title);
    }

    #[test]
    fn parent_cycles_are_errors() {
        let dir = TempThemeDir::new();
        dir.write("a", "parent = \"b\"\n");
        dir.write("b", "parent = \"c\"\n");
        dir.write("c", "parent = \"a\"\n");
        dir.write("me", "parent = \"me\"\n");
        let error = load("a", Some(dir.path())).unwrap_err();
        assert!(matches!(error, ThemeError::ParentCycle { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            "theme parents form a cycle: a -> b -> c -> a"
        );
        // A theme that is its own parent, with no built-in of that name.
        let error = load("me", Some(dir.path())).unwrap_err();
        assert!(
            error.to_string().contains("parent \"me\" is not a theme"),
            "{error}"
        );
    }

    #[test]
    fn a_user_theme_may_extend_the_built_in_it_replaces() {
        let dir = TempThemeDir::new();
        dir.write(
            "default",
            "parent = \"default\"\n[selection]\nmodifiers = [\"reversed\"]\n",
        );
        let built_in = load("default", None).unwrap();
        let theme = load("default", Some(dir.path())).unwrap();
        assert_eq!(
            theme.selection,
            Style::default().add_modifier(Modifier::REVERSED)
        );
        assert_eq!(theme.danger, built_in.danger);

        // But user themes that are each other's parents still form a cycle.
        dir.write("dark", "parent = \"default\"\n");
        dir.write("default", "parent = \"dark\"\n");
        let error = load("default", Some(dir.path())).unwrap_err();
        assert_eq!(
            error.to_string(),
            "theme parents form a cycle: default -> dark -> default"
        );
    }

    #[test]
    fn an_unknown_parent_names_the_file_and_line() {
        let dir = TempThemeDir::new();
        let path = dir.write("mine", "# mine\n\nparent = \"nope\"\n");
        let error = load("mine", Some(dir.path())).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!(
                "theme file {}, line 3, column 10: parent \"nope\" is not a theme (available: dark, default,",
                path.display()
            )),
            "{error}"
        );
    }

    #[test]
    fn a_user_theme_overrides_a_built_in_and_is_listed() {
        let dir = TempThemeDir::new();
        dir.write("dark", "[base]\nfg = \"green\"\n");
        dir.write("solar", "parent = \"light\"\n");
        dir.write("bad name", "");
        std::fs::write(dir.path().join("notes.txt"), "").unwrap();
        std::fs::create_dir(dir.path().join("folder.toml")).unwrap();

        let dark = load("dark", Some(dir.path())).unwrap();
        assert_eq!(dark.base, Style::default().fg(Color::Green));
        assert_eq!(
            dark.selection,
            Style::default(),
            "no parent: nothing from the built-in"
        );
        assert_eq!(
            load("solar", Some(dir.path())).unwrap().ok,
            load("light", None).unwrap().ok
        );

        assert_eq!(
            available(Some(dir.path())),
            [
                "dark",
                "default",
                "high-contrast",
                "light",
                "monochrome",
                "solar"
            ]
        );
        assert_eq!(
            available(None),
            ["dark", "default", "high-contrast", "light", "monochrome"]
        );
        assert_eq!(
            available(Some(&dir.path().join("missing"))),
            available(None)
        );
    }

    #[test]
    fn an_unknown_name_lists_what_there_is() {
        let dir = TempThemeDir::new();
        dir.write("solar", "");
        for name in ["nope", "../dark", "", "dark.toml"] {
            let error = load(name, Some(dir.path())).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    "unknown theme \"{name}\" (available: dark, default, high-contrast, light, monochrome, solar)"
                )
            );
        }
    }

    #[test]
    fn a_broken_user_theme_is_an_error_not_the_built_in() {
        let dir = TempThemeDir::new();
        let path = dir.write("dark", "name = \"dark\"\n[ok]\nfg = \"purpel\"\n");
        let error = load("dark", Some(dir.path())).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("theme file {}, line 3", path.display())),
            "{error}"
        );
        assert!(error.contains("unknown colour \"purpel\""), "{error}");

        let path = dir.write("dark", "[ok\nfg = \"red\"\n");
        let error = load("dark", Some(dir.path())).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("theme file {}, line 1", path.display())),
            "{error}"
        );
    }

    #[test]
    fn an_unreadable_user_theme_is_an_error() {
        let dir = TempThemeDir::new();
        let path = dir.path().join("odd.toml");
        std::fs::write(&path, [0xff, 0xfe, b'\n']).unwrap();
        let error = load("odd", Some(dir.path())).unwrap_err();
        assert!(matches!(error, ThemeError::Read { .. }), "{error:?}");
        assert!(error
            .to_string()
            .starts_with(&format!("cannot read theme file {}:", path.display())));
    }
}
