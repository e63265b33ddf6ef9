//! Keys, mouse and the `:` command line, applied to the console state.

use crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};

use super::dialog::{request_for, Ask, Dialog, DialogReply, KeyContext, Target};
use super::effect::Effect;
use super::table::{Column, Filter};
use super::{ConsoleState, NoticeLevel, View};
use crate::console::keymap::{self, KeyCommand, LineCommand, Scope};
use crate::console::layout;
use crate::ops::{ActionKind, ActionRequest};

/// Rows one wheel notch scrolls.
const WHEEL_ROWS: isize = 3;

/// What the operator is typing, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Normal,
    /// `/` filter being edited; applied as it is typed.
    Filter(String),
    /// `:` command line.
    CommandLine(String),
}

impl ConsoleState {
    pub fn on_key(&mut self, event: KeyEvent) -> Vec<Effect> {
        if event.kind == KeyEventKind::Release {
            return Vec::new();
        }
        // A notice has been read once the operator does something else; what this key
        // says (if anything) replaces it.
        self.notice = None;
        let ctrl = event.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && event.code == KeyCode::Char('c') {
            return self.quit_asking_for_a_running_rebuild();
        }
        if self.dialog.is_some() {
            return self.dialog_key(event.code, ctrl);
        }
        match &self.input {
            Input::Filter(_) => return self.edit_filter(event.code),
            Input::CommandLine(_) => return self.edit_command(event.code),
            Input::Normal => {}
        }
        if let Some(scroll) = self.help {
            match event.code {
                KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('?') => self.help = None,
                KeyCode::Down | KeyCode::Char('j') => {
                    self.help = Some((scroll + 1).min(self.help_max_scroll()))
                }
                KeyCode::Up | KeyCode::Char('k') => self.help = Some(scroll.saturating_sub(1)),
                _ => {}
            }
            return Vec::new();
        }
        if event.code == KeyCode::Esc && self.view == View::Leases {
            if !self.leases.filter().is_empty() {
                self.leases.set_filter(Filter::default());
            }
            return Vec::new();
        }
        let effects = match keymap::lookup(&event, &self.scopes()) {
            Some(command) => self.run(command),
            None => {
                if let Some(reason) = self.unbound_reason(&event) {
                    self.notify(NoticeLevel::Info, reason);
                }
                Vec::new()
            }
        };
        self.normalise_scroll();
        effects
    }

    /// How far help scrolls: its lines less those the popup shows (it is the screen
    /// height less its margin and borders).
    fn help_max_scroll(&self) -> usize {
        let visible = usize::from(self.size.1.saturating_sub(4));
        keymap::help_height(self.read_only).saturating_sub(visible)
    }

    /// The keymap scopes in force in the current view.
    pub fn scopes(&self) -> Vec<Scope> {
        let mut scopes = match self.view {
            View::Leases => vec![Scope::Global, Scope::Lists, Scope::Leases],
            View::Detail => vec![Scope::Global, Scope::Lists, Scope::Detail],
            View::Listeners | View::Audit => vec![Scope::Global, Scope::Lists],
            View::Oplog => vec![Scope::Global],
        };
        // Read-only: the action keys are not bound at all.
        if !self.read_only {
            match self.view {
                View::Leases | View::Detail => scopes.push(Scope::LeaseActions),
                View::Audit => scopes.push(Scope::AuditActions),
                _ => {}
            }
        }
        scopes
    }

    fn run(&mut self, command: KeyCommand) -> Vec<Effect> {
        let height = self.table_height();
        let page = height.max(1) as isize;
        match command {
            KeyCommand::Quit => return self.quit_asking_for_a_running_rebuild(),
            KeyCommand::Back => match self.view {
                View::Leases => return self.quit_asking_for_a_running_rebuild(),
                _ => self.show(View::Leases),
            },
            KeyCommand::ToggleHelp => self.help = Some(0),
            KeyCommand::StartCommand => self.input = Input::CommandLine(String::new()),
            KeyCommand::NextView => self.show(View::from_tab(self.view.tab() + 1)),
            KeyCommand::PreviousView => self.show(View::from_tab(self.view.tab() + 3)),
            KeyCommand::ShowLeases => self.show(View::Leases),
            KeyCommand::ShowOplog => self.show(View::Oplog),
            KeyCommand::ShowListeners => self.show(View::Listeners),
            KeyCommand::ShowAudit => self.show(View::Audit),
            KeyCommand::ToggleMouse => {
                self.mouse = !self.mouse;
                return vec![Effect::SetMouse(self.mouse)];
            }
            KeyCommand::Up => self.step(-1, height),
            KeyCommand::Down => self.step(1, height),
            KeyCommand::PageUp => self.step(-page, height),
            KeyCommand::PageDown => self.step(page, height),
            KeyCommand::Top => self.jump(false, height),
            KeyCommand::Bottom => self.jump(true, height),
            KeyCommand::Open => {
                if self.leases.selected().is_some() {
                    // The detail stays on this lease however the rows move.
                    self.leases.choose();
                    self.view = View::Detail;
                }
            }
            KeyCommand::StartFilter => {
                self.input = Input::Filter(self.leases.filter().text().to_string());
            }
            KeyCommand::ToggleFreeze => self.set_frozen(!self.frozen),
            KeyCommand::SortNext => self.leases.sort_next(),
            KeyCommand::SortReverse => self.leases.sort_reverse(),
            KeyCommand::Takeover => return self.open_action(ActionKind::Takeover),
            KeyCommand::HandOver => return self.open_handover(),
            KeyCommand::Rewind => return self.open_action(ActionKind::Rewind),
            KeyCommand::Reset => return self.open_action(ActionKind::Reset),
            KeyCommand::ResetToNow => return self.open_reset_to_now(),
            KeyCommand::Skip => return self.open_action(ActionKind::Skip),
            KeyCommand::Rebuild => return self.open_action(ActionKind::Rebuild),
            KeyCommand::AbortBulk => return self.open_action(ActionKind::AbortBulk),
            KeyCommand::Undo => return self.open_undo(),
            KeyCommand::CopyToken => return self.copy_token(),
            KeyCommand::CopyError => return self.copy_error(),
        }
        Vec::new()
    }

    /// The selected lease as the dialog captures it: who holds which version now.
    fn capture(&mut self) -> Option<Target> {
        if self.read_only {
            return None;
        }
        self.leases.choose();
        match self.leases.selected() {
            Some(entry) => Some(Target::of(&entry.lease)),
            None => {
                self.notify(NoticeLevel::Error, "select a lease first");
                None
            }
        }
    }

    fn start_planning(&mut self, target: Option<Target>, request: ActionRequest) -> Vec<Effect> {
        self.dialog = Some(Dialog::Planning {
            target,
            request: request.clone(),
            reason: String::new(),
        });
        vec![Effect::Plan(request)]
    }

    /// `T`: hand the lease to a named standby: one of the in-process listeners of the
    /// lease that does not hold it, or a typed name.
    fn open_handover(&mut self) -> Vec<Effect> {
        let Some(target) = self.capture() else {
            return Vec::new();
        };
        let standbys: Vec<String> = self
            .listeners
            .iter()
            .filter(|l| l.resource == target.resource)
            .filter(|l| Some(&l.listener_id) != target.holder.as_ref())
            .map(|l| l.listener_id.clone())
            .collect();
        let choice = (!standbys.is_empty()).then_some(0);
        self.dialog = Some(Dialog::Ask {
            target,
            ask: Ask::HandOver { standbys, choice },
            text: String::new(),
        });
        Vec::new()
    }

    /// `X`: reset to now. Planned as the CLI does it without `--accept-skip`: the plan
    /// says what is skipped and is refused until `a` accepts the skip.
    fn open_reset_to_now(&mut self) -> Vec<Effect> {
        let Some(target) = self.capture() else {
            return Vec::new();
        };
        let request = ActionRequest::Reset {
            resource: target.resource.clone(),
            to: crate::ops::ResetTarget::Now,
            accept_skip: false,
        };
        self.start_planning(Some(target), request)
    }

    /// Opens the dialog for `action` on the selected lease, capturing who holds which
    /// version right now.
    fn open_action(&mut self, action: ActionKind) -> Vec<Effect> {
        let Some(target) = self.capture() else {
            return Vec::new();
        };
        let request = match action {
            ActionKind::Rewind => {
                self.dialog = Some(Dialog::Ask {
                    target,
                    ask: Ask::Rewind,
                    text: String::new(),
                });
                return Vec::new();
            }
            ActionKind::Rebuild if self.background_rebuild.is_some() => {
                let running = self
                    .background_rebuild
                    .as_ref()
                    .map(|b| crate::model::text::escape_control(&b.resource))
                    .unwrap_or_default();
                self.notify(
                    NoticeLevel::Error,
                    format!("a rebuild of {running} is running in the background: one rebuild at a time"),
                );
                return Vec::new();
            }
            ActionKind::Rebuild => {
                let name = self
                    .rebuilds
                    .iter()
                    .find(|(resource, _)| *resource == target.resource)
                    .map(|(_, name)| name.clone());
                match name {
                    Some(name) => ActionRequest::Rebuild { name },
                    None => {
                        let defined: Vec<&str> =
                            self.rebuilds.iter().map(|(r, _)| r.as_str()).collect();
                        self.notify(
                            NoticeLevel::Error,
                            format!(
                                "no rebuild is defined for {} (defined for: {}); attached, add [rebuilds.NAME] to streamward.toml",
                                crate::model::text::escape_control(&target.resource),
                                if defined.is_empty() { "none".to_string() } else { defined.join(", ") }
                            ),
                        );
                        return Vec::new();
                    }
                }
            }
            other => match request_for(other, &target) {
                Some(request) => request,
                None => return Vec::new(),
            },
        };
        self.start_planning(Some(target), request)
    }

    fn open_undo(&mut self) -> Vec<Effect> {
        let Some(record) = self.audit.get(self.audit_cursor.selected) else {
            self.notify(NoticeLevel::Error, "no audit record selected");
            return Vec::new();
        };
        let request = ActionRequest::Undo {
            audit_id: record.id.clone(),
        };
        self.start_planning(None, request)
    }

    /// The selected lease's position as text to paste: a change stream's resume token
    /// as hex (for `rewind --to-token`), or a capped collection's entry `_id` (for
    /// `rewind --to-id`); with what it is.
    pub fn selected_token_hex(&self) -> Option<(&'static str, String)> {
        let token = self.leases.selected()?.lease.resume_token.as_ref()?;
        if let Some(id) = crate::model::token_entry(token) {
            return Some(("the position's entry _id", id.to_hex()));
        }
        token
            .data_hex()
            .filter(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()))
            .map(|hex| ("the resume token", hex.to_string()))
    }

    /// The last error of an in-process listener of the selected lease: its holder's
    /// when it has one, else the first that has one. Escaped: it came from a server.
    pub fn selected_listener_error(&self) -> Option<String> {
        let lease = &self.leases.selected()?.lease;
        let mut with_error = self
            .listeners
            .iter()
            .filter(|l| l.resource == lease.resource && l.last_error.is_some());
        let first = with_error.clone().next()?;
        let chosen = with_error
            .find(|l| Some(&l.listener_id) == lease.holder.as_ref())
            .unwrap_or(first);
        let error = chosen.last_error.as_deref()?;
        Some(format!(
            "{}: {}",
            crate::model::text::escape_control(&chosen.listener_id),
            crate::model::text::escape_control(error)
        ))
    }

    fn copy_token(&mut self) -> Vec<Effect> {
        match self.selected_token_hex() {
            Some((what, text)) => vec![Effect::Copy { what, text }],
            None => {
                self.notify(
                    NoticeLevel::Error,
                    "nothing copied: this lease has no resume token in hex nor an entry _id (resumeAt or the oldest entry instead)",
                );
                Vec::new()
            }
        }
    }

    fn copy_error(&mut self) -> Vec<Effect> {
        match self.selected_listener_error() {
            Some(text) => vec![Effect::Copy {
                what: "the last error",
                text,
            }],
            None => {
                self.notify(
                    NoticeLevel::Error,
                    "nothing copied: no listener of this lease in this process has an error",
                );
                Vec::new()
            }
        }
    }

    fn dialog_key(&mut self, code: KeyCode, ctrl: bool) -> Vec<Effect> {
        let context = KeyContext {
            server_now: self.server_now(),
            ctrl,
        };
        let Some(dialog) = &mut self.dialog else {
            return Vec::new();
        };
        match dialog.on_key(code, context) {
            DialogReply::Nothing => Vec::new(),
            DialogReply::Close => {
                self.dialog = None;
                Vec::new()
            }
            DialogReply::Cancelled(message) => {
                self.dialog = None;
                self.notify(NoticeLevel::Info, message);
                Vec::new()
            }
            DialogReply::Error(message) => {
                self.notify(NoticeLevel::Error, message);
                Vec::new()
            }
            DialogReply::Effect(effect) => vec![effect],
            DialogReply::Replan(request) => self.replan(request),
            DialogReply::Background => {
                if let Some(Dialog::Running {
                    resource, progress, ..
                }) = self.dialog.take()
                {
                    self.notify(
                        NoticeLevel::Info,
                        format!(
                            "the rebuild of {} goes on in the background; its outcome will show here and in the audit view",
                            crate::model::text::escape_control(&resource)
                        ),
                    );
                    self.background_rebuild = Some(super::BackgroundRebuild { resource, progress });
                }
                Vec::new()
            }
        }
    }

    /// `r` in a preview: capture the lease as it is now and plan again; the reason
    /// typed so far is kept.
    fn replan(&mut self, request: ActionRequest) -> Vec<Effect> {
        let Some(Dialog::Preview { target, reason, .. }) = self.dialog.take() else {
            return Vec::new();
        };
        let target = target.map(|old| match self.lease_now(&old.resource) {
            Some(Some(lease)) => Target::of(lease),
            _ => old,
        });
        self.dialog = Some(Dialog::Planning {
            target,
            request: request.clone(),
            reason,
        });
        vec![Effect::Plan(request)]
    }

    /// Quits at once, unless a running rebuild asks first: the one in the dialog, or
    /// one running in the background (its dialog comes back to ask).
    fn quit_asking_for_a_running_rebuild(&mut self) -> Vec<Effect> {
        // A rebuild in the background asks first, whatever dialog is open on top of it
        // (an ask or a preview has written nothing; a running action asks for itself).
        if !matches!(self.dialog, Some(Dialog::Running { .. })) {
            if let Some(background) = self.background_rebuild.take() {
                self.dialog = Some(Dialog::Running {
                    action: ActionKind::Rebuild,
                    resource: background.resource,
                    progress: background.progress,
                    stage: super::RunningStage::ConfirmQuit,
                });
                return Vec::new();
            }
        }
        match self.dialog.as_mut().map(Dialog::ask_before_quitting) {
            Some(DialogReply::Effect(effect)) => vec![effect],
            Some(_) => Vec::new(),
            None => vec![Effect::Quit],
        }
    }

    fn show(&mut self, view: View) {
        self.view = view;
        let height = self.table_height();
        self.leases.scroll_into_view(height);
    }

    fn step(&mut self, delta: isize, height: usize) {
        match self.view {
            View::Leases | View::Detail => self.leases.move_selection(delta, height),
            View::Listeners => self
                .listener_cursor
                .step(delta, self.listeners.len(), height),
            View::Audit => self.audit_cursor.step(delta, self.audit.len(), height),
            View::Oplog => {}
        }
    }

    fn jump(&mut self, to_end: bool, height: usize) {
        match self.view {
            View::Leases | View::Detail if to_end => self.leases.select_last(height),
            View::Leases | View::Detail => self.leases.select_first(height),
            View::Listeners => self
                .listener_cursor
                .jump(to_end, self.listeners.len(), height),
            View::Audit => self.audit_cursor.jump(to_end, self.audit.len(), height),
            View::Oplog => {}
        }
    }

    fn edit_filter(&mut self, code: KeyCode) -> Vec<Effect> {
        let Input::Filter(text) = &mut self.input else {
            return Vec::new();
        };
        match code {
            KeyCode::Enter => self.input = Input::Normal,
            KeyCode::Esc => {
                self.input = Input::Normal;
                self.leases.set_filter(Filter::default());
            }
            KeyCode::Backspace => {
                text.pop();
                let filter = Filter::new(text);
                self.leases.set_filter(filter);
            }
            KeyCode::Char(c) if !c.is_control() => {
                text.push(c);
                let filter = Filter::new(text);
                self.leases.set_filter(filter);
            }
            _ => {}
        }
        let height = self.table_height();
        self.leases.scroll_into_view(height);
        Vec::new()
    }

    fn edit_command(&mut self, code: KeyCode) -> Vec<Effect> {
        let Input::CommandLine(text) = &mut self.input else {
            return Vec::new();
        };
        match code {
            KeyCode::Esc => self.input = Input::Normal,
            KeyCode::Backspace if text.pop().is_none() => self.input = Input::Normal,
            KeyCode::Char(c) if !c.is_control() => text.push(c),
            KeyCode::Enter => {
                let line = text.trim().to_string();
                self.input = Input::Normal;
                return self.execute_command_line(&line);
            }
            _ => {}
        }
        Vec::new()
    }

    /// Runs one `:` command. Unknown commands leave a notice saying what exists.
    pub fn execute_command_line(&mut self, line: &str) -> Vec<Effect> {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else {
            return Vec::new();
        };
        let argument: Vec<&str> = words.collect();
        let Some(command) = keymap::line_command(name) else {
            self.notify(
                NoticeLevel::Error,
                format!(
                    "unknown command :{line} — try {}",
                    keymap::line_command_usages()
                ),
            );
            return Vec::new();
        };
        let usage_error = |state: &mut Self, expected: String| {
            state.notify(NoticeLevel::Error, format!(":{line}: expected {expected}"));
        };
        match (command, argument.as_slice()) {
            (LineCommand::Quit, []) => return self.quit_asking_for_a_running_rebuild(),
            (LineCommand::Leases, []) => self.show(View::Leases),
            (LineCommand::Oplog, []) => self.show(View::Oplog),
            (LineCommand::Listeners, []) => self.show(View::Listeners),
            (LineCommand::Audit, []) => self.show(View::Audit),
            (LineCommand::Help, []) => self.help = Some(0),
            (LineCommand::Theme, [theme]) => return vec![Effect::LoadTheme((*theme).to_string())],
            (LineCommand::Freeze, []) => self.set_frozen(true),
            (LineCommand::Unfreeze, []) => self.set_frozen(false),
            (LineCommand::Filter, words) => {
                self.leases.set_filter(Filter::new(&words.join(" ")));
                self.normalise_scroll();
            }
            (LineCommand::Mouse, ["on"]) => {
                self.mouse = true;
                return vec![Effect::SetMouse(true)];
            }
            (LineCommand::Mouse, ["off"]) => {
                self.mouse = false;
                return vec![Effect::SetMouse(false)];
            }
            (LineCommand::Sort, [column, order @ ..]) => match (Column::parse(column), order) {
                (Some(column), []) | (Some(column), ["asc"]) => self.leases.sort_by(column, false),
                (Some(column), ["desc"]) => self.leases.sort_by(column, true),
                _ => usage_error(
                    self,
                    format!(
                        "a column ({}) and optionally asc or desc",
                        Column::ALL.map(|c| c.label().to_lowercase()).join(", ")
                    ),
                ),
            },
            (other, _) => {
                let usage = keymap::LINE_COMMANDS
                    .iter()
                    .find(|spec| spec.command == other)
                    .map_or("", |spec| spec.usage);
                usage_error(self, usage.to_string());
            }
        }
        Vec::new()
    }

    pub fn on_mouse(&mut self, event: MouseEvent) {
        if !self.mouse {
            return;
        }
        let height = self.table_height();
        match event.kind {
            MouseEventKind::ScrollDown | MouseEventKind::ScrollUp => {
                let delta = if event.kind == MouseEventKind::ScrollDown {
                    WHEEL_ROWS
                } else {
                    -WHEEL_ROWS
                };
                if let Some(scroll) = self.help {
                    let max = self.help_max_scroll();
                    self.help = Some(scroll.saturating_add_signed(delta).min(max));
                    return;
                }
                match self.view {
                    View::Leases => self.leases.scroll(delta, height),
                    _ => self.step(delta, height),
                }
            }
            MouseEventKind::Down(MouseButton::Left)
                if self.help.is_none() && self.dialog.is_none() =>
            {
                self.click(event.column, event.row, height)
            }
            _ => {}
        }
    }

    fn click(&mut self, x: u16, y: u16, height: usize) {
        let area = ratatui::layout::Rect::new(0, 0, self.size.0, self.size.1);
        if !layout::fits(area) {
            return;
        }
        let areas = layout::areas(area);
        if y == areas.tabs.y {
            if let Some(tab) = layout::tab_spans()
                .iter()
                .position(|&(from, to)| x >= from && x < to)
            {
                self.show(View::from_tab(tab));
            }
            return;
        }
        let list = match self.view {
            View::Audit => layout::split_list(areas.body).0,
            View::Listeners => layout::split_listeners(areas.body, self.process_count()).0,
            _ => areas.body,
        };
        let (first_row, _) = layout::table_rows(list);
        if y < first_row {
            return;
        }
        let row = usize::from(y - first_row);
        match self.view {
            View::Leases => {
                self.leases.select_visible_row(row, height);
            }
            View::Listeners => {
                self.listener_cursor
                    .click(row, self.listeners.len(), height);
            }
            View::Audit => {
                self.audit_cursor.click(row, self.audit.len(), height);
            }
            View::Detail | View::Oplog => {}
        }
    }
}
