//! One lease in full: the document, its decoded token and health, the holder
//! changes seen while watching, and any listener of it running in this process.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;

use super::format::{cluster_clock, duration, status_style, DASH};
use crate::console::state::{ConsoleState, LeaseEntry};
use crate::console::theme::Theme;
use crate::model::text::{clock_and_relative, escape_control};
use crate::model::{
    entry_time, token_entry, unclaimed_explanation, Lease, LeaseStatus, LossTime, ResumeToken,
    SourceKind, TokenVersion, LOSS_WARNING_WITHIN,
};

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let Some(entry) = state.leases.selected() else {
        frame.render_widget(
            Paragraph::new(Line::styled("no lease selected", theme.muted)).block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(theme.border),
            ),
            area,
        );
        return;
    };
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let title = format!(" Lease {} ", escape_control(&entry.lease.resource));
    // Inside the border, after the 12-cell field name.
    let value_width = usize::from(left.width.saturating_sub(2 + 12));
    frame.render_widget(
        Paragraph::new(document_lines(entry, state, value_width, theme))
            .wrap(Wrap { trim: false })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(theme.border_focused)
                    .title(Span::styled(title, theme.title)),
            ),
        left,
    );
    frame.render_widget(
        Paragraph::new(health_lines(entry, state, theme))
            .wrap(Wrap { trim: false })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(theme.border)
                    .title(Span::styled(" Position, holders, listeners ", theme.title)),
            ),
        right,
    );
}

fn field<'a>(name: &'static str, value: String, theme: &Theme) -> Line<'a> {
    Line::from(vec![
        Span::styled(format!("{name:<12}"), theme.muted),
        Span::styled(value, theme.base),
    ])
}

fn document_lines<'a>(
    entry: &'a LeaseEntry,
    state: &ConsoleState,
    value_width: usize,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let lease = &entry.lease;
    let now = state.server_now();
    let date = |value| clock_and_relative(value, now);
    let mut token = token_lines(lease.resume_token.as_ref(), value_width, theme);
    let first_token_line = token.remove(0);
    let mut lines = vec![
        field("_id", escape_control(&lease.resource), theme),
        field(
            "listenerId",
            lease
                .holder
                .as_deref()
                .map_or_else(|| "null".to_string(), escape_control),
            theme,
        ),
        field("expiresAt", date(lease.expires_at), theme),
        field("version", lease.version.to_string(), theme),
        field("kind", lease.kind.to_string(), theme),
        first_token_line,
    ];
    // Only a seed lease says so: every other lease is streamward's own.
    if lease.protocol.is_seed() {
        lines.insert(
            lines.len() - 1,
            field(
                "protocol",
                "seed: written by another implementation (docs/protocol.md)".to_string(),
                theme,
            ),
        );
    }
    lines.extend(token);
    lines.extend([
        field(
            "resumeAt",
            lease
                .resume_at
                .map_or_else(|| "null".to_string(), |t| t.to_string()),
            theme,
        ),
        field("acquiredAt", date(lease.acquired_at), theme),
        field("renewedAt", date(lease.renewed_at), theme),
        field("committedAt", date(lease.committed_at), theme),
        field(
            "watch",
            lease.watch.as_ref().map_or_else(
                || DASH.to_string(),
                |w| {
                    let pipeline = if w.pipeline.is_empty() {
                        String::new()
                    } else {
                        format!(" | {}", escape_control(&w.pipeline))
                    };
                    format!(
                        "{}.{}{pipeline}",
                        escape_control(&w.db),
                        escape_control(&w.coll)
                    )
                },
            ),
            theme,
        ),
        field("source", source_text(lease), theme),
        field(
            "note",
            lease
                .note
                .as_deref()
                .map_or_else(|| DASH.to_string(), escape_control),
            theme,
        ),
        field(
            "invalidated",
            lease.invalidated.as_ref().map_or_else(
                || DASH.to_string(),
                |i| match i.at {
                    Some(at) => format!("{} at {}", escape_control(&i.reason), cluster_clock(at)),
                    None => escape_control(&i.reason),
                },
            ),
            theme,
        ),
        field(
            "failure",
            lease.failure.as_ref().map_or_else(
                || DASH.to_string(),
                |f| match f.attempts {
                    1 => "1 attempt (see the right)".to_string(),
                    n => format!("{n} attempts (see the right)"),
                },
            ),
            theme,
        ),
    ]);
    lines
}

/// The change a lease's listeners fail on: which, why, how often, and the way past it.
fn failure_lines<'a>(
    failure: &crate::model::ChangeFailure,
    now: chrono::DateTime<chrono::Utc>,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let at = failure
        .at
        .map(|t| format!(" at {}", cluster_clock(t)))
        .unwrap_or_default();
    let warn = |name: &'static str, value: String| {
        Line::from(vec![
            Span::styled(format!("{name:<12}"), theme.muted),
            Span::styled(value, theme.warn),
        ])
    };
    vec![
        field(
            "fails on",
            format!(
                "{} {} {}{at}",
                escape_control(&failure.operation),
                escape_control(&failure.namespace),
                escape_control(&failure.document_key)
            ),
            theme,
        ),
        warn("error", escape_control(&failure.error)),
        field(
            "attempts",
            format!(
                "{} ({}), first {}, latest {}",
                failure.attempts,
                failure.cause.as_str(),
                clock_and_relative(Some(failure.first_at), now),
                clock_and_relative(Some(failure.last_at), now)
            ),
            theme,
        ),
        warn(
            "recover",
            "fix the handler (the next attempt goes through), or K skips this one change \
             (kept in the skipped collection; undo brings it back)"
                .to_string(),
        ),
    ]
}

/// What the resource reads, from what its listener recorded: `capped collection
/// shop.events` or `change stream on shop.orders`; a dash before any listener has.
fn source_text(lease: &Lease) -> String {
    match &lease.watch {
        None => DASH.to_string(),
        Some(watch) => {
            let ns = format!(
                "{}.{}",
                escape_control(&watch.db),
                escape_control(&watch.coll)
            );
            match watch.source {
                SourceKind::Capped => format!("capped collection {ns}"),
                SourceKind::ChangeStream => format!("change stream on {ns}"),
            }
        }
    }
}

/// The whole resume token, never shortened: hex in lines of `width` characters under
/// its field name, so it can be read off the screen (or copied with `c`). A capped
/// collection's position is the `_id` of its entry.
fn token_lines<'a>(token: Option<&ResumeToken>, width: usize, theme: &Theme) -> Vec<Line<'a>> {
    let text = match token {
        None => "null".to_string(),
        Some(token) => match (token_entry(token), token.data_hex()) {
            (Some(id), _) => format!("{{_id: ObjectId(\"{}\")}}", id.to_hex()),
            // Escaped first: a corrupt token may hold anything.
            (None, Some(hex)) => escape_control(hex),
            (None, None) => "(not a hex _data token)".into(),
        },
    };
    let chars: Vec<char> = text.chars().collect();
    let chunks: Vec<String> = if width >= 8 {
        chars.chunks(width).map(|c| c.iter().collect()).collect()
    } else {
        vec![text]
    };
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| field(if i == 0 { "resumeToken" } else { "" }, chunk, theme))
        .collect()
}

/// When the resume point may leave the oplog, with the inputs that were missing; or
/// why there is no prediction.
fn loss_lines<'a>(entry: &LeaseEntry, state: &ConsoleState, theme: &Theme) -> Vec<Line<'a>> {
    let Some(loss) = state.time_to_loss(entry) else {
        let why = if entry.lease.resume_point().time().is_none() {
            "no prediction: the resume point has no time to place in the oplog".to_string()
        } else if let Some(unknown) = state
            .loss_unpredicted
            .get(&entry.lease.resource)
            .or(state.loss_unknown.as_ref())
        {
            format!("unknown: {}", escape_control(unknown))
        } else {
            "measuring (reading the oplog's figures)".to_string()
        };
        return vec![Line::from(vec![
            Span::styled(format!("{:<12}", "loss in"), theme.muted),
            Span::styled(why, theme.muted),
        ])];
    };
    let style = match loss.earliest {
        LossTime::AlreadyLost => status_style(LeaseStatus::Lost, theme),
        LossTime::In(soon) if soon < LOSS_WARNING_WITHIN => theme.warn,
        _ => theme.base,
    };
    let range = match (loss.earliest, loss.latest) {
        _ if loss.filling_bound().is_some() => {
            format!("{loss} (at the highest fill rate seen)")
        }
        (LossTime::AlreadyLost, _) => "lost: its entry has left the oplog".to_string(),
        (LossTime::Never, _) => "never at the rates seen (it keeps up with the oplog)".to_string(),
        (earliest, Some(LossTime::Never)) => {
            format!("earliest {earliest}, latest never (at the slowest rates seen it stays)")
        }
        (earliest, Some(latest)) => format!("earliest {earliest}, latest {latest}"),
        (earliest, None) => format!("earliest {earliest}, latest unknown"),
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(format!("{:<12}", "loss in"), theme.muted),
        Span::styled(range, style),
    ])];
    for missing in &loss.missing {
        lines.push(Line::from(vec![
            Span::raw(" ".repeat(12)),
            Span::styled(missing.to_string(), theme.muted),
        ]));
    }
    lines
}

/// The lease's checkpoints, newest first and numbered as `rewind --to-checkpoint N`
/// takes them, or why they are not shown.
fn checkpoint_lines<'a>(resource: &str, state: &ConsoleState, theme: &Theme) -> Vec<Line<'a>> {
    let mut lines = vec![
        Line::raw(""),
        Line::styled("Checkpoints (rewind --to-checkpoint N)", theme.title),
    ];
    let shown = state
        .checkpoints
        .as_ref()
        .filter(|c| c.resource == resource);
    match shown.map(|c| &c.read) {
        None => lines.push(Line::styled("  reading…", theme.muted)),
        Some(Err(error)) => lines.push(Line::styled(
            format!("  cannot read them: {}", escape_control(error)),
            theme.warn,
        )),
        Some(Ok((checkpoints, malformed))) => {
            if checkpoints.is_empty() {
                lines.push(Line::styled(
                    "  none yet (listeners record one per minute by default)",
                    theme.muted,
                ));
            }
            for (n, checkpoint) in checkpoints.iter().enumerate() {
                lines.push(Line::from(vec![
                    Span::styled(format!("  {:>2} ", n + 1), theme.accent),
                    Span::styled(
                        format!("{} ", checkpoint.at.format("%H:%M:%S")),
                        theme.muted,
                    ),
                    Span::styled(format!("v{:<5} ", checkpoint.version), theme.accent),
                    Span::styled(
                        match (checkpoint.token.decode(), checkpoint.token.recorded_time()) {
                            (Ok(decoded), _) => cluster_clock(decoded.time),
                            // A capped collection's position: its entry's time.
                            (Err(_), _) if token_entry(&checkpoint.token).is_some() => {
                                checkpoint.token.time().map_or_else(
                                    || DASH.to_string(),
                                    |t| format!("entry {}", cluster_clock(t)),
                                )
                            }
                            // A Cosmos DB token: the document time recorded beside it.
                            (Err(_), Some(at)) => format!("doc {}", at.format("%H:%M:%S")),
                            (Err(_), None) => DASH.to_string(),
                        },
                        theme.base,
                    ),
                    Span::styled(
                        format!("  {}", escape_control(&checkpoint.holder)),
                        theme.muted,
                    ),
                ]));
            }
            if *malformed > 0 {
                lines.push(Line::styled(
                    format!("  {malformed} unreadable checkpoint document(s) not shown"),
                    theme.warn,
                ));
            }
        }
    }
    lines
}

fn health_lines<'a>(entry: &'a LeaseEntry, state: &ConsoleState, theme: &Theme) -> Vec<Line<'a>> {
    let lease = &entry.lease;
    let health = &entry.health;
    let capped_position = lease.resume_token.as_ref().and_then(token_entry);
    let decoded = match &lease.resume_token {
        None => "no token: resumes from resumeAt, else the oldest entry".to_string(),
        Some(_) if capped_position.is_some() => DASH.to_string(),
        Some(token) => match token.decode() {
            Ok(d) => format!(
                "{} (token {})",
                d.time,
                match d.version {
                    TokenVersion::V0 => "v0",
                    TokenVersion::V1 => "v1",
                    TokenVersion::V2 => "v2",
                }
            ),
            Err(e) => escape_control(&e.to_string()),
        },
    };
    let mut lines = vec![
        field(
            "token time",
            health
                .token_time
                .map_or_else(|| DASH.to_string(), cluster_clock),
            theme,
        ),
        match capped_position {
            // After this entry, in the collection's insertion order, and the entry's
            // time (its ObjectId's, whole seconds).
            Some(id) => field(
                "position",
                format!("after {} ({})", id.to_hex(), cluster_clock(entry_time(&id))),
                theme,
            ),
            None => field("decoded", decoded, theme),
        },
        field("lag", duration(health.lag), theme),
        field(
            "left",
            match health.pending {
                Some(crate::model::Pending::Counted(0)) => "nothing: caught up".to_string(),
                Some(crate::model::Pending::AtMost(n)) => {
                    format!("at most {n} changes (its pipeline or partition may filter them out)")
                }
                Some(pending) => format!("{pending} changes"),
                None => "not counted".to_string(),
            },
            theme,
        ),
        field(
            "headroom",
            match (health.headroom, health.headroom_share) {
                (Some(h), Some(s)) => format!(
                    "{} ({:.0}% of the window)",
                    crate::model::text::short_duration(h),
                    s * 100.0
                ),
                _ => DASH.to_string(),
            },
            theme,
        ),
    ];
    lines.extend(loss_lines(entry, state, theme));
    if let Some(risk) = health.risk {
        lines.push(field("risk", risk.label().to_string(), theme));
    }
    lines.push(Line::from(vec![
        Span::styled(format!("{:<12}", "status"), theme.muted),
        Span::styled(health.status.label(), status_style(health.status, theme)),
    ]));
    if health.status == LeaseStatus::Unclaimed {
        if let Some(unclaimed) = state.thresholds.unclaimed_for(lease, state.server_now()) {
            lines.push(Line::from(vec![
                Span::styled(format!("{:<12}", "why"), theme.muted),
                Span::styled(
                    unclaimed_explanation(&escape_control(&lease.resource), unclaimed),
                    theme.warn,
                ),
            ]));
        }
    }
    if let Some(failure) = &lease.failure {
        lines.extend(failure_lines(failure, state.server_now(), theme));
    }
    if let Some(invalidated) = &lease.invalidated {
        // The stream was closed for good: what happened, and the way out.
        lines.push(field("closed", escape_control(&invalidated.reason), theme));
        lines.push(Line::from(vec![
            Span::styled(format!("{:<12}", "recover"), theme.muted),
            Span::styled(
                invalidated.recovery(&escape_control(&lease.resource)),
                theme.warn,
            ),
        ]));
    }
    // The listeners here first: their last error is what the operator came for.
    if state.mode.runs_listeners() {
        lines.push(Line::raw(""));
        lines.push(Line::styled("Listeners in this process", theme.title));
        let here: Vec<_> = state
            .listeners
            .iter()
            .filter(|l| l.resource == lease.resource)
            .collect();
        if here.is_empty() {
            lines.push(Line::styled("  none", theme.muted));
        }
        for listener in here {
            lines.push(Line::from(vec![
                Span::styled(format!("  {:<12}", listener.state.label()), theme.accent),
                Span::styled(escape_control(&listener.listener_id), theme.base),
                Span::styled(
                    format!("  {} events, {} commits", listener.events, listener.commits),
                    theme.muted,
                ),
            ]));
            if let Some(last) = listener
                .last_change
                .as_deref()
                .map(crate::engine::LastChange::of)
            {
                let when = last.wall_time.map_or_else(
                    || {
                        last.cluster_time
                            .map_or_else(String::new, |t| format!(" at {t}"))
                    },
                    |at| format!(" at {}", at.format("%H:%M:%S%.3fZ")),
                );
                lines.push(Line::from(vec![
                    Span::styled("    last change: ", theme.muted),
                    Span::styled(
                        escape_control(&format!(
                            "{} {} {}{when}",
                            last.operation, last.ns, last.key
                        )),
                        theme.base,
                    ),
                ]));
            }
            // The whole last error, wrapped: the listeners table has room for its start.
            if let Some(error) = &listener.last_error {
                lines.push(Line::from(vec![
                    Span::styled("    last error: ", theme.muted),
                    Span::styled(escape_control(error), theme.danger),
                ]));
            }
        }
    }
    lines.extend(checkpoint_lines(&entry.lease.resource, state, theme));
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "Holder changes seen while watching",
        theme.title,
    ));
    if entry.changes.is_empty() {
        lines.push(Line::styled("  none yet", theme.muted));
    }
    for change in entry.changes.iter().rev() {
        lines.push(Line::from(vec![
            Span::styled(format!("  {} ", change.at.format("%H:%M:%S")), theme.muted),
            Span::styled(format!("v{:<5} ", change.version), theme.accent),
            Span::styled(
                change
                    .holder
                    .as_deref()
                    .map_or_else(|| "(released)".to_string(), escape_control),
                theme.base,
            ),
        ]));
    }
    lines
}
