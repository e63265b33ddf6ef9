//! A change the handler fails on (docs/protocol.md, "A change that fails"): which one
//! it is, as the lease records it, and whether a batch got past it.

use chrono::{DateTime, Utc};

use crate::model::{ChangeFailure, FailureCause, ResumeToken, UnreadableChange};
use crate::store::ChangeEvent;

/// The failure record for `event`, on which the handler returned `error` at server
/// time `now`, counted after what the lease recorded before (`previous`).
pub fn handler_failure(
    event: &ChangeEvent,
    error: &str,
    now: DateTime<Utc>,
    previous: Option<&ChangeFailure>,
) -> ChangeFailure {
    let key = bson::Bson::Document(event.document_key.clone())
        .into_relaxed_extjson()
        .to_string();
    ChangeFailure::first(
        Some(event.token.clone()),
        event.cluster_time,
        &event.ns.to_string(),
        event.operation.name(),
        &key,
        error,
        FailureCause::Handler,
        now,
    )
    .after(previous)
}

/// The failure record for a change on `namespace` the server could not return, at
/// server time `now`, counted after `previous`. Which operation it was and its key are
/// not known where the server did not say: it returned nothing of a change too large
/// but its size and, mostly, its token; of one without its required image, its
/// operation and cluster time (no token).
pub fn unreadable_failure(
    change: &UnreadableChange,
    namespace: &str,
    now: DateTime<Utc>,
    previous: Option<&ChangeFailure>,
) -> ChangeFailure {
    const NOT_RETURNED: &str = "(not returned)";
    let failure = match change {
        UnreadableChange::TooLarge(change) => {
            let size = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
            ChangeFailure::first(
                change.token.clone(),
                change.token.as_ref().and_then(ResumeToken::time),
                namespace,
                "unknown",
                NOT_RETURNED,
                &format!(
                    "the change ({} bytes) is larger than the server returns ({} bytes): {}",
                    size(change.size),
                    size(change.limit),
                    change.message
                ),
                FailureCause::TooLarge {
                    size: change.size,
                    limit: change.limit,
                },
                now,
            )
        }
        UnreadableChange::ImageMissing(missing) => ChangeFailure::first(
            None,
            missing.at,
            namespace,
            missing.operation.as_deref().unwrap_or("unknown"),
            NOT_RETURNED,
            &missing.remedy(namespace),
            FailureCause::ImageMissing {
                before: missing.before,
            },
            now,
        ),
    };
    failure.after(previous)
}

/// Whether `events`, handled, got past the change `failure` names.
pub fn passes(failure: Option<&ChangeFailure>, events: &[ChangeEvent]) -> bool {
    failure.is_some_and(|f| events.iter().any(|e| f.names(&e.token, e.cluster_time)))
}

/// Whether `token` is past the change `failure` names by their cluster times.
pub fn passed_by(failure: Option<&ChangeFailure>, token: &crate::model::ResumeToken) -> bool {
    match (failure.and_then(|f| f.at), token.time()) {
        (Some(at), Some(time)) => time > at,
        _ => false,
    }
}

/// What the listener says of a failure, for its status and the log.
pub fn describe(failure: &ChangeFailure) -> String {
    let at = failure.at.map(|t| format!(" at {t}")).unwrap_or_default();
    format!(
        "the handler failed on {} {} {}{at} (attempt {}): {}",
        failure.operation, failure.namespace, failure.document_key, failure.attempts, failure.error
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterTime, ResumeToken};
    use crate::store::{Namespace, OperationType};
    use bson::doc;

    fn event(data: &str, id: i32) -> ChangeEvent {
        ChangeEvent {
            token: ResumeToken::from_document(doc! { "_data": data }),
            cluster_time: Some(ClusterTime::new(100, id as u32)),
            operation: OperationType::Insert,
            ns: Namespace::new("zoo", "animals"),
            document_key: doc! { "_id": id },
            full_document: None,
            details: Default::default(),
        }
    }

    #[test]
    fn the_record_names_the_change_and_counts_after_the_previous() {
        let now = Utc::now();
        let first = handler_failure(&event("82A1", 1), "no valid tags", now, None);
        assert_eq!(first.namespace, "zoo.animals");
        assert_eq!(first.operation, "insert");
        assert_eq!(first.document_key, r#"{"_id":1}"#);
        assert_eq!(first.attempts, 1);
        let second = handler_failure(&event("82A1", 1), "no valid tags", now, Some(&first));
        assert_eq!(second.attempts, 2);
        assert!(describe(&second).contains("attempt 2"));
    }

    #[test]
    fn only_a_batch_holding_the_failed_change_passes_it() {
        let failure = handler_failure(&event("82A2", 2), "boom", Utc::now(), None);
        assert!(passes(
            Some(&failure),
            &[event("82A1", 1), event("82A2", 2)]
        ));
        assert!(!passes(Some(&failure), &[event("82A1", 1)]));
        assert!(!passes(None, &[event("82A2", 2)]));
    }
}
