//! Every key the console answers to, in one table: key handling looks keys up here
//! and the help screen and footer hints are generated from it.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Which part of the console a binding belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Anywhere.
    Global,
    /// Any view that shows a list or scrolls.
    Lists,
    /// The leases table.
    Leases,
    /// The lease detail.
    Detail,
    /// Guarded actions on the selected lease (absent in read-only mode).
    LeaseActions,
    /// Guarded actions on the selected audit record (absent in read-only mode).
    AuditActions,
}

impl Scope {
    pub fn title(self) -> &'static str {
        match self {
            Scope::Global => "Anywhere",
            Scope::Lists => "Lists",
            Scope::Leases => "Leases",
            Scope::Detail => "Lease detail",
            Scope::LeaseActions => "Actions on the selected lease (leases and detail views)",
            Scope::AuditActions => "Actions in the audit view",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyCommand {
    Quit,
    Back,
    ToggleHelp,
    StartCommand,
    NextView,
    PreviousView,
    ShowLeases,
    ShowOplog,
    ShowListeners,
    ShowAudit,
    ToggleMouse,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    Open,
    StartFilter,
    ToggleFreeze,
    SortNext,
    SortReverse,
    Takeover,
    HandOver,
    Rewind,
    Reset,
    ResetToNow,
    Skip,
    Rebuild,
    AbortBulk,
    Undo,
    CopyToken,
    CopyError,
}

/// One key: a code plus whether Ctrl is held (Shift is part of the character).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub code: KeyCode,
    pub ctrl: bool,
}

const fn key(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        ctrl: false,
    }
}

const fn ctrl(c: char) -> Key {
    Key {
        code: KeyCode::Char(c),
        ctrl: true,
    }
}

const fn code(code: KeyCode) -> Key {
    Key { code, ctrl: false }
}

impl Key {
    pub fn of(event: &KeyEvent) -> Key {
        Key {
            code: event.code,
            ctrl: event.modifiers.contains(KeyModifiers::CONTROL),
        }
    }

    pub fn label(&self) -> String {
        let name = match self.code {
            KeyCode::Char(' ') => "space".to_string(),
            KeyCode::Char(c) => c.to_string(),
            KeyCode::Enter => "enter".into(),
            KeyCode::Esc => "esc".into(),
            KeyCode::Tab => "tab".into(),
            KeyCode::BackTab => "shift-tab".into(),
            KeyCode::Up => "↑".into(),
            KeyCode::Down => "↓".into(),
            KeyCode::Left => "←".into(),
            KeyCode::Right => "→".into(),
            KeyCode::PageUp => "pgup".into(),
            KeyCode::PageDown => "pgdn".into(),
            KeyCode::Home => "home".into(),
            KeyCode::End => "end".into(),
            other => format!("{other:?}").to_lowercase(),
        };
        if self.ctrl {
            format!("ctrl-{name}")
        } else {
            name
        }
    }
}

pub struct Binding {
    pub keys: &'static [Key],
    pub command: KeyCommand,
    pub scope: Scope,
    pub help: &'static str,
    /// Shown in the footer of the views where it applies.
    pub hint: Option<&'static str>,
}

pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: &[ctrl('c')],
        command: KeyCommand::Quit,
        scope: Scope::Global,
        help: "quit",
        hint: None,
    },
    Binding {
        keys: &[key('q'), code(KeyCode::Esc)],
        command: KeyCommand::Back,
        scope: Scope::Global,
        help: "back; on the leases view q quits, esc clears the filter",
        hint: Some("quit"),
    },
    Binding {
        keys: &[key('?')],
        command: KeyCommand::ToggleHelp,
        scope: Scope::Global,
        help: "this help",
        hint: Some("help"),
    },
    Binding {
        keys: &[key(':')],
        command: KeyCommand::StartCommand,
        scope: Scope::Global,
        help: "command line (:leases :audit :theme NAME :sort COL :q …)",
        hint: Some("command"),
    },
    Binding {
        keys: &[code(KeyCode::Tab)],
        command: KeyCommand::NextView,
        scope: Scope::Global,
        help: "next view",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::BackTab)],
        command: KeyCommand::PreviousView,
        scope: Scope::Global,
        help: "previous view",
        hint: None,
    },
    Binding {
        keys: &[key('1')],
        command: KeyCommand::ShowLeases,
        scope: Scope::Global,
        help: "leases view",
        hint: None,
    },
    Binding {
        keys: &[key('2')],
        command: KeyCommand::ShowOplog,
        scope: Scope::Global,
        help: "oplog view",
        hint: None,
    },
    Binding {
        keys: &[key('3')],
        command: KeyCommand::ShowListeners,
        scope: Scope::Global,
        help: "listeners view",
        hint: None,
    },
    Binding {
        keys: &[key('4')],
        command: KeyCommand::ShowAudit,
        scope: Scope::Global,
        help: "audit view",
        hint: None,
    },
    Binding {
        keys: &[key('m')],
        command: KeyCommand::ToggleMouse,
        scope: Scope::Global,
        help: "mouse on/off (off lets the terminal select text)",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::Up), key('k')],
        command: KeyCommand::Up,
        scope: Scope::Lists,
        help: "move up",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::Down), key('j')],
        command: KeyCommand::Down,
        scope: Scope::Lists,
        help: "move down",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::PageUp), ctrl('b')],
        command: KeyCommand::PageUp,
        scope: Scope::Lists,
        help: "page up",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::PageDown), ctrl('f')],
        command: KeyCommand::PageDown,
        scope: Scope::Lists,
        help: "page down",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::Home), key('g')],
        command: KeyCommand::Top,
        scope: Scope::Lists,
        help: "first row",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::End), key('G')],
        command: KeyCommand::Bottom,
        scope: Scope::Lists,
        help: "last row",
        hint: None,
    },
    Binding {
        keys: &[code(KeyCode::Enter)],
        command: KeyCommand::Open,
        scope: Scope::Leases,
        help: "lease detail",
        hint: Some("detail"),
    },
    Binding {
        keys: &[key('/')],
        command: KeyCommand::StartFilter,
        scope: Scope::Leases,
        help: "filter rows (substring; !text inverts; esc clears)",
        hint: Some("filter"),
    },
    Binding {
        keys: &[key('f')],
        command: KeyCommand::ToggleFreeze,
        scope: Scope::Leases,
        help: "freeze / unfreeze the table so rows stop moving",
        hint: Some("freeze"),
    },
    Binding {
        keys: &[key('s')],
        command: KeyCommand::SortNext,
        scope: Scope::Leases,
        help: "sort by the next column",
        hint: Some("sort"),
    },
    Binding {
        keys: &[key('S')],
        command: KeyCommand::SortReverse,
        scope: Scope::Leases,
        help: "reverse the sort order",
        hint: None,
    },
    Binding {
        keys: &[key('t')],
        command: KeyCommand::Takeover,
        scope: Scope::LeaseActions,
        help: "takeover: fence out the holder; a standby takes over",
        hint: Some("takeover"),
    },
    Binding {
        keys: &[key('T')],
        command: KeyCommand::HandOver,
        scope: Scope::LeaseActions,
        help: "hand over to a standby (one running here, or a listener id)",
        hint: Some("hand over"),
    },
    Binding {
        keys: &[key('w')],
        command: KeyCommand::Rewind,
        scope: Scope::LeaseActions,
        help: "rewind: back by 10m, or to a time (RFC 3339, or 03:10 UTC)",
        hint: Some("rewind"),
    },
    Binding {
        keys: &[key('x')],
        command: KeyCommand::Reset,
        scope: Scope::LeaseActions,
        help: "reset the resume point to the oldest oplog entry",
        hint: Some("reset"),
    },
    Binding {
        keys: &[key('X')],
        command: KeyCommand::ResetToNow,
        scope: Scope::LeaseActions,
        help: "reset to now: skips what is unprocessed (asks to accept it)",
        hint: Some("reset to now"),
    },
    Binding {
        keys: &[key('K')],
        command: KeyCommand::Skip,
        scope: Scope::LeaseActions,
        help: "skip the one change a FAILING lease's listeners fail on",
        hint: Some("skip"),
    },
    Binding {
        keys: &[key('b')],
        command: KeyCommand::Rebuild,
        scope: Scope::LeaseActions,
        help: "rebuild the derived data under the bulk lock",
        hint: Some("rebuild"),
    },
    Binding {
        keys: &[key('a')],
        command: KeyCommand::AbortBulk,
        scope: Scope::LeaseActions,
        help: "abort a stuck bulk lease without rebuilding",
        hint: Some("abort-bulk"),
    },
    Binding {
        keys: &[key('u')],
        command: KeyCommand::Undo,
        scope: Scope::AuditActions,
        help: "undo: restore the resume point the selected action replaced",
        hint: Some("undo"),
    },
    Binding {
        keys: &[key('c')],
        command: KeyCommand::CopyToken,
        scope: Scope::Detail,
        help: "copy the resume token (hex), or a capped entry _id (OSC 52)",
        hint: Some("copy token"),
    },
    Binding {
        keys: &[key('C')],
        command: KeyCommand::CopyError,
        scope: Scope::Detail,
        help: "copy the last error of a listener running here (OSC 52)",
        hint: Some("copy error"),
    },
];

/// The command bound to `event` in any of `scopes`.
pub fn lookup(event: &KeyEvent, scopes: &[Scope]) -> Option<KeyCommand> {
    let pressed = Key::of(event);
    BINDINGS
        .iter()
        .filter(|b| scopes.contains(&b.scope))
        .find(|b| b.keys.contains(&pressed))
        .map(|b| b.command)
}

/// What a `:` command line does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineCommand {
    Leases,
    Oplog,
    Listeners,
    Audit,
    Help,
    Filter,
    Sort,
    Freeze,
    Unfreeze,
    Theme,
    Mouse,
    Quit,
}

/// One `:` command: the names it answers to, how it is written, what it does.
pub struct LineCommandSpec {
    /// The first name is the one help shows.
    pub names: &'static [&'static str],
    /// How it is written, arguments included (`:sort COLUMN [asc|desc]`).
    pub usage: &'static str,
    pub help: &'static str,
    pub command: LineCommand,
}

/// Every `:` command: the one table parsing, help and the unknown-command hint read.
pub const LINE_COMMANDS: &[LineCommandSpec] = &[
    LineCommandSpec {
        names: &["leases", "lease"],
        usage: ":leases",
        help: "the leases view",
        command: LineCommand::Leases,
    },
    LineCommandSpec {
        names: &["oplog"],
        usage: ":oplog",
        help: "the oplog view",
        command: LineCommand::Oplog,
    },
    LineCommandSpec {
        names: &["listeners", "listener"],
        usage: ":listeners",
        help: "the listeners view",
        command: LineCommand::Listeners,
    },
    LineCommandSpec {
        names: &["audit"],
        usage: ":audit",
        help: "the audit view",
        command: LineCommand::Audit,
    },
    LineCommandSpec {
        names: &["filter"],
        usage: ":filter TEXT",
        help: "filter the leases (same as /)",
        command: LineCommand::Filter,
    },
    LineCommandSpec {
        names: &["sort"],
        usage: ":sort COLUMN [asc|desc]",
        help: "sort the leases by a column",
        command: LineCommand::Sort,
    },
    LineCommandSpec {
        names: &["freeze"],
        usage: ":freeze",
        help: "stop table updates (they queue)",
        command: LineCommand::Freeze,
    },
    LineCommandSpec {
        names: &["unfreeze"],
        usage: ":unfreeze",
        help: "resume table updates",
        command: LineCommand::Unfreeze,
    },
    LineCommandSpec {
        names: &["theme"],
        usage: ":theme NAME",
        help: "switch to a built-in theme or one of yours",
        command: LineCommand::Theme,
    },
    LineCommandSpec {
        names: &["mouse"],
        usage: ":mouse on|off",
        help: "mouse capture",
        command: LineCommand::Mouse,
    },
    LineCommandSpec {
        names: &["help"],
        usage: ":help",
        help: "this screen",
        command: LineCommand::Help,
    },
    LineCommandSpec {
        names: &["q", "q!", "quit"],
        usage: ":q",
        help: "quit",
        command: LineCommand::Quit,
    },
];

/// The `:` command called `name`.
pub fn line_command(name: &str) -> Option<LineCommand> {
    LINE_COMMANDS
        .iter()
        .find(|spec| spec.names.contains(&name))
        .map(|spec| spec.command)
}

/// How each `:` command is written, on one line: what an unknown command is told.
pub fn line_command_usages() -> String {
    LINE_COMMANDS
        .iter()
        .map(|spec| spec.usage)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Cells of the help screen's keys column (after a two-cell indent): the longest
/// keys (`pgdn ctrl-f`) and two spaces.
pub const HELP_KEYS_WIDTH: usize = 13;
/// Cells of the help screen's `:` command column (after a two-cell indent).
pub const HELP_USAGE_WIDTH: usize = 26;

/// Lines the help screen has: each section's title, bindings and blank line, then the
/// commands' title, lines and blank line, and the status line.
pub fn help_height(read_only: bool) -> usize {
    let sections: usize = help_sections(read_only)
        .iter()
        .map(|(_, lines)| lines.len() + 2)
        .sum();
    sections + LINE_COMMANDS.len() + 3
}

/// Help lines grouped by scope: (scope title, [(keys, help)]). In read-only mode the
/// action keys are not bound, so help does not list them.
pub fn help_sections(read_only: bool) -> Vec<(&'static str, Vec<(String, &'static str)>)> {
    [
        Scope::Global,
        Scope::Lists,
        Scope::Leases,
        Scope::Detail,
        Scope::LeaseActions,
        Scope::AuditActions,
    ]
    .into_iter()
    .filter(|scope| !(read_only && matches!(scope, Scope::LeaseActions | Scope::AuditActions)))
    .map(|scope| {
        let lines = BINDINGS
            .iter()
            .filter(|b| b.scope == scope)
            .map(|b| {
                let keys: Vec<String> = b.keys.iter().map(Key::label).collect();
                (keys.join(" "), b.help)
            })
            .collect();
        (scope.title(), lines)
    })
    .collect()
}

/// The binding of `command`, for what a key does and in which scope.
pub fn binding(command: KeyCommand) -> Option<&'static Binding> {
    BINDINGS.iter().find(|b| b.command == command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_is_bound_twice_where_scopes_overlap() {
        let mut seen = Vec::new();
        for binding in BINDINGS {
            for key in binding.keys {
                assert!(!seen.contains(key), "{} is bound twice", key.label());
                seen.push(*key);
            }
        }
    }

    #[test]
    fn help_texts_fit_the_help_popup_at_80_columns() {
        // At 80 columns the popup is 76 wide: 74 inside, less the keys' or the
        // commands' column. (Cut with `…` otherwise: X's "asks to accept" was.)
        let inside = 74;
        for binding in BINDINGS {
            let keys: Vec<String> = binding.keys.iter().map(Key::label).collect();
            assert!(
                keys.join(" ").chars().count() + 2 <= HELP_KEYS_WIDTH,
                "{keys:?} leave two spaces before the help"
            );
            assert!(
                binding.help.chars().count() <= inside - 2 - HELP_KEYS_WIDTH,
                "{}",
                binding.help
            );
        }
        for spec in LINE_COMMANDS {
            assert!(
                spec.usage.chars().count() < HELP_USAGE_WIDTH,
                "{}",
                spec.usage
            );
            assert!(
                spec.help.chars().count() <= inside - 2 - HELP_USAGE_WIDTH,
                "{}",
                spec.help
            );
        }
    }

    #[test]
    fn help_lists_every_binding() {
        let lines: usize = help_sections(false).iter().map(|(_, l)| l.len()).sum();
        assert_eq!(lines, BINDINGS.len());
        let read_only: usize = help_sections(true).iter().map(|(_, l)| l.len()).sum();
        assert_eq!(
            read_only,
            BINDINGS.len() - 9,
            "no action keys in read-only help"
        );
    }

    #[test]
    fn every_line_command_is_found_by_each_of_its_names_and_no_name_twice() {
        let mut seen = Vec::new();
        for spec in LINE_COMMANDS {
            assert!(spec.usage.starts_with(&format!(":{}", spec.names[0])));
            for name in spec.names {
                assert_eq!(line_command(name), Some(spec.command), "{name}");
                assert!(!seen.contains(name), ":{name} is defined twice");
                seen.push(*name);
            }
        }
        assert_eq!(line_command("nope"), None);
    }

    #[test]
    fn shifted_letters_and_ctrl_are_told_apart() {
        let plain = KeyEvent::new(KeyCode::Char('s'), KeyModifiers::NONE);
        let shifted = KeyEvent::new(KeyCode::Char('S'), KeyModifiers::SHIFT);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        let all = [Scope::Global, Scope::Lists, Scope::Leases];
        assert_eq!(lookup(&plain, &all), Some(KeyCommand::SortNext));
        assert_eq!(lookup(&shifted, &all), Some(KeyCommand::SortReverse));
        assert_eq!(lookup(&ctrl_c, &all), Some(KeyCommand::Quit));
        assert_eq!(lookup(&plain, &[Scope::Global]), None);
    }
}
