//! The record every operator action leaves behind, written before the action's first
//! lease write (`pending`) and finalized after its last.

use std::fmt;

use chrono::{DateTime, Utc};

use super::{Lease, LockKind};

/// Where an action's record stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditState {
    /// Written before the lease write; the program that wrote it has not said how it
    /// ended (it is running, or it died or lost the server mid-action).
    Pending,
    Applied,
    /// Nothing was changed on the lease.
    NotApplied,
    /// Part of it was applied and the rest failed (a rebuild left STUCK BULK).
    Failed,
}

impl AuditState {
    pub const ALL: [AuditState; 4] = [
        AuditState::Pending,
        AuditState::Applied,
        AuditState::NotApplied,
        AuditState::Failed,
    ];

    /// As stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditState::Pending => "pending",
            AuditState::Applied => "applied",
            AuditState::NotApplied => "not applied",
            AuditState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<AuditState> {
        AuditState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for AuditState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of an action made of several lease writes (a rebuild's bulk swap and
/// give-back), recorded as it happens.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditStep {
    pub at: DateTime<Utc>,
    pub what: String,
}

/// One row of the audit collection: enough to explain the action and to undo it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: String,
    pub operator: String,
    pub at: DateTime<Utc>,
    pub action: String,
    pub resource: String,
    pub state: AuditState,
    /// The full lease before the action, including its resume point.
    pub before: Option<Lease>,
    /// The lease the action's (first) write means to leave: what a pending record is
    /// compared with when the lease is read back.
    pub intended: Option<Lease>,
    /// The lease as the action left it (for a pending record: as of its last step).
    pub after: Option<Lease>,
    pub steps: Vec<AuditStep>,
    pub reason: Option<String>,
    /// What happened, in words ("applied", "not applied: …", "failed: …").
    pub outcome: String,
}

impl AuditRecord {
    /// For a pending record, what it means against the lease as read now.
    pub fn judge_pending(&self, now: Option<&Lease>) -> Option<PendingJudgment> {
        (self.state == AuditState::Pending).then(|| {
            let verdict = PendingVerdict::of(self, now);
            PendingJudgment {
                recovery: verdict.recovery(self, now),
                verdict,
            }
        })
    }
}

/// A pending record judged: what it means and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJudgment {
    pub verdict: PendingVerdict,
    pub recovery: String,
}

/// What a pending record means, judged against the lease as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingVerdict {
    /// The lease is as the action's write meant to leave it.
    Applied,
    /// The lease is still at the version the action found: nothing was written.
    NotApplied,
    /// A rebuild holds the lease bulk (or left it bulk): it died or lost the server
    /// between its bulk swap and its give-back.
    StuckBulk,
    /// The lease moved on (or is gone) since: the record alone cannot tell.
    Unknown,
}

impl PendingVerdict {
    /// As shown and in JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            PendingVerdict::Applied => "applied",
            PendingVerdict::NotApplied => "not applied",
            PendingVerdict::StuckBulk => "stuck bulk",
            PendingVerdict::Unknown => "unknown",
        }
    }

    /// Judges a pending record by the lease read now.
    pub fn of(record: &AuditRecord, now: Option<&Lease>) -> PendingVerdict {
        let Some(now) = now else {
            return PendingVerdict::Unknown;
        };
        let before_version = record.before.as_ref().map(|b| b.version);
        if let Some(intended) = &record.intended {
            if now.version == intended.version
                && now.holder == intended.holder
                && now.kind == intended.kind
            {
                return if intended.kind == LockKind::Bulk {
                    PendingVerdict::StuckBulk
                } else {
                    PendingVerdict::Applied
                };
            }
        }
        if now.kind == LockKind::Bulk {
            if let Some(after) = &record.after {
                if after.kind == LockKind::Bulk && after.version == now.version {
                    return PendingVerdict::StuckBulk;
                }
            }
        }
        if Some(now.version) == before_version {
            return PendingVerdict::NotApplied;
        }
        PendingVerdict::Unknown
    }

    /// What it means and what to do, for the operator.
    pub fn recovery(&self, record: &AuditRecord, now: Option<&Lease>) -> String {
        let resource = &record.resource;
        let version = now.map_or_else(
            || "missing".to_string(),
            |l| format!("version {}", l.version),
        );
        match self {
            PendingVerdict::Applied => format!(
                "not finalized, but the lease reads back as this {} left it ({version}): it was applied",
                record.action
            ),
            PendingVerdict::NotApplied => format!(
                "not finalized, and the lease is still at {version}, as the {} found it: nothing was written; plan it again if it is still needed",
                record.action
            ),
            PendingVerdict::StuckBulk => format!(
                "the rebuild stopped while it held {resource} bulk ({version}): run it again (streamward rebuild … --execute) or give the lease back without rebuilding (streamward abort-bulk {resource} --execute)"
            ),
            PendingVerdict::Unknown => format!(
                "not finalized, and {resource} has moved on since ({version}): whether this {} was applied cannot be told from the lease; see the audit records after it",
                record.action
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn lease(version: i64, holder: Option<&str>, kind: LockKind) -> Lease {
        let mut lease = Lease::vacant("r");
        lease.version = version;
        lease.holder = holder.map(str::to_string);
        lease.kind = kind;
        lease
    }

    fn pending(action: &str, intended: Lease) -> AuditRecord {
        AuditRecord {
            id: "a1".into(),
            operator: "ann".into(),
            at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap(),
            action: action.into(),
            resource: "r".into(),
            state: AuditState::Pending,
            before: Some(lease(4, Some("w1"), LockKind::Update)),
            intended: Some(intended),
            after: None,
            steps: Vec::new(),
            reason: None,
            outcome: "pending".into(),
        }
    }

    #[test]
    fn a_pending_record_is_judged_by_the_lease_read_now() {
        let takeover = pending("takeover", lease(5, None, LockKind::Update));
        let verdict = |now: Option<Lease>| PendingVerdict::of(&takeover, now.as_ref());
        assert_eq!(
            verdict(Some(lease(5, None, LockKind::Update))),
            PendingVerdict::Applied
        );
        assert_eq!(
            verdict(Some(lease(4, Some("w1"), LockKind::Update))),
            PendingVerdict::NotApplied
        );
        // The next version with another holder: someone else's change, ours unknown.
        assert_eq!(
            verdict(Some(lease(5, Some("w2"), LockKind::Update))),
            PendingVerdict::Unknown
        );
        assert_eq!(
            verdict(Some(lease(9, None, LockKind::Update))),
            PendingVerdict::Unknown
        );
        assert_eq!(verdict(None), PendingVerdict::Unknown);

        let rebuild = pending("rebuild", lease(5, Some("ann"), LockKind::Bulk));
        assert_eq!(
            PendingVerdict::of(&rebuild, Some(&lease(5, Some("ann"), LockKind::Bulk))),
            PendingVerdict::StuckBulk
        );
        // Released but still bulk, as its last step left it.
        let mut stepped = rebuild.clone();
        stepped.after = Some(lease(5, Some("ann"), LockKind::Bulk));
        assert_eq!(
            PendingVerdict::of(&stepped, Some(&lease(5, None, LockKind::Bulk))),
            PendingVerdict::StuckBulk
        );
        let stuck = PendingVerdict::StuckBulk.recovery(&rebuild, None);
        assert!(
            stuck.contains("streamward abort-bulk r --execute"),
            "{stuck}"
        );
    }

    #[test]
    fn only_a_pending_record_is_judged_and_states_read_back_as_written() {
        let mut record = pending("takeover", lease(5, None, LockKind::Update));
        assert!(record.judge_pending(None).is_some());
        record.state = AuditState::Applied;
        assert_eq!(record.judge_pending(None), None);
        for state in AuditState::ALL {
            assert_eq!(AuditState::parse(state.as_str()), Some(state));
        }
        assert_eq!(AuditState::parse("APPLIED"), None);
    }
}
