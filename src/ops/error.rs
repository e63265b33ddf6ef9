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
    /// The compare-and-swap found another version: nothing was written.
    #[error(
        "{resource} changed since it was planned (planned against version {planned}, now {}): nothing was written; plan again",
        current.map_or_else(|| "missing".to_string(), |v| format!("version {v} held by {}", holder.as_deref().unwrap_or("nobody")))
    )]
    Changed {
        resource: String,
        planned: i64,
        current: Option<i64>,
        holder: Option<String>,
    },
    /// The lease was changed but its audit record could not be written.
    #[error("{action} on {resource} was applied (version {version}) but its audit record was not written or not confirmed: {source}")]
    AuditMissing {
        action: String,
        resource: String,
        version: i64,
        source: Box<StoreError>,
    },
    /// The compare-and-swap's reply was lost (a network or write-concern error): the
    /// write may or may not have been applied, and no audit record was written.
    #[error(
        "{action} on {resource}: the lease write's reply was lost, so whether it was applied is unknown, \
         and no audit record was written. Check with `streamward leases`: version {planned} means \
         nothing was written (plan again); a later version means it was applied or someone else \
         changed the lease since. Cause: {source}",
        planned = planned_version
    )]
    OutcomeUnknown {
        action: String,
        resource: String,
        planned_version: i64,
        source: Box<StoreError>,
    },
    /// A rebuild failed or was cancelled after it took the bulk lease: the lease stays
    /// bulk (STUCK BULK) until a re-run or abort-bulk.
    #[error(
        "rebuild {name} {what}; the lease {resource} stays bulk (STUCK BULK) and incremental listeners stay out. \
         Recover by running the rebuild again (streamward rebuild {name} --execute) or by giving the lease back \
         without rebuilding (streamward abort-bulk {resource} --execute){}",
        match audit_id {
            Ok(id) => format!("; audit record {id}"),
            Err(e) => format!("; NO audit record was written ({e})"),
        }
    )]
    StuckBulk {
        name: String,
        resource: String,
        /// "failed: …" or "was cancelled".
        what: String,
        /// The failure's audit record, or why it could not be written.
        audit_id: Result<String, String>,
    },
    /// A rebuild ran to its end, but its bulk lease was taken away before it could be
    /// given back: the derived data was rebuilt, the lease is whatever the other writer
    /// left, and listeners do not replay from the rebuild's T0.
    #[error(
        "rebuild {name} {what}; check the lease of {resource} (streamward leases) and, if the listeners must replay from the rebuild, rewind it{}",
        match audit_id {
            Ok(id) => format!("; audit record {id}"),
            Err(e) => format!("; NO audit record was written ({e})"),
        }
    )]
    BulkTakenAway {
        name: String,
        resource: String,
        what: String,
        audit_id: Result<String, String>,
    },
    /// The plan is for another way of executing (a rebuild plan given to `execute`).
    #[error("{0}")]
    WrongPlan(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
