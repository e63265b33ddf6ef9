//! The guarded-action dialog: ask (for a rewind, how far), plan, preview with Cancel
//! focused and the resource name to type for destructive actions, run, report.
//! The target (resource, holder, version) is captured when the dialog opens; a plan
//! read against any other version is not offered for confirmation.

use std::time::Duration;

use crossterm::event::KeyCode;

use super::input::Effect;
use crate::model::text::escape_control;
use crate::ops::{ActionKind, ActionRequest, Plan, RebuildProgress, ResetTarget, RewindTarget};

/// What the operator pointed at when the dialog opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub resource: String,
    pub holder: Option<String>,
    pub version: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Button {
    Cancel,
    Apply,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Dialog {
    /// A rewind needs to know how far back: a duration such as `10m`.
    Ask { target: Target, text: String },
    /// The facts are being read.
    Planning {
        target: Option<Target>,
        request: ActionRequest,
    },
    Preview {
        target: Option<Target>,
        plan: Box<Plan>,
        focus: Button,
        typed: String,
    },
    /// Executing; a rebuild reports progress and can be cancelled.
    Running {
        action: ActionKind,
        resource: String,
        progress: Option<RebuildProgress>,
        stage: RunningStage,
    },
}

/// Where a running rebuild stands with the operator: cancelling or quitting leaves its
/// lease STUCK BULK, so both ask first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningStage {
    Working,
    /// `esc` was pressed: `y` cancels, anything else keeps it running.
    ConfirmCancel,
    /// `q` or Ctrl-C was pressed: `y` (or Ctrl-C again) cancels it and quits.
    ConfirmQuit,
    Cancelling,
}

/// What a key did to a dialog, for the console state to carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum DialogReply {
    Nothing,
    Close,
    /// Stay open and tell the operator this.
    Error(String),
    /// Stay open (in its new step) and have the app do this.
    Effect(Effect),
}

impl Dialog {
    /// The dialog's transitions: ask → plan → preview → run, and back out with `esc`.
    pub fn on_key(&mut self, code: KeyCode) -> DialogReply {
        match self {
            Dialog::Ask { target, text } => match code {
                KeyCode::Esc => return DialogReply::Close,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) if !c.is_control() => text.push(c),
                KeyCode::Enter => match rewind_request(target, text) {
                    Ok(request) => {
                        *self = Dialog::Planning {
                            target: Some(target.clone()),
                            request: request.clone(),
                        };
                        return DialogReply::Effect(Effect::Plan(request));
                    }
                    Err(error) => return DialogReply::Error(error),
                },
                _ => {}
            },
            Dialog::Planning { .. } if code == KeyCode::Esc => return DialogReply::Close,
            Dialog::Planning { .. } => {}
            Dialog::Preview {
                target,
                plan,
                focus,
                typed,
            } => match code {
                KeyCode::Esc => return DialogReply::Close,
                KeyCode::Tab | KeyCode::BackTab | KeyCode::Left | KeyCode::Right => {
                    *focus = match focus {
                        Button::Cancel => Button::Apply,
                        Button::Apply => Button::Cancel,
                    }
                }
                KeyCode::Backspace => {
                    typed.pop();
                }
                KeyCode::Char(c) if !c.is_control() && plan.confirm_text().is_some() => {
                    typed.push(c)
                }
                KeyCode::Enter if *focus == Button::Cancel => return DialogReply::Close,
                KeyCode::Enter => {
                    if let Some(reason) = Dialog::blocked(target.as_ref(), plan) {
                        return DialogReply::Error(reason);
                    }
                    if let Some(expected) = plan.confirm_text().filter(|expected| typed != expected)
                    {
                        return DialogReply::Error(format!(
                            "type {} to confirm; nothing was written",
                            escape_control(expected)
                        ));
                    }
                    let plan: Box<Plan> = plan.clone();
                    *self = Dialog::Running {
                        action: plan.action,
                        resource: plan.resource.clone().unwrap_or_default(),
                        progress: None,
                        stage: RunningStage::Working,
                    };
                    return DialogReply::Effect(Effect::Execute(plan));
                }
                _ => {}
            },
            Dialog::Running { action, stage, .. } if *action == ActionKind::Rebuild => {
                let answer_yes = code == KeyCode::Char('y');
                match (*stage, code) {
                    (RunningStage::Working, KeyCode::Esc) => *stage = RunningStage::ConfirmCancel,
                    (RunningStage::Working | RunningStage::Cancelling, KeyCode::Char('q')) => {
                        return self.ask_before_quitting();
                    }
                    (RunningStage::ConfirmCancel, _) if answer_yes => {
                        *stage = RunningStage::Cancelling;
                        return DialogReply::Effect(Effect::CancelRebuild);
                    }
                    (RunningStage::ConfirmQuit, _) if answer_yes => {
                        return DialogReply::Effect(Effect::Quit)
                    }
                    (RunningStage::ConfirmCancel | RunningStage::ConfirmQuit, _) => {
                        *stage = RunningStage::Working;
                    }
                    _ => {}
                }
            }
            Dialog::Running { .. } => {}
        }
        DialogReply::Nothing
    }

    /// Quitting (`q`, Ctrl-C) with this dialog open: a running rebuild asks first
    /// (quitting cancels it and leaves its lease STUCK BULK), and quits when asked
    /// again; one already being cancelled is not asked about. Anything else quits.
    pub fn ask_before_quitting(&mut self) -> DialogReply {
        if let Dialog::Running {
            action: ActionKind::Rebuild,
            stage: stage @ (RunningStage::Working | RunningStage::ConfirmCancel),
            ..
        } = self
        {
            *stage = RunningStage::ConfirmQuit;
            return DialogReply::Nothing;
        }
        DialogReply::Effect(Effect::Quit)
    }

    /// Why the plan must not be confirmed: refused, or the lease is not the one the
    /// dialog opened on.
    pub fn blocked(target: Option<&Target>, plan: &Plan) -> Option<String> {
        if let Some(refusal) = &plan.refusal {
            return Some(refusal.reason.clone());
        }
        let (Some(target), Some(captured)) = (target, plan.captured.as_ref()) else {
            return None;
        };
        (captured.version != target.version).then(|| {
            format!(
                "the lease changed since this dialog opened (version {} → {}): nothing will be written; close and press the key again to re-plan",
                target.version, captured.version
            )
        })
    }
}

/// The request an action key makes for `target`; `None` for a rewind, which asks first.
pub fn request_for(action: ActionKind, target: &Target) -> Option<ActionRequest> {
    let resource = target.resource.clone();
    match action {
        ActionKind::Takeover => Some(ActionRequest::Takeover {
            resource,
            to: None,
            hold: None,
        }),
        ActionKind::Reset => Some(ActionRequest::Reset {
            resource,
            to: ResetTarget::Oldest,
            accept_skip: false,
        }),
        ActionKind::AbortBulk => Some(ActionRequest::AbortBulk { resource }),
        ActionKind::Rewind | ActionKind::Rebuild | ActionKind::Undo => None,
    }
}

/// A rewind by the duration typed into the ask dialog.
pub fn rewind_request(target: &Target, text: &str) -> Result<ActionRequest, String> {
    let by: Duration = humantime::parse_duration(text.trim()).map_err(|e| {
        format!(
            "{:?} is not a duration such as 10m or 1h30m: {e}",
            text.trim()
        )
    })?;
    if by.is_zero() {
        return Err("a rewind by 0s changes nothing".into());
    }
    Ok(ActionRequest::Rewind {
        resource: target.resource.clone(),
        to: RewindTarget::By(by),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            resource: "shop.orders".into(),
            holder: Some("w1".into()),
            version: 4,
        }
    }

    #[test]
    fn rewind_durations_are_checked() {
        assert!(matches!(
            rewind_request(&target(), " 10m "),
            Ok(ActionRequest::Rewind {
                to: RewindTarget::By(d),
                ..
            }) if d == Duration::from_secs(600)
        ));
        assert!(rewind_request(&target(), "soon")
            .unwrap_err()
            .contains("10m"));
        assert!(rewind_request(&target(), "0s").is_err());
    }
}
