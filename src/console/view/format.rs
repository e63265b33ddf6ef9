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

/// A bar of `width` cells for `share` (0..=1): filled part and empty part.
pub fn bar(share: f64, width: usize) -> (String, String) {
    let filled = ((share.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    ("█".repeat(filled), "░".repeat(width - filled))
}

pub fn status_style(status: LeaseStatus, theme: &Theme) -> Style {
    match status {
        LeaseStatus::Lost | LeaseStatus::Invalidated | LeaseStatus::StuckBulk => theme.danger,
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
