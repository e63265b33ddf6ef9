//! Below the minimum size: say so instead of drawing a broken layout.

use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use crate::console::layout::{MIN_HEIGHT, MIN_WIDTH};
use crate::console::theme::Theme;

pub fn draw(frame: &mut Frame, area: Rect, theme: &Theme) {
    let lines = vec![
        Line::styled("terminal too small", theme.warn),
        Line::styled(
            format!(
                "need {MIN_WIDTH}×{MIN_HEIGHT}, have {}×{}",
                area.width, area.height
            ),
            theme.base,
        ),
        Line::styled("enlarge the window, or press q to quit", theme.muted),
    ];
    let top = area.height.saturating_sub(3) / 2;
    let text_area = Rect {
        y: area.y + top,
        height: area.height - top,
        ..area
    };
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).centered(),
        text_area,
    );
}
