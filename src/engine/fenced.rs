//! Helpers for the two fencing patterns (docs/protocol.md §5), on any `DocumentStore`.

use bson::{Bson, Document};

use super::HandlerError;
use crate::model::Fence;
use crate::store::{DocumentStore, Namespace, WriteFence, WriteOutcome};

/// Whether a source-versioned write changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Yes,
    /// The target already holds this source version or a newer one: a replay.
    AlreadyApplied,
}

/// Writes `fields` into `id` fenced by the lease version. A refusal means a newer
/// holder wrote there: the caller has lost the lock, reported as `HandlerError::Fenced`.
pub async fn write_with_lease_fence(
    store: &impl DocumentStore,
    ns: &Namespace,
    id: &Bson,
    fence: &Fence,
    fields: Document,
) -> Result<(), HandlerError> {
    match store
        .fenced_upsert(ns, id, &WriteFence::Lease(fence.clone()), fields)
        .await?
    {
        WriteOutcome::Applied => Ok(()),
        WriteOutcome::Stale => Err(HandlerError::Fenced(format!(
            "{ns} {id} carries a fence newer than version {} of {}",
            fence.version, fence.resource
        ))),
    }
}

/// Writes `fields` into `id` fenced by the source document's version. A refusal
/// means this version (or a newer one) was already applied: replays change nothing.
pub async fn write_with_source_version(
    store: &impl DocumentStore,
    ns: &Namespace,
    id: &Bson,
    source_version: i64,
    fields: Document,
) -> Result<Applied, HandlerError> {
    Ok(
        match store
            .fenced_upsert(ns, id, &WriteFence::SourceVersion(source_version), fields)
            .await?
        {
            WriteOutcome::Applied => Applied::Yes,
            WriteOutcome::Stale => Applied::AlreadyApplied,
        },
    )
}
