//! Exit codes of DESIGN §7. 0 is `ExitCode::SUCCESS`; 3 (refused by a guard) and
//! 4 (lease changed since planned) come from the guarded actions' `OpsError`.

use std::process::ExitCode;

use crate::ops::OpsError;
use crate::store::StoreError;

pub use crate::ops::exit::{CANNOT_CONNECT, CHANGED, ERROR, REFUSED, USAGE};

/// The exit code for a failed command: a guarded action's own, else from the store
/// error at its root if any.
pub fn code_for(error: &anyhow::Error) -> ExitCode {
    if let Some(ops) = error.chain().find_map(|e| e.downcast_ref::<OpsError>()) {
        return ExitCode::from(ops.exit_code());
    }
    let code = error
        .chain()
        .find_map(|e| e.downcast_ref::<StoreError>())
        .map_or(ERROR, crate::ops::exit::for_store);
    ExitCode::from(code)
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
    }

    #[test]
    fn guarded_action_errors_keep_their_codes_under_context() {
        let changed = anyhow::Error::new(OpsError::Changed {
            resource: "r".into(),
            planned: 1,
            current: Some(2),
            holder: None,
        })
        .context("taking over r");
        assert_eq!(code_for(&changed), ExitCode::from(CHANGED));
        let not_permitted = anyhow::Error::new(OpsError::Store(StoreError::NotPermitted {
            action: "a".into(),
            detail: "d".into(),
            hint: "h".into(),
        }));
        assert_eq!(code_for(&not_permitted), ExitCode::from(CANNOT_CONNECT));
        let stuck = anyhow::Error::new(OpsError::StuckBulk {
            name: "n".into(),
            resource: "r".into(),
            what: "failed: x".into(),
            audit_id: Err("timeout".into()),
        });
        assert!(stuck
            .to_string()
            .contains("NO audit record was written (timeout)"));
        assert_eq!(code_for(&stuck), ExitCode::from(ERROR));
    }
}
