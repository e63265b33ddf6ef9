//! The bottom line: what is being typed, else the latest notice, else key hints.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::console::keymap;
use crate::console::state::{ConsoleState, Input, NoticeLevel};
use crate::console::theme::Theme;

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let line = match (&state.input, &state.notice) {
        (Input::Filter(text), _) => Line::from(vec![
            Span::styled("/", theme.accent),
            Span::styled(text.clone(), theme.base),
            Span::styled("▏", theme.accent),
            Span::styled("   enter keep · esc clear · !text inverts", theme.muted),
        ]),
        (Input::CommandLine(text), _) => Line::from(vec![
            Span::styled(":", theme.accent),
            Span::styled(text.clone(), theme.base),
            Span::styled("▏", theme.accent),
            Span::styled("   enter run · esc cancel", theme.muted),
        ]),
        (Input::Normal, Some(notice)) => Line::styled(
            format!(" {}", crate::model::text::escape_control(&notice.text)),
            match notice.level {
                NoticeLevel::Info => theme.notice,
                NoticeLevel::Error => theme.danger,
            },
        ),
        (Input::Normal, None) => {
            let mut spans = Vec::new();
            for (key, hint) in keymap::hints(&state.scopes()) {
                spans.push(Span::styled(format!(" {key}"), theme.key_hint));
                spans.push(Span::styled(format!(" {hint} "), theme.muted));
            }
            Line::from(spans)
        }
    };
    frame.render_widget(Paragraph::new(line), area);
}
