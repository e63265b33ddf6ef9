//! Turning values into text for people: durations, and database strings made safe to print.

use std::fmt::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Resource names for a table cell, escaped, space-separated; `-` for none.
pub fn resource_names(resources: &[String]) -> String {
    if resources.is_empty() {
        return "-".into();
    }
    resources
        .iter()
        .map(|r| escape_control(r))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Replaces control characters (and other non-printing ones) with visible escapes, so a
/// string from the database cannot move the cursor, clear the screen or forge a line.
pub fn escape_control(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Besides the controls: zero-width characters, every direction mark and
            // embedding (Unicode's Bidi_Control set, with the Arabic letter mark),
            // Unicode's own line and paragraph separators, and the byte-order mark.
            c if c.is_control()
                || matches!(
                    c,
                    '\u{61c}'
                        | '\u{200b}'..='\u{200f}'
                        | '\u{2028}'..='\u{202e}'
                        | '\u{2066}'..='\u{2069}'
                        | '\u{feff}'
                ) =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The time recorded for a token that cannot tell its own (Azure Cosmos DB's): the
/// document time of the change it follows, said as such so it is not read as a
/// cluster time: "document time 2024-05-01T12:00:00.250Z".
pub fn document_time(at: DateTime<Utc>) -> String {
    format!("document time {}", at.format("%Y-%m-%dT%H:%M:%S%.3fZ"))
}

/// The time a capped collection's entry was made, from its ObjectId (whole seconds).
pub fn entry_time_text(id: &bson::oid::ObjectId) -> String {
    format!(
        "entry time {}",
        id.timestamp().to_chrono().format("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// The most characters a plain-text table shows of one value; longer values end in
/// `…` (the JSON output carries them whole).
pub const CELL_MAX_CHARS: usize = 120;

/// `text` cut to at most `max` characters, the last one `…` when anything was cut.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `text` followed by spaces up to `width` characters. Unlike `{:<width$}`, any width
/// works (the standard formatter panics on widths past 65,535).
pub fn pad_to(text: &str, width: usize) -> String {
    let count = text.chars().count();
    let mut out = String::with_capacity(text.len() + width.saturating_sub(count));
    out.push_str(text);
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(count)));
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

/// `at` against `now`: "in 8s" for the future, "3s ago" for the past.
pub fn relative_time(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at > now {
        format!(
            "in {}",
            short_duration((at - now).to_std().unwrap_or_default())
        )
    } else {
        format!(
            "{} ago",
            short_duration((now - at).to_std().unwrap_or_default())
        )
    }
}

/// A stored date as the lease document views show it: "03:14:08 (in 8s)", "03:14:00
/// (now)", or "null" when the field is not set.
pub fn clock_and_relative(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match at {
        None => "null".into(),
        Some(at) if at == now => format!("{} (now)", at.format("%H:%M:%S")),
        Some(at) => format!("{} ({})", at.format("%H:%M:%S"), relative_time(at, now)),
    }
}

/// `12345` → `12 345`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_control("a\x1b[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape_control("x\ny\r\t"), "x\\ny\\r\\t");
        assert_eq!(escape_control("evil\u{202e}txt"), "evil\\u{202e}txt");
        assert_eq!(
            escape_control("a\u{2028}b\u{2029}c\u{61c}d\u{feff}"),
            "a\\u{2028}b\\u{2029}c\\u{61c}d\\u{feff}"
        );
        assert_eq!(escape_control("host-1 ünïcode"), "host-1 ünïcode");
    }

    #[test]
    fn times_read_relative_to_now() {
        use chrono::TimeZone;
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 3, 14, 0).unwrap();
        let later = now + chrono::Duration::seconds(8);
        let earlier = now - chrono::Duration::seconds(65);
        assert_eq!(relative_time(later, now), "in 8s");
        assert_eq!(relative_time(earlier, now), "1m05s ago");
        assert_eq!(clock_and_relative(Some(later), now), "03:14:08 (in 8s)");
        assert_eq!(clock_and_relative(Some(now), now), "03:14:00 (now)");
        assert_eq!(clock_and_relative(None, now), "null");
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
