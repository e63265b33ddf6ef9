//! The guarded-action dialog over the current view.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Gauge, Paragraph, Wrap};
use ratatui::Frame;

use crate::console::state::{Button, ConsoleState, Dialog, RunningStage, Target};
use crate::console::theme::Theme;
use crate::model::text::escape_control;
use crate::ops::describe::lease_diff;
use crate::ops::{ActionKind, Plan};

pub fn draw(frame: &mut Frame, area: Rect, state: &ConsoleState, theme: &Theme) {
    let Some(dialog) = &state.dialog else {
        return;
    };
    let width = area.width.saturating_sub(4).min(100);
    let height = area.height.saturating_sub(2).min(28);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    frame.render_widget(Clear, popup);
    let (title, lines) = match dialog {
        Dialog::Ask { target, text } => (
            format!(" rewind {} ", escape_control(&target.resource)),
            vec![
                captured_line(Some(target), theme),
                Line::raw(""),
                Line::styled(
                    "Rewind by how long? (e.g. 10m, 1h30m; the changes since are replayed)",
                    theme.base,
                ),
                Line::from(vec![
                    Span::styled("> ", theme.accent),
                    Span::styled(text.clone(), theme.base),
                    Span::styled("▏", theme.accent),
                ]),
                Line::raw(""),
                Line::styled(
                    "enter plans it (nothing is written yet) · esc cancels",
                    theme.muted,
                ),
            ],
        ),
        Dialog::Planning { target, request } => (
            format!(" {} ", request.kind()),
            vec![
                captured_line(target.as_ref(), theme),
                Line::raw(""),
                Line::styled(
                    "reading the lease, the oplog window and the changes it affects…",
                    theme.muted,
                ),
            ],
        ),
        Dialog::Preview {
            target,
            plan,
            focus,
            typed,
        } => {
            let block = block(
                format!(
                    " {} {} ",
                    plan.action,
                    escape_control(plan.resource.as_deref().unwrap_or("?"))
                ),
                theme,
            );
            let inner = block.inner(popup);
            frame.render_widget(block, popup);
            // The confirmation and the buttons stay visible however long the plan is.
            let footer = footer_lines(target.as_ref(), plan, *focus, typed, theme);
            let [body, bottom] =
                Layout::vertical([Constraint::Min(0), Constraint::Length(footer.len() as u16)])
                    .areas(inner);
            let compact = body.height < 20;
            frame.render_widget(
                Paragraph::new(preview_lines(target.as_ref(), plan, compact, theme))
                    .wrap(Wrap { trim: false }),
                body,
            );
            frame.render_widget(Paragraph::new(footer), bottom);
            return;
        }
        Dialog::Running {
            action,
            resource,
            progress,
            stage,
        } => {
            let block = block(format!(" {action} {} ", escape_control(resource)), theme);
            let inner = block.inner(popup);
            frame.render_widget(block, popup);
            let [text, gauge] =
                Layout::vertical([Constraint::Length(3), Constraint::Length(1)]).areas(inner);
            let status = match (action, stage) {
                (ActionKind::Rebuild, RunningStage::Working) => {
                    "rebuilding under the bulk lock · esc cancels · q quits (both ask first)"
                }
                (ActionKind::Rebuild, RunningStage::ConfirmCancel) => {
                    "cancel it? the lease then stays bulk (STUCK BULK) until a re-run or abort-bulk · y cancels · n keeps it running"
                }
                (ActionKind::Rebuild, RunningStage::ConfirmQuit) => {
                    "quit? the rebuild is cancelled first and its lease stays bulk (STUCK BULK) · y quits · n keeps it running"
                }
                (_, RunningStage::Cancelling) => {
                    "cancelling: the lease stays bulk (STUCK BULK) until a re-run or abort-bulk"
                }
                _ => "writing…",
            };
            let stage = progress
                .as_ref()
                .map(|p| escape_control(&p.stage))
                .unwrap_or_default();
            frame.render_widget(
                Paragraph::new(vec![
                    Line::styled(status, theme.base),
                    Line::styled(stage, theme.muted),
                ])
                .wrap(Wrap { trim: true }),
                text,
            );
            if let Some(p) = progress {
                let ratio = match p.total {
                    Some(total) if total > 0 => (p.done as f64 / total as f64).clamp(0.0, 1.0),
                    _ => 0.0,
                };
                let label = match p.total {
                    Some(total) => format!("{} / {total}", p.done),
                    None => p.done.to_string(),
                };
                frame.render_widget(
                    Gauge::default()
                        .ratio(ratio)
                        .label(label)
                        .gauge_style(theme.gauge_filled),
                    gauge,
                );
            }
            return;
        }
    };
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block(title, theme)),
        popup,
    );
}

fn block<'a>(title: String, theme: &Theme) -> Block<'a> {
    Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border_focused)
        .style(theme.base)
        .title(Span::styled(title, theme.title))
}

fn captured_line<'a>(target: Option<&Target>, theme: &Theme) -> Line<'a> {
    match target {
        Some(t) => Line::styled(
            format!(
                "opened on {} at version {}, held by {}",
                escape_control(&t.resource),
                t.version,
                t.holder
                    .as_deref()
                    .map_or_else(|| "nobody".to_string(), escape_control)
            ),
            theme.muted,
        ),
        None => Line::styled("opened on the selected audit record", theme.muted),
    }
}

/// The plan: captured target, the lease fields (only the changed ones when
/// `compact`), the effect, warnings, and why it is blocked if it is.
fn preview_lines<'a>(
    target: Option<&Target>,
    plan: &Plan,
    compact: bool,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let mut lines = vec![captured_line(target, theme)];
    if let (Some(before), Some(after)) = (&plan.before, &plan.after) {
        for row in lease_diff(before, after, plan.planned_at) {
            if compact && !row.changed {
                continue;
            }
            let style = if row.changed {
                theme.accent
            } else {
                theme.muted
            };
            lines.push(Line::from(vec![
                Span::styled(format!("{:<12}", row.field), theme.muted),
                Span::styled(row.before, theme.base),
                Span::styled(if row.changed { "  →  " } else { "     " }, style),
                Span::styled(
                    if row.changed {
                        row.after
                    } else {
                        String::new()
                    },
                    style,
                ),
            ]));
        }
    }
    for effect in &plan.effect.lines {
        lines.push(Line::styled(format!("• {effect}"), theme.base));
    }
    for warning in &plan.warnings {
        lines.push(Line::styled(format!("! {warning}"), theme.warn));
    }
    if let Some(reason) = Dialog::blocked(target, plan) {
        lines.push(Line::styled(format!("✗ {reason}"), theme.danger));
    }
    lines
}

/// What to type, and the buttons, with Cancel first and focused when the dialog opens.
fn footer_lines<'a>(
    target: Option<&Target>,
    plan: &Plan,
    focus: Button,
    typed: &str,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let blocked = Dialog::blocked(target, plan).is_some();
    let mut lines = Vec::new();
    if let (Some(expected), false) = (plan.confirm_text(), blocked) {
        lines.push(Line::from(vec![
            Span::styled(
                format!("type {} to confirm: ", escape_control(expected)),
                theme.warn,
            ),
            Span::styled(escape_control(typed), theme.base),
            Span::styled("▏", theme.accent),
        ]));
    }
    let button = |label: &'static str, this: Button| {
        Span::styled(
            format!("[ {label} ]"),
            if focus == this {
                theme.selection
            } else {
                theme.muted
            },
        )
    };
    let mut buttons = vec![button("Cancel", Button::Cancel)];
    if !blocked {
        buttons.push(Span::raw("  "));
        buttons.push(button("Apply", Button::Apply));
    }
    buttons.push(Span::styled(
        "   tab switches · enter chooses · esc cancels",
        theme.muted,
    ));
    lines.push(Line::from(buttons));
    lines
}
