//! Drawing: pure functions of the console state and a theme. Nothing here waits,
//! reads a clock or touches a database.

mod audit;
mod detail;
mod dialog;
mod footer;
mod format;
mod header;
mod help;
mod leases;
mod listeners;
mod oplog;
mod tabs;
mod too_small;

use ratatui::widgets::Block;
use ratatui::Frame;

use super::layout;
use super::state::{ConsoleState, View};
use super::theme::Theme;

pub fn draw(frame: &mut Frame, state: &ConsoleState, theme: &Theme) {
    let area = frame.area();
    if area.width == 0 || area.height == 0 {
        return;
    }
    frame.render_widget(Block::default().style(theme.base), area);
    if !layout::fits(area) {
        too_small::draw(frame, area, theme);
        return;
    }
    let areas = layout::areas(area);
    header::draw(frame, areas.header, state, theme);
    tabs::draw(frame, areas.tabs, state, theme);
    match state.view {
        View::Leases => leases::draw(frame, areas.body, state, theme),
        View::Detail => detail::draw(frame, areas.body, state, theme),
        View::Oplog => oplog::draw(frame, areas.body, state, theme),
        View::Listeners => listeners::draw(frame, areas.body, state, theme),
        View::Audit => audit::draw(frame, areas.body, state, theme),
    }
    footer::draw(frame, areas.footer, state, theme);
    dialog::draw(frame, area, state, theme);
    if let Some(scroll) = state.help {
        help::draw(frame, area, scroll, state, theme);
    }
}
