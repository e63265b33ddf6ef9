//! Turning values into text for people: durations, and database strings made safe to print.

use std::fmt::Write;
use std::time::Duration;

/// Replaces control characters (and other non-printing ones) with visible escapes, so a
/// string from the database cannot move the cursor, clear the screen or forge a line.
pub fn escape_control(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control()
                || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A short human duration: `0s`, `42s`, `3m05s`, `2h07m`, `3d04h`.
pub fn short_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
        _ => format!("{}d{:02}h", secs / 86_400, (secs % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_control("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape_control("x\ny\r\t"), "x\\ny\\r\\t");
        assert_eq!(escape_control("evil\u{202e}txt"), "evil\\u{202e}txt");
        assert_eq!(escape_control("host-1 ünïcode"), "host-1 ünïcode");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short_duration(Duration::from_secs(0)), "0s");
        assert_eq!(short_duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(short_duration(Duration::from_secs(7620)), "2h07m");
        assert_eq!(
            short_duration(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d04h"
        );
    }
}
