//! The record every operator action leaves behind, written before the action's first
//! lease write (`pending`) and finalized after its last.

use std::fmt;

use chrono::{DateTime, Utc};

use super::{Lease, LockKind};

/// The action name of the increments' cleanup (`streamward increments fold`), whose
/// record names a collection, not a lease.
pub const FOLD_INCREMENTS_ACTION: &str = "fold-increments";

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
    /// When it was finalized; `None` while pending.
    pub finished_at: Option<DateTime<Utc>>,
}

impl AuditRecord {
    /// Whether the record is about a lease: its resource names one, and `before`,
    /// `intended` and `after` are leases. A fold of increments names a collection and
    /// records no lease: nothing about it is read from, judged by or restored to a lease.
    pub fn concerns_lease(&self) -> bool {
        self.action != FOLD_INCREMENTS_ACTION
    }

    /// For a pending record, what it means against the lease as read at `at`.
    pub fn judge_pending(&self, now: Option<&Lease>, at: DateTime<Utc>) -> Option<PendingJudgment> {
        (self.state == AuditState::Pending).then(|| {
            let verdict = PendingVerdict::of(self, now, at);
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
    /// The lease is as the action's write (or its last recorded step) left it.
    Applied,
    /// The lease is still at the version the action found: nothing was written.
    NotApplied,
    /// The action holds the lease bulk and its lease has not run out: a rebuild that
    /// is running (it renews the lease), or that stopped less than a lease ago.
    Running,
    /// The action left the lease bulk and its lease ran out: a rebuild that died or
    /// lost the server between its bulk swap and its give-back.
    StuckBulk,
    /// The lease moved on (or is gone) since: the record alone cannot tell.
    Unknown,
    /// An action that concerns no lease (a fold of increments) stopped part way: each
    /// of its steps is safe to take again, so it is run again.
    Rerun,
}

/// Whether `now` is `left` as far as a verdict can tell: the version, the holder and
/// the kind together (a release clears the holder and keeps the version, so the
/// version alone would take a released lease for the tenure that released it).
fn same_tenure(now: &Lease, left: &Lease) -> bool {
    now.version == left.version && now.holder == left.holder && now.kind == left.kind
}

impl PendingVerdict {
    /// As shown and in JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            PendingVerdict::Applied => "applied",
            PendingVerdict::NotApplied => "not applied",
            PendingVerdict::Running => "running",
            PendingVerdict::StuckBulk => "stuck bulk",
            PendingVerdict::Unknown => "unknown",
            PendingVerdict::Rerun => "run again",
        }
    }

    /// Judges a pending record by the lease read at `at`: the lease as its last
    /// recorded step or its intended write left it, or as it was found. A record that
    /// concerns no lease is `Rerun`, whatever `now` is.
    pub fn of(record: &AuditRecord, now: Option<&Lease>, at: DateTime<Utc>) -> PendingVerdict {
        if !record.concerns_lease() {
            return PendingVerdict::Rerun;
        }
        let Some(now) = now else {
            return PendingVerdict::Unknown;
        };
        let left = [record.after.as_ref(), record.intended.as_ref()];
        if left.into_iter().flatten().any(|l| same_tenure(now, l)) {
            return match now.kind {
                LockKind::Bulk
                    if now.holder.is_some() && now.expires_at.is_some_and(|e| e > at) =>
                {
                    PendingVerdict::Running
                }
                LockKind::Bulk => PendingVerdict::StuckBulk,
                LockKind::Update => PendingVerdict::Applied,
            };
        }
        // Released as STUCK BULK by its own failure path, not yet finalized.
        if now.kind == LockKind::Bulk
            && now.holder.is_none()
            && left
                .into_iter()
                .flatten()
                .any(|l| l.kind == LockKind::Bulk && l.version == now.version)
        {
            return PendingVerdict::StuckBulk;
        }
        if Some(now.version) == record.before.as_ref().map(|b| b.version) {
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
            PendingVerdict::Running => format!(
                "{resource} is held bulk by this {} and its lease has not run out ({version}): it is running, or stopped less than a lease ago; look again after {}",
                record.action,
                now.and_then(|l| l.expires_at).map_or_else(|| "its expiry".to_string(), |e| e.to_rfc3339())
            ),
            PendingVerdict::StuckBulk => format!(
                "the rebuild stopped while it held {resource} bulk ({version}): once its pipeline is no longer running on the server, run it again (streamward rebuild … --execute) or give the lease back without rebuilding (streamward abort-bulk {resource} --execute)"
            ),
            PendingVerdict::Unknown => format!(
                "not finalized, and {resource} has moved on since ({version}): whether this {} was applied cannot be told from the lease; see the audit records after it",
                record.action
            ),
            PendingVerdict::Rerun => format!(
                "not finalized: the fold of {resource} stopped; each step names a document it meant to fold (the last may or may not have been), and a fold is conditional on what it read, so run `streamward increments fold` again to fold what is still pending"
            ),
        }
    }
}

/// A lease the audit log names that the lease collection no longer holds: lease
/// documents are never deleted by the protocol, so one missing (or back below the
/// version an action left it at) means the collection was dropped or the document
/// deleted, and its listeners stop rather than start over at version 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VanishedLease {
    pub resource: String,
    /// The highest version the audit log saw it at.
    pub seen_version: i64,
    /// Its version now, where a document of that name is back (created anew).
    pub found_version: Option<i64>,
}

/// The leases `records` name at a version that `listed` (the lease collection now)
/// does not hold: missing, or back at a lower version. Each once, by name.
pub fn vanished_leases(records: &[AuditRecord], listed: &[Lease]) -> Vec<VanishedLease> {
    let mut seen: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for record in records.iter().filter(|r| r.concerns_lease()) {
        // What the lease was and what the action left, never what it only meant to
        // write (an action refused by the version check never wrote it).
        let versions = [&record.before, &record.after]
            .into_iter()
            .flatten()
            .map(|lease| lease.version);
        for version in versions {
            let highest = seen.entry(record.resource.as_str()).or_insert(version);
            *highest = (*highest).max(version);
        }
    }
    seen.into_iter()
        .filter_map(|(resource, seen_version)| {
            let found = listed.iter().find(|l| l.resource == resource);
            match found {
                None => Some(VanishedLease {
                    resource: resource.to_string(),
                    seen_version,
                    found_version: None,
                }),
                Some(lease) if lease.version < seen_version => Some(VanishedLease {
                    resource: resource.to_string(),
                    seen_version,
                    found_version: Some(lease.version),
                }),
                Some(_) => None,
            }
        })
        .collect()
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
            finished_at: None,
        }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs)
    }

    fn expiring(mut lease: Lease, secs: i64) -> Lease {
        lease.expires_at = Some(at(secs));
        lease
    }

    fn record_of(resource: &str, before: i64, after: Option<i64>) -> AuditRecord {
        let at = |version: i64| {
            let mut lease = Lease::vacant(resource);
            lease.version = version;
            lease
        };
        AuditRecord {
            id: "a1".into(),
            operator: "oncall".into(),
            at: Utc::now(),
            action: "rewind".into(),
            resource: resource.into(),
            state: AuditState::Applied,
            before: Some(at(before)),
            intended: after.map(at),
            after: after.map(at),
            steps: Vec::new(),
            reason: None,
            outcome: "applied".into(),
            finished_at: None,
        }
    }

    /// Lease documents are never deleted: one the audit log names that is missing, or
    /// back below the version an action left it at, is named once with that version.
    #[test]
    fn a_lease_the_audit_log_names_that_is_gone_or_went_back_is_vanished() {
        let records = [
            record_of("shop.orders", 11, Some(12)),
            record_of("shop.orders", 12, Some(13)),
            record_of("pets", 4, Some(5)),
            record_of("shop.mailer", 2, None),
            record_of("kept", 7, Some(8)),
        ];
        let mut recreated = Lease::vacant("pets");
        recreated.version = 0;
        let mut kept = Lease::vacant("kept");
        kept.version = 9;
        let mut mailer = Lease::vacant("shop.mailer");
        mailer.version = 2;
        let vanished = vanished_leases(&records, &[recreated, kept, mailer]);
        assert_eq!(
            vanished,
            vec![
                VanishedLease {
                    resource: "pets".into(),
                    seen_version: 5,
                    found_version: Some(0),
                },
                VanishedLease {
                    resource: "shop.orders".into(),
                    seen_version: 13,
                    found_version: None,
                },
            ]
        );
    }

    #[test]
    fn a_pending_record_is_judged_by_the_lease_read_now() {
        let takeover = pending("takeover", lease(5, None, LockKind::Update));
        let verdict = |now: Option<Lease>| PendingVerdict::of(&takeover, now.as_ref(), at(0));
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
    }

    #[test]
    fn a_pending_rebuild_is_running_until_its_bulk_lease_runs_out_then_stuck() {
        let bulk = lease(5, Some("ann"), LockKind::Bulk);
        let rebuild = pending("rebuild", bulk.clone());
        let verdict = |now: Lease, secs: i64| PendingVerdict::of(&rebuild, Some(&now), at(secs));
        assert_eq!(
            verdict(expiring(bulk.clone(), 10), 0),
            PendingVerdict::Running
        );
        assert_eq!(
            verdict(expiring(bulk.clone(), 10), 10),
            PendingVerdict::StuckBulk
        );
        // Released at once by its own failure path, not yet finalized.
        assert_eq!(
            verdict(lease(5, None, LockKind::Bulk), 0),
            PendingVerdict::StuckBulk
        );
        let stuck = PendingVerdict::StuckBulk.recovery(&rebuild, None);
        assert!(
            stuck.contains("streamward abort-bulk r --execute"),
            "{stuck}"
        );
        let running = PendingVerdict::Running.recovery(&rebuild, Some(&expiring(bulk.clone(), 10)));
        assert!(
            running.contains("look again after 2026-01-01T00:00:10"),
            "{running}"
        );

        // Its run finished and it announced the give-back: given back reads applied,
        // still bulk as its first step left it reads stuck.
        let mut giving_back = rebuild.clone();
        giving_back.after = Some(bulk.clone());
        giving_back.intended = Some(lease(6, None, LockKind::Update));
        assert_eq!(
            PendingVerdict::of(&giving_back, Some(&lease(6, None, LockKind::Update)), at(0)),
            PendingVerdict::Applied
        );
        assert_eq!(
            PendingVerdict::of(&giving_back, Some(&expiring(bulk, -1)), at(0)),
            PendingVerdict::StuckBulk
        );
        // Someone else gave it back (abort-bulk): the record cannot tell.
        assert_eq!(
            PendingVerdict::of(
                &giving_back,
                Some(&lease(6, Some("w1"), LockKind::Update)),
                at(0)
            ),
            PendingVerdict::Unknown
        );
    }

    #[test]
    fn a_pending_fold_is_run_again_whatever_lease_shares_its_name() {
        let mut fold = pending(FOLD_INCREMENTS_ACTION, lease(5, None, LockKind::Update));
        fold.before = None;
        fold.intended = None;
        assert!(!fold.concerns_lease());
        assert!(pending("takeover", lease(5, None, LockKind::Update)).concerns_lease());
        for now in [None, Some(lease(4, Some("w1"), LockKind::Update))] {
            let judged = fold.judge_pending(now.as_ref(), at(0)).unwrap();
            assert_eq!(judged.verdict, PendingVerdict::Rerun);
            assert!(
                judged
                    .recovery
                    .contains("run `streamward increments fold` again"),
                "{}",
                judged.recovery
            );
        }
    }

    #[test]
    fn only_a_pending_record_is_judged_and_states_read_back_as_written() {
        let mut record = pending("takeover", lease(5, None, LockKind::Update));
        assert!(record.judge_pending(None, at(0)).is_some());
        record.state = AuditState::Applied;
        assert_eq!(record.judge_pending(None, at(0)), None);
        for state in AuditState::ALL {
            assert_eq!(AuditState::parse(state.as_str()), Some(state));
        }
        assert_eq!(AuditState::parse("APPLIED"), None);
    }
}
