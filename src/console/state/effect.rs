//! What a key asks of the app beyond the state: the one thing the state's input
//! handling and its dialogs both return (kept apart so neither imports the other).

use crate::ops::{ActionRequest, Plan};

/// What the app must do for the state: things that need a terminal, a file or the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Quit,
    LoadTheme(String),
    SetMouse(bool),
    /// Read the facts and plan this action (the dialog waits for `Planned`).
    Plan(ActionRequest),
    /// The operator confirmed this plan: execute it (or run the rebuild), with the
    /// reason typed in the dialog for the audit record.
    Execute {
        plan: Box<Plan>,
        reason: Option<String>,
    },
    CancelRebuild,
    /// Put this text on the operator's clipboard (OSC 52 through the terminal).
    Copy {
        what: &'static str,
        text: String,
    },
}
