//! Recent operator actions, newest first, and the selected one's before and after.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

use super::format::DASH;
use crate::console::layout;
use crate::console::state::{visible_start, ConsoleState};
use crate::console::theme::Theme;
use crate::model::text::escape_control;
use crate::model::{AuditRecord, Lease};

const HEADERS: [&str; 6] = [
    "TIME", "OPERATOR", "ACTION", "RESOURCE", "OUTCOME", "REASON",
];

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let (list_area, detail_area) = layout::split_list(area);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Span::styled(
            format!(" Audit: last {} operator actions ", state.audit.len()),
            theme.title,
        ));
    if state.audit.is_empty() {
        frame.render_widget(
            Paragraph::new(Line::styled("no operator action recorded yet", theme.muted))
                .block(block),
            area,
        );
        return;
    }
    let (_, height) = layout::table_rows(list_area);
    let cursor = state.audit_cursor;
    let start = visible_start(cursor.selected, cursor.offset, height, state.audit.len());
    let rows: Vec<Row> = state
        .audit
        .iter()
        .skip(start)
        .take(height)
        .map(|r| {
            Row::new(vec![
                Cell::from(r.at.format("%m-%d %H:%M:%S").to_string()),
                Cell::from(escape_control(&r.operator)),
                Cell::from(escape_control(&r.action)),
                Cell::from(escape_control(&r.resource)),
                Cell::from(escape_control(&r.outcome)),
                Cell::from(
                    r.reason
                        .as_deref()
                        .map_or_else(|| DASH.to_string(), escape_control),
                ),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(14),
        Constraint::Fill(2),
        Constraint::Length(12),
        Constraint::Fill(2),
        Constraint::Fill(2),
        Constraint::Fill(3),
    ];
    let table = Table::new(rows, widths)
        .header(Row::new(HEADERS).style(theme.title))
        .block(block)
        .column_spacing(1)
        .style(theme.base)
        .row_highlight_style(theme.selection);
    let mut table_state = TableState::default().with_selected(Some(cursor.selected - start));
    frame.render_stateful_widget(table, list_area, &mut table_state);
    if let Some(record) = state.audit.get(cursor.selected) {
        draw_record(frame, detail_area, record, theme);
    }
}

fn draw_record(frame: &mut Frame, area: Rect, record: &AuditRecord, theme: &Theme) {
    let [before, after] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    for (title, lease, target) in [
        (" Before ", record.before.as_ref(), before),
        (" After ", record.after.as_ref(), after),
    ] {
        frame.render_widget(
            Paragraph::new(lease_summary(lease, theme))
                .wrap(Wrap { trim: false })
                .block(
                    Block::default()
                        .borders(Borders::ALL)
                        .border_style(theme.border)
                        .title(Span::styled(
                            format!("{title}({}) ", escape_control(&record.id)),
                            theme.title,
                        )),
                ),
            target,
        );
    }
}

fn lease_summary<'a>(lease: Option<&Lease>, theme: &Theme) -> Vec<Line<'a>> {
    let Some(lease) = lease else {
        return vec![Line::styled("no lease document", theme.muted)];
    };
    let line = |name: &str, value: String| {
        Line::from(vec![
            Span::styled(format!("{name:<12}"), theme.muted),
            Span::styled(value, theme.base),
        ])
    };
    vec![
        line(
            "listenerId",
            lease
                .holder
                .as_deref()
                .map_or_else(|| "null".to_string(), escape_control),
        ),
        line("version", lease.version.to_string()),
        line("kind", lease.kind.to_string()),
        line(
            "resume",
            escape_control(&crate::ops::describe_point(&lease.resume_point())),
        ),
    ]
}
