//! Under `NO_COLOR` the selected row stays visible (DESIGN §6, console-ux "Traps").
//!
//! crossterm writes every colour change as a bare SGR reset (`ESC [ m`) when `NO_COLOR`
//! is set, and ratatui writes a cell's modifiers before its colours, so a theme that
//! keeps its colours loses the reverse and bold of the selection. This test draws one
//! real frame through `CrosstermBackend` (so crossterm's own `NO_COLOR` handling is
//! what writes the bytes), parses the bytes with `vt100` and checks the attributes of
//! every cell of the selected row, as a terminal would show them.
//!
//! crossterm reads `NO_COLOR` once per process, so this file is its own test binary
//! with a single test that sets it first.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use chrono::{DateTime, TimeZone, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::{Terminal, TerminalOptions, Viewport};

use streamward::console::data::DataEvent;
use streamward::console::layout;
use streamward::console::state::{ConsoleSetup, ConsoleState, Mode};
use streamward::console::theme::{Theme, ThemeChoice};
use streamward::console::view;
use streamward::model::{ClusterTime, Lease, LockKind, OplogWindow, ResumeToken, TokenKind};

const WIDTH: u16 = 120;
const HEIGHT: u16 = 40;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 3, 14, 0).unwrap()
}

fn secs(at: DateTime<Utc>) -> u32 {
    u32::try_from(at.timestamp()).expect("a 32-bit cluster time")
}

fn lease(resource: &str, holder: Option<&str>, version: i64, token_age: u32) -> Lease {
    let mut lease = Lease::vacant(resource);
    lease.holder = holder.map(str::to_string);
    lease.version = version;
    lease.expires_at = Some(now() + chrono::Duration::seconds(8));
    lease.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(secs(now()) - token_age, 1),
        TokenKind::Event,
        u64::try_from(version).unwrap_or_default(),
    ));
    lease.committed_at = Some(now() - chrono::Duration::seconds(1));
    lease
}

/// A few leases in different states, so the rows mix plain, muted, warning and
/// danger cells (each with its own modifiers) under the selection.
fn state() -> ConsoleState {
    let mut state = ConsoleState::new(ConsoleSetup {
        theme: "monochrome".into(),
        ..ConsoleSetup::new(Mode::Demo, "sandbox", now())
    });
    state.apply(
        DataEvent::Window {
            window: OplogWindow::new(
                ClusterTime::new(secs(now()) - 3600, 1),
                ClusterTime::new(secs(now()), 1),
            ),
            server_now: now(),
            ops_per_sec: Some(40.0),
        },
        now(),
    );
    let mut stuck = lease("pets.rebuild", Some("ops@bastion"), 12, 300);
    stuck.kind = LockKind::Bulk;
    stuck.expires_at = Some(now() - chrono::Duration::seconds(120));
    let mut expired = lease("shop.invoices", Some("app-2/771"), 4, 3);
    expired.expires_at = Some(now() - chrono::Duration::seconds(30));
    let mut vacant = lease("shop.carts", None, 0, 0);
    vacant.resume_token = None;
    state.apply(
        DataEvent::LeaseSnapshot(
            (vec![
                lease("shop.orders", Some("app-1/4242-orders"), 7, 1),
                lease("pet-aggregates", Some("app-1/4242-pets"), 3, 0),
                lease("shop.mailer", Some("app-3/90-mailer"), 2, 1500),
                lease("legacy.feed", Some("app-9/1"), 1, 4000),
                stuck,
                expired,
                vacant,
            ])
            .into(),
        ),
        now(),
    );
    state.on_resize(WIDTH, HEIGHT);
    // Select the second row, as the operator would.
    state.on_key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
    assert_eq!(state.leases.selected_index(), Some(1));
    state
}

/// A `Vec<u8>` the test keeps a handle on while the backend writes into it
/// (`CrosstermBackend::writer` is behind an unstable ratatui feature).
#[derive(Clone, Default)]
struct Captured(Rc<RefCell<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One frame as the bytes a terminal would receive.
fn frame_bytes(state: &ConsoleState, theme: &Theme) -> Vec<u8> {
    let captured = Captured::default();
    let backend = CrosstermBackend::new(captured.clone());
    // A fixed viewport: the backend never asks a (missing) terminal for its size.
    let mut terminal = Terminal::with_options(
        backend,
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, WIDTH, HEIGHT)),
        },
    )
    .expect("terminal over a Vec");
    terminal
        .draw(|frame| view::draw(frame, state, theme))
        .expect("draw");
    drop(terminal);
    captured.0.take()
}

fn screen_of(bytes: &[u8]) -> vt100::Parser {
    let mut parser = vt100::Parser::new(HEIGHT, WIDTH, 0);
    parser.process(bytes);
    parser
}

/// The first table row's y, from the same layout the view draws with.
fn first_row_y() -> u16 {
    layout::table_rows(layout::areas(Rect::new(0, 0, WIDTH, HEIGHT)).body).0
}

fn row_text(screen: &vt100::Screen, y: u16) -> String {
    (1..WIDTH - 1)
        .map(|x| screen.cell(y, x).map_or(" ", |c| c.contents()).to_string())
        .map(|s| if s.is_empty() { " ".to_string() } else { s })
        .collect()
}

/// The cells of row `y` inside the table's borders.
fn cells(screen: &vt100::Screen, y: u16) -> Vec<&vt100::Cell> {
    (1..WIDTH - 1)
        .map(|x| screen.cell(y, x).expect("cell inside the screen"))
        .collect()
}

/// Every cell of the selected row is reversed (and keeps the selection's intensity),
/// no cell of the rows around it is reversed.
fn assert_selection_visible(label: &str, state: &ConsoleState, theme: &Theme) {
    assert!(
        theme.selection.add_modifier.contains(Modifier::REVERSED),
        "{label}: the selection must be reversed without colour: {:?}",
        theme.selection
    );
    let bytes = frame_bytes(state, theme);
    let parser = screen_of(&bytes);
    let screen = parser.screen();
    let first = first_row_y();
    let selected_y = first + 1;
    let selected = state.leases.selected().expect("a selected lease");
    let text = row_text(screen, selected_y);
    assert!(
        text.contains(&selected.lease.resource),
        "{label}: row {selected_y} should show the selected lease {}: {text:?}\n{}",
        selected.lease.resource,
        screen.contents()
    );
    for (i, cell) in cells(screen, selected_y).into_iter().enumerate() {
        let x = i + 1;
        assert!(
            cell.inverse(),
            "{label}: selected row {selected_y}, column {x} ({:?}) is not reversed: {text:?}",
            cell.contents()
        );
        if theme.selection.add_modifier.contains(Modifier::BOLD) {
            // vt100 keeps one intensity per cell (bold or dim), so a muted cell of
            // the selected row shows as dim; either way no reset wiped it.
            assert!(
                cell.bold() || cell.dim(),
                "{label}: selected row {selected_y}, column {x} ({:?}) lost the selection's bold",
                cell.contents()
            );
        }
    }
    for y in [first, first + 2] {
        let text = row_text(screen, y);
        assert!(
            text.trim().len() > 10,
            "{label}: row {y} is a lease row: {text:?}"
        );
        for (i, cell) in cells(screen, y).into_iter().enumerate() {
            assert!(
                !cell.inverse(),
                "{label}: unselected row {y}, column {} ({:?}) is reversed: {text:?}",
                i + 1,
                cell.contents()
            );
        }
    }
    assert_no_colour_written(label, &bytes);
}

/// crossterm honoured NO_COLOR in this process: not a single colour parameter
/// (30–49, 90–107) in any SGR sequence that went out.
fn assert_no_colour_written(label: &str, bytes: &[u8]) {
    let colours: Vec<String> = sgr_sequences(bytes)
        .into_iter()
        .filter(|params| {
            params.split(';').any(|p| {
                p.parse::<u16>()
                    .is_ok_and(|n| (30..=49).contains(&n) || (90..=107).contains(&n))
            })
        })
        .collect();
    assert!(
        colours.is_empty(),
        "{label}: colours were written under NO_COLOR: {colours:?}"
    );
}

/// The parameters of every `ESC [ … m` in `bytes`.
fn sgr_sequences(bytes: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == 0x1b && bytes[i + 1] == b'[' {
            let start = i + 2;
            let mut end = start;
            while end < bytes.len() && !(0x40..=0x7e).contains(&bytes[end]) {
                end += 1;
            }
            if end < bytes.len() && bytes[end] == b'm' {
                found.push(String::from_utf8_lossy(&bytes[start..end]).into_owned());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

#[test]
fn under_no_color_the_selected_row_stays_visible() {
    // Before anything reads it: crossterm memoises NO_COLOR on first use. Edition
    // 2021, one test in this binary, so no other thread reads the environment.
    std::env::set_var("NO_COLOR", "1");
    std::env::remove_var("STREAMWARD_THEME");
    // No user theme may stand in for a built-in one.
    let absent = std::env::temp_dir().join(format!(
        "streamward-no-color-{}-absent-config",
        std::process::id()
    ));
    std::env::set_var("XDG_CONFIG_HOME", &absent);

    let state = state();

    // Nothing chosen: NO_COLOR alone picks monochrome, as the app resolves it.
    let choice = ThemeChoice::from_env(None, None);
    assert!(choice.no_color, "NO_COLOR=1 is seen: {choice:?}");
    let monochrome = choice.resolve().expect("the monochrome theme");
    assert_eq!(monochrome.name, "monochrome");
    assert_selection_visible("monochrome", &state, &monochrome);

    // The operator picks `dark` (flag, env or config, all alike): its colours go.
    let dark = ThemeChoice::from_env(Some("dark".into()), None)
        .resolve()
        .expect("the dark theme");
    assert_eq!(dark.name, "dark");
    assert_eq!(
        dark,
        Theme::by_name("dark", None).unwrap().without_colour(),
        "under NO_COLOR the app shows `dark` without its colours"
    );
    assert_selection_visible("dark without colour", &state, &dark);
    // `:theme dark` while running goes through the same `without_colour()`.
    let switched = Theme::by_name("dark", None).unwrap().without_colour();
    assert_selection_visible(":theme dark", &state, &switched);

    // Negative control: the `default` theme with its colours kept. Its selection is
    // bold on a cyan background; under NO_COLOR the background never shows, and the
    // colour change right after the bold is written as a bare reset that wipes it.
    let coloured = Theme::by_name("default", None).unwrap();
    assert!(coloured.selection.bg.is_some());
    assert!(coloured.selection.add_modifier.contains(Modifier::BOLD));
    assert!(!coloured.selection.add_modifier.contains(Modifier::REVERSED));
    let bytes = frame_bytes(&state, &coloured);
    assert_no_colour_written("default with colours", &bytes);
    assert!(
        sgr_sequences(&bytes).iter().any(String::is_empty),
        "colour changes went out as bare SGR resets (ESC [ m)"
    );
    let parser = screen_of(&bytes);
    let screen = parser.screen();
    let selected_y = first_row_y() + 1;
    let row = cells(screen, selected_y);
    assert!(
        row.iter().all(|c| !c.inverse()),
        "nothing reverses the default selection"
    );
    assert!(
        !row[0].bold() && !row[0].inverse(),
        "the reset after the selection's bold leaves the row's first cell plain: {:?}",
        row_text(screen, selected_y)
    );
    assert!(
        !row.iter().all(|c| c.bold()),
        "with colours kept, the selected row is not marked as a whole"
    );
    // The same theme through `without_colour()`, as the app shows it, is marked.
    assert_selection_visible("default without colour", &state, &coloured.without_colour());
}
