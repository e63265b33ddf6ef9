//! `streamward demo` as an operator runs it: in a real pseudo-terminal (120×40, or
//! the smallest supported 80×24; `TERM=xterm-256color`), typing keys and reading the
//! screen through a terminal
//! emulator (`vt100`), then checking that the terminal is given back as it was.
//!
//! Synchronisation is by polling the emulated screen against a deadline, never by
//! sleeping for a fixed time.

mod support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};
use predicates::prelude::*;

/// The pty's size unless a test asks for another: (rows, columns).
const SIZE: (u16, u16) = (40, 120);
/// The smallest size the console supports.
const SMALLEST: (u16, u16) = (24, 80);
/// How long any one expected change may take to show on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "streamward-e2e-{label}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).expect("create a temp dir");
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where the binary looks for configuration, themes, state and logs: all inside `home`,
/// so nothing of the user running the tests takes part.
struct Sandbox {
    home: TempDir,
}

impl Sandbox {
    fn new(label: &str) -> Sandbox {
        let home = TempDir::new(label);
        for dir in ["config", "state", "cache", "work"] {
            std::fs::create_dir_all(home.path().join(dir)).expect("create a sandbox dir");
        }
        Sandbox { home }
    }

    fn log(&self) -> PathBuf {
        self.home.path().join("streamward.log")
    }

    fn theme_dir(&self) -> PathBuf {
        self.home
            .path()
            .join("config")
            .join("streamward")
            .join("themes")
    }

    fn env(&self) -> Vec<(&'static str, PathBuf)> {
        let home = self.home.path();
        vec![
            ("HOME", home.to_path_buf()),
            ("XDG_CONFIG_HOME", home.join("config")),
            ("XDG_STATE_HOME", home.join("state")),
            ("XDG_CACHE_HOME", home.join("cache")),
            ("STREAMWARD_LOG", self.log()),
        ]
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// `streamward ARGS` for `assert_cmd`: no terminal at all.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::cargo_bin("streamward").expect("binary built");
        cmd.args(args)
            .current_dir(self.home.path().join("work"))
            .env_remove("NO_COLOR")
            .env_remove("STREAMWARD_THEME")
            .env_remove("STREAMWARD_URI")
            .env("TERM", "xterm-256color")
            .timeout(Duration::from_secs(60));
        for (key, value) in self.env() {
            cmd.env(key, value);
        }
        cmd
    }
}

/// The binary running in a pty, its output drained on a background thread into a
/// terminal emulator and a copy of the raw bytes.
struct PtySession {
    master: Box<dyn MasterPty + Send>,
    writer: Box<dyn Write + Send>,
    child: Box<dyn Child + Send + Sync>,
    parser: Arc<Mutex<vt100::Parser>>,
    raw: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
    /// The pty's local modes before the program started.
    #[cfg(unix)]
    initial_modes: Vec<String>,
}

impl PtySession {
    fn spawn(sandbox: &Sandbox, args: &[&str], extra_env: &[(&str, &str)]) -> PtySession {
        PtySession::spawn_sized(sandbox, args, extra_env, SIZE)
    }

    /// In a pty of `(rows, cols)`.
    fn spawn_sized(
        sandbox: &Sandbox,
        args: &[&str],
        extra_env: &[(&str, &str)],
        (rows, cols): (u16, u16),
    ) -> PtySession {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pty");
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_streamward"));
        cmd.args(args);
        cmd.cwd(sandbox.home.path().join("work"));
        for key in [
            "NO_COLOR",
            "STREAMWARD_THEME",
            "STREAMWARD_URI",
            "STREAMWARD_LOG_LEVEL",
        ] {
            cmd.env_remove(key);
        }
        cmd.env("TERM", "xterm-256color");
        for (key, value) in sandbox.env() {
            cmd.env(key, value);
        }
        for (key, value) in extra_env {
            cmd.env(key, value);
        }
        // Read before the child exists, so it cannot have switched to raw mode yet.
        #[cfg(unix)]
        let initial_modes = local_modes(pair.master.as_ref());
        let child = pair.slave.spawn_command(cmd).expect("spawn streamward");
        // Only the child holds the slave now: when it exits, reading the master ends.
        drop(pair.slave);

        let parser = Arc::new(Mutex::new(vt100::Parser::new(rows, cols, 0)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let mut output = pair.master.try_clone_reader().expect("pty reader");
        let reader = {
            let (parser, raw) = (Arc::clone(&parser), Arc::clone(&raw));
            std::thread::spawn(move || {
                let mut buffer = [0u8; 8192];
                loop {
                    match output.read(&mut buffer) {
                        // EOF, or EIO once the last slave descriptor closed (Linux).
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            raw.lock().unwrap().extend_from_slice(&buffer[..n]);
                            parser.lock().unwrap().process(&buffer[..n]);
                        }
                    }
                }
            })
        };
        let writer = pair.master.take_writer().expect("pty writer");
        PtySession {
            master: pair.master,
            writer,
            child,
            parser,
            raw,
            reader: Some(reader),
            #[cfg(unix)]
            initial_modes,
        }
    }

    fn contents(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    fn raw(&self) -> Vec<u8> {
        self.raw.lock().unwrap().clone()
    }

    fn send(&mut self, keys: &str) {
        self.writer
            .write_all(keys.as_bytes())
            .expect("type into the pty");
        self.writer.flush().expect("flush the pty");
    }

    /// Polls the screen until `done` holds; fails with the screen and the log if the
    /// deadline passes or the program exits first.
    fn wait_for(&mut self, what: &str, sandbox: &Sandbox, done: impl Fn(&str) -> bool) {
        self.wait_for_within(DEADLINE, what, sandbox, done);
    }

    /// [`PtySession::wait_for`] on a table taller than the screen: goes to its first
    /// and its last rows in turn (`g`, `G`) until `done` holds on one of them.
    fn wait_for_in_either_end(
        &mut self,
        what: &str,
        sandbox: &Sandbox,
        done: impl Fn(&str) -> bool,
    ) {
        let started = Instant::now();
        for key in ["G", "g"].iter().cycle() {
            self.send(key);
            let turn = Instant::now();
            while turn.elapsed() < Duration::from_millis(500) {
                if done(&self.contents()) {
                    return;
                }
                std::thread::sleep(POLL);
            }
            if started.elapsed() > DEADLINE {
                break;
            }
        }
        self.wait_for_within(Duration::ZERO, what, sandbox, done);
    }

    /// [`PtySession::wait_for`] with its own deadline, for what takes longer than one
    /// screen change (the demo's mailer falling off the oplog).
    fn wait_for_within(
        &mut self,
        deadline: Duration,
        what: &str,
        sandbox: &Sandbox,
        done: impl Fn(&str) -> bool,
    ) {
        let started = Instant::now();
        loop {
            let screen = self.contents();
            if done(&screen) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // One last look: the final frame may have arrived with the exit.
                self.finish_reading(Duration::from_secs(2));
                let screen = self.contents();
                assert!(
                    done(&screen),
                    "streamward exited ({status:?}) before {what}:\n{screen}\n--- log ---\n{}",
                    sandbox.log_text()
                );
                return;
            }
            if started.elapsed() > deadline {
                let _ = self.child.kill();
                panic!(
                    "timed out after {deadline:?} waiting for {what}:\n{screen}\n--- log ---\n{}",
                    sandbox.log_text()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    fn wait_exit(&mut self, sandbox: &Sandbox) -> portable_pty::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                self.finish_reading(Duration::from_secs(10));
                return status;
            }
            if started.elapsed() > DEADLINE {
                let _ = self.child.kill();
                panic!(
                    "streamward did not exit within {DEADLINE:?}:\n{}\n--- log ---\n{}",
                    self.contents(),
                    sandbox.log_text()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits (bounded) for the reader to reach the end of the output.
    fn finish_reading(&mut self, limit: Duration) {
        let started = Instant::now();
        while self.reader.as_ref().is_some_and(|r| !r.is_finished()) {
            if started.elapsed() > limit {
                return;
            }
            std::thread::sleep(POLL);
        }
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the pty reader thread");
        }
    }

    /// The pty's local modes now, by name (e.g. `ICANON`, `ECHO`).
    #[cfg(unix)]
    fn local_modes(&self) -> Vec<String> {
        local_modes(self.master.as_ref())
    }
}

/// The local modes of the pty behind `master`, by name. (`get_termios` returns nix's
/// `Termios`; this crate does not depend on nix, so the set flags are read from
/// their `Debug` form, `LocalFlags(ISIG | ICANON | ECHO | …)`.)
#[cfg(unix)]
fn local_modes(master: &dyn MasterPty) -> Vec<String> {
    let termios = master.get_termios().expect("the pty's termios");
    format!("{:?}", termios.local_flags)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty() && *word != "LocalFlags")
        .map(str::to_string)
        .collect()
}

impl Drop for PtySession {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The table rows of the leases view: the lines between the table's top and bottom border.
fn table(screen: &str) -> String {
    screen
        .lines()
        .skip_while(|line| !line.starts_with('┌'))
        .skip(1)
        .take_while(|line| !line.starts_with('└'))
        .collect::<Vec<_>>()
        .join("\n")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

#[test]
fn demo_console_filters_shows_help_quits_and_restores_the_terminal() {
    let sandbox = Sandbox::new("demo");
    let mut session = PtySession::spawn(&sandbox, &["demo"], &[]);
    #[cfg(unix)]
    let cooked = session.initial_modes.clone();

    session.wait_for("lease rows", &sandbox, |screen| {
        let rows = table(screen);
        rows.contains("pet-aggregates") && rows.contains("shop.orders")
    });
    {
        let parser = session.parser.lock().unwrap();
        let screen = parser.screen();
        assert!(
            screen.alternate_screen(),
            "the console draws on the alternate screen"
        );
        assert!(
            screen.hide_cursor(),
            "the cursor is hidden while the console runs"
        );
        assert_ne!(
            screen.mouse_protocol_mode(),
            vt100::MouseProtocolMode::None,
            "mouse capture is on by default"
        );
    }
    #[cfg(unix)]
    {
        let running = session.local_modes();
        assert!(
            cooked.iter().any(|m| m == "ICANON") && cooked.iter().any(|m| m == "ECHO"),
            "the pty starts cooked: {cooked:?}"
        );
        assert!(
            !running.iter().any(|m| m == "ICANON" || m == "ECHO"),
            "raw mode while the console runs: {running:?}"
        );
    }

    session.send("/shop\r");
    session.wait_for("the /shop filter to apply", &sandbox, |screen| {
        let rows = table(screen);
        screen.contains("filter /shop")
            && rows.contains("shop.orders")
            && !rows.contains("pet-aggregates")
    });
    // The filter is kept after Enter: the footer is back to key hints.
    session.wait_for("the filter prompt to close", &sandbox, |screen| {
        screen.contains("? help") && !screen.contains("enter keep")
    });

    session.send("?");
    session.wait_for("the help", &sandbox, |screen| screen.contains("Help —"));
    session.send("q");
    session.wait_for("the help to close", &sandbox, |screen| {
        !screen.contains("Help —") && table(screen).contains("shop.orders")
    });
    session.send("q");
    let status = session.wait_exit(&sandbox);
    assert!(
        status.success(),
        "q quits cleanly: {status:?}\n{}\n--- log ---\n{}",
        session.contents(),
        sandbox.log_text()
    );

    // The terminal is given back: after the last frame (each frame ends with an SGR
    // reset), mouse capture off, the main screen back, the cursor shown.
    let raw = session.raw();
    let last_frame = rfind(&raw, b"\x1b[0m").expect("at least one frame was drawn");
    let tail = &raw[last_frame..];
    let shown = String::from_utf8_lossy(tail).into_owned();
    for (what, sequence) in [
        ("mouse capture off", &b"\x1b[?1000l"[..]),
        ("SGR mouse reports off", &b"\x1b[?1006l"[..]),
        ("the alternate screen left", &b"\x1b[?1049l"[..]),
        ("the cursor shown", &b"\x1b[?25h"[..]),
    ] {
        assert!(
            find(tail, sequence).is_some(),
            "{what}: {sequence:?} missing after the last frame: {shown:?}"
        );
    }
    let left = rfind(&raw, b"\x1b[?1049l").unwrap();
    let entered = rfind(&raw, b"\x1b[?1049h").expect("the alternate screen was entered");
    assert!(
        entered < left,
        "nothing re-entered the alternate screen after leaving it"
    );
    {
        let parser = session.parser.lock().unwrap();
        let screen = parser.screen();
        assert!(!screen.alternate_screen(), "back on the main screen");
        assert!(!screen.hide_cursor(), "the cursor is visible again");
        assert_eq!(
            screen.mouse_protocol_mode(),
            vt100::MouseProtocolMode::None,
            "no mouse capture left on"
        );
    }
    #[cfg(unix)]
    {
        let after = session.local_modes();
        for mode in ["ICANON", "ECHO"] {
            assert!(
                after.iter().any(|m| m == mode),
                "raw mode is off again: {mode} missing from {after:?}"
            );
        }
        assert_eq!(after, cooked, "the pty's local modes are exactly as before");
    }
}

/// A user theme with a TOML syntax error on line 3.
const BROKEN_THEME: &str = "# a theme with a typo\n[selection]\nfg = \"black\nbg = \"cyan\"\n";

fn write_broken_theme(sandbox: &Sandbox) -> PathBuf {
    let dir = sandbox.theme_dir();
    std::fs::create_dir_all(&dir).expect("create the user theme dir");
    let file = dir.join("broken.toml");
    std::fs::write(&file, BROKEN_THEME).expect("write the broken theme");
    file
}

#[test]
fn a_broken_theme_file_stops_the_demo_before_it_takes_the_terminal() {
    let sandbox = Sandbox::new("theme-pty");
    let file = write_broken_theme(&sandbox);
    let mut session = PtySession::spawn(&sandbox, &["demo"], &[("STREAMWARD_THEME", "broken")]);
    #[cfg(unix)]
    let cooked = session.initial_modes.clone();
    let status = session.wait_exit(&sandbox);
    let screen = session.contents();
    assert!(
        !status.success(),
        "a broken theme is an error: {status:?}\n{screen}"
    );
    assert_eq!(status.exit_code(), 1, "{screen}");
    let message = screen.split_whitespace().collect::<Vec<_>>().join(" ");
    for expected in ["STREAMWARD_THEME", &file.display().to_string(), "line 3"] {
        // The message may wrap at 120 columns: compare with whitespace folded, and
        // the path (which has no spaces) with the line breaks taken out.
        let unwrapped = screen.replace('\n', "");
        assert!(
            message.contains(expected) || unwrapped.contains(expected),
            "the error names {expected:?}:\n{screen}"
        );
    }
    let raw = session.raw();
    assert!(
        find(&raw, b"\x1b[?1049h").is_none(),
        "the alternate screen was never entered: {:?}",
        String::from_utf8_lossy(&raw)
    );
    assert!(
        find(&raw, b"\x1b[?1000h").is_none(),
        "mouse capture never turned on"
    );
    #[cfg(unix)]
    assert_eq!(
        session.local_modes(),
        cooked,
        "raw mode was never turned on"
    );
}

#[test]
fn a_broken_theme_file_is_reported_before_the_missing_terminal() {
    let sandbox = Sandbox::new("theme-pipe");
    let file = write_broken_theme(&sandbox);
    sandbox
        .command(&["demo", "--theme", "broken"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(file.display().to_string()))
        .stderr(predicate::str::contains("line 3"))
        .stderr(predicate::str::contains("--theme"))
        .stderr(predicate::str::contains("needs a terminal").not())
        .stderr(
            predicate::function(|err: &str| err.matches("line 3").count() == 1)
                .name("says where the error is once, not once per error in the chain"),
        );
}

#[test]
fn demo_without_a_terminal_points_to_plain() {
    let sandbox = Sandbox::new("no-tty");
    sandbox
        .command(&["demo"])
        .assert()
        .failure()
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("needs a terminal"))
        .stderr(predicate::str::contains("streamward demo --plain"));
}

/// The operator's path through a guarded action, as typed: take over a lease from the
/// table, see it in the audit view, open the undo of it and cancel.
#[test]
fn a_takeover_from_the_console_is_confirmed_applied_and_audited() {
    let sandbox = Sandbox::new("takeover");
    let mut session = PtySession::spawn(&sandbox, &["demo", "--mailer-delay", "0s"], &[]);
    session.wait_for("lease rows", &sandbox, |screen| {
        let rows = table(screen);
        rows.contains("pet-aggregates") && rows.contains("shop.orders")
    });
    session.send(":filter pet-aggregates\r");
    session.wait_for("one row", &sandbox, |screen| {
        !table(screen).contains("shop.orders")
    });
    session.send("t");
    session.wait_for("the plan", &sandbox, |screen| {
        screen.contains("type pet-aggregates to confirm") && screen.contains("[ Cancel ]")
    });
    // Apply without the name is refused; with it, applied.
    session.send("\t\r");
    session.wait_for("the refusal", &sandbox, |screen| {
        screen.contains("type pet-aggregates to confirm; nothing was written")
    });
    // A reason for the audit record: tab from Apply to the reason field, enter back.
    session.send("\te2e check\r");
    session.wait_for("the reason typed", &sandbox, |screen| {
        screen.contains("reason (for the audit record): e2e check")
    });
    session.send("pet-aggregates\r");
    session.wait_for("the outcome", &sandbox, |screen| {
        screen.contains("applied: takeover pet-aggregates")
    });
    session.send("4");
    session.wait_for("the audit record", &sandbox, |screen| {
        screen.contains("takeover") && screen.contains("reason: from the console: e2e check")
    });
    // A takeover moved no resume point: its undo has nothing to undo (it used to
    // rewind the lease over everything processed since).
    session.send("u");
    session.wait_for("the undo plan", &sandbox, |screen| {
        screen.contains(" undo ")
            && screen.contains("[ Cancel ]")
            && screen.contains("nothing to undo: takeover did not move the resume point")
    });
    // Enter on the focused Cancel closes the dialog and writes nothing.
    session.send("\r");
    session.wait_for("the dialog to close", &sandbox, |screen| {
        !screen.contains("[ Cancel ]")
    });
    session.send("1");
    session.send("q");
    let status = session.wait_exit(&sandbox);
    assert!(status.success(), "{status:?}");
}

/// The lines inside the dialog titled `title` (between its side borders, from under
/// the title to above the bottom border), or `None` unless the whole box is on screen.
fn dialog(screen: &str, title: &str) -> Option<Vec<String>> {
    let lines: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    let corner = format!("┌{title}");
    let top = screen.lines().position(|l| l.contains(&corner))?;
    let line = screen.lines().nth(top)?;
    let left = line[..line.find(&corner)?].chars().count();
    let right = left + lines[top][left..].iter().position(|&c| c == '┐')?;
    let mut inside = Vec::new();
    for row in &lines[top + 1..] {
        match (row.get(left), row.get(right)) {
            (Some('└'), Some('┘')) => return Some(inside),
            (Some('│'), Some('│')) => inside.push(
                row[left + 1..right]
                    .iter()
                    .collect::<String>()
                    .trim_end()
                    .to_string(),
            ),
            _ => return None,
        }
    }
    None
}

/// The leases table's row of `resource`, without its borders and with runs of spaces
/// folded: `shop.mailer - 4 4s ago 49s ░░░░░ 0% LOST`.
fn lease_row(screen: &str, resource: &str) -> Option<String> {
    table(screen)
        .lines()
        .map(|line| {
            line.trim_matches('│')
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .find(|row| row.split(' ').next() == Some(resource))
}

/// The listeners view's rows whose resource starts with `prefix` (it is cut at 80
/// columns), each as its cells: resource, listener, state, version, events/s, events…
fn listener_rows(screen: &str, prefix: &str) -> Vec<Vec<String>> {
    table(screen)
        .lines()
        .map(|line| {
            line.trim_matches('│')
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.first().is_some_and(|c| c.starts_with(prefix)))
        .collect()
}

/// Each mailer listener on screen: its name as shown, the events it counted, and
/// whether it streams.
fn mailer_counts(screen: &str) -> Vec<(String, u64, bool)> {
    listener_rows(screen, "shop.ma")
        .iter()
        .filter_map(|cells| {
            let events = cells.get(5)?.parse().ok()?;
            let streaming = cells.get(2).map(String::as_str) == Some("streaming");
            Some((cells.get(1)?.clone(), events, streaming))
        })
        .collect()
}

/// The background colour of the cell where `text` starts on screen.
fn background_at(session: &PtySession, text: &str) -> Option<vt100::Color> {
    let parser = session.parser.lock().unwrap();
    let screen = parser.screen();
    let (_, cols) = screen.size();
    let found = screen.rows(0, cols).enumerate().find_map(|(row, line)| {
        let column = line[..line.find(text)?].chars().count();
        let cell = screen.cell(u16::try_from(row).ok()?, u16::try_from(column).ok()?)?;
        Some(cell.bgcolor())
    });
    found
}

/// Listeners per resource in the walk: one holds, the others stand by.
const MAILER_LISTENERS: usize = 3;

/// The newcomer's recovery walk at the smallest supported size: the demo's mailer,
/// slowed to a second per message as the tutorial does, falls off a small sandbox log
/// (LOST), the operator resets it to now from the console (accepting the skip, typing
/// the name and a reason), and its listener streams again; the audit view has the
/// record.
#[test]
fn a_lost_lease_is_reset_to_now_from_the_console_at_80x24_and_streams_again() {
    let sandbox = Sandbox::new("walk");
    // A small log, so the mailer's resume point falls off it within about a minute;
    // no rotation, so no lease moves under the dialog but the one being recovered.
    let mut session = PtySession::spawn_sized(
        &sandbox,
        &[
            "demo",
            "--oplog-size",
            "1MiB",
            "--mailer-delay",
            "1s",
            "--rotate-after",
            "0s",
            "--operator",
            "walker",
            "--listeners",
            &MAILER_LISTENERS.to_string(),
        ],
        &[],
        SMALLEST,
    );
    session.wait_for("lease rows", &sandbox, |screen| {
        lease_row(screen, "shop.mailer").is_some() && lease_row(screen, "shop.orders").is_some()
    });
    session.send(":filter shop.mailer\r");
    session.wait_for("the mailer alone", &sandbox, |screen| {
        lease_row(screen, "shop.mailer").is_some() && lease_row(screen, "shop.orders").is_none()
    });
    // LOST, and given back by its listener (holder "-"): nothing moves it any more.
    session.wait_for_within(
        Duration::from_secs(150),
        "the mailer LOST and released",
        &sandbox,
        |screen| {
            lease_row(screen, "shop.mailer")
                .is_some_and(|row| row.ends_with(" LOST") && row.split(' ').nth(1) == Some("-"))
        },
    );
    // The standbys take the lease in turn and fail on the same lost history within a
    // second; once all three wait for an operator, the lease stays as it is. The
    // listeners do not all fit at 80×24 (six per process, and the fleet's processes
    // below them): the last rows hold the last two processes' mailers (each process's
    // mailer is its last listener), the first rows the first one's.
    let history_lost = |screen: &str| {
        let rows = listener_rows(screen, "shop.ma");
        (!rows.is_empty()
            && rows
                .iter()
                .all(|cells| cells.get(2).is_some_and(|s| s == "history-lost")))
        .then_some(rows.len())
    };
    session.send("3");
    session.send("G");
    session.wait_for(
        "the last rows' mailer listeners history-lost",
        &sandbox,
        |screen| history_lost(screen).is_some(),
    );
    let last = history_lost(&session.contents()).unwrap_or_default();
    session.send("g");
    // The rest of them, there, history-lost too.
    session.wait_for(
        "the first rows' mailer listeners history-lost",
        &sandbox,
        |screen| history_lost(screen) == Some(MAILER_LISTENERS.saturating_sub(last)),
    );
    session.send("1");
    session.wait_for("the leases view", &sandbox, |screen| {
        lease_row(screen, "shop.mailer")
            .is_some_and(|row| row.ends_with(" LOST") && row.split(' ').nth(1) == Some("-"))
            && screen.contains("X reset to now")
    });

    // X: planned as the command line plans it without --accept-skip: refused, saying
    // what would be skipped and that ctrl-s accepts it.
    session.send("X");
    let title = " reset shop.mailer ";
    session.wait_for("the refused plan, whole", &sandbox, |screen| {
        dialog(screen, title).is_some_and(|lines| {
            let text = lines.join("\n");
            text.contains("will be skipped")
                && text.contains("ctrl-s accepts the skip")
                && text.contains("[ Apply — disabled: refused ]")
                && text.contains("esc cancels")
        })
    });
    session.send("\x13");
    session.wait_for("the plan with the skip accepted", &sandbox, |screen| {
        dialog(screen, title).is_some_and(|lines| {
            let text = lines.join("\n");
            text.contains("reset to now by walker")
                && text.contains("type shop.mailer to confirm:")
                && text.contains("[ Apply — disabled: type the name first ]")
                && text.contains("esc cancels")
        })
    });
    session.send("shop.mailer");
    session.wait_for("the name typed, Apply enabled", &sandbox, |screen| {
        dialog(screen, title).is_some_and(|lines| {
            lines
                .iter()
                .any(|l| l.starts_with("type shop.mailer to confirm: shop.mailer"))
                && lines.iter().any(|l| l.starts_with("[ Cancel ]  [ Apply ]"))
        })
    });
    // Tab twice to the reason; enter there goes back to Apply.
    session.send("\t\twalk at 80x24\r");
    session.wait_for("the reason typed", &sandbox, |screen| {
        dialog(screen, title).is_some_and(|lines| {
            lines
                .iter()
                .any(|l| l.starts_with("reason (for the audit record): walk at 80x24"))
                && lines.iter().any(|l| l.contains("enter chooses Apply"))
        })
    });
    let (apply, cancel) = (
        background_at(&session, "[ Apply ]"),
        background_at(&session, "[ Cancel ]"),
    );
    assert!(
        apply.is_some() && apply != cancel,
        "the focus is on Apply, and it shows: {apply:?} vs {cancel:?}\n{}",
        session.contents()
    );
    session.send("\r");
    session.wait_for("the outcome", &sandbox, |screen| {
        dialog(screen, title).is_none() && screen.contains("applied: reset shop.mailer")
    });
    // A listener takes the lease from the new resume point: held, and healthy.
    session.wait_for("the mailer held and healthy", &sandbox, |screen| {
        lease_row(screen, "shop.mailer").is_some_and(|row| {
            [" OK", " IDLE", " BEHIND"].iter().any(|s| row.ends_with(s))
                && row.split(' ').nth(1).is_some_and(|h| h != "-")
        })
    });
    session.send("3");
    // Whichever process's mailer took the lease: the first rows or the last.
    session.wait_for_in_either_end("a mailer listener streaming", &sandbox, |screen| {
        mailer_counts(screen)
            .iter()
            .any(|(_, _, streaming)| *streaming)
    });
    // The fleet may hand the lease to another process's mailer right after the reset
    // (balancing), so each mailer is compared with the count it showed when first seen,
    // on whichever end of the table it is.
    let first_seen = std::cell::RefCell::new(std::collections::BTreeMap::new());
    session.wait_for_in_either_end("a mailer's events counted rising", &sandbox, |screen| {
        let mut first_seen = first_seen.borrow_mut();
        mailer_counts(screen)
            .into_iter()
            .any(|(listener, events, streaming)| {
                let first = *first_seen.entry(listener).or_insert(events);
                streaming && events > first
            })
    });
    session.send("4");
    session.wait_for("the audit record", &sandbox, |screen| {
        let rows = table(screen);
        rows.lines().any(|row| {
            row.contains("walker")
                && row.contains(" reset ")
                && row.contains("shop.ma")
                && row.contains("APPLIED")
        }) && screen.contains(
            "reset shop.mailer · reason: from the console: walk at 80x24 · outcome: applied",
        )
    });
    session.send("q");
    session.wait_for("the leases view again", &sandbox, |screen| {
        lease_row(screen, "shop.mailer").is_some()
    });
    session.send("q");
    let status = session.wait_exit(&sandbox);
    assert!(status.success(), "{status:?}");
}

// ------------------------------------------- a poison change, on the real replica set

/// Drops the test's database when the test ends, however it ends.
struct DropDatabase {
    uri: String,
    db: String,
}

impl Drop for DropDatabase {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Runtime::new() else {
            return;
        };
        runtime.block_on(async {
            if let Ok(client) = mongodb::Client::with_uri_str(&self.uri).await {
                let _ = client.database(&self.db).drop().await;
            }
        });
    }
}

/// What `leases --output json` says of `resource` now: its fencing version, holder, the
/// attempts its failure record counts (0 without one) and when that record began.
fn lease_reading(
    sandbox: &Sandbox,
    uri: &str,
    leases: &str,
    resource: &str,
) -> (i64, String, u64, String) {
    let output = sandbox
        .command(&[
            "leases", "--output", "json", "--uri", uri, "--leases", leases,
        ])
        .output()
        .expect("leases ran");
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("leases --output json is JSON");
    fn find<'a>(value: &'a serde_json::Value, resource: &str) -> Option<&'a serde_json::Value> {
        match value {
            serde_json::Value::Object(map)
                if map.get("resource").and_then(|r| r.as_str()) == Some(resource) =>
            {
                Some(value)
            }
            serde_json::Value::Object(map) => map.values().find_map(|v| find(v, resource)),
            serde_json::Value::Array(items) => items.iter().find_map(|v| find(v, resource)),
            _ => None,
        }
    }
    let lease = find(&json, resource).unwrap_or_else(|| panic!("{resource} in {json}"));
    (
        lease["version"].as_i64().unwrap_or(0),
        lease["listenerId"].as_str().unwrap_or("").to_string(),
        lease["failure"]["attempts"].as_u64().unwrap_or(0),
        lease["failure"]["firstAt"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

/// An operator's night with a poison change, on the real replica set: `console --run`
/// writes an animal the pets listeners can never process; the console shows the lease
/// FAILING, and so does a `leases --check` run from another shell (exit 6). The
/// process is killed and another `console --run` takes over: its listeners count on
/// from the attempts the first one's made (the count is on the lease, not in a
/// process), no faster than the back-off. `skip` from the command line steps over the
/// change, and the console sees the lease leave FAILING.
#[test]
fn a_poison_change_is_failing_across_processes_and_skipped_from_the_command_line() {
    let test = "a_poison_change_is_failing_across_processes";
    let Some(uri) = support::live::live_uri(test, support::live::URI_VAR) else {
        return;
    };
    let db = format!("sw_poison_e2e_{:08x}", rand::random::<u32>());
    let _drop = DropDatabase {
        uri: uri.clone(),
        db: db.clone(),
    };
    let leases = format!("{db}.leases");
    let sandbox = Sandbox::new("poison");
    let run = |poison: bool| {
        let mut args = vec![
            "console",
            "--run",
            "--uri",
            &uri,
            "--leases",
            &leases,
            "--demo-db",
            &db,
            "--operator",
            "oncall@test",
        ];
        if poison {
            args.extend(["--poison-after", "1s"]);
        }
        PtySession::spawn(&sandbox, &args, &[])
    };
    let failing = |screen: &str| {
        lease_row(screen, "pet-aggregates").is_some_and(|row| row.contains("FAILING"))
    };
    let mut first = run(true);
    first.wait_for_within(
        Duration::from_secs(120),
        "pet-aggregates FAILING",
        &sandbox,
        failing,
    );

    let check = sandbox
        .command(&["leases", "--check", "--uri", &uri, "--leases", &leases])
        .output()
        .expect("leases --check ran");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(check.status.code(), Some(6), "{said}");
    assert!(said.contains("pet-aggregates FAILING"), "{said}");

    // The first process dies without a word; another takes over.
    let first_pid = first.child.process_id().expect("the first console's pid");
    first.child.kill().expect("kill the first console");
    let _ = first.child.wait();
    let (_, _, attempts_before, first_failed_before) =
        lease_reading(&sandbox, &uri, &leases, "pet-aggregates");
    assert!(
        attempts_before >= 3,
        "FAILING after 3 attempts: {attempts_before}"
    );
    let mut second = run(false);
    let started = Instant::now();
    let (version_then, attempts_then, first_failed_then) = loop {
        let (version, holder, attempts, first_failed) =
            lease_reading(&sandbox, &uri, &leases, "pet-aggregates");
        let by_second = !holder.is_empty() && !holder.contains(&format!("/{first_pid}-"));
        if by_second && attempts > attempts_before {
            break (version, attempts, first_failed);
        }
        assert!(
            attempts >= attempts_before,
            "the count went back from {attempts_before} to {attempts}: it restarted with the process"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the second process never failed on the change: holder {holder}, attempts {attempts}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // Counted on, not restarted: one change, so the record keeps its first time (a
    // count started over could pass the old one between two readings).
    assert!(attempts_then > attempts_before);
    assert_eq!(
        first_failed_then, first_failed_before,
        "the second process's attempts count on from the first's"
    );
    let span = Duration::from_secs(30);
    std::thread::sleep(span);
    let (version_later, _, attempts_later, _) =
        lease_reading(&sandbox, &uri, &leases, "pet-aggregates");
    let acquires = version_later - version_then;
    let attempts = i64::try_from(attempts_later - attempts_then).unwrap_or(i64::MAX);
    println!(
        "after the takeover by a new process: {attempts} more attempts and {acquires} acquires in {span:?}"
    );
    assert!(
        acquires <= attempts + 1,
        "{acquires} acquires for {attempts} attempts in {span:?}: one per attempt at most"
    );
    assert!(
        attempts <= 4,
        "{attempts} attempts in {span:?}: the back-off allows a few, not a loop"
    );
    second.wait_for("still FAILING", &sandbox, failing);

    let skip = sandbox
        .command(&[
            "skip",
            "pet-aggregates",
            "--execute",
            "--uri",
            &uri,
            "--leases",
            &leases,
            "--operator",
            "oncall@test",
        ])
        .output()
        .expect("skip ran");
    let said =
        String::from_utf8_lossy(&skip.stdout).into_owned() + &String::from_utf8_lossy(&skip.stderr);
    assert!(skip.status.success(), "{said}");
    assert!(said.contains("applied"), "{said}");
    second.wait_for_within(
        Duration::from_secs(60),
        "pet-aggregates past the change",
        &sandbox,
        |screen| lease_row(screen, "pet-aggregates").is_some_and(|row| !row.contains("FAILING")),
    );
    let (_, _, attempts_after, _) = lease_reading(&sandbox, &uri, &leases, "pet-aggregates");
    assert_eq!(
        attempts_after, 0,
        "past the change, the lease records no failure"
    );
    second.send("q");
    let status = second.wait_exit(&sandbox);
    assert!(status.success(), "{status:?}");
}
