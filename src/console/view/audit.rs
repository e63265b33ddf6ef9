//! Recent operator actions, newest first, and the selected one's before and after.

use chrono::{DateTime, Utc};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

use super::format::{fit, table_widths, DASH};
use crate::console::layout;
use crate::console::state::{visible_start, ConsoleState};
use crate::console::theme::Theme;
use crate::model::text::escape_control;
use crate::model::{AuditRecord, AuditState, Lease};

const HEADERS: [&str; 7] = [
    "TIME", "OPERATOR", "ACTION", "RESOURCE", "STATE", "OUTCOME", "REASON",
];

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let (list_area, detail_area) = layout::split_list(area);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Span::styled(
            match state.audit.len() {
                1 => " Audit: the last operator action ".to_string(),
                n => format!(" Audit: last {n} operator actions "),
            },
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
    let widths = [
        Constraint::Length(14),
        Constraint::Fill(2),
        Constraint::Length(12),
        Constraint::Fill(2),
        Constraint::Length(11),
        Constraint::Fill(2),
        Constraint::Fill(3),
    ];
    let cells = table_widths(&widths, list_area.width, 1);
    let fit_to = |column: usize, text: String| fit(&text, cells.get(column).copied().unwrap_or(0));
    let rows: Vec<Row> = state
        .audit
        .iter()
        .skip(start)
        .take(height)
        .map(|r| {
            Row::new(vec![
                Cell::from(r.at.format("%m-%d %H:%M:%S").to_string()),
                Cell::from(fit_to(1, escape_control(&r.operator))),
                Cell::from(fit_to(2, escape_control(&r.action))),
                Cell::from(fit_to(3, escape_control(&r.resource))),
                state_cell(r, theme),
                Cell::from(fit_to(5, escape_control(&r.outcome))),
                Cell::from(fit_to(
                    6,
                    r.reason
                        .as_deref()
                        .map_or_else(|| DASH.to_string(), escape_control),
                )),
            ])
        })
        .collect();
    let table = Table::new(rows, widths)
        .header(Row::new(HEADERS).style(theme.title))
        .block(block)
        .column_spacing(1)
        .style(theme.base)
        .row_highlight_style(theme.selection);
    let mut table_state = TableState::default().with_selected(Some(cursor.selected - start));
    frame.render_stateful_widget(table, list_area, &mut table_state);
    if let Some(record) = state.audit.get(cursor.selected) {
        let now = state.leases.get(&record.resource).map(|e| &e.lease);
        draw_record(frame, detail_area, record, now, state.server_now(), theme);
    }
}

fn state_cell<'a>(record: &AuditRecord, theme: &Theme) -> Cell<'a> {
    let style = match record.state {
        AuditState::Applied => theme.base,
        AuditState::NotApplied => theme.muted,
        AuditState::Pending => theme.warn,
        AuditState::Failed => theme.danger,
    };
    Cell::from(Span::styled(record.state.as_str().to_uppercase(), style))
}

fn draw_record(
    frame: &mut Frame,
    area: Rect,
    record: &AuditRecord,
    now: Option<&Lease>,
    at: DateTime<Utc>,
    theme: &Theme,
) {
    // A pending record says first what it means now and what to do.
    let area = match record.judge_pending(now, at) {
        Some(judgment) => {
            let text = format!(
                "PENDING ({}): {}",
                judgment.verdict.as_str(),
                escape_control(&judgment.recovery)
            );
            let width = usize::from(area.width.saturating_sub(2).max(1));
            let lines = (text.chars().count().div_ceil(width)).clamp(1, 4);
            let height = u16::try_from(lines).unwrap_or(4) + 2;
            let [note, rest] =
                Layout::vertical([Constraint::Length(height), Constraint::Fill(1)]).areas(area);
            frame.render_widget(
                Paragraph::new(Line::styled(text, theme.warn))
                    .wrap(Wrap { trim: false })
                    .block(
                        Block::default()
                            .borders(Borders::ALL)
                            .border_style(theme.border),
                    ),
                note,
            );
            rest
        }
        None => area,
    };
    // What was done to which resource, the reason and the outcome, whole: the table
    // has room for their start only (at 80 columns `shop.ma…`).
    let text = format!(
        "{} {} · reason: {} · outcome: {}",
        escape_control(&record.action),
        escape_control(&record.resource),
        record
            .reason
            .as_deref()
            .map_or_else(|| DASH.to_string(), escape_control),
        escape_control(&record.outcome)
    );
    let width = usize::from(area.width.max(1));
    let lines = text.chars().count().div_ceil(width).clamp(1, 3);
    let [said, area] = Layout::vertical([
        Constraint::Length(u16::try_from(lines).unwrap_or(3)),
        Constraint::Fill(1),
    ])
    .areas(area);
    frame.render_widget(
        Paragraph::new(Line::styled(text, theme.base)).wrap(Wrap { trim: false }),
        said,
    );
    let [before, after] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    // Pending with no step done: what its write means to leave, not "no lease".
    let (after_title, after_lease) = match (&record.after, record.state) {
        (None, AuditState::Pending) => (" Intended ", record.intended.as_ref()),
        (after, _) => (" After ", after.as_ref()),
    };
    for (title, lease, target) in [
        (" Before ", record.before.as_ref(), before),
        (after_title, after_lease, after),
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
