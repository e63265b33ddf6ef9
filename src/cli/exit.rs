//! Exit codes of DESIGN §7. 0 is `ExitCode::SUCCESS`; 3 (refused by a guard) and
//! 4 (lease changed since planned) arrive with the guarded actions.

use std::process::ExitCode;

use crate::store::StoreError;

pub const ERROR: u8 = 1;
pub const USAGE: u8 = 2;
pub const CANNOT_CONNECT: u8 = 5;

/// The exit code for a failed command, from the store error at its root if any.
pub fn code_for(error: &anyhow::Error) -> ExitCode {
    let code = match error.chain().find_map(|e| e.downcast_ref::<StoreError>()) {
        Some(
            StoreError::Unreachable(_)
            | StoreError::NotPermitted { .. }
            | StoreError::Authentication(_),
        ) => CANNOT_CONNECT,
        Some(StoreError::InvalidArgument(_)) => USAGE,
        _ => ERROR,
    };
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
}
