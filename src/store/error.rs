use std::fmt;

use thiserror::Error;

use super::Namespace;
use crate::model::{ClusterTime, Invalidation};

/// Server codes that mean "this node is not (or no longer) a writable primary": the
/// stepdown family (NotWritablePrimary 10107, NotPrimaryNoSecondaryOk 13435,
/// NotPrimaryOrSecondary 13436, InterruptedDueToReplStateChange 11602,
/// InterruptedAtShutdown 11600, ShutdownInProgress 91, PrimarySteppedDown 189).
pub const NOT_PRIMARY_CODES: [i32; 7] = [189, 91, 10107, 11600, 11602, 13435, 13436];

/// Every way a store call can fail, classified by what the caller should do about it.
#[derive(Debug, Clone, Error)]
pub enum StoreError {
    /// No server could be reached in time; nothing was written.
    #[error("cannot reach the database: {0}")]
    Unreachable(String),
    /// A network error after the request may have been sent: the write may or may not
    /// have been applied. Conditional writes make a retry safe.
    #[error("network error talking to the database: {0}")]
    Network(String),
    /// The user lacks a privilege; `hint` names the role that grants it.
    #[error("not permitted to {action}: {detail} (grant {hint})")]
    NotPermitted {
        action: String,
        detail: String,
        hint: String,
    },
    #[error("authentication failed: {0}")]
    Authentication(String),
    /// The server is older than the commands this program sends need.
    #[error(
        "MongoDB {found} is too old: streamward needs MongoDB {needed} or newer \
         ($getField/$setField in its fenced writes, pipeline updates with $$NOW in every \
         lease write); upgrade the server"
    )]
    UnsupportedServer { found: String, needed: String },
    /// The resume point is older than the oldest history the server keeps (286, or
    /// 280 "resume token was not found").
    #[error("change stream history lost (code {code}): {message}")]
    HistoryLost { code: i32, message: String },
    /// The server closed the change stream for good (`invalidate`, or 260 when resuming
    /// after an invalidate notification): reopening from the same point closes it again.
    #[error("change stream closed by the server (invalidate){}: {cause}", .at.map(|t| format!(" at {t}")).unwrap_or_default())]
    Invalidated {
        cause: InvalidationCause,
        /// Cluster time of the change that closed it, when known.
        at: Option<ClusterTime>,
    },
    #[error("write concern not satisfied: {0}")]
    WriteConcern(String),
    #[error("server error {code}: {message}")]
    Command { code: i32, message: String },
    /// A document or reply had a shape this program cannot read.
    #[error("malformed {what}: {detail}")]
    Malformed { what: String, detail: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An audit record that is not there, or no longer pending, was to be written to.
    #[error("audit record {id} {}", match found {
        Some(state) => format!("is already {state}, not pending: it was finalized before"),
        None => "does not exist".to_string(),
    })]
    AuditNotPending {
        id: String,
        found: Option<crate::model::AuditState>,
    },
    /// The oplog window cannot be known just now, for a reason other than a privilege
    /// (a shard of a sharded cluster that cannot be reached): it may come back.
    #[error("the oplog window cannot be read: {0}")]
    OplogUnknown(String),
    /// The deployment keeps no oplog at all (Azure Cosmos DB): nothing is sent to try.
    #[error("there is no oplog to read: {0}")]
    NoOplog(String),
    /// A change on the stream the server cannot return as asked: larger than a reply
    /// may be (`BSONObjectTooLarge`), or without the image the stream requires
    /// (`NoMatchingDocument`). Reading again meets it again.
    #[error("change stream read failed: {}", .0.message())]
    UnreadableChange(Box<crate::model::UnreadableChange>),
    /// The store was shut down (sandbox) or the watch ended.
    #[error("the store connection was closed")]
    Closed,
}

impl StoreError {
    /// Whether a write that failed this way may still have been applied: its reply
    /// was lost (network) or the majority did not confirm it (write concern). Any
    /// other error means the server did not apply it.
    pub fn write_may_have_applied(&self) -> bool {
        matches!(self, StoreError::Network(_) | StoreError::WriteConcern(_))
    }

    /// Whether this error from reading the oplog means it cannot be read through this
    /// connection (a missing privilege, or `local` refused through mongos: code 20),
    /// rather than that the read failed.
    pub fn oplog_unreadable(&self) -> bool {
        matches!(
            self,
            StoreError::NotPermitted { .. }
                | StoreError::Command { code: 20, .. }
                | StoreError::OplogUnknown(_)
                | StoreError::NoOplog(_)
        )
    }

    /// Why the oplog window is unknown, in the words every view shows, when this error
    /// from reading it means so ([`StoreError::oplog_unreadable`]); `None` when the
    /// read failed instead.
    pub fn why_oplog_unreadable(&self) -> Option<String> {
        match self {
            // Its own words: the error's would say "cannot be read" twice.
            StoreError::OplogUnknown(why) => Some(why.clone()),
            other if other.oplog_unreadable() => Some(other.to_string()),
            _ => None,
        }
    }

    /// The driver's account of a failed server selection, in a few words (its whole
    /// account names every server and label, and belongs in the log).
    pub fn unreachable_reason(detail: &str) -> &'static str {
        let lower = detail.to_lowercase();
        if lower.contains("connection refused") {
            "connection refused"
        } else if lower.contains("dns") || lower.contains("lookup") || lower.contains("resolve") {
            "the host name does not resolve"
        } else if lower.contains("tls") || lower.contains("certificate") || lower.contains("ssl") {
            "the TLS handshake failed"
        } else if lower.contains("replicasetnoprimary") {
            "no primary answered (check the replicaSet name)"
        } else if lower.contains("timed out") || lower.contains("timeout") {
            "no server answered"
        } else {
            "no server could be used"
        }
    }

    /// Whether the server refused because it is not (or no longer) a writable primary
    /// (an election): nothing was applied, and the same command may succeed on the
    /// next primary.
    pub fn is_not_primary(&self) -> bool {
        matches!(self, StoreError::Command { code, .. } if NOT_PRIMARY_CODES.contains(code))
    }

    /// What an `Invalidated` error records on the lease; `None` for any other error.
    pub fn invalidation(&self) -> Option<Invalidation> {
        match self {
            StoreError::Invalidated { cause, at } => Some(Invalidation {
                at: *at,
                reason: cause.to_string(),
            }),
            _ => None,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What closed a change stream for good: the change the server's `invalidate` event
/// follows on a collection stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidationCause {
    /// The watched collection was dropped (also by `dropDatabase`).
    Dropped(Namespace),
    /// The watched collection was renamed to `to`.
    Renamed { from: Namespace, to: Namespace },
    /// `from` was renamed onto the watched collection `to`, replacing it:
    /// `renameCollection` with `dropTarget`, or an aggregation's `$out`.
    Replaced { from: Namespace, to: Namespace },
    /// The watched collection's database was dropped.
    DatabaseDropped(String),
    /// The stream was resumed from its own invalidate notification (server code 260):
    /// what closed it is no longer known.
    ResumedFromInvalidate,
    /// An `invalidate` that no drop or rename of the watched collection preceded.
    Unknown,
    /// Azure Cosmos DB answered the stream with NamespaceNotFound, which it sends
    /// instead of an `invalidate` event when the watched collection was dropped or
    /// never existed (Microsoft's change stream documentation, "Error handling").
    Missing(Namespace),
}

impl InvalidationCause {
    /// Whether a change of kind `operation` on `ns` (renamed `to`, for a rename) closes
    /// a stream on `watched`, and why. Collection streams see `drop` of their own
    /// collection, `rename` away from it or onto it, then `invalidate`; `dropDatabase`
    /// closes them too where the server sends it.
    pub fn of_change(
        watched: &Namespace,
        operation: &str,
        ns: &Namespace,
        to: Option<&Namespace>,
    ) -> Option<Self> {
        match (operation, to) {
            ("drop", _) if ns == watched => Some(Self::Dropped(ns.clone())),
            ("rename", Some(to)) if ns == watched => Some(Self::Renamed {
                from: ns.clone(),
                to: to.clone(),
            }),
            ("rename", Some(to)) if to == watched => Some(Self::Replaced {
                from: ns.clone(),
                to: to.clone(),
            }),
            ("dropDatabase", _) if ns.db == watched.db => {
                Some(Self::DatabaseDropped(ns.db.clone()))
            }
            _ => None,
        }
    }
}

impl fmt::Display for InvalidationCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dropped(ns) => write!(f, "{ns} was dropped"),
            Self::Renamed { from, to } => write!(f, "{from} was renamed to {to}"),
            Self::Replaced { from, to } => write!(
                f,
                "{to} was replaced: {from} was renamed onto it ($out, or renameCollection with dropTarget)"
            ),
            Self::DatabaseDropped(db) => write!(f, "database {db} was dropped"),
            Self::ResumedFromInvalidate => f.write_str(
                "the stored resume token is the invalidate notification of a closed change stream",
            ),
            Self::Unknown => f.write_str("the server closed the change stream (invalidate)"),
            Self::Missing(ns) => write!(
                f,
                "{ns} does not exist (NamespaceNotFound: dropped, or never created)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oplog_read_refused_for_privilege_or_by_a_router_is_unreadable_not_failed() {
        let denied = StoreError::NotPermitted {
            action: "read local.oplog.rs".into(),
            detail: "not authorized".into(),
            hint: "clusterMonitor".into(),
        };
        let router = StoreError::Command {
            code: 20,
            message: "Can't use 'local' database through mongos".into(),
        };
        assert!(denied.oplog_unreadable() && router.oplog_unreadable());
        for other in [
            StoreError::Command {
                code: 10107,
                message: "not primary".into(),
            },
            StoreError::Network("reset".into()),
            StoreError::Unreachable("no server".into()),
        ] {
            assert!(!other.oplog_unreadable(), "{other}");
        }
        assert!(StoreError::Command {
            code: 10107,
            message: String::new()
        }
        .is_not_primary());
        assert!(!router.is_not_primary());
    }
}
