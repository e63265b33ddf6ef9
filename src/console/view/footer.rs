//! The bottom line: what is being typed, else the latest notice, else key hints.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::format::{fit, text_width};
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
        // One line: a longer notice is cut, and marked so.
        (Input::Normal, Some(notice)) => Line::styled(
            fit(
                &format!(" {}", crate::model::text::escape_control(&notice.text)),
                usize::from(area.width),
            ),
            match notice.level {
                NoticeLevel::Info => theme.notice,
                NoticeLevel::Error => theme.danger,
            },
        ),
        (Input::Normal, None) => hint_line(state, usize::from(area.width), theme),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// What the console is in (read-only, frozen, a rebuild in the background), then the
/// keys that apply here, most useful first. Hints that do not fit are left out whole,
/// never cut, and the last one (help) always stays.
fn hint_line<'a>(state: &ConsoleState, width: usize, theme: &Theme) -> Line<'a> {
    let mut spans = Vec::new();
    let mut used = 0;
    if let Some(lead) = state.footer_lead() {
        let lead = fit(&format!(" {lead} "), width);
        used += text_width(&lead);
        spans.push(Span::styled(lead, theme.warn));
    }
    let hints = state.footer_hints();
    let cost = |h: &crate::console::state::Hint| text_width(&h.key) + text_width(&h.text) + 3;
    let last = hints.last().map_or(0, cost);
    for (i, hint) in hints.iter().enumerate() {
        let is_last = i + 1 == hints.len();
        let room = width.saturating_sub(used + if is_last { 0 } else { last });
        if cost(hint) > room {
            continue;
        }
        used += cost(hint);
        spans.push(Span::styled(format!(" {}", hint.key), theme.key_hint));
        spans.push(Span::styled(format!(" {} ", hint.text), theme.muted));
    }
    Line::from(spans)
}
