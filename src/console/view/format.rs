//! Values as the console prints them.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::console::theme::Theme;
use crate::model::text::short_duration;
use crate::model::{ClusterTime, LeaseStatus};
use ratatui::style::Style;

pub const DASH: &str = "-";

pub fn clock(time: DateTime<Utc>) -> String {
    time.format("%H:%M:%S").to_string()
}

pub fn cluster_clock(time: ClusterTime) -> String {
    time.to_datetime().map_or_else(|| time.to_string(), clock)
}

pub fn duration(value: Option<Duration>) -> String {
    value.map_or_else(|| DASH.to_string(), short_duration)
}

/// Terminal cells `text` takes (wide characters take two).
pub fn text_width(text: &str) -> usize {
    ratatui::text::Span::raw(text).width()
}

/// `text` fitted to `width` terminal cells: whole when it fits, else cut at the end
/// and marked with `…`. Never cut from the left (a right-aligned `1420d11h` in seven
/// cells must not read `420d11h`), never cut without a mark.
pub fn fit(text: &str, width: usize) -> String {
    if text_width(text) <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    let mut buffer = [0u8; 4];
    for c in text.chars() {
        let w = text_width(c.encode_utf8(&mut buffer));
        if used + w > width - 1 {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

/// An input field's `text` fitted to `width` cells by its end, where the cursor is:
/// whole when it fits, else marked with `…` where it is cut at the start. (For what
/// is being typed only: a value shown in a cell is cut at its end, see [`fit`].)
pub fn fit_tail(text: &str, width: usize) -> String {
    if text_width(text) <= width {
        return text.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut kept = Vec::new();
    let mut used = 0;
    let mut buffer = [0u8; 4];
    for c in text.chars().rev() {
        let w = text_width(c.encode_utf8(&mut buffer));
        if used + w > width - 1 {
            break;
        }
        used += w;
        kept.push(c);
    }
    std::iter::once('…').chain(kept.into_iter().rev()).collect()
}

/// `parts` joined with `separator` into lines of at most `width` cells, each part
/// whole on one line (a part wider than a line is cut with [`fit`]).
pub fn pack(parts: &[String], separator: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for part in parts {
        let part = fit(part, width);
        match lines.last_mut() {
            Some(line) if text_width(line) + text_width(separator) + text_width(&part) <= width => {
                line.push_str(separator);
                line.push_str(&part);
            }
            _ => lines.push(part),
        }
    }
    lines
}

/// The widths a `Table` gives its columns inside a bordered block `outer` cells wide
/// (the same layout the table makes), so cells can be fitted with [`fit`] before the
/// table cuts them silently.
pub fn table_widths(
    constraints: &[ratatui::layout::Constraint],
    outer: u16,
    spacing: u16,
) -> Vec<usize> {
    use ratatui::layout::{Flex, Layout, Rect};
    Layout::horizontal(constraints.iter().copied())
        .flex(Flex::Start)
        .spacing(spacing)
        .split(Rect::new(0, 0, outer.saturating_sub(2), 1))
        .iter()
        .map(|r| usize::from(r.width))
        .collect()
}

/// A bar of `width` cells for `share` (0..=1): filled part and empty part.
pub fn bar(share: f64, width: usize) -> (String, String) {
    let filled = ((share.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    ("█".repeat(filled), "░".repeat(width - filled))
}

pub fn status_style(status: LeaseStatus, theme: &Theme) -> Style {
    match status {
        LeaseStatus::Lost
        | LeaseStatus::Invalidated
        | LeaseStatus::Failing
        | LeaseStatus::StuckBulk
        | LeaseStatus::Unclaimed => theme.danger,
        LeaseStatus::AtRisk | LeaseStatus::Behind | LeaseStatus::Expired => theme.warn,
        LeaseStatus::Idle => theme.muted,
        LeaseStatus::Ok => theme.ok,
    }
}

pub fn rate(per_sec: f64) -> String {
    if per_sec >= 100.0 {
        format!("{per_sec:.0}")
    } else {
        format!("{per_sec:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_cut_at_the_end_with_a_mark_never_from_the_left() {
        assert_eq!(fit("1420d11h", 8), "1420d11h");
        assert_eq!(fit("1420d11h", 7), "1420d1…");
        assert_eq!(fit("app-1/4242-orders", 10), "app-1/424…");
        assert_eq!(fit("short", 10), "short");
        assert_eq!(fit("abc", 0), "");
        assert_eq!(fit("abc", 1), "…");
        // Wide characters count two cells and are never split.
        assert_eq!(fit("日本語テキスト", 7), "日本語…");
        assert_eq!(text_width(&fit("日本語テキスト", 6)), 5);
    }

    #[test]
    fn a_field_being_typed_shows_its_end_and_marks_the_cut() {
        assert_eq!(fit_tail("shop.mailer", 11), "shop.mailer");
        assert_eq!(fit_tail("shop.mailer", 7), "…mailer");
        assert_eq!(fit_tail("abc", 1), "…");
        assert_eq!(fit_tail("abc", 0), "");
        assert_eq!(fit_tail("日本語テキスト", 7), "…キスト");
    }

    #[test]
    fn packed_parts_stay_whole_and_within_the_width() {
        let parts: Vec<String> = ["tab moves", "enter chooses", "esc cancels"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            pack(&parts, " · ", 40),
            ["tab moves · enter chooses · esc cancels"]
        );
        assert_eq!(
            pack(&parts, " · ", 30),
            ["tab moves · enter chooses", "esc cancels"]
        );
        assert_eq!(pack(&parts, " · ", 8), ["tab mov…", "enter c…", "esc can…"]);
        assert!(pack(&[], " · ", 8).is_empty());
    }

    #[test]
    fn bars_fill_in_proportion_and_never_overflow() {
        assert_eq!(bar(0.5, 4), ("██".into(), "░░".into()));
        assert_eq!(bar(7.0, 3).0.chars().count(), 3);
        assert_eq!(bar(-1.0, 3).1.chars().count(), 3);
        assert_eq!(
            bar(f64::NAN, 2).0.chars().count() + bar(f64::NAN, 2).1.chars().count(),
            2
        );
    }
}
