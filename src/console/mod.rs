//! The terminal console. State and key handling are plain data
//! (`state`), drawing is a function of that state (`view`), and data arrives from
//! background tasks over a channel (`feed`); only `app` and `terminal` touch the
//! terminal.

pub mod action_runner;
pub mod app;
pub mod data;
pub mod feed;
pub mod keymap;
pub mod layout;
pub mod state;
pub mod terminal;
pub mod theme;
pub mod view;
