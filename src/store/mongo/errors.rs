//! Classifies driver errors into [`StoreError`]s, and owns the single retry.
//!
//! Retry policy (DESIGN §3 "Retries"): the client is built with `retryWrites=false`
//! and `retryReads=false`, so the driver never retries on its own; this module
//! retries a call **once** when the failure says the command may not have run on a
//! primary: a network error (`Io`, `ConnectionPoolCleared`) or the not-primary /
//! stepdown family (189, 91, 10107, 11600, 11602, 13435, 13436). Every other
//! command error is returned at once. Every write this adapter retries is
//! conditional on holder and version (or idempotent by `_id`), so a retry that
//! lands after the first attempt was applied changes nothing twice.

use std::future::Future;
use std::time::Duration;

use mongodb::change_stream::ChangeStream;
use mongodb::error::{Error, ErrorKind, WriteFailure};
use serde::de::DeserializeOwned;

use crate::store::StoreError;

/// Codes that mean "this node is not (or no longer) a writable primary".
const NOT_PRIMARY_CODES: [i32; 7] = [189, 91, 10107, 11600, 11602, 13435, 13436];
/// Change-stream history lost: 286 ChangeStreamHistoryLost, 280 ChangeStreamFatalError
/// (token not found), 40576 / 40585 on older servers, and 136 CappedPositionLost: what
/// a real 6.0 answers a live stream's getMore once the oplog rolled past its position
/// while it was paused (the driver does not resume on 136; the only tailable cursors
/// this adapter opens are change streams).
pub const HISTORY_LOST_CODES: [i32; 5] = [286, 280, 136, 40576, 40585];
pub const DUPLICATE_KEY: i32 = 11000;
pub const UNAUTHORIZED: i32 = 13;
pub const AUTHENTICATION_FAILED: i32 = 18;

/// The server error code of a command or write error, if it has one.
pub fn code_of(error: &Error) -> Option<i32> {
    match &*error.kind {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => Some(w.code),
        _ => None,
    }
}

pub fn is_duplicate_key(error: &Error) -> bool {
    matches!(
        &*error.kind,
        ErrorKind::Command(_) | ErrorKind::Write(WriteFailure::WriteError(_))
    ) && code_of(error) == Some(DUPLICATE_KEY)
}

/// Whether one more attempt of the same conditional call is allowed.
pub fn is_retryable(error: &Error) -> bool {
    match &*error.kind {
        ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => true,
        ErrorKind::Command(c) => NOT_PRIMARY_CODES.contains(&c.code),
        _ => false,
    }
}

/// Maps a driver error; `action` says what we were doing ("acquire lease shop.orders")
/// and is used for privilege errors.
pub fn classify(error: &Error, action: &str) -> StoreError {
    match &*error.kind {
        ErrorKind::ServerSelection { message, .. } => {
            StoreError::Unreachable(format!("{action}: {message}"))
        }
        ErrorKind::Io(io) => StoreError::Network(format!("{action}: {io}")),
        ErrorKind::ConnectionPoolCleared { message, .. } => {
            StoreError::Network(format!("{action}: {message}"))
        }
        ErrorKind::Authentication { message, .. } => StoreError::Authentication(message.clone()),
        ErrorKind::DnsResolve { message, .. } => {
            StoreError::Unreachable(format!("{action}: DNS resolution failed: {message}"))
        }
        ErrorKind::InvalidArgument { message, .. } => {
            StoreError::InvalidArgument(format!("{action}: {message}"))
        }
        ErrorKind::InvalidResponse { message, .. } => StoreError::Malformed {
            what: "server reply".into(),
            detail: format!("{action}: {message}"),
        },
        ErrorKind::BsonDeserialization(e) => StoreError::Malformed {
            what: "server reply".into(),
            detail: format!("{action}: {e}"),
        },
        ErrorKind::Write(WriteFailure::WriteConcernError(wc)) => {
            StoreError::WriteConcern(format!("{action}: {} (code {})", wc.message, wc.code))
        }
        ErrorKind::Command(_) | ErrorKind::Write(WriteFailure::WriteError(_)) => {
            let code = code_of(error).unwrap_or_default();
            let message = match &*error.kind {
                ErrorKind::Command(c) => c.message.clone(),
                ErrorKind::Write(WriteFailure::WriteError(w)) => w.message.clone(),
                _ => String::new(),
            };
            from_code(code, message, action)
        }
        ErrorKind::Shutdown => StoreError::Closed,
        _ => StoreError::Command {
            code: 0,
            message: format!("{action}: {error}"),
        },
    }
}

/// Maps a server error code, with the role hint for privilege errors.
pub fn from_code(code: i32, message: String, action: &str) -> StoreError {
    match code {
        c if HISTORY_LOST_CODES.contains(&c) => StoreError::HistoryLost { code, message },
        AUTHENTICATION_FAILED => StoreError::Authentication(message),
        UNAUTHORIZED => StoreError::NotPermitted {
            action: action.to_string(),
            detail: message,
            hint: "a role with this privilege: see docs/permissions.md".into(),
        },
        _ => StoreError::Command {
            code,
            message: format!("{action}: {message}"),
        },
    }
}

/// Like [`classify`] but with a specific role hint for `NotPermitted`.
pub fn classify_with_hint(error: &Error, action: &str, hint: &str) -> StoreError {
    match classify(error, action) {
        StoreError::NotPermitted { action, detail, .. } => StoreError::NotPermitted {
            action,
            detail,
            hint: hint.to_string(),
        },
        other => other,
    }
}

/// Bounds one driver call by `limit` (the driver has no client-side operation timeout).
pub async fn bounded<T, F>(limit: Duration, action: &str, call: F) -> Result<T, CallError>
where
    F: Future<Output = Result<T, Error>>,
{
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(CallError::Driver(error)),
        Err(_) => Err(CallError::TimedOut(format!(
            "{action}: no reply within {} ms",
            limit.as_millis()
        ))),
    }
}

/// A failed attempt: either the driver's error or our own timeout.
#[derive(Debug)]
pub enum CallError {
    Driver(Error),
    TimedOut(String),
}

impl CallError {
    pub fn into_store(self, action: &str) -> StoreError {
        match self {
            CallError::Driver(e) => classify(&e, action),
            CallError::TimedOut(m) => StoreError::Network(m),
        }
    }

    /// As `into_store`, naming `hint` as the role to grant when permission is missing.
    pub fn into_store_hinted(self, action: &str, hint: &str) -> StoreError {
        match self {
            CallError::Driver(e) => classify_with_hint(&e, action, hint),
            other => other.into_store(action),
        }
    }
}

/// One getMore on a change stream. The server answers within its await time, so
/// silence past `bound` means it is not answering: a `TimedOut` naming `action`.
pub async fn next_within<T>(
    stream: &mut ChangeStream<T>,
    bound: Duration,
    action: &str,
) -> Result<Option<T>, CallError>
where
    T: DeserializeOwned + Unpin + Send + Sync,
{
    match tokio::time::timeout(bound, stream.next_if_any()).await {
        Ok(next) => next.map_err(CallError::Driver),
        Err(_) => Err(CallError::TimedOut(format!(
            "{action}: no reply within {bound:?}"
        ))),
    }
}

/// Runs `attempt` and, if it fails with a retryable error, once more. A timeout is
/// not retried: the caller's time budget is already spent.
pub async fn with_one_retry<T, F, Fut>(
    limit: Duration,
    action: &str,
    mut attempt: F,
) -> Result<T, CallError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    match bounded(limit, action, attempt()).await {
        Err(CallError::Driver(e)) if is_retryable(&e) => {
            tracing::warn!(action, error = %e, "retrying once after a network or not-primary error");
            bounded(limit, action, attempt()).await
        }
        other => other,
    }
}
