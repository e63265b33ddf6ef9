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
