//! The values a theme file may hold: colours and modifiers, read strictly.

use std::fmt;

use ratatui::style::{Color, Modifier};
use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The 16 named colours and `reset`, by the names theme files use.
const NAMED_COLOURS: [(&str, Color); 17] = [
    ("black", Color::Black),
    ("red", Color::Red),
    ("green", Color::Green),
    ("yellow", Color::Yellow),
    ("blue", Color::Blue),
    ("magenta", Color::Magenta),
    ("cyan", Color::Cyan),
    ("gray", Color::Gray),
    ("dark_gray", Color::DarkGray),
    ("light_red", Color::LightRed),
    ("light_green", Color::LightGreen),
    ("light_yellow", Color::LightYellow),
    ("light_blue", Color::LightBlue),
    ("light_magenta", Color::LightMagenta),
    ("light_cyan", Color::LightCyan),
    ("white", Color::White),
    ("reset", Color::Reset),
];

const MODIFIERS: [(&str, Modifier); 7] = [
    ("bold", Modifier::BOLD),
    ("dim", Modifier::DIM),
    ("italic", Modifier::ITALIC),
    ("underlined", Modifier::UNDERLINED),
    ("reversed", Modifier::REVERSED),
    ("crossed_out", Modifier::CROSSED_OUT),
    ("slow_blink", Modifier::SLOW_BLINK),
];

/// Reads a colour: a named colour, `reset`, `#rrggbb` or `ansi:NNN` (0 to 255).
pub fn parse_colour(text: &str) -> Result<Color, String> {
    if let Some((_, colour)) = NAMED_COLOURS.iter().find(|(name, _)| *name == text) {
        return Ok(*colour);
    }
    if let Some(hex) = text.strip_prefix('#') {
        return parse_rgb(hex).ok_or_else(|| {
            format!("invalid colour \"{text}\": expected \"#\" and six hex digits")
        });
    }
    if let Some(index) = text.strip_prefix("ansi:") {
        return index
            .parse::<u8>()
            .ok()
            .filter(|_| index.bytes().all(|b| b.is_ascii_digit()))
            .map(Color::Indexed)
            .ok_or_else(|| {
                format!("invalid colour \"{text}\": expected \"ansi:\" and a number from 0 to 255")
            });
    }
    Err(format!(
        "unknown colour \"{text}\" (expected one of {}, \"#rrggbb\" or \"ansi:0\" to \"ansi:255\")",
        names(&NAMED_COLOURS)
    ))
}

fn parse_rgb(hex: &str) -> Option<Color> {
    if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let channel = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
    Some(Color::Rgb(channel(0)?, channel(2)?, channel(4)?))
}

/// Reads one modifier name.
pub fn parse_modifier(text: &str) -> Result<Modifier, String> {
    MODIFIERS
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, modifier)| *modifier)
        .ok_or_else(|| {
            format!(
                "unknown modifier \"{text}\" (expected one of {})",
                names(&MODIFIERS)
            )
        })
}

fn names<T>(table: &[(&str, T)]) -> String {
    table
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A colour in a theme file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColourSpec(pub Color);

/// A modifier in a theme file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModifierSpec(pub Modifier);

impl<'de> Deserialize<'de> for ColourSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_str(StrVisitor {
                expecting: "a colour name, \"#rrggbb\" or \"ansi:NNN\"",
                parse: parse_colour,
            })
            .map(ColourSpec)
    }
}

impl<'de> Deserialize<'de> for ModifierSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_str(StrVisitor {
                expecting: "a modifier name",
                parse: parse_modifier,
            })
            .map(ModifierSpec)
    }
}

/// A string read by `parse`, whose error message becomes the deserializer's, so the
/// TOML reader attaches the value's position to it.
struct StrVisitor<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
}

impl<T> Visitor<'_> for StrVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        (self.parse)(text).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_colour_form_reads() {
        assert_eq!(parse_colour("dark_gray"), Ok(Color::DarkGray));
        assert_eq!(parse_colour("light_cyan"), Ok(Color::LightCyan));
        assert_eq!(parse_colour("reset"), Ok(Color::Reset));
        assert_eq!(parse_colour("#1a2B3c"), Ok(Color::Rgb(0x1a, 0x2b, 0x3c)));
        assert_eq!(parse_colour("ansi:0"), Ok(Color::Indexed(0)));
        assert_eq!(parse_colour("ansi:255"), Ok(Color::Indexed(255)));
    }

    #[test]
    fn bad_colours_are_errors_that_say_what_is_allowed() {
        let unknown = parse_colour("purpel").unwrap_err();
        assert!(unknown.starts_with("unknown colour \"purpel\" (expected one of black, red,"));
        assert!(unknown.contains("light_cyan, white, reset"));
        for bad in ["#12345", "#1234567", "#gg0000", "#", "#ééé"] {
            let error = parse_colour(bad).unwrap_err();
            assert!(error.contains("six hex digits"), "{bad}: {error}");
        }
        for bad in ["ansi:256", "ansi:-1", "ansi:+1", "ansi:", "ansi:x"] {
            let error = parse_colour(bad).unwrap_err();
            assert!(error.contains("0 to 255"), "{bad}: {error}");
        }
        // Names are exact: no case folding, no other spellings.
        for bad in ["Red", "grey", "darkgray", "lightred", ""] {
            assert!(parse_colour(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn modifiers_read_by_exact_name() {
        assert_eq!(parse_modifier("reversed"), Ok(Modifier::REVERSED));
        assert_eq!(parse_modifier("slow_blink"), Ok(Modifier::SLOW_BLINK));
        let error = parse_modifier("blink").unwrap_err();
        assert!(error.contains("unknown modifier \"blink\" (expected one of bold, dim,"));
    }
}
