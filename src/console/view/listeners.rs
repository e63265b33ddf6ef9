//! Listeners running in this process: state, throughput, batches, errors.

use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::format::{rate, DASH};
use crate::console::layout;
use crate::console::state::{visible_start, ConsoleState};
use crate::console::theme::Theme;
use crate::engine::ListenerState;
use crate::model::text::escape_control;

const HEADERS: [&str; 9] = [
    "RESOURCE",
    "LISTENER",
    "STATE",
    "VER",
    "EV/S",
    "EVENTS",
    "BATCH",
    "LOST",
    "LAST ERROR",
];

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Span::styled(
            format!(" Listeners in this process ({}) ", state.listeners.len()),
            theme.title,
        ));
    if !state.mode.runs_listeners() || state.listeners.is_empty() {
        let message = if state.mode.runs_listeners() {
            "no listener has started yet"
        } else {
            "attached: the listeners run in other processes. Their leases are in the leases view; `console --run` also runs the demo listeners here."
        };
        frame.render_widget(
            Paragraph::new(Line::styled(message, theme.muted))
                .wrap(ratatui::widgets::Wrap { trim: true })
                .block(block),
            area,
        );
        return;
    }
    let (_, height) = layout::table_rows(area);
    let cursor = state.listener_cursor;
    let start = visible_start(
        cursor.selected,
        cursor.offset,
        height,
        state.listeners.len(),
    );
    let rows: Vec<Row> = state
        .listeners
        .iter()
        .skip(start)
        .take(height)
        .map(|l| {
            let state_style = match l.state {
                ListenerState::Streaming | ListenerState::Committing => theme.ok,
                ListenerState::Standby | ListenerState::Stopped | ListenerState::Starting => {
                    theme.muted
                }
                ListenerState::Acquiring | ListenerState::LostLock => theme.warn,
                ListenerState::HistoryLost
                | ListenerState::Invalidated
                | ListenerState::Refused => theme.danger,
            };
            Row::new(vec![
                Cell::from(escape_control(&l.resource)),
                Cell::from(escape_control(&l.listener_id)),
                Cell::from(Span::styled(l.state.label(), state_style)),
                Cell::from(
                    l.version
                        .map_or_else(|| DASH.to_string(), |v| v.to_string()),
                ),
                Cell::from(Line::from(rate(l.events_per_sec)).right_aligned()),
                Cell::from(Line::from(l.events.to_string()).right_aligned()),
                Cell::from(Line::from(l.last_batch_size.to_string()).right_aligned()),
                Cell::from(Line::from(l.lost_locks.to_string()).right_aligned()),
                Cell::from(Span::styled(
                    l.last_error
                        .as_deref()
                        .map_or_else(|| DASH.to_string(), escape_control),
                    theme.danger,
                )),
            ])
        })
        .collect();
    let widths = [
        Constraint::Fill(2),
        Constraint::Fill(3),
        Constraint::Length(12),
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Fill(3),
    ];
    let table = Table::new(rows, widths)
        .header(Row::new(HEADERS).style(theme.title))
        .block(block)
        .column_spacing(1)
        .style(if state.is_stale() {
            theme.stale
        } else {
            theme.base
        })
        .row_highlight_style(theme.selection);
    let mut table_state = TableState::default().with_selected(Some(cursor.selected - start));
    frame.render_stateful_widget(table, area, &mut table_state);
}
