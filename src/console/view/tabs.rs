//! The view tabs, drawn where `layout::tab_spans` says so that clicks land on them.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::console::layout::TABS;
use crate::console::state::ConsoleState;
use crate::console::theme::Theme;

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let mut spans = vec![Span::raw(" ")];
    for (i, (number, name)) in TABS.iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(" │ ", theme.border));
        }
        let style = if i == state.view.tab() {
            theme.selection
        } else {
            theme.muted
        };
        spans.push(Span::styled(format!("{number} {name}"), style));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
