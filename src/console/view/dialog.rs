//! The guarded-action dialog over the current view.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Gauge, Paragraph, Widget, Wrap};
use ratatui::Frame;

use super::format::{fit, fit_tail, pack, text_width};
use crate::console::state::{
    blocked, opened_moved, replan_offered, skip_not_accepted, Ask, ConsoleState, Dialog, Focus,
    Moved, RunningStage, Target, ACCEPT_SKIP_KEY, REPLAN_KEY,
};
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
        Dialog::Ask { target, ask, text } => ask_lines(target, ask, text, theme),
        Dialog::Planning {
            target, request, ..
        } => (
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
            reason,
            moved,
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
            // The reason, the confirmation and the buttons stay visible however long
            // the plan is; what changed since it was planned comes right under the
            // captured line, above the plan it makes stale.
            let footer = footer_lines(
                dialog,
                target.as_ref(),
                plan,
                Fields {
                    focus: *focus,
                    typed,
                    reason,
                },
                usize::from(inner.width),
                theme,
            );
            let [body, bottom] =
                Layout::vertical([Constraint::Min(0), Constraint::Length(footer.len() as u16)])
                    .areas(inner);
            // Every field of the lease when they fit, else only the changed ones.
            let plan_text = |compact| {
                Paragraph::new(preview_lines(
                    target.as_ref(),
                    plan,
                    moved.as_ref(),
                    compact,
                    theme,
                ))
                .wrap(Wrap { trim: false })
            };
            let full = plan_text(false);
            let plan_text =
                if rows_used(&full, body.width, body.height.saturating_add(1)) <= body.height {
                    full
                } else {
                    plan_text(true)
                };
            draw_marking_the_cut(frame, plan_text, body, theme);
            // Every footer line fits the width (fields show their end, the keys are
            // packed): wrapping one would push the buttons or the keys out of sight.
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
                Layout::vertical([Constraint::Length(4), Constraint::Length(1)]).areas(inner);
            let (status, style) = match (action, stage) {
                (ActionKind::Rebuild, RunningStage::Working) => (
                    "rebuilding under the bulk lock · esc cancels (asks first) · b runs it on in the background · q quits (asks first)",
                    theme.base,
                ),
                (ActionKind::Rebuild, RunningStage::ConfirmCancel) => (
                    "cancel the rebuild? it leaves the lease STUCK BULK (until a re-run or abort-bulk) — y cancels · n keeps it running · b runs it on in the background",
                    theme.warn,
                ),
                (ActionKind::Rebuild, RunningStage::ConfirmQuit) => (
                    "quit? the rebuild is cancelled first and its lease stays bulk (STUCK BULK) · y quits · n keeps it running",
                    theme.warn,
                ),
                (_, RunningStage::Cancelling) => (
                    "cancelling: the lease stays bulk (STUCK BULK) until a re-run or abort-bulk",
                    theme.base,
                ),
                _ => ("writing…", theme.base),
            };
            let stage = progress
                .as_ref()
                .map(|p| escape_control(&p.stage))
                .unwrap_or_default();
            frame.render_widget(
                Paragraph::new(vec![
                    Line::styled(status, style),
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

/// Draws `paragraph` in `area`; when it is taller, its last row says how many rows are
/// cut instead, so a plan is never cut mid-sentence without a word (at 80×24 a
/// "changed since" line pushes a LOST plan's last warning out).
fn draw_marking_the_cut(frame: &mut Frame, paragraph: Paragraph, area: Rect, theme: &Theme) {
    let needed = rows_used(&paragraph, area.width, area.height.saturating_add(100));
    if needed <= area.height || area.height == 0 {
        frame.render_widget(paragraph, area);
        return;
    }
    let [shown, mark] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
    frame.render_widget(paragraph, shown);
    let cut = needed - shown.height;
    frame.render_widget(
        Paragraph::new(Line::styled(
            fit(
                &format!("… {cut} more lines: a taller terminal shows the whole plan"),
                usize::from(mark.width),
            ),
            theme.warn,
        )),
        mark,
    );
}

/// Rows `paragraph` takes at `width`, up to `limit`: drawn on a scratch buffer (the
/// wrapping is ratatui's own), counted to its last row with anything on it.
fn rows_used(paragraph: &Paragraph, width: u16, limit: u16) -> u16 {
    let area = Rect::new(0, 0, width, limit);
    let mut scratch = Buffer::empty(area);
    paragraph.clone().render(area, &mut scratch);
    (0..limit)
        .rev()
        .find(|&y| (0..width).any(|x| scratch[(x, y)].symbol() != " "))
        .map_or(0, |y| y + 1)
}

/// The question before planning: how far to rewind, or whom to hand over to.
fn ask_lines<'a>(target: &Target, ask: &Ask, text: &str, theme: &Theme) -> (String, Vec<Line<'a>>) {
    let input = Line::from(vec![
        Span::styled("> ", theme.accent),
        Span::styled(escape_control(text), theme.base),
        Span::styled("▏", theme.accent),
    ]);
    let keys = Line::styled(
        "enter plans it (nothing is written yet) · esc cancels",
        theme.muted,
    );
    match ask {
        Ask::Rewind => (
            format!(" rewind {} ", escape_control(&target.resource)),
            vec![
                captured_line(Some(target), theme),
                Line::raw(""),
                Line::styled(
                    "Rewind to when? Back by a duration from the resume point (10m, 1h30m), to a time \
                     (2026-11-22T03:00:00Z, or a clock time in UTC as shown here: 03:10), to SECS:INC, \
                     or to a checkpoint (#2: the detail view numbers them). The changes since are replayed.",
                    theme.base,
                ),
                input,
                Line::raw(""),
                keys,
            ],
        ),
        Ask::HandOver { standbys, choice } => {
            let mut lines = vec![
                captured_line(Some(target), theme),
                Line::raw(""),
                Line::styled(
                    "Hand the lease to which standby? ↑/↓ chooses a listener of this lease running here, or type a listener id.",
                    theme.base,
                ),
            ];
            if standbys.is_empty() {
                lines.push(Line::styled(
                    "  (no standby of this lease runs in this process: type its listener id)",
                    theme.muted,
                ));
            }
            for (i, standby) in standbys.iter().enumerate() {
                let chosen = *choice == Some(i) && text.is_empty();
                lines.push(Line::styled(
                    format!("{} {}", if chosen { "▸" } else { " " }, escape_control(standby)),
                    if chosen { theme.selection } else { theme.base },
                ));
            }
            lines.push(input);
            lines.push(Line::raw(""));
            lines.push(keys);
            (
                format!(" hand over {} ", escape_control(&target.resource)),
                lines,
            )
        }
    }
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

/// The plan: captured target, what changed since, the lease fields (only the changed
/// ones when `compact`), the effect, warnings, and why it is blocked if it is.
fn preview_lines<'a>(
    target: Option<&Target>,
    plan: &Plan,
    moved: Option<&Moved>,
    compact: bool,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let mut lines = vec![captured_line(target, theme)];
    let since_opened = target.and_then(|t| opened_moved(t, plan));
    for changed in since_opened.iter().chain(moved) {
        lines.push(Line::styled(
            format!("⚠ {} — {REPLAN_KEY} plans it again", changed.text()),
            theme.danger,
        ));
    }
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
    if let Some(refusal) = &plan.refusal {
        lines.push(Line::styled(format!("✗ {}", refusal.reason), theme.danger));
    }
    // (The refusal names the key; the key line below says it again.)
    lines
}

/// What the operator has typed into the preview, and where the keyboard is.
struct Fields<'t> {
    focus: Focus,
    typed: &'t str,
    reason: &'t str,
}

/// The reason field, what to type, the buttons (Apply visibly disabled, and why, until
/// it can be applied) and the keys that work here, each line within `width` cells.
fn footer_lines<'a>(
    dialog: &Dialog,
    target: Option<&Target>,
    plan: &Plan,
    fields: Fields<'_>,
    width: usize,
    theme: &Theme,
) -> Vec<Line<'a>> {
    let Fields {
        focus,
        typed,
        reason,
    } = fields;
    let blocked = blocked(target, plan, moved_of(dialog)).is_some();
    let mut lines = vec![field_line(
        "reason (for the audit record): ".to_string(),
        if focus == Focus::Reason {
            theme.accent
        } else {
            theme.muted
        },
        reason,
        focus == Focus::Reason,
        width,
        theme,
    )];
    if let Some(expected) = plan.confirm_text() {
        lines.push(field_line(
            format!("type {} to confirm: ", escape_control(expected)),
            theme.warn,
            typed,
            focus != Focus::Reason,
            width,
            theme,
        ));
    }
    let disabled = if plan.refusal.is_some() {
        Some("refused".to_string())
    } else if blocked {
        Some(format!("the lease changed: {REPLAN_KEY} re-plans"))
    } else if dialog.apply_disabled().is_some() {
        Some("type the name first".to_string())
    } else {
        None
    };
    let focused = |this: Focus, enabled: bool| match (focus == this, enabled) {
        (true, _) => theme.selection,
        (false, true) => theme.base,
        (false, false) => theme.muted,
    };
    let apply = match &disabled {
        Some(why) => format!("[ Apply — disabled: {why} ]"),
        None => "[ Apply ]".to_string(),
    };
    lines.push(Line::from(vec![
        Span::styled("[ Cancel ]", focused(Focus::Cancel, true)),
        Span::raw("  "),
        Span::styled(apply, focused(Focus::Apply, disabled.is_none())),
    ]));
    // What enter does here, said outright: with the name typed, enter on the focused
    // Cancel is easily taken for Apply.
    let enter = match focus {
        Focus::Cancel => "enter chooses Cancel",
        Focus::Apply => "enter chooses Apply",
        Focus::Reason => "enter goes to Apply",
    };
    let mut keys = vec!["tab moves".to_string(), enter.to_string()];
    if replan_offered(plan, blocked) {
        keys.push(format!("{REPLAN_KEY} re-plans"));
    }
    if skip_not_accepted(plan) {
        keys.push(format!("{ACCEPT_SKIP_KEY} accepts the skip"));
    }
    keys.push("esc cancels".to_string());
    lines.extend(
        pack(&keys, " · ", width)
            .into_iter()
            .map(|line| Line::styled(line, theme.muted)),
    );
    lines
}

/// One input line: `label`, the end of `value` (as much as fits after the label),
/// and the cursor when the field has the keyboard. A label too long for the line
/// leaves the value a third of it.
fn field_line<'a>(
    label: String,
    label_style: ratatui::style::Style,
    value: &str,
    cursor: bool,
    width: usize,
    theme: &Theme,
) -> Line<'a> {
    let value = escape_control(value);
    // The cursor's cell is kept whether it shows or not, so the text does not jump.
    let room = width.saturating_sub(1);
    let keep = text_width(&value).min(room / 3);
    let label = fit(&label, room.saturating_sub(keep));
    let value = fit_tail(&value, room.saturating_sub(text_width(&label)));
    Line::from(vec![
        Span::styled(label, label_style),
        Span::styled(value, theme.base),
        Span::styled(if cursor { "▏" } else { "" }, theme.accent),
    ])
}

fn moved_of(dialog: &Dialog) -> Option<&Moved> {
    match dialog {
        Dialog::Preview { moved, .. } => moved.as_ref(),
        _ => None,
    }
}
