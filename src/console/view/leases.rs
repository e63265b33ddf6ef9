//! The home view: one row per lease, only the visible rows built.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::format::{bar, cluster_clock, duration, status_style, DASH};
use crate::console::layout;
use crate::console::state::{visible_start, Column, ConsoleState, LeaseEntry};
use crate::console::theme::Theme;
use crate::model::text::{escape_control, relative_time};

/// Widths of the fixed columns; resource and holder share what is left.
fn width_of(column: Column, wide: bool) -> u16 {
    match column {
        Column::Kind => 6,
        Column::Version => 6,
        Column::Expires => 9,
        Column::LastCommit => 9,
        Column::TokenTime => 8,
        Column::Lag => 7,
        Column::Headroom if wide => 17,
        Column::Headroom => 10,
        // The longest label, INVALIDATED.
        Column::Status => 11,
        Column::Resource | Column::Holder => 0,
    }
}

/// The columns that fit `width`. When narrow, kind and the two time columns go:
/// a bulk lease still shows as STUCK BULK, and the detail view has them all.
pub fn columns_for(width: u16) -> (Vec<Column>, bool) {
    let wide = width >= 110;
    let columns = Column::ALL
        .into_iter()
        .filter(|c| wide || !matches!(c, Column::Kind | Column::LastCommit | Column::TokenTime))
        .collect();
    (columns, wide)
}

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let table = &state.leases;
    let (sort, descending) = table.sort();
    let mut title = vec![
        Span::styled(" Leases ", theme.title),
        Span::styled(
            format!(
                "{} of {} · sort {} {} ",
                table.shown(),
                table.len(),
                sort.label().to_lowercase(),
                if descending { "↓" } else { "↑" }
            ),
            theme.muted,
        ),
    ];
    if !table.filter().is_empty() {
        title.push(Span::styled(
            format!("· filter /{} ", escape_control(table.filter().text())),
            theme.accent,
        ));
    }
    if state.frozen {
        title.push(Span::styled("· FROZEN ", theme.warn));
    }
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Line::from(title));

    if table.shown() == 0 {
        let message = if table.is_empty() {
            "no leases yet: waiting for the lease collection"
        } else {
            "no lease matches the filter (esc clears it)"
        };
        frame.render_widget(
            Paragraph::new(Line::styled(message, theme.muted)).block(block),
            area,
        );
        return;
    }

    let (_, height) = layout::table_rows(area);
    let selected = table.selected_index().unwrap_or(0);
    let start = visible_start(selected, table.offset(), height, table.shown());
    let (columns, wide) = columns_for(area.width.saturating_sub(2));
    let row_style = if state.is_stale() {
        theme.stale
    } else {
        theme.base
    };
    let rows: Vec<Row> = table
        .rows(start, height)
        .map(|entry| row(entry, &columns, wide, state, theme).style(row_style))
        .collect();
    let widths: Vec<Constraint> = columns
        .iter()
        .map(|&c| match c {
            Column::Resource => Constraint::Fill(1),
            Column::Holder => Constraint::Fill(1),
            other => Constraint::Length(width_of(other, wide)),
        })
        .collect();
    let header = Row::new(columns.iter().map(|&c| {
        let marker = if c == sort {
            if descending {
                "↓"
            } else {
                "↑"
            }
        } else {
            ""
        };
        Cell::from(format!("{}{marker}", c.label()))
    }))
    .style(theme.title);
    let widget = Table::new(rows, widths)
        .header(header)
        .block(block)
        .column_spacing(1)
        .row_highlight_style(theme.selection);
    let mut table_state = TableState::default().with_selected(Some(selected - start));
    frame.render_stateful_widget(widget, area, &mut table_state);
}

fn row<'a>(
    entry: &'a LeaseEntry,
    columns: &[Column],
    wide: bool,
    state: &ConsoleState,
    theme: &Theme,
) -> Row<'a> {
    let lease = &entry.lease;
    let health = &entry.health;
    let now = state.server_now();
    let cells = columns.iter().map(|&column| -> Cell {
        match column {
            Column::Resource => Cell::from(escape_control(&lease.resource)),
            Column::Kind => {
                let style = if lease.kind == crate::model::LockKind::Bulk {
                    theme.warn
                } else {
                    Style::default()
                };
                Cell::from(Span::styled(lease.kind.as_str(), style))
            }
            Column::Holder => match (&lease.holder, lease.live_holder(now)) {
                (_, Some(holder)) => Cell::from(escape_control(holder)),
                (Some(holder), None) => Cell::from(Span::styled(
                    format!("({})", escape_control(holder)),
                    theme.muted,
                )),
                (None, None) => Cell::from(Span::styled(DASH, theme.muted)),
            },
            Column::Version => Cell::from(Line::from(lease.version.to_string()).right_aligned()),
            Column::Expires => Cell::from(
                lease
                    .expires_at
                    .map_or_else(|| DASH.to_string(), |at| relative_time(at, now)),
            ),
            Column::LastCommit => Cell::from(
                lease
                    .committed_at
                    .map_or_else(|| DASH.to_string(), |at| relative_time(at, now)),
            ),
            Column::TokenTime => Cell::from(match (&lease.resume_token, health.token_time) {
                (_, Some(time)) => cluster_clock(time),
                (Some(_), None) => "corrupt".into(),
                (None, None) => "oldest".into(),
            }),
            Column::Lag => Cell::from(Line::from(duration(health.lag)).right_aligned()),
            Column::Headroom => match health.headroom_share {
                Some(share) => {
                    let bar_width = usize::from(width_of(Column::Headroom, wide)) - 5;
                    let (filled, empty) = bar(share, bar_width);
                    Cell::from(Line::from(vec![
                        Span::styled(filled, status_style(health.status, theme)),
                        Span::styled(empty, theme.gauge_empty),
                        Span::raw(format!("{:>4}", format!("{:.0}%", share * 100.0))),
                    ]))
                }
                None => Cell::from(Span::styled(DASH, theme.muted)),
            },
            Column::Status => Cell::from(Span::styled(
                health.status.label(),
                status_style(health.status, theme),
            )),
        }
    });
    Row::new(cells.collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LeaseStatus;

    #[test]
    fn every_status_label_fits_its_column() {
        for status in LeaseStatus::ALL {
            assert!(
                status.label().chars().count() <= usize::from(width_of(Column::Status, false)),
                "{status} is cut"
            );
        }
    }
}
