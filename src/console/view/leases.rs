//! The home view: one row per lease, only the visible rows built.

use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use super::format::{bar, cluster_clock, fit, status_style, text_width, DASH};
use crate::console::layout;
use crate::console::state::{resource_label, visible_start, Column, ConsoleState, LeaseEntry};
use crate::console::theme::Theme;
use crate::model::text::{escape_control, relative_time};
use crate::model::{token_time_cell, LeaseStatus, LossTime, LOSS_WARNING_WITHIN};

/// Widths of the fixed columns; resource and holder share what is left.
fn width_of(column: Column, wide: bool) -> u16 {
    match column {
        Column::Kind => 6,
        // `stream`, `capped`.
        Column::Source => 6,
        Column::Version => 6,
        Column::Expires => 9,
        Column::LastCommit => 9,
        Column::TokenTime => 8,
        // `≥1000 left · 9d23h` in the widest layout; up to 9999d23h otherwise.
        Column::Lag if wide => 18,
        Column::Lag => 8,
        Column::Headroom if wide => 17,
        Column::Headroom => 10,
        // `59m–never` ([`crate::model::TimeToLoss::compact`]).
        Column::LossIn => 9,
        // The longest label, INVALIDATED.
        Column::Status => 11,
        Column::Resource | Column::Holder => 0,
    }
}

/// Space between columns.
const SPACING: u16 = 1;

/// Resource and holder ask for at most this many cells each before the optional
/// columns may take the rest; longer values are cut with `…` in every layout.
pub const NAME_CAP: u16 = 32;

/// The layout of the leases table: the columns shown and their widths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnLayout {
    pub columns: Vec<(Column, u16)>,
    /// The headroom bar is the wide one.
    pub wide: bool,
}

#[cfg(test)]
impl ColumnLayout {
    pub fn width(&self, column: Column) -> Option<u16> {
        self.columns
            .iter()
            .find(|(c, _)| *c == column)
            .map(|&(_, w)| w)
    }
}

/// The columns for a table `width` cells wide whose visible resources and holders
/// are `resource` and `holder` cells long at most.
///
/// The optional columns (time to loss, token time, kind, source, last commit, then
/// the wide headroom bar)
/// are added, in that order, only while resource and holder still get all they ask
/// for (up to [`NAME_CAP`]); until then they share what the base columns leave. So a
/// wider terminal never shows less of a resource or a holder than a narrower one, and
/// the widest terminals get the widest layout.
pub fn columns_for(width: u16, resource: u16, holder: u16) -> ColumnLayout {
    let need = (
        resource.clamp(Column::Resource.label().len() as u16 + 1, NAME_CAP),
        holder.clamp(Column::Holder.label().len() as u16 + 1, NAME_CAP),
    );
    let base = [
        Column::Resource,
        Column::Holder,
        Column::Version,
        Column::Expires,
        Column::Lag,
        Column::Headroom,
        Column::Status,
    ];
    // Each step adds to the one before; the last one that fits wins.
    let steps: [(&[Column], bool); 7] = [
        (&[], false),
        (&[Column::LossIn], false),
        (&[Column::LossIn, Column::TokenTime], false),
        (&[Column::LossIn, Column::TokenTime, Column::Kind], false),
        (
            &[
                Column::LossIn,
                Column::TokenTime,
                Column::Kind,
                Column::Source,
            ],
            false,
        ),
        (
            &[
                Column::LossIn,
                Column::TokenTime,
                Column::Kind,
                Column::Source,
                Column::LastCommit,
            ],
            false,
        ),
        (
            &[
                Column::LossIn,
                Column::TokenTime,
                Column::Kind,
                Column::Source,
                Column::LastCommit,
            ],
            true,
        ),
    ];
    let free_for_names = |extra: &[Column], wide: bool| -> i32 {
        let shown: Vec<Column> = Column::ALL
            .into_iter()
            .filter(|c| base.contains(c) || extra.contains(c))
            .collect();
        let fixed: i32 = shown.iter().map(|&c| i32::from(width_of(c, wide))).sum();
        let gaps = i32::from(SPACING) * (shown.len() as i32 - 1);
        i32::from(width) - fixed - gaps
    };
    let (extra, wide) = steps
        .iter()
        .rev()
        .find(|(extra, wide)| free_for_names(extra, *wide) >= i32::from(need.0 + need.1))
        .copied()
        .unwrap_or(steps[0]);
    let free = u16::try_from(free_for_names(extra, wide).max(0)).unwrap_or(0);
    let (resource_width, holder_width) = share(free, need.0, need.1);
    let columns = Column::ALL
        .into_iter()
        .filter(|c| base.contains(c) || extra.contains(c))
        .map(|c| {
            let w = match c {
                Column::Resource => resource_width,
                Column::Holder => holder_width,
                other => width_of(other, wide),
            };
            (c, w)
        })
        .collect();
    ColumnLayout { columns, wide }
}

/// Splits `free` cells between two columns that ask for `a` and `b`: each gets what
/// it asks when both fit (the rest is shared), else the smaller ask is met when it is
/// at most half, else half each. Neither share shrinks when `free` grows.
fn share(free: u16, a: u16, b: u16) -> (u16, u16) {
    if free >= a + b {
        let left = a + (free - a - b) / 2;
        (left, free - left)
    } else if a <= free / 2 {
        (a, free - a)
    } else if b <= free / 2 {
        (free - b, b)
    } else {
        (free / 2, free - free / 2)
    }
}

/// The holder as its cell shows it: in parentheses once its lease has expired.
fn holder_text(entry: &LeaseEntry, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    let lease = &entry.lease;
    match (&lease.holder, lease.live_holder(now)) {
        (_, Some(holder)) => Some(escape_control(holder)),
        (Some(holder), None) => Some(format!("({})", escape_control(holder))),
        (None, None) => None,
    }
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
    let vanished = table.vanished();
    if !vanished.is_empty() {
        title.push(Span::styled(
            format!("· {} GONE ", vanished.len()),
            theme.danger,
        ));
    }
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Line::from(title));

    if table.shown() == 0 {
        let (message, style) = match (table.is_empty(), vanished.is_empty()) {
            (true, false) => (vanished_text(vanished), theme.danger),
            (true, true) => (
                "no leases yet: waiting for the lease collection".to_string(),
                theme.muted,
            ),
            (false, _) => (
                "no lease matches the filter (esc clears it)".to_string(),
                theme.muted,
            ),
        };
        frame.render_widget(
            Paragraph::new(Line::styled(message, style))
                .wrap(ratatui::widgets::Wrap { trim: true })
                .block(block),
            area,
        );
        return;
    }

    let (_, height) = layout::table_rows(area);
    let selected = table.selected_index().unwrap_or(0);
    let start = visible_start(selected, table.offset(), height, table.shown());
    let now = state.server_now();
    // Only the visible rows are measured: a frame costs what it draws.
    let (mut resource_need, mut holder_need) = (0, 0);
    let mut previous: Option<&str> = None;
    for entry in table.rows(start, height) {
        let label = resource_label(&entry.lease.resource, previous);
        previous = Some(&entry.lease.resource);
        resource_need = resource_need.max(text_width(&escape_control(&label)));
        holder_need = holder_need.max(holder_text(entry, now).map_or(0, |h| text_width(&h)));
    }
    let cap = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
    let layout = columns_for(
        area.width.saturating_sub(2),
        cap(resource_need),
        cap(holder_need),
    );
    let row_style = if state.is_stale() {
        theme.stale
    } else {
        theme.base
    };
    // A resource's partition leases are shown together, each under the one before.
    let mut previous: Option<&str> = None;
    let rows: Vec<Row> = table
        .rows(start, height)
        .map(|entry| {
            let label = resource_label(&entry.lease.resource, previous);
            previous = Some(&entry.lease.resource);
            row(entry, label, &layout, state, theme).style(row_style)
        })
        .collect();
    let widths: Vec<Constraint> = layout
        .columns
        .iter()
        .map(|&(_, w)| Constraint::Length(w))
        .collect();
    let header = Row::new(layout.columns.iter().map(|&(c, w)| {
        let marker = if c == sort {
            if descending {
                "↓"
            } else {
                "↑"
            }
        } else {
            ""
        };
        Cell::from(fit(&format!("{}{marker}", c.label()), usize::from(w)))
    }))
    .style(theme.title);
    let widget = Table::new(rows, widths)
        .header(header)
        .block(block)
        .column_spacing(SPACING)
        .row_highlight_style(theme.selection);
    let mut table_state = TableState::default().with_selected(Some(selected - start));
    frame.render_stateful_widget(widget, area, &mut table_state);
}

fn row<'a>(
    entry: &'a LeaseEntry,
    label: String,
    layout: &ColumnLayout,
    state: &ConsoleState,
    theme: &Theme,
) -> Row<'a> {
    let lease = &entry.lease;
    let health = &entry.health;
    let now = state.server_now();
    let cells = layout.columns.iter().map(|&(column, width)| -> Cell {
        let width = usize::from(width);
        let text = |value: String| fit(&value, width);
        match column {
            Column::Resource => Cell::from(text(escape_control(&label))),
            Column::Kind => {
                let style = if lease.kind == crate::model::LockKind::Bulk {
                    theme.warn
                } else {
                    Style::default()
                };
                Cell::from(Span::styled(text(lease.kind.as_str().into()), style))
            }
            Column::Source => match lease.source() {
                Some(source) => Cell::from(text(source.as_str().into())),
                None => Cell::from(Span::styled(DASH, theme.muted)),
            },
            Column::Holder => match (holder_text(entry, now), lease.live_holder(now)) {
                (Some(holder), Some(_)) => Cell::from(text(holder)),
                (Some(holder), None) => Cell::from(Span::styled(text(holder), theme.muted)),
                (None, _) => Cell::from(Span::styled(DASH, theme.muted)),
            },
            Column::Version => {
                Cell::from(Line::from(text(lease.version.to_string())).right_aligned())
            }
            Column::Expires => Cell::from(text(
                lease
                    .expires_at
                    .map_or_else(|| DASH.to_string(), |at| relative_time(at, now)),
            )),
            Column::LastCommit => Cell::from(text(
                lease
                    .committed_at
                    .map_or_else(|| DASH.to_string(), |at| relative_time(at, now)),
            )),
            Column::TokenTime => Cell::from(text(token_time_cell(
                lease,
                health.token_time,
                cluster_clock,
            ))),
            Column::Lag => {
                Cell::from(Line::from(text(health.lag_text_within(width))).right_aligned())
            }
            Column::Headroom => match health.headroom_share {
                Some(share) => {
                    let bar_width = width.saturating_sub(5);
                    let (filled, empty) = bar(share, bar_width);
                    Cell::from(Line::from(vec![
                        Span::styled(filled, status_style(health.status, theme)),
                        Span::styled(empty, theme.gauge_empty),
                        Span::raw(format!("{:>4}", format!("{:.0}%", share * 100.0))),
                    ]))
                }
                None => Cell::from(Span::styled(DASH, theme.muted)),
            },
            Column::LossIn => match state.time_to_loss(entry) {
                Some(loss) => {
                    let style = match loss.earliest {
                        LossTime::AlreadyLost => status_style(LeaseStatus::Lost, theme),
                        LossTime::In(soon) if soon < LOSS_WARNING_WITHIN => theme.warn,
                        _ => Style::default(),
                    };
                    Cell::from(Span::styled(text(loss.compact()), style))
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

/// What the empty table says when leases listed before are gone.
fn vanished_text(vanished: &std::collections::BTreeMap<String, i64>) -> String {
    let names: Vec<String> = vanished
        .iter()
        .take(5)
        .map(|(resource, version)| format!("{} (v{version})", escape_control(resource)))
        .collect();
    let more = vanished.len().saturating_sub(names.len());
    format!(
        "the {} leases listed before are gone: {}{}. Deleted, or their collection dropped: \
         listeners that saw them stop rather than recreate them at version 0 \
         (docs/explanation/listener.md §9a)",
        vanished.len(),
        names.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::LeaseStatus;

    #[test]
    fn a_wider_table_never_shows_less_of_a_resource_or_a_holder() {
        let asks = [
            (8u16, 6u16),
            (11, 17),
            (17, 17),
            (14, 30),
            (32, 32),
            (40, 9),
        ];
        for (resource, holder) in asks {
            let shown = |width: u16, column: Column, ask: u16| {
                let layout = columns_for(width, resource, holder);
                let total: u16 = layout.columns.iter().map(|&(_, w)| w).sum::<u16>()
                    + SPACING * (layout.columns.len() as u16 - 1);
                assert!(
                    total <= width.max(78),
                    "{width}: {layout:?} is {total} wide"
                );
                layout.width(column).unwrap().min(ask.min(NAME_CAP))
            };
            let mut previous = columns_for(78, resource, holder).columns.len();
            for width in 78..400u16 {
                for (column, ask) in [(Column::Resource, resource), (Column::Holder, holder)] {
                    assert!(
                        shown(width + 1, column, ask) >= shown(width, column, ask),
                        "{column:?} asking {ask} shows less at {} than at {width}",
                        width + 1
                    );
                }
                let columns = columns_for(width, resource, holder).columns.len();
                assert!(columns >= previous, "a column went away at {width}");
                previous = columns;
            }
            let widest = columns_for(400, resource, holder);
            assert!(widest.wide && widest.columns.len() == Column::ALL.len());
        }
    }

    #[test]
    fn names_are_shared_by_what_they_ask() {
        assert_eq!(share(40, 10, 20), (15, 25));
        assert_eq!(share(20, 8, 30), (8, 12));
        assert_eq!(share(20, 30, 8), (12, 8));
        assert_eq!(share(20, 30, 30), (10, 10));
    }

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
