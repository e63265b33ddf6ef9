//! The real terminal: raw mode, alternate screen and mouse capture on the way in,
//! and all of it undone on the way out, on Ctrl-C, and on a panic.

use std::io::{self, Stdout, Write};

use crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use crossterm::{cursor, execute};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

/// Restores the terminal when dropped, however the console ends.
pub struct TerminalGuard {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    pub fn enter(mouse: bool) -> io::Result<TerminalGuard> {
        install_panic_hook();
        enable_raw_mode()?;
        let mut stdout = io::stdout();
        if let Err(error) = execute!(stdout, EnterAlternateScreen, cursor::Hide) {
            let _ = restore();
            return Err(error);
        }
        if mouse {
            if let Err(error) = set_mouse(true) {
                let _ = restore();
                return Err(error);
            }
        }
        match Terminal::new(CrosstermBackend::new(stdout)) {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(error) => {
                let _ = restore();
                Err(error)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = restore();
    }
}

pub fn set_mouse(on: bool) -> io::Result<()> {
    let mut stdout = io::stdout();
    if on {
        execute!(stdout, EnableMouseCapture)
    } else {
        execute!(stdout, DisableMouseCapture)
    }
}

/// Leaves the terminal as the shell expects it. Safe to call more than once.
pub fn restore() -> io::Result<()> {
    let mut stdout = io::stdout();
    let screen = execute!(
        stdout,
        DisableMouseCapture,
        LeaveAlternateScreen,
        cursor::Show
    );
    let raw = disable_raw_mode();
    stdout.flush()?;
    screen.and(raw)
}

/// Restores the terminal before the panic message prints, then lets the previous
/// hook (the default one prints the message and backtrace) run. Only a panic on the
/// thread that draws ends the console: tokio catches a panic in a background task (a
/// data task, an in-process listener), and restoring the terminal under a console that
/// keeps drawing would leave frames on the shell's screen.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    let ui_thread = std::thread::current().id();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() == ui_thread {
            let _ = restore();
        }
        previous(info);
    }));
}
