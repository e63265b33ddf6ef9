//! Why an action did not happen (or did only in part). Each variant is a kind of
//! failure; which exit code it means is decided by the command line (`cli::exit`).

use thiserror::Error;

use super::refusal::Refusal;
use crate::store::StoreError;

#[derive(Debug, Error)]
pub enum OpsError {
    /// A guard refused the plan; nothing was written.
    #[error("refused: {0}")]
    Refused(Refusal),
    /// The action's audit record could not be written first, so nothing was done.
    #[error(
        "{action} on {resource} was not started: its audit record could not be written, and no lease \
         is changed without one, so nothing was written to the lease. Cause: {cause}"
    )]
    NotStarted {
        action: String,
        resource: String,
        /// What failed (shown in the message, not chained as a source, so it is
        /// printed once).
        cause: Box<StoreError>,
    },
    /// The compare-and-swap found another version: nothing was written to the lease.
    #[error(
        "{resource} changed since it was planned (planned against version {planned}, now {}): nothing was written to the lease; plan again{}",
        current.map_or_else(|| "missing".to_string(), |v| format!("version {v} held by {}", holder.as_deref().unwrap_or("nobody"))),
        audit.as_ref().map(|a| format!(" ({a})")).unwrap_or_default()
    )]
    Changed {
        resource: String,
        planned: i64,
        current: Option<i64>,
        holder: Option<String>,
        /// The action's audit record, and how it was finalized.
        audit_id: Option<String>,
        audit: Option<String>,
    },
    /// The server refused the lease write: nothing was written to the lease.
    #[error("{action} on {resource} was not applied: nothing was written to the lease ({audit}). Cause: {cause}")]
    NotApplied {
        action: String,
        resource: String,
        audit_id: String,
        audit: String,
        /// What failed (shown in the message, not chained as a source, so it is
        /// printed once).
        cause: Box<StoreError>,
    },
    /// The lease was changed, but its pending audit record could not be finalized.
    #[error(
        "{action} on {resource} was applied (now version {version}), but its audit record {audit_id} \
         could not be finalized and stays pending; `streamward audit` shows it with the lease read back. Cause: {cause}"
    )]
    AuditUnfinished {
        action: String,
        resource: String,
        version: i64,
        audit_id: String,
        /// What failed (shown in the message, not chained as a source, so it is
        /// printed once).
        cause: Box<StoreError>,
    },
    /// The compare-and-swap's reply was lost, and sent again it was lost too (or found
    /// the lease moved on): whether it was applied is unknown.
    #[error(
        "{action} on {resource}: the lease write's reply was lost (it was sent twice), so whether it was applied \
         is unknown; its audit record {audit_id} stays pending. `streamward audit` judges it against the lease \
         as it is now: version {planned} means nothing was written (plan again); version {next} with the new \
         holder means it was applied. Cause: {cause}",
        planned = planned_version,
        next = planned_version + 1
    )]
    OutcomeUnknown {
        action: String,
        resource: String,
        planned_version: i64,
        audit_id: String,
        /// What failed (shown in the message, not chained as a source, so it is
        /// printed once).
        cause: Box<StoreError>,
    },
    /// A rebuild failed or was cancelled after it took the bulk lease: the lease stays
    /// bulk (STUCK BULK) until a re-run or abort-bulk.
    #[error(
        "rebuild {name} {what}; the lease {resource} stays bulk (STUCK BULK) and incremental listeners stay out. \
         Recover by running the rebuild again (streamward rebuild {name} --execute) or by giving the lease back \
         without rebuilding (streamward abort-bulk {resource} --execute); {audit}"
    )]
    StuckBulk {
        name: String,
        resource: String,
        /// "failed: …" or "was cancelled".
        what: String,
        audit_id: String,
        /// Where its audit record stands.
        audit: String,
    },
    /// A rebuild's bulk lease was taken away by another writer, while the definition
    /// ran (abandoned half-way) or before it could be given back (rebuilt): the lease
    /// is whatever that writer left, and listeners do not replay from the rebuild's T0.
    #[error(
        "rebuild {name} {what}; check the lease of {resource} (streamward leases) and, if the listeners must replay from the rebuild, rewind it; {audit}"
    )]
    BulkTakenAway {
        name: String,
        resource: String,
        what: String,
        audit_id: String,
        audit: String,
    },
    /// The plan is for another way of executing (a rebuild plan given to `execute`).
    #[error("{0}")]
    WrongPlan(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OpsError {
    /// Whether the lease was written: `Some(false)` nothing was, `Some(true)` the change
    /// (or a rebuild's bulk lease) stands, `None` unknown.
    pub fn written(&self) -> Option<bool> {
        match self {
            OpsError::Refused(_)
            | OpsError::NotStarted { .. }
            | OpsError::Changed { .. }
            | OpsError::NotApplied { .. }
            | OpsError::WrongPlan(_) => Some(false),
            OpsError::AuditUnfinished { .. }
            | OpsError::StuckBulk { .. }
            | OpsError::BulkTakenAway { .. } => Some(true),
            OpsError::OutcomeUnknown { .. } | OpsError::Store(_) => None,
        }
    }

    /// The audit record this attempt left, if it got that far.
    pub fn audit_id(&self) -> Option<&str> {
        match self {
            OpsError::Changed { audit_id, .. } => audit_id.as_deref(),
            OpsError::NotApplied { audit_id, .. }
            | OpsError::AuditUnfinished { audit_id, .. }
            | OpsError::OutcomeUnknown { audit_id, .. }
            | OpsError::StuckBulk { audit_id, .. }
            | OpsError::BulkTakenAway { audit_id, .. } => Some(audit_id),
            OpsError::Refused(_)
            | OpsError::NotStarted { .. }
            | OpsError::WrongPlan(_)
            | OpsError::Store(_) => None,
        }
    }
}
