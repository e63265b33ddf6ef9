//! The guarded-action dialog: ask (how far to rewind, whom to hand over to), plan,
//! preview with Cancel focused, a reason for the audit record and the resource name
//! to type for destructive actions, run, report.
//!
//! The dialog stays true while it is open: the target (resource, holder, version) is
//! captured when it opens, the lease feed keeps flowing, and a plan whose lease moved
//! on since (another version or holder) says so and cannot be applied until it is
//! planned again (`r`).

use chrono::{DateTime, NaiveTime, Utc};
use crossterm::event::KeyCode;

use super::effect::Effect;
use crate::model::text::escape_control;
use crate::model::Lease;
use crate::ops::{
    ActionKind, ActionRequest, CheckpointRef, Plan, RebuildProgress, RefusalKind, ResetTarget,
    RewindTarget, TimeSpec,
};

/// What the operator pointed at when the dialog opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub resource: String,
    pub holder: Option<String>,
    pub version: i64,
}

impl Target {
    pub fn of(lease: &Lease) -> Target {
        Target {
            resource: lease.resource.clone(),
            holder: lease.holder.clone(),
            version: lease.version,
        }
    }

    /// "v7 held by X" (or "held by nobody").
    pub fn seen(&self) -> String {
        seen(self.version, self.holder.as_deref())
    }
}

fn seen(version: i64, holder: Option<&str>) -> String {
    format!(
        "v{version} held by {}",
        holder.map_or_else(|| "nobody".to_string(), escape_control)
    )
}

/// Where the keyboard goes in the preview.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    Cancel,
    Apply,
    /// The reason field: what is typed goes to the audit record.
    Reason,
}

/// What the dialog asks before it can plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// How far back: a duration, an RFC 3339 time, a clock time (UTC) or `SECS:INC`.
    Rewind,
    /// To whom: one of the in-process standbys of the lease (↑/↓), or a typed name.
    HandOver {
        standbys: Vec<String>,
        choice: Option<usize>,
    },
}

/// The lease as the console sees it now, against what a plan or the dialog saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// "changed since planned" or "changed since opened".
    pub since: &'static str,
    pub then: String,
    /// `None`: the lease can no longer be read.
    pub now: Option<String>,
}

impl Moved {
    pub fn text(&self) -> String {
        format!(
            "changed since {}: {} → {}",
            self.since,
            self.then,
            self.now
                .as_deref()
                .unwrap_or("the lease can no longer be read")
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Dialog {
    Ask {
        target: Target,
        ask: Ask,
        text: String,
    },
    /// The facts are being read.
    Planning {
        target: Option<Target>,
        request: ActionRequest,
        /// Typed before a re-plan: kept for the new preview.
        reason: String,
    },
    Preview {
        target: Option<Target>,
        plan: Box<Plan>,
        focus: Focus,
        /// The resource name typed to confirm.
        typed: String,
        /// Why, for the audit record.
        reason: String,
        /// The lease moved on since it was planned (kept current by the console).
        moved: Option<Moved>,
    },
    /// Executing; a rebuild reports progress and can be cancelled or sent to the
    /// background.
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
    /// `esc` was pressed: `y` cancels, `b` closes the dialog and lets it run on in the
    /// background, anything else keeps it running here.
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
    /// A preview closed without applying: close it and tell the operator this (that
    /// nothing was written, and how to apply when Apply was ready).
    Cancelled(String),
    /// Stay open and tell the operator this.
    Error(String),
    /// Stay open (in its new step) and have the app do this.
    Effect(Effect),
    /// Plan again: recapture the lease as it is now and read the facts anew.
    Replan(ActionRequest),
    /// Close the dialog; the rebuild goes on and its outcome arrives as a notice.
    Background,
}

/// What the dialog needs to know from the console to answer a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyContext {
    /// The server's clock, for a clock time typed into the rewind question.
    pub server_now: DateTime<Utc>,
    /// Control was held: the preview's commands are control keys, so that every
    /// letter typed goes to the name or the reason (a resource name can hold any).
    pub ctrl: bool,
}

/// The preview's command keys, as shown; held with control (see [`KeyContext::ctrl`]).
pub const REPLAN_KEY: &str = "ctrl-r";
pub const ACCEPT_SKIP_KEY: &str = "ctrl-s";

impl Dialog {
    /// The dialog's transitions: ask → plan → preview → run, and back out with `esc`.
    pub fn on_key(&mut self, code: KeyCode, context: KeyContext) -> DialogReply {
        let apply_ready = matches!(self, Dialog::Preview { .. }) && self.apply_disabled().is_none();
        match self {
            Dialog::Ask { target, ask, text } => match code {
                KeyCode::Esc => return DialogReply::Close,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Up | KeyCode::Down | KeyCode::Tab | KeyCode::BackTab => {
                    if let Ask::HandOver { standbys, choice } = ask {
                        *choice = step_choice(*choice, standbys.len(), code);
                        text.clear();
                    }
                }
                KeyCode::Char(c) if !c.is_control() => {
                    text.push(c);
                    if let Ask::HandOver { choice, .. } = ask {
                        *choice = None;
                    }
                }
                KeyCode::Enter => {
                    let request = match ask {
                        Ask::Rewind => rewind_request(target, text, context.server_now),
                        Ask::HandOver { standbys, choice } => {
                            handover_request(target, text, standbys, *choice)
                        }
                    };
                    return match request {
                        Ok(request) => {
                            *self = Dialog::Planning {
                                target: Some(target.clone()),
                                request: request.clone(),
                                reason: String::new(),
                            };
                            DialogReply::Effect(Effect::Plan(request))
                        }
                        Err(error) => DialogReply::Error(error),
                    };
                }
                _ => {}
            },
            Dialog::Planning { .. } if code == KeyCode::Esc => return DialogReply::Close,
            Dialog::Planning { .. } => {}
            Dialog::Preview {
                target,
                plan,
                focus,
                typed,
                reason,
                moved,
            } => {
                let blocked = blocked(target.as_ref(), plan, moved.as_ref());
                match (code, *focus) {
                    (KeyCode::Esc, _) => return DialogReply::Cancelled(cancelled(plan, false)),
                    (KeyCode::Tab, _) => {
                        *focus = match focus {
                            Focus::Cancel => Focus::Apply,
                            Focus::Apply => Focus::Reason,
                            Focus::Reason => Focus::Cancel,
                        }
                    }
                    (KeyCode::BackTab, _) => {
                        *focus = match focus {
                            Focus::Cancel => Focus::Reason,
                            Focus::Apply => Focus::Cancel,
                            Focus::Reason => Focus::Apply,
                        }
                    }
                    (KeyCode::Left | KeyCode::Right, Focus::Cancel | Focus::Apply) => {
                        *focus = match focus {
                            Focus::Cancel => Focus::Apply,
                            _ => Focus::Cancel,
                        }
                    }
                    (KeyCode::Backspace, Focus::Reason) => {
                        reason.pop();
                    }
                    (KeyCode::Char(c), Focus::Reason) if !c.is_control() => reason.push(c),
                    // Enter in the reason field goes on to the buttons, never applies.
                    (KeyCode::Enter, Focus::Reason) => *focus = Focus::Apply,
                    (KeyCode::Backspace, _) => {
                        typed.pop();
                    }
                    (KeyCode::Char('s'), _) if context.ctrl && skip_not_accepted(plan) => {
                        if let ActionRequest::Reset { resource, to, .. } = &plan.request {
                            return DialogReply::Replan(ActionRequest::Reset {
                                resource: resource.clone(),
                                to: *to,
                                accept_skip: true,
                            });
                        }
                    }
                    (KeyCode::Char('r'), _)
                        if context.ctrl && replan_offered(plan, blocked.is_some()) =>
                    {
                        return DialogReply::Replan(plan.request.clone());
                    }
                    (KeyCode::Char(_), _) if context.ctrl => {}
                    // Typed while the plan is blocked too: the name is kept, Apply waits.
                    (KeyCode::Char(c), _) if !c.is_control() && plan.confirm_text().is_some() => {
                        typed.push(c)
                    }
                    // The name typed and enter pressed, with Cancel still focused: the
                    // operator meant Apply, and must not think it applied.
                    (KeyCode::Enter, Focus::Cancel) => {
                        return DialogReply::Cancelled(cancelled(plan, apply_ready))
                    }
                    (KeyCode::Enter, _) => {
                        if let Some(reason) = blocked {
                            return DialogReply::Error(reason);
                        }
                        if let Some(expected) =
                            plan.confirm_text().filter(|_| !plan.confirmed_by(typed))
                        {
                            return DialogReply::Error(format!(
                                "type {} to confirm; nothing was written",
                                escape_control(expected)
                            ));
                        }
                        let plan: Box<Plan> = plan.clone();
                        let reason = Some(reason.trim().to_string()).filter(|r| !r.is_empty());
                        *self = Dialog::Running {
                            action: plan.action,
                            resource: plan.resource.clone().unwrap_or_default(),
                            progress: None,
                            stage: RunningStage::Working,
                        };
                        return DialogReply::Effect(Effect::Execute { plan, reason });
                    }
                    _ => {}
                }
            }
            Dialog::Running { action, stage, .. } if *action == ActionKind::Rebuild => {
                let answer_yes = code == KeyCode::Char('y');
                match (*stage, code) {
                    (RunningStage::Working, KeyCode::Esc) => *stage = RunningStage::ConfirmCancel,
                    (RunningStage::Working | RunningStage::ConfirmCancel, KeyCode::Char('b')) => {
                        return DialogReply::Background
                    }
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

    /// The resource the dialog is about, as far as it knows one.
    pub fn resource(&self) -> Option<&str> {
        match self {
            Dialog::Ask { target, .. } => Some(&target.resource),
            Dialog::Planning { target, .. } => target.as_ref().map(|t| t.resource.as_str()),
            Dialog::Preview { target, plan, .. } => plan
                .resource
                .as_deref()
                .or(target.as_ref().map(|t| t.resource.as_str())),
            Dialog::Running { resource, .. } => Some(resource),
        }
    }

    /// Why Apply is disabled, if it is: refused, the lease changed since the dialog
    /// opened or since the plan was read, or the name is not typed yet.
    pub fn apply_disabled(&self) -> Option<String> {
        let Dialog::Preview {
            target,
            plan,
            typed,
            moved,
            ..
        } = self
        else {
            return None;
        };
        blocked(target.as_ref(), plan, moved.as_ref()).or_else(|| {
            plan.confirm_text()
                .filter(|_| !plan.confirmed_by(typed))
                .map(|expected| format!("type {} to enable Apply", escape_control(expected)))
        })
    }

    /// Compares the plan with the lease as the console has it now: `Some(None)` when
    /// its document can no longer be read, `None` when the console has not seen it.
    /// Called whenever a lease event arrives and when a plan does.
    pub fn follow(&mut self, lease: Option<Option<&Lease>>) {
        let Dialog::Preview { plan, moved, .. } = self else {
            return;
        };
        let Some(lease) = lease else {
            return;
        };
        let Some(captured) = &plan.captured else {
            return;
        };
        *moved = match lease {
            None => Some(Moved {
                since: "planned",
                then: seen(captured.version, captured.holder.as_deref()),
                now: None,
            }),
            // The feed may lag behind the plan's own read: an older version is not a
            // change. A newer one, or another holder at the same version (a release),
            // is.
            Some(lease)
                if lease.version > captured.version
                    || (lease.version == captured.version && lease.holder != captured.holder) =>
            {
                Some(Moved {
                    since: "planned",
                    then: seen(captured.version, captured.holder.as_deref()),
                    now: Some(seen(lease.version, lease.holder.as_deref())),
                })
            }
            Some(_) => None,
        };
    }
}

/// What closing a preview without applying says: nothing was written; and when enter
/// chose Cancel while Apply was ready, how to apply (short enough for the footer at
/// 80 columns: a notice is one line).
fn cancelled(plan: &Plan, apply_was_ready: bool) -> String {
    if apply_was_ready {
        return "nothing written: enter chose Cancel (to apply: tab to Apply, then enter)".into();
    }
    let what = match &plan.resource {
        Some(resource) => format!("{} {}", plan.action, escape_control(resource)),
        None => plan.action.to_string(),
    };
    format!("{what} cancelled: nothing was written")
}

/// Why the plan must not be confirmed: refused, the lease is not the one the dialog
/// opened on, or it moved on since it was planned.
pub fn blocked(target: Option<&Target>, plan: &Plan, moved: Option<&Moved>) -> Option<String> {
    if let Some(refusal) = &plan.refusal {
        return Some(refusal.reason.clone());
    }
    if let Some(moved) = moved {
        return Some(format!(
            "{}: nothing will be written; {REPLAN_KEY} plans it again",
            moved.text()
        ));
    }
    let (Some(target), Some(captured)) = (target, plan.captured.as_ref()) else {
        return None;
    };
    (captured.version != target.version || captured.holder != target.holder).then(|| {
        format!(
            "{}: nothing will be written; {REPLAN_KEY} plans it again",
            opened_moved(target, plan)
                .map(|m| m.text())
                .unwrap_or_default()
        )
    })
}

/// The lease the plan was read against is not the one the dialog opened on.
pub fn opened_moved(target: &Target, plan: &Plan) -> Option<Moved> {
    let captured = plan.captured.as_ref()?;
    (captured.version != target.version || captured.holder != target.holder).then(|| Moved {
        since: "opened",
        then: target.seen(),
        now: Some(seen(captured.version, captured.holder.as_deref())),
    })
}

/// `r` plans again when nothing is being typed into the confirmation: the plan cannot
/// be applied as it is, or needs no name.
pub fn replan_offered(plan: &Plan, blocked: bool) -> bool {
    blocked || plan.confirm_text().is_none()
}

/// A reset to now refused for want of the CLI's `--accept-skip`: `a` accepts it.
pub fn skip_not_accepted(plan: &Plan) -> bool {
    plan.refusal
        .as_ref()
        .is_some_and(|r| r.kind == RefusalKind::SkipNotAccepted)
}

fn step_choice(choice: Option<usize>, len: usize, code: KeyCode) -> Option<usize> {
    if len == 0 {
        return None;
    }
    let back = matches!(code, KeyCode::Up | KeyCode::BackTab);
    Some(match (choice, back) {
        (None, false) => 0,
        (None, true) => len - 1,
        (Some(i), false) => (i + 1) % len,
        (Some(i), true) => (i + len - 1) % len,
    })
}

/// The request an action key makes for `target`; `None` for the ones that ask first
/// (rewind, hand over) and those that need more than the lease (rebuild, undo).
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
        ActionKind::Skip => Some(ActionRequest::Skip {
            resource,
            to_token: None,
        }),
        ActionKind::Rewind | ActionKind::Rebuild | ActionKind::Undo => None,
    }
}

/// A rewind as typed into the ask dialog: back by a duration (`10m`, `1h30m`), to an
/// RFC 3339 time, to a clock time (`03:10`, `03:10:30`, UTC as the console shows
/// times: the latest such time not after `server_now`), to `SECS:INC` /
/// `Timestamp(SECS, INC)`, or to a checkpoint (`#N` as the detail view numbers them, or
/// `#ID`).
pub fn rewind_request(
    target: &Target,
    text: &str,
    server_now: DateTime<Utc>,
) -> Result<ActionRequest, String> {
    let text = text.trim();
    let rewind = |to| ActionRequest::Rewind {
        resource: target.resource.clone(),
        to,
    };
    if let Some(which) = text.strip_prefix('#') {
        return which
            .parse::<CheckpointRef>()
            .map(|which| rewind(RewindTarget::Checkpoint(which)));
    }
    if let Ok(by) = humantime::parse_duration(text) {
        if by.is_zero() {
            return Err("a rewind by 0s changes nothing".into());
        }
        return Ok(rewind(RewindTarget::By(by)));
    }
    if let Some(at) = clock_time(text, server_now) {
        return Ok(rewind(RewindTarget::Time(TimeSpec::Wall(at))));
    }
    let two_digits = |part: &str| part.len() == 2 && part.chars().all(|c| c.is_ascii_digit());
    let parts: Vec<&str> = text.split(':').collect();
    if (2..=3).contains(&parts.len()) && parts.iter().all(|p| two_digits(p)) {
        return Err(format!(
            "{text:?} is not a clock time: expected HH:MM or HH:MM:SS (UTC, 00:00 to 23:59:59)"
        ));
    }
    match text.parse::<TimeSpec>() {
        Ok(spec) => Ok(rewind(RewindTarget::Time(spec))),
        Err(_) => Err(format!(
            "{text:?} is neither a duration (10m, 1h30m), an RFC 3339 time (2026-01-01T00:10:00Z), a clock time in UTC (03:10 or 03:10:30), SECS:INC nor a checkpoint (#2)"
        )),
    }
}

/// `HH:MM` or `HH:MM:SS` in UTC: the latest such time not after `now`.
fn clock_time(text: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let time = NaiveTime::parse_from_str(text, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(text, "%H:%M"))
        .ok()?;
    // Only two-digit hours: `1795442561:5` is a cluster time, not a clock.
    if text.split(':').next().is_none_or(|h| h.len() != 2) {
        return None;
    }
    let today = now.date_naive().and_time(time).and_utc();
    Some(if today > now {
        today - chrono::Duration::days(1)
    } else {
        today
    })
}

/// A takeover handing the lease to the standby chosen or the name typed.
pub fn handover_request(
    target: &Target,
    text: &str,
    standbys: &[String],
    choice: Option<usize>,
) -> Result<ActionRequest, String> {
    let typed = text.trim();
    let to = if typed.is_empty() {
        choice.and_then(|i| standbys.get(i)).cloned()
    } else {
        Some(typed.to_string())
    };
    match to {
        Some(to) => Ok(ActionRequest::Takeover {
            resource: target.resource.clone(),
            to: Some(to),
            hold: None,
        }),
        None => Err(if standbys.is_empty() {
            "type the id of the listener to hand the lease to".into()
        } else {
            "choose a standby with ↑/↓ or type a listener id".into()
        }),
    }
}

#[cfg(test)]
mod tests;
