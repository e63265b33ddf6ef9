//! Exit codes (listed in docs/reference/exit-codes.md), and which failure means which. 0 is `ExitCode::SUCCESS`.

use std::process::ExitCode;

use thiserror::Error;

use crate::ops::{FoldError, OpsError, Refusal, RefusalKind};
use crate::store::StoreError;

/// The command line was used wrongly (arguments, config file, missing URI): exit 2,
/// found before anything is read or written.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A config file that does not parse: a usage error (exit 2) whose detail is the TOML
/// parser's own lines (the line, a caret under the column, what it expected), printed
/// as lines rather than escaped into one.
#[derive(Debug, Error)]
#[error("config file {path} is not valid:\n{detail}")]
pub struct InvalidConfig {
    /// The file's path, control characters escaped.
    pub path: String,
    pub detail: String,
}

pub const ERROR: u8 = 1;
pub const USAGE: u8 = 2;
pub const REFUSED: u8 = 3;
pub const CHANGED: u8 = 4;
pub const CANNOT_CONNECT: u8 = 5;
/// `leases --check`: some lease needs attention (`commands::leases::NEEDS_ATTENTION`), or is unreadable.
pub const UNHEALTHY: u8 = 6;
/// Standard output was closed early (`streamward … | head`): the code of a program
/// stopped by SIGPIPE, with nothing said.
pub const BROKEN_PIPE: u8 = 141;

/// No server of the cluster answered: one sentence with the address (redacted), not
/// the driver's view of the topology (that goes to the log). Exit 5.
#[derive(Debug, Error)]
#[error("cannot reach {address} within {within}: {why} (is it running, and is the address right?)")]
pub struct Unreachable {
    /// The connection string, passwords masked.
    pub address: String,
    pub within: String,
    pub why: String,
}

/// `leases --check` found leases that need attention; the message names them. Exit 6.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct Unhealthy(pub String);

/// A check that needs the oplog window where it cannot be read (a missing privilege,
/// a mongos, Cosmos DB): exit 5, like a missing privilege.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OplogUnknown(pub String);

/// What a store error at the root of a failure means for the exit code.
pub fn for_store(error: &StoreError) -> u8 {
    match error {
        StoreError::Unreachable(_)
        | StoreError::NotPermitted { .. }
        | StoreError::Authentication(_)
        | StoreError::UnsupportedServer { .. } => CANNOT_CONNECT,
        StoreError::InvalidArgument(_) => USAGE,
        _ => ERROR,
    }
}

/// 3 for a guard; 5 when the refusal is a missing privilege.
pub fn for_refusal(refusal: &Refusal) -> u8 {
    match refusal.kind {
        RefusalKind::NoOplogAccess => CANNOT_CONNECT,
        _ => REFUSED,
    }
}

/// Refused by a guard → 3, changed since planned → 4, cannot connect or not
/// permitted → 5, anything else → 1.
pub fn for_ops(error: &OpsError) -> u8 {
    match error {
        OpsError::Refused(refusal) => for_refusal(refusal),
        OpsError::Changed { .. } => CHANGED,
        OpsError::Store(error) => for_store(error),
        OpsError::NotStarted { cause, .. } | OpsError::NotApplied { cause, .. } => for_store(cause),
        OpsError::AuditUnfinished { .. }
        | OpsError::OutcomeUnknown { .. }
        | OpsError::StuckBulk { .. }
        | OpsError::BulkTakenAway { .. }
        | OpsError::WrongPlan(_) => ERROR,
    }
}

/// A fold of increments fails as a guarded action does: not started or stopped by a
/// store error → that error's code (as `NotStarted` and `NotApplied`), done but its
/// record not finalized → 1 (as `AuditUnfinished`), whatever the finalize's cause.
pub fn for_fold(error: &FoldError) -> u8 {
    match error {
        FoldError::NotStarted { cause, .. } | FoldError::Stopped { cause, .. } => for_store(cause),
        FoldError::AuditUnfinished { .. } => ERROR,
    }
}

/// The exit code for a failed command: a guarded action's own, else from the store
/// error at its root if any.
pub fn code_for(error: &anyhow::Error) -> ExitCode {
    ExitCode::from(code_of(error))
}

/// [`code_for`] as a number, for `{"error": {"exit": N}}`.
pub fn code_of(error: &anyhow::Error) -> u8 {
    if is_broken_pipe(error) {
        return BROKEN_PIPE;
    }
    if error
        .chain()
        .any(|e| e.is::<UsageError>() || e.is::<InvalidConfig>())
    {
        return USAGE;
    }
    if error
        .chain()
        .any(|e| e.is::<Unreachable>() || e.is::<OplogUnknown>())
    {
        return CANNOT_CONNECT;
    }
    if error.chain().any(|e| e.is::<Unhealthy>()) {
        return UNHEALTHY;
    }
    if let Some(ops) = error.chain().find_map(|e| e.downcast_ref::<OpsError>()) {
        return for_ops(ops);
    }
    if let Some(fold) = error.chain().find_map(|e| e.downcast_ref::<FoldError>()) {
        return for_fold(fold);
    }
    error
        .chain()
        .find_map(|e| e.downcast_ref::<StoreError>())
        .map_or(ERROR, for_store)
}

/// The word for an exit code in `{"error": {"kind": …}}`.
pub fn kind_of(code: u8) -> &'static str {
    match code {
        USAGE => "usage",
        REFUSED => "refused",
        CHANGED => "changed",
        CANNOT_CONNECT => "cannot_connect",
        UNHEALTHY => "unhealthy",
        BROKEN_PIPE => "broken_pipe",
        _ => "error",
    }
}

/// Whether the failure is a write to a reader that went away.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_their_codes() {
        let unreachable =
            anyhow::Error::new(StoreError::Unreachable("x".into())).context("listing leases");
        assert_eq!(code_for(&unreachable), ExitCode::from(CANNOT_CONNECT));
        let other = anyhow::anyhow!("boom");
        assert_eq!(code_for(&other), ExitCode::from(ERROR));
        let usage = anyhow::Error::new(UsageError("--to and --by".into())).context("rewind");
        assert_eq!(code_for(&usage), ExitCode::from(USAGE));
    }

    #[test]
    fn connect_check_and_pipe_failures_have_their_own_codes() {
        let unreachable = anyhow::Error::new(Unreachable {
            address: "mongodb://127.0.0.1:9".into(),
            within: "2s".into(),
            why: "connection refused".into(),
        });
        assert_eq!(code_of(&unreachable), CANNOT_CONNECT);
        assert_eq!(kind_of(code_of(&unreachable)), "cannot_connect");
        let unhealthy = anyhow::Error::new(Unhealthy("x".into())).context("checking");
        assert_eq!(code_of(&unhealthy), UNHEALTHY);
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("printing the leases");
        assert_eq!(code_of(&pipe), BROKEN_PIPE);
        assert_eq!(kind_of(1), "error");
    }

    #[test]
    fn refusals_are_3_except_a_missing_oplog_privilege_which_is_5() {
        let refusal = |kind| Refusal {
            kind,
            reason: String::new(),
        };
        for kind in [
            RefusalKind::ReadOnly,
            RefusalKind::BulkHeld,
            RefusalKind::OutsideWindow,
            RefusalKind::SkipNotAccepted,
        ] {
            assert_eq!(for_refusal(&refusal(kind)), REFUSED, "{kind:?}");
        }
        assert_eq!(
            for_refusal(&refusal(RefusalKind::NoOplogAccess)),
            CANNOT_CONNECT
        );
    }

    #[test]
    fn guarded_action_errors_keep_their_codes_under_context() {
        let changed = anyhow::Error::new(OpsError::Changed {
            resource: "r".into(),
            planned: 1,
            current: Some(2),
            holder: None,
            audit_id: None,
            audit: None,
        })
        .context("taking over r");
        assert_eq!(code_for(&changed), ExitCode::from(CHANGED));
        let not_permitted = anyhow::Error::new(OpsError::Store(StoreError::NotPermitted {
            action: "a".into(),
            detail: "d".into(),
            hint: "h".into(),
        }));
        assert_eq!(code_for(&not_permitted), ExitCode::from(CANNOT_CONNECT));
        let not_started = anyhow::Error::new(OpsError::NotStarted {
            action: "takeover".into(),
            resource: "r".into(),
            cause: Box::new(StoreError::NotPermitted {
                action: "a".into(),
                detail: "d".into(),
                hint: "h".into(),
            }),
        });
        assert_eq!(code_for(&not_started), ExitCode::from(CANNOT_CONNECT));
        let stuck = anyhow::Error::new(OpsError::StuckBulk {
            name: "n".into(),
            resource: "r".into(),
            what: "failed: x".into(),
            audit_id: "1".into(),
            audit: "audit record 1 stays pending (timeout)".into(),
        });
        assert!(stuck
            .to_string()
            .contains("audit record 1 stays pending (timeout)"));
        assert_eq!(code_for(&stuck), ExitCode::from(ERROR));
    }

    #[test]
    fn a_fold_exits_as_a_guarded_action_does() {
        use crate::ops::FoldReport;
        use crate::store::Namespace;

        let denied = || StoreError::NotPermitted {
            action: "a".into(),
            detail: "d".into(),
            hint: "h".into(),
        };
        let ns = Namespace::new("shop", "counts");
        let not_started = anyhow::Error::new(FoldError::NotStarted {
            ns: ns.clone(),
            cause: denied(),
        });
        assert_eq!(code_of(&not_started), CANNOT_CONNECT);
        // Done, its record left pending: 1 as for OpsError::AuditUnfinished, even when
        // the finalize was refused for want of a privilege.
        let unfinished = anyhow::Error::new(FoldError::AuditUnfinished {
            ns,
            report: FoldReport::default(),
            audit_id: "1".into(),
            cause: denied(),
        })
        .context("folding");
        assert_eq!(code_of(&unfinished), ERROR);
    }
}
