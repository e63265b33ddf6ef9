//! Why an action did not happen (or did only in part), with the exit code of DESIGN §7.

use thiserror::Error;

use super::plan::Refusal;
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
    #[error("{action} on {resource} was applied (version {version}) but its audit record was not written: {source}")]
    AuditMissing {
        action: String,
        resource: String,
        version: i64,
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

/// Exit codes of DESIGN §7 (0 is success). Defined here, below the command line, so
/// the guarded actions can say which code an outcome means; `cli::exit` uses them.
pub mod exit {
    use crate::store::StoreError;

    pub const ERROR: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const REFUSED: u8 = 3;
    pub const CHANGED: u8 = 4;
    pub const CANNOT_CONNECT: u8 = 5;

    /// What a store error at the root of a failure means for the exit code.
    pub fn for_store(error: &StoreError) -> u8 {
        match error {
            StoreError::Unreachable(_)
            | StoreError::NotPermitted { .. }
            | StoreError::Authentication(_) => CANNOT_CONNECT,
            StoreError::InvalidArgument(_) => USAGE,
            _ => ERROR,
        }
    }
}

impl OpsError {
    /// Refused by a guard → 3, changed since planned → 4, cannot connect or not
    /// permitted → 5, anything else → 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            OpsError::Refused(refusal) => refusal.exit_code(),
            OpsError::Changed { .. } => exit::CHANGED,
            OpsError::Store(error) => exit::for_store(error),
            OpsError::AuditMissing { .. }
            | OpsError::StuckBulk { .. }
            | OpsError::BulkTakenAway { .. }
            | OpsError::WrongPlan(_) => exit::ERROR,
        }
    }
}
