//! The oplog window over time: its length, the write rate, and the lag of the
//! leases that lag most.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Sparkline, Wrap};
use ratatui::Frame;

use super::format::{cluster_clock, rate};
use crate::console::state::{ConsoleState, Series};
use crate::console::theme::Theme;
use crate::model::text::{escape_control, short_duration};
use crate::model::{OplogAccess, Topology};

/// The oplog's size against its maximum and how fast it fills, once read (the time to
/// loss is predicted from them).
fn figures_line<'a>(state: &ConsoleState, theme: &Theme) -> Option<Line<'a>> {
    let stats = state.oplog_stats.as_ref()?;
    let size = |bytes: u64| bytesize::ByteSize(bytes).display().iec().to_string();
    let share = stats.size_bytes as f64 / stats.max_bytes.max(1) as f64 * 100.0;
    let fill = match state.fill_rate {
        Some(r) if (r.high - r.low) < 1.0 => format!("{}/s", size(r.low as u64)),
        Some(r) => format!("{}–{}/s", size(r.low as u64), size(r.high as u64)),
        None => "-".to_string(),
    };
    Some(Line::from(vec![
        Span::styled("size ", theme.muted),
        Span::styled(
            format!(
                "{} of {} ({share:.0}%)",
                size(stats.size_bytes),
                size(stats.max_bytes)
            ),
            theme.base,
        ),
        Span::styled("  filling ", theme.muted),
        Span::styled(fill, theme.base),
    ]))
}

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border)
        .title(Span::styled(" Oplog ", theme.title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    // Where the oplog cannot be read, what the cluster is and what follows, wrapped.
    let unreadable = state
        .topology
        .as_ref()
        .filter(|t| t.oplog != OplogAccess::Readable);
    let shards = state
        .topology
        .as_ref()
        .map(|t| shard_lines(t, usize::from(inner.width), theme))
        .unwrap_or_default();
    // With the window: an oplog that cannot be read has no figures either.
    let figures = figures_line(state, theme).filter(|_| unreadable.is_none());
    // Enough rows for the topology's sentence wrapped, at most six.
    let facts_rows = unreadable.map_or(1 + u16::from(figures.is_some()), |t| {
        let chars = u16::try_from(t.to_string().chars().count()).unwrap_or(u16::MAX);
        (chars / inner.width.max(1) + 2).min(6)
    });
    let shard_rows = u16::try_from(shards.len()).unwrap_or(u16::MAX);
    // What the cluster is and its shards come first; the sparklines only where they fit.
    let spark_rows = if facts_rows + shard_rows + 7 <= inner.height {
        3
    } else {
        0
    };
    let [facts, shards_area, window_spark, ops_spark, lag_title, lags] = Layout::vertical([
        Constraint::Length(facts_rows),
        Constraint::Length(shard_rows),
        Constraint::Length(spark_rows),
        Constraint::Length(spark_rows),
        Constraint::Length(1),
        Constraint::Min(0),
    ])
    .areas(inner);

    let facts_line = match state.window {
        Some(window) => Line::from(vec![
            // As the header writes the window, so the line fits 80 columns whole
            // ("first … last …" cut the server time to "03:").
            Span::styled("window ", theme.muted),
            Span::styled(short_duration(window.length()), theme.base),
            Span::raw("  "),
            Span::styled(cluster_clock(window.first), theme.base),
            Span::styled(" → ", theme.muted),
            Span::styled(cluster_clock(window.last), theme.base),
            Span::styled("  rate ", theme.muted),
            Span::styled(
                state
                    .ops_per_sec
                    .map_or_else(|| "-".to_string(), |r| format!("{} ops/s", rate(r))),
                theme.base,
            ),
            Span::styled("  server time ", theme.muted),
            Span::styled(
                state.server_now().format("%H:%M:%S").to_string(),
                theme.base,
            ),
        ]),
        None => match unreadable {
            Some(topology) => Line::styled(escape_control(&topology.to_string()), theme.warn),
            None => Line::styled("the oplog window has not been read yet", theme.muted),
        },
    };
    let mut facts_lines = vec![facts_line];
    facts_lines.extend(figures);
    frame.render_widget(Paragraph::new(facts_lines).wrap(Wrap { trim: true }), facts);
    frame.render_widget(Paragraph::new(shards), shards_area);
    spark(
        frame,
        window_spark,
        "window length (s)",
        &state.history.window_secs,
        theme,
    );
    spark(frame, ops_spark, "ops/s", &state.history.ops_per_sec, theme);
    frame.render_widget(
        Paragraph::new(Line::styled("lag per lease, worst first", theme.title)),
        lag_title,
    );

    let series = state.history.lag_series();
    if series.is_empty() {
        frame.render_widget(
            Paragraph::new(Line::styled("no lease has a position yet", theme.muted)),
            lags,
        );
        return;
    }
    let name_width = 24u16.min(lags.width / 3);
    let value_width = 8u16;
    for (i, (resource, samples)) in series.iter().take(usize::from(lags.height)).enumerate() {
        let y = lags.y + i as u16;
        let row = Rect {
            y,
            height: 1,
            ..lags
        };
        let [name, line, value] = Layout::horizontal([
            Constraint::Length(name_width),
            Constraint::Min(0),
            Constraint::Length(value_width),
        ])
        .areas(row);
        frame.render_widget(
            Paragraph::new(Span::styled(escape_control(resource), theme.base)),
            name,
        );
        frame.render_widget(
            Sparkline::default()
                .data(samples.values())
                .max(samples.max().max(1))
                .style(theme.gauge_filled),
            line,
        );
        frame.render_widget(
            Paragraph::new(
                Line::from(short_duration(std::time::Duration::from_secs(
                    samples.last().unwrap_or(0),
                )))
                .right_aligned(),
            )
            .style(theme.muted),
            value,
        );
    }
}

/// Through mongos: a title line, then each shard with its window and what to know of
/// it (limits the window, quiet, not read): on its row where it fits in `width`
/// columns, else one note per line below it. Nothing for any other deployment.
fn shard_lines(topology: &Topology, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    if topology.shards.is_empty() {
        return Vec::new();
    }
    let windows = topology.shard_windows();
    let name_width = topology
        .shards
        .iter()
        .map(|s| escape_control(&s.name).chars().count())
        .max()
        .unwrap_or(0);
    let mut lines = vec![Line::styled(
        "shards (the window is what every shard still holds)",
        theme.title,
    )];
    for shard in &topology.shards {
        let mut row = format!("{:<name_width$}  ", escape_control(&shard.name));
        if let Ok(window) = &shard.window {
            row.push_str(&format!(
                "{:>6}  {} → {}",
                short_duration(window.length()),
                cluster_clock(window.first),
                cluster_clock(window.last)
            ));
        }
        let style = if shard.window.is_ok() {
            theme.muted
        } else {
            theme.warn
        };
        let notes: Vec<String> = windows
            .notes(shard)
            .iter()
            .map(|n| escape_control(n))
            .collect();
        let joined = notes.join("; ");
        let row_len = row.chars().count();
        if notes.is_empty() || row_len + 2 + joined.chars().count() <= width {
            lines.push(Line::from(vec![
                Span::styled(row, theme.base),
                Span::styled(
                    if joined.is_empty() {
                        joined
                    } else {
                        format!("  {joined}")
                    },
                    style,
                ),
            ]));
        } else {
            lines.push(Line::styled(row, theme.base));
            let indent = " ".repeat(name_width + 2);
            lines.extend(
                notes
                    .into_iter()
                    .map(|note| Line::styled(format!("{indent}{note}"), style)),
            );
        }
    }
    lines
}

fn spark(frame: &mut Frame, area: Rect, title: &str, series: &Series, theme: &Theme) {
    let [label, line] =
        Layout::horizontal([Constraint::Length(24), Constraint::Min(0)]).areas(area);
    let last = series
        .last()
        .map_or_else(|| "-".to_string(), |v| v.to_string());
    frame.render_widget(
        Paragraph::new(vec![
            Line::styled(title.to_string(), theme.muted),
            Line::styled(last, theme.base),
        ]),
        label,
    );
    frame.render_widget(
        Sparkline::default()
            .data(series.values())
            .max(series.max().max(1))
            .style(theme.gauge_filled),
        line,
    );
}
