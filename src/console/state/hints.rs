//! What the footer offers: the keys that apply here and now (to the selected lease,
//! the selected audit record, the view), and what the console is in (frozen,
//! read-only). Key labels and hint words come from the keymap.

use super::{ConsoleState, View};
use crate::console::keymap::{self, KeyCommand, Scope};
use crate::model::{AuditRecord, AuditState, LeaseStatus, LockKind};
use crate::ops::ActionKind;

/// One footer hint: a key and what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    pub key: String,
    pub text: String,
}

impl ConsoleState {
    /// Said before the hints: the state the keys act in.
    pub fn footer_lead(&self) -> Option<String> {
        let mut lead = Vec::new();
        if self.read_only {
            lead.push("🔒 read-only: no actions".to_string());
        }
        if self.frozen && matches!(self.view, View::Leases | View::Detail) {
            lead.push(format!("❄ FROZEN, {} changes held", self.pending()));
        }
        if let Some(rebuild) = &self.background_rebuild {
            lead.push(format!(
                "⟳ rebuild of {} running in the background{}",
                crate::model::text::escape_control(&rebuild.resource),
                rebuild
                    .progress
                    .as_ref()
                    .map(|p| match p.total {
                        Some(total) => format!(" ({}/{total})", p.done),
                        None => format!(" ({})", p.done),
                    })
                    .unwrap_or_default()
            ));
        }
        (!lead.is_empty()).then(|| lead.join(" · "))
    }

    /// The footer's key hints, most useful first: the actions that apply to what is
    /// selected, then the view's keys, help last.
    pub fn footer_hints(&self) -> Vec<Hint> {
        if self.dialog.is_some() {
            // Keys go to the dialog, which shows its own.
            return Vec::new();
        }
        let mut commands: Vec<(KeyCommand, Option<&'static str>)> = Vec::new();
        match self.view {
            View::Leases => {
                commands.extend(self.lease_actions().into_iter().map(|c| (c, None)));
                commands.extend([
                    (KeyCommand::Open, None),
                    (KeyCommand::StartFilter, None),
                    (
                        KeyCommand::ToggleFreeze,
                        Some(if self.frozen { "unfreeze" } else { "freeze" }),
                    ),
                    (KeyCommand::SortNext, None),
                    (KeyCommand::Back, Some("quit")),
                ]);
            }
            View::Detail => {
                commands.extend(self.lease_actions().into_iter().map(|c| (c, None)));
                if self.selected_token_hex().is_some() {
                    commands.push((KeyCommand::CopyToken, None));
                }
                if self.selected_listener_error().is_some() {
                    commands.push((KeyCommand::CopyError, None));
                }
                commands.push((KeyCommand::Down, Some("next lease")));
                commands.push((KeyCommand::Back, Some("back")));
            }
            View::Audit => {
                if self.undo_applies() {
                    commands.push((KeyCommand::Undo, None));
                }
                commands.push((KeyCommand::Back, Some("back")));
            }
            View::Oplog | View::Listeners => commands.push((KeyCommand::Back, Some("back"))),
        }
        commands.push((KeyCommand::StartCommand, None));
        commands.push((KeyCommand::ToggleHelp, None));
        commands
            .into_iter()
            .filter_map(|(command, text)| {
                let binding = keymap::binding(command)?;
                let key = binding.keys.first()?.label();
                let text = text.or(binding.hint).unwrap_or(binding.help);
                Some(Hint {
                    key,
                    text: text.to_string(),
                })
            })
            .collect()
    }

    /// The guarded actions that make sense for the selected lease, most likely first;
    /// none in read-only mode. (The others are still bound: their plan says why not.)
    pub fn lease_actions(&self) -> Vec<KeyCommand> {
        if self.read_only {
            return Vec::new();
        }
        let Some(entry) = self.leases.selected() else {
            return Vec::new();
        };
        let rebuild = self
            .rebuilds
            .iter()
            .any(|(resource, _)| *resource == entry.lease.resource)
            .then_some(KeyCommand::Rebuild);
        let mut actions = if entry.lease.kind == LockKind::Bulk {
            vec![KeyCommand::AbortBulk]
        } else {
            match entry.health.status {
                LeaseStatus::Lost => vec![
                    KeyCommand::Reset,
                    KeyCommand::Rewind,
                    KeyCommand::ResetToNow,
                ],
                LeaseStatus::Invalidated => vec![KeyCommand::Rewind, KeyCommand::ResetToNow],
                LeaseStatus::Failing => vec![
                    KeyCommand::Skip,
                    KeyCommand::Takeover,
                    KeyCommand::ResetToNow,
                ],
                LeaseStatus::AtRisk => vec![
                    KeyCommand::HandOver,
                    KeyCommand::Takeover,
                    KeyCommand::ResetToNow,
                ],
                _ => vec![
                    KeyCommand::Takeover,
                    KeyCommand::HandOver,
                    KeyCommand::Rewind,
                    KeyCommand::Reset,
                ],
            }
        };
        if let Some(rebuild) = rebuild {
            let at = usize::from(entry.lease.kind != LockKind::Bulk) * actions.len();
            actions.insert(at.min(actions.len()), rebuild);
        }
        actions
    }

    /// `u` on the selected audit record would plan an undo worth showing: the action
    /// changed the lease and moved its resume point.
    pub fn undo_applies(&self) -> bool {
        !self.read_only
            && self
                .audit
                .get(self.audit_cursor.selected)
                .is_some_and(undoable)
    }

    /// What a key that is not bound here would have done, when it is an action key
    /// left unbound by read-only mode: said instead of doing nothing silently.
    pub(super) fn unbound_reason(&self, event: &crossterm::event::KeyEvent) -> Option<String> {
        if !self.read_only {
            return None;
        }
        let command = keymap::lookup(event, &[Scope::LeaseActions, Scope::AuditActions])?;
        let binding = keymap::binding(command)?;
        let what = binding.hint.unwrap_or(binding.help);
        Some(format!(
            "read-only: {} ({what}) does nothing — the console was started with --read-only (or read_only = true), so no action can be taken from it",
            keymap::Key::of(event).label()
        ))
    }
}

/// An applied (or pending) action that moved the resume point: one undo can restore.
/// Takeover and abort-bulk never do (their record's after may show a token the holder
/// committed meanwhile); the plan says the same ("nothing to undo").
fn undoable(record: &AuditRecord) -> bool {
    let changed = matches!(record.state, AuditState::Applied | AuditState::Pending);
    let keeps_it = [ActionKind::Takeover, ActionKind::AbortBulk]
        .iter()
        .any(|kind| record.action == kind.name());
    let moved = match (&record.before, &record.after) {
        (Some(before), Some(after)) => before.resume_point() != after.resume_point(),
        (before, _) => before.is_some(),
    };
    changed && moved && !keeps_it
}
