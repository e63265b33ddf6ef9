//! Listeners running in this process: state, throughput, batches, errors.

use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::format::{fit, rate, table_widths, DASH};
use crate::console::layout;
use crate::console::state::{visible_start, ConsoleState};
use crate::console::theme::Theme;
use crate::engine::ListenerState;
use crate::model::text::{escape_control, relative_time, resource_names as names};
use crate::model::ProcessView;

const PROCESS_HEADERS: [&str; 6] = [
    "PROCESS",
    "MEMBERSHIP",
    "SHARE",
    "HOLDS",
    "HANDING OVER",
    "STANDBY",
];

/// Why the fleet's processes cannot be read (a role without `find` on them, say).
fn draw_processes_unread(frame: &mut Frame, area: Rect, error: &str, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Span::styled(" Fleet processes ", theme.title));
    frame.render_widget(
        Paragraph::new(Line::styled(
            format!("cannot read them: {}", escape_control(error)),
            theme.danger,
        ))
        .wrap(ratatui::widgets::Wrap { trim: true })
        .block(block),
        area,
    );
}

/// The fleet's processes (docs/protocol.md, "Membership and balancing"): each one's
/// membership, fair share, the leases it holds, hands over and stands by for.
fn draw_processes(
    frame: &mut Frame,
    area: Rect,
    processes: &[ProcessView],
    state: &ConsoleState,
    theme: &Theme,
) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Span::styled(
            format!(" Fleet processes ({}) ", processes.len()),
            theme.title,
        ));
    let widths = [
        Constraint::Fill(2),
        Constraint::Length(20),
        Constraint::Length(5),
        Constraint::Fill(3),
        Constraint::Fill(2),
        Constraint::Fill(3),
    ];
    let cells = table_widths(&widths, area.width, 1);
    let fit_to = |column: usize, text: String| fit(&text, cells.get(column).copied().unwrap_or(0));
    let now = state.server_now();
    let rows: Vec<Row> = processes
        .iter()
        .map(|p| {
            let (membership, style) = if p.live {
                (
                    format!("live, exp. {}", relative_time(p.member.expires_at, now)),
                    theme.ok,
                )
            } else {
                (
                    format!("expired {}", relative_time(p.member.expires_at, now)),
                    theme.danger,
                )
            };
            Row::new(vec![
                Cell::from(fit_to(0, escape_control(&p.member.process))),
                Cell::from(Span::styled(fit_to(1, membership), style)),
                Cell::from(fit_to(
                    2,
                    p.share.map_or_else(|| DASH.to_string(), |s| s.to_string()),
                )),
                Cell::from(fit_to(3, format!("{} {}", p.holds.len(), names(&p.holds)))),
                Cell::from(Span::styled(fit_to(4, names(&p.handing_over)), theme.warn)),
                Cell::from(Span::styled(fit_to(5, names(&p.standby)), theme.muted)),
            ])
        })
        .collect();
    let table = Table::new(rows, widths)
        .header(Row::new(PROCESS_HEADERS).style(theme.title))
        .block(block)
        .column_spacing(1)
        .style(if state.is_stale() {
            theme.stale
        } else {
            theme.base
        });
    frame.render_widget(table, area);
}

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
    let (area, below) = layout::split_listeners(area, state.process_count());
    if let Some(below) = below {
        match &state.processes {
            Ok(_) => draw_processes(frame, below, &state.process_views(), state, theme),
            Err(error) => draw_processes_unread(frame, below, error, theme),
        }
    }
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
    let cells = table_widths(&widths, area.width, 1);
    let fit_to = |column: usize, text: String| fit(&text, cells.get(column).copied().unwrap_or(0));
    let right = |column: usize, text: String| Line::from(fit_to(column, text)).right_aligned();
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
                | ListenerState::Failing
                | ListenerState::Refused => theme.danger,
            };
            // The whole last error is in the lease detail (enter on the leases view).
            Row::new(vec![
                Cell::from(fit_to(0, escape_control(&l.resource))),
                Cell::from(fit_to(1, escape_control(&l.listener_id))),
                Cell::from(Span::styled(fit_to(2, l.state.label().into()), state_style)),
                Cell::from(fit_to(
                    3,
                    l.version
                        .map_or_else(|| DASH.to_string(), |v| v.to_string()),
                )),
                Cell::from(right(4, rate(l.events_per_sec))),
                Cell::from(right(5, l.events.to_string())),
                Cell::from(right(6, l.last_batch_size.to_string())),
                Cell::from(right(7, l.lost_locks.to_string())),
                Cell::from(Span::styled(
                    fit_to(
                        8,
                        l.last_error
                            .as_deref()
                            .map_or_else(|| DASH.to_string(), escape_control),
                    ),
                    theme.danger,
                )),
            ])
        })
        .collect();
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
