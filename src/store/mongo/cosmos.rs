//! What the Azure Cosmos DB profile changes in how change streams are opened and read.
//! Each rule is from Microsoft's documentation of change streams in Azure Cosmos DB
//! for MongoDB (request-unit accounts); docs/cosmos.md cites them.

use bson::{doc, Document};

use super::errors::NAMESPACE_NOT_FOUND;
use crate::store::{InvalidationCause, Namespace, StoreError};

/// The operations a Cosmos DB change stream must `$match` (no others are supported:
/// "the delete operation or other events are not yet supported").
const OPERATIONS: [&str; 3] = ["insert", "update", "replace"];

/// The pipeline every Cosmos DB change stream must have after `$changeStream`: a
/// `$match` on `operationType`, then a `$project` of `_id`, `fullDocument`, `ns` and
/// `documentKey`, exactly as Microsoft documents it.
pub fn change_stream_pipeline() -> Vec<Document> {
    vec![
        doc! { "$match": { "operationType": { "$in": OPERATIONS.to_vec() } } },
        doc! { "$project": { "_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1 } },
    ]
}

/// A stream error as the Cosmos DB profile reads it: NamespaceNotFound is the watched
/// collection gone (Cosmos DB's `invalidate`); anything else is as MongoDB means it.
pub fn stream_error(error: StoreError, watched: &Namespace) -> StoreError {
    match error {
        StoreError::Command {
            code: NAMESPACE_NOT_FOUND,
            ..
        } => StoreError::Invalidated {
            cause: InvalidationCause::Missing(watched.clone()),
            at: None,
        },
        other => other,
    }
}

/// Why a Cosmos DB change stream cannot open at a cluster time.
pub fn no_start_at_time(ns: &Namespace, at: crate::model::ClusterTime) -> StoreError {
    StoreError::InvalidArgument(format!(
        "cannot open a change stream on {ns} at {at}: Azure Cosmos DB change streams resume \
         after a token or start now, never at a time (it keeps no oplog and its events carry \
         no cluster time); move the resume point to a token (rewind --to-token, undo) or \
         reset it (the listener then starts as its bootstrap says)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_is_the_documented_one() {
        let documented = vec![
            doc! { "$match": { "operationType": { "$in": ["insert", "update", "replace"] } } },
            doc! { "$project": { "_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1 } },
        ];
        assert_eq!(change_stream_pipeline(), documented);
    }

    #[test]
    fn namespace_not_found_is_the_collection_gone() {
        let ns = Namespace::new("shop", "orders");
        let error = stream_error(
            StoreError::Command {
                code: 26,
                message: "ns not found".into(),
            },
            &ns,
        );
        assert!(matches!(
            error,
            StoreError::Invalidated { cause: InvalidationCause::Missing(ref missing), at: None } if missing == &ns
        ));
        assert!(matches!(
            stream_error(
                StoreError::Command {
                    code: 2,
                    message: "bad".into()
                },
                &ns
            ),
            StoreError::Command { code: 2, .. }
        ));
    }
}
