//! `?`: every key from the keymap, the `:` commands, and the themes.

use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::format::fit;
use crate::console::keymap;
use crate::console::state::ConsoleState;
use crate::console::theme::Theme;

/// Help's lines, each description fitted to `width` cells after its keys (cut with
/// `…` when the popup is narrower than the text).
pub fn lines(state: &ConsoleState, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    for (title, bindings) in keymap::help_sections(state.read_only) {
        lines.push(Line::styled(title.to_string(), theme.title));
        for (keys, help) in bindings {
            lines.push(Line::from(vec![
                Span::styled(
                    format!("  {keys:<w$}", w = keymap::HELP_KEYS_WIDTH),
                    theme.key_hint,
                ),
                Span::styled(
                    fit(help, width.saturating_sub(2 + keymap::HELP_KEYS_WIDTH)),
                    theme.base,
                ),
            ]));
        }
        lines.push(Line::raw(""));
    }
    lines.push(Line::styled("Commands", theme.title));
    for spec in keymap::LINE_COMMANDS {
        lines.push(Line::from(vec![
            Span::styled(
                format!("  {:<w$}", spec.usage, w = keymap::HELP_USAGE_WIDTH),
                theme.key_hint,
            ),
            Span::styled(
                fit(
                    spec.help,
                    width.saturating_sub(2 + keymap::HELP_USAGE_WIDTH),
                ),
                theme.base,
            ),
        ]));
    }
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        format!(
            "theme: {}   mouse: {}",
            state.theme,
            if state.mouse { "on" } else { "off" }
        ),
        theme.muted,
    ));
    lines
}

pub fn draw(frame: &mut Frame, area: Rect, scroll: usize, state: &ConsoleState, theme: &Theme) {
    let width = area.width.saturating_sub(4).min(90);
    let height = area.height.saturating_sub(2);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let lines = lines(state, usize::from(width.saturating_sub(2)), theme);
    let visible = usize::from(height.saturating_sub(2));
    let max_scroll = lines.len().saturating_sub(visible);
    let scroll = u16::try_from(scroll.min(max_scroll)).unwrap_or(u16::MAX);
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .scroll((scroll, 0))
            .style(theme.base)
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(theme.border_focused)
                    .title(Span::styled(" Help — esc closes, j/k scroll ", theme.title)),
            ),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::state::{ConsoleSetup, Mode};

    #[test]
    fn the_keymap_knows_how_long_help_is() {
        for read_only in [false, true] {
            let state = ConsoleState::new(ConsoleSetup {
                read_only,
                ..ConsoleSetup::new(Mode::Demo, "", chrono::Utc::now())
            });
            let theme = Theme::by_name("default", None).expect("built-in");
            assert_eq!(
                lines(&state, 88, &theme).len(),
                keymap::help_height(read_only)
            );
        }
    }
}
