//! Classifies driver errors into [`StoreError`]s, and owns the single retry.
//!
//! Retry policy (docs/protocol.md §13): the client is built with `retryWrites=false`
//! and `retryReads=false`, so the driver never retries on its own; this module
//! retries a call **once** when the failure says the command may not have run on a
//! primary: a network error (`Io`, `ConnectionPoolCleared`) or the not-primary /
//! stepdown family (189, 91, 10107, 11600, 11602, 13435, 13436). Every other
//! command error is returned at once. Every write this adapter retries is
//! conditional on holder and version (or idempotent by `_id`), so a retry that
//! lands after the first attempt was applied changes nothing twice.

use std::future::Future;
use std::time::Duration;

use mongodb::change_stream::session::SessionChangeStream;
use mongodb::change_stream::ChangeStream;
use mongodb::error::{Error, ErrorKind, WriteFailure};
use mongodb::ClientSession;
use serde::de::DeserializeOwned;

use crate::store::error::NOT_PRIMARY_CODES;
use crate::store::{InvalidationCause, StoreError};

/// 286 ChangeStreamHistoryLost: the resume point is older than the oplog.
pub const HISTORY_LOST: i32 = 286;
/// 136 CappedPositionLost: what a real 6.0 answers a live stream's getMore once the oplog
/// rolled past its position while it was paused (the driver does not resume on 136; the
/// only tailable cursors this adapter opens are change streams).
pub const CAPPED_POSITION_LOST: i32 = 136;
/// 280 ChangeStreamFatalError: history lost only when it says the resume token was not
/// found; the server also uses it for an ambiguous `updateLookup` ("found more than one
/// document with document key"), a pipeline that modified `_id`, and split events.
pub const CHANGE_STREAM_FATAL: i32 = 280;
/// 40576 / 40585: history lost on servers before 4.2 (kept for their messages' sake).
const OLD_HISTORY_LOST_CODES: [i32; 2] = [40576, 40585];
/// 260 InvalidResumeToken: a stream resumed after its invalidate notification when the
/// message says so; otherwise a token the server cannot use.
pub const INVALID_RESUME_TOKEN: i32 = 260;
/// In the 280 (and old 40585) message when a resume token is not in the oplog, as a real
/// 6.0 says it: "cannot resume stream; the resume token was not found. {_data: …}".
const TOKEN_NOT_FOUND: &str = "resume token was not found";
/// In the 260 message, as a real 6.0 says it: "Attempting to resume a change stream
/// using 'resumeAfter' is not allowed from an invalidate notification".
const FROM_INVALIDATE: &str = "from an invalidate notification";
/// 26 NamespaceNotFound: `$collStats` on a server without an oplog; what Cosmos DB
/// answers a change stream on a collection that was dropped or never existed.
pub const NAMESPACE_NOT_FOUND: i32 = 26;
pub const DUPLICATE_KEY: i32 = 11000;
/// `BSONObjectTooLarge`: on a change stream read, an event over the 16 MB limit.
pub const BSON_OBJECT_TOO_LARGE: i32 = 10334;
/// `NoMatchingDocument`: on a change stream read, a required pre- or post-image the
/// server does not keep (MongoDB 6.0.5 names the change's operation and time).
pub const NO_MATCHING_DOCUMENT: i32 = 47;
/// `MaxTimeMSExpired`: a command ran out of its `maxTimeMS` on the server.
pub const MAX_TIME_EXPIRED: i32 = 50;
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

/// Whether one more attempt of the same conditional call is allowed. A not-primary
/// code counts whether the server sends it as the command's error or as the write
/// error of the statement: a primary that steps down while an `update` runs answers
/// `ok: 1` with `writeErrors: [{code: 189, errmsg: "Not primary while writing to …"}]`
/// (seen on a real 6.0.5: tests/failover_live.rs), and that statement was not applied.
/// A write-concern error is never retried: its write was applied.
pub fn is_retryable(error: &Error) -> bool {
    match &*error.kind {
        ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => true,
        ErrorKind::Command(c) => NOT_PRIMARY_CODES.contains(&c.code),
        ErrorKind::Write(WriteFailure::WriteError(w)) => NOT_PRIMARY_CODES.contains(&w.code),
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
        HISTORY_LOST | CAPPED_POSITION_LOST => StoreError::HistoryLost { code, message },
        CHANGE_STREAM_FATAL if message.contains(TOKEN_NOT_FOUND) => {
            StoreError::HistoryLost { code, message }
        }
        c if OLD_HISTORY_LOST_CODES.contains(&c) => StoreError::HistoryLost { code, message },
        INVALID_RESUME_TOKEN if message.contains(FROM_INVALIDATE) => StoreError::Invalidated {
            cause: InvalidationCause::ResumedFromInvalidate,
            at: None,
        },
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
#[derive(Debug, Clone)]
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

/// [`next_within`] on a change stream opened in an explicit session.
pub async fn next_within_session<T>(
    stream: &mut SessionChangeStream<T>,
    session: &mut ClientSession,
    bound: Duration,
    action: &str,
) -> Result<Option<T>, CallError>
where
    T: DeserializeOwned + Unpin + Send + Sync,
{
    match tokio::time::timeout(bound, stream.next_if_any(session)).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(code: i32, message: &str) -> StoreError {
        from_code(
            code,
            message.into(),
            "read the change stream on shop.orders",
        )
    }

    #[test]
    fn code_280_is_history_lost_only_when_the_token_was_not_found() {
        let not_found = "PlanExecutor error during aggregation :: caused by :: cannot resume stream; \
                         the resume token was not found. {_data: \"826B04478C000000012B022C0100296E5A1004\"}";
        assert!(matches!(
            mapped(280, not_found),
            StoreError::HistoryLost { code: 280, .. }
        ));
        for other in [
            "found more than one document with document key { _id: 1 } [{ _id: 1 }, { _id: 1 }]",
            "Encountered an event whose _id field, which contains the resume token, was modified by the pipeline.",
        ] {
            assert!(
                matches!(mapped(280, other), StoreError::Command { code: 280, .. }),
                "{other}"
            );
        }
        assert!(matches!(
            mapped(286, "Resume of change stream was not possible, as the resume point may no longer be in the oplog."),
            StoreError::HistoryLost { code: 286, .. }
        ));
    }

    #[test]
    fn code_260_is_invalidated_only_after_an_invalidate_notification() {
        let closed = "Attempting to resume a change stream using 'resumeAfter' is not allowed from an invalidate notification";
        assert_eq!(
            mapped(260, closed).to_string(),
            "change stream closed by the server (invalidate): the stored resume token is the \
             invalidate notification of a closed change stream"
        );
        assert!(matches!(
            mapped(260, "Invalid resume token: expected a document"),
            StoreError::Command { code: 260, .. }
        ));
    }
}
