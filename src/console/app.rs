//! The console's main loop: input events, data events and a clock tick change the
//! state; the screen is redrawn from the state, at most once per frame interval,
//! and at once after a key.

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use crossterm::event::Event;
use futures_util::{Stream, StreamExt};
use ratatui::backend::Backend;
use ratatui::Terminal;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::action_runner::ActionCommand;
use super::data::DataEvent;
use super::state::{ConsoleState, Effect, NoticeLevel};
use super::theme::Theme;
use super::view;

/// Data-driven redraws are coalesced to at most one per this interval.
const FRAME: Duration = Duration::from_millis(50);
/// Expiry countdowns and statuses move with the clock even when no data arrives.
const TICK: Duration = Duration::from_secs(1);

/// What the loop needs besides the state: the theme, where user themes live, and
/// how to switch mouse capture on the real terminal.
pub struct AppContext<M: FnMut(bool) -> std::io::Result<()>> {
    pub theme: Theme,
    pub user_theme_dir: Option<PathBuf>,
    /// NO_COLOR is set: every theme switched to loses its colours, keeps its modifiers.
    pub no_color: bool,
    /// Where confirmed actions go (`None` in read-only mode: nothing is ever sent).
    pub actions: Option<mpsc::Sender<ActionCommand>>,
    pub set_mouse: M,
    /// The resource the detail view shows, for the task that reads its checkpoints.
    pub detail: tokio::sync::watch::Sender<Option<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The operator quit.
    Quit,
    /// The input stream ended (the terminal went away).
    InputClosed,
}

pub async fn run<B, I, M>(
    terminal: &mut Terminal<B>,
    state: &mut ConsoleState,
    context: &mut AppContext<M>,
    mut input: I,
    mut data: mpsc::Receiver<DataEvent>,
) -> std::io::Result<Ended>
where
    B: Backend + std::io::Write,
    B::Error: Into<std::io::Error>,
    I: Stream<Item = std::io::Result<Event>> + Unpin,
    M: FnMut(bool) -> std::io::Result<()>,
{
    let size = terminal.size().map_err(Into::into)?;
    state.on_resize(size.width, size.height);
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut redraw_at: Option<Instant> = Some(Instant::now());
    let mut last_draw = Instant::now() - FRAME;
    let mut data_open = true;
    loop {
        if redraw_at.is_some_and(|at| at <= Instant::now()) {
            terminal
                .draw(|frame| view::draw(frame, state, &context.theme))
                .map_err(Into::into)?;
            last_draw = Instant::now();
            redraw_at = None;
        }
        let frame_due = redraw_at.unwrap_or_else(|| Instant::now() + TICK);
        tokio::select! {
            event = input.next() => {
                let Some(event) = event else { return Ok(Ended::InputClosed) };
                let effects = match event? {
                    Event::Key(key) => state.on_key(key),
                    Event::Mouse(mouse) => {
                        state.on_mouse(mouse);
                        Vec::new()
                    }
                    Event::Resize(width, height) => {
                        state.on_resize(width, height);
                        Vec::new()
                    }
                    _ => Vec::new(),
                };
                for effect in effects {
                    if let Effect::Copy { what, text } = effect {
                        copy(terminal.backend_mut(), state, what, &text);
                        continue;
                    }
                    if apply_effect(effect, state, context) == Some(Ended::Quit) {
                        return Ok(Ended::Quit);
                    }
                }
                redraw_at = Some(Instant::now());
                follow_detail(state, context);
            }
            received = data.recv(), if data_open => {
                match received {
                    Some(event) => {
                        state.apply(event, Utc::now());
                        while let Ok(more) = data.try_recv() {
                            state.apply(more, Utc::now());
                        }
                        redraw_at.get_or_insert(last_draw + FRAME);
                        follow_detail(state, context);
                    }
                    None => data_open = false,
                }
            }
            _ = ticker.tick() => {
                state.tick(Utc::now());
                redraw_at.get_or_insert(Instant::now());
            }
            _ = tokio::time::sleep_until(frame_due), if redraw_at.is_some() => {}
        }
    }
}

/// Tells the checkpoint task which lease the detail view shows now (if it changed).
fn follow_detail<M: FnMut(bool) -> std::io::Result<()>>(
    state: &ConsoleState,
    context: &AppContext<M>,
) {
    let shown = state.detail_resource();
    context.detail.send_if_modified(|current| {
        let changed = *current != shown;
        if changed {
            current.clone_from(&shown);
        }
        changed
    });
}

fn apply_effect<M: FnMut(bool) -> std::io::Result<()>>(
    effect: Effect,
    state: &mut ConsoleState,
    context: &mut AppContext<M>,
) -> Option<Ended> {
    match effect {
        Effect::Quit => return Some(Ended::Quit),
        Effect::LoadTheme(name) => match Theme::by_name(&name, context.user_theme_dir.as_deref()) {
            Ok(theme) => {
                context.theme = if context.no_color {
                    theme.without_colour()
                } else {
                    theme
                };
                state.theme = name.clone();
                state.notify(NoticeLevel::Info, format!("theme {name}"));
            }
            Err(error) => state.notify(NoticeLevel::Error, error.to_string()),
        },
        Effect::Plan(request) => send_action(state, context, ActionCommand::Plan(request)),
        Effect::Execute { plan, reason } => {
            send_action(state, context, ActionCommand::Execute { plan, reason })
        }
        Effect::Copy { .. } => {}
        Effect::CancelRebuild => send_action(state, context, ActionCommand::CancelRebuild),
        Effect::SetMouse(on) => {
            if let Err(error) = (context.set_mouse)(on) {
                state.notify(
                    NoticeLevel::Error,
                    format!("cannot switch the mouse: {error}"),
                );
            } else {
                state.notify(
                    NoticeLevel::Info,
                    if on {
                        "mouse on"
                    } else {
                        "mouse off: the terminal can select text"
                    },
                );
            }
        }
    }
    None
}

/// Writes `text` to the clipboard through the terminal (OSC 52) and says so; a
/// terminal that does not allow OSC 52 ignores it, which the notice mentions.
fn copy<W: std::io::Write>(out: &mut W, state: &mut ConsoleState, what: &str, text: &str) {
    let written = crossterm::execute!(
        out,
        crossterm::clipboard::CopyToClipboard::to_clipboard_from(text)
    );
    match written {
        Ok(()) => state.notify(
            NoticeLevel::Info,
            format!(
                "copied {what} ({} characters) to the clipboard (OSC 52: the terminal must allow it)",
                text.chars().count()
            ),
        ),
        Err(error) => state.notify(
            NoticeLevel::Error,
            format!("cannot copy {what}: {error}"),
        ),
    }
}

/// Hands an action to the runner without waiting; a full or closed runner is reported.
fn send_action<M: FnMut(bool) -> std::io::Result<()>>(
    state: &mut ConsoleState,
    context: &mut AppContext<M>,
    command: ActionCommand,
) {
    let sent = match &context.actions {
        Some(actions) => actions.try_send(command).map_err(|e| e.to_string()),
        None => Err("read-only: actions are off".to_string()),
    };
    if let Err(error) = sent {
        state.dialog = None;
        state.notify(
            NoticeLevel::Error,
            format!("the action was not started ({error}); nothing was written"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::state::{ConsoleSetup, Mode};

    #[test]
    fn copy_writes_an_osc_52_escape_whose_payload_cannot_end_it_early() {
        let mut state = ConsoleState::new(ConsoleSetup::new(Mode::Demo, "sandbox", Utc::now()));
        let mut out = Vec::new();
        copy(&mut out, &mut state, "the token", "8263E5B9D2000000012B04");
        assert_eq!(
            out,
            b"\x1b]52;c;ODI2M0U1QjlEMjAwMDAwMDAxMkIwNA==\x1b\\".to_vec()
        );
        let notice = state.notice.as_ref().map(|n| n.text.as_str());
        assert_eq!(
            notice,
            Some("copied the token (22 characters) to the clipboard (OSC 52: the terminal must allow it)")
        );

        let mut out = Vec::new();
        copy(
            &mut out,
            &mut state,
            "the error",
            "a\x1b]0;title\x07\x1b\\b\n",
        );
        let payload = &out[7..out.len() - 2];
        assert!(payload
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b)));
    }
}
