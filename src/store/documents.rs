//! Document writes used by handlers (fenced) and by applications (plain).

use std::future::Future;

use bson::{Bson, Document};

use super::{Namespace, StoreResult};
use crate::model::Fence;

/// The field a lease-fenced document stores its writer's lease version in.
pub const LEASE_FENCE_FIELD: &str = "_fence";
/// The field a source-versioned document stores the source version in.
pub const SOURCE_VERSION_FIELD: &str = "_v";

/// The two fencing patterns (docs/protocol.md §5).
#[derive(Debug, Clone, PartialEq)]
pub enum WriteFence {
    /// Applied where the stored `_fence` ≤ the lease version (or the document is new).
    Lease(Fence),
    /// Applied where the stored `_v` < the source document's version (or it is new).
    SourceVersion(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Applied,
    /// The fence refused the write (matched nothing, or 11000 on the upsert). For a
    /// lease fence a newer holder has written: the caller has lost the lock. For a
    /// source version the change was already applied: a replay, safe to skip.
    Stale,
}

/// The application's own documents: what handlers write (fenced) and read.
pub trait DocumentStore: Send + Sync {
    /// Upserts `fields` (`$set`) into document `id` if the fence admits it, and stores the fence.
    fn fenced_upsert(
        &self,
        ns: &Namespace,
        id: &Bson,
        fence: &WriteFence,
        fields: Document,
    ) -> impl Future<Output = StoreResult<WriteOutcome>> + Send;

    fn find_one(
        &self,
        ns: &Namespace,
        id: &Bson,
    ) -> impl Future<Output = StoreResult<Option<Document>>> + Send;

    /// Every document of the collection, sorted by `_id`.
    fn find_all(&self, ns: &Namespace) -> impl Future<Output = StoreResult<Vec<Document>>> + Send;

    /// Unfenced insert-or-replace by `_id`: the application's own writes.
    fn put(
        &self,
        ns: &Namespace,
        document: Document,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Insert-or-replaces each of `documents` by `_id` in one multi-document
    /// transaction on `ns`: a change stream hands their changes one after another,
    /// each with the transaction's identity (`lsid` and `txnNumber`).
    fn put_together(
        &self,
        ns: &Namespace,
        documents: Vec<Document>,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Deletes document `id` (`deleteOne` by `_id`), logging a `delete` change; returns
    /// whether it was there. Nothing happens when it is not.
    fn delete_one(
        &self,
        ns: &Namespace,
        id: &Bson,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Deletes every document whose top-level `field` equals `value` (`deleteMany`),
    /// logging a `delete` change for each; returns how many. Numbers compare by value
    /// across types, as in MongoDB. A document, array or regular expression as `value`
    /// (which MongoDB would read as a query) is refused with `InvalidArgument`.
    fn delete_where(
        &self,
        ns: &Namespace,
        field: &str,
        value: &Bson,
    ) -> impl Future<Output = StoreResult<u64>> + Send;

    /// Replaces the whole collection with `documents` (a rebuild's output).
    fn replace_all(
        &self,
        ns: &Namespace,
        documents: Vec<Document>,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Drops the collection; nothing happens when it does not exist. Change streams on
    /// it end with `Invalidated`.
    fn drop_collection(&self, ns: &Namespace) -> impl Future<Output = StoreResult<()>> + Send;

    /// Renames `from` to `to` in the same database (`InvalidArgument` across databases).
    /// An existing `to` is replaced only with `drop_target`. Streams on either end
    /// with `Invalidated`.
    fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Drops every collection of `db`, then the database.
    fn drop_database(&self, db: &str) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The `_id` a document written to `ns` is replaced by, whatever the store: a
/// document without one is refused before anything is written.
#[cfg(any(feature = "sandbox", feature = "mongo"))]
pub(crate) fn id_to_write(ns: &Namespace, document: &Document) -> StoreResult<Bson> {
    document.get("_id").cloned().ok_or_else(|| {
        super::StoreError::InvalidArgument(format!(
            "a document written to {ns} needs an _id; nothing was written"
        ))
    })
}

/// Why a `delete_where` may not go ahead, whatever the store: `None` when it may.
#[cfg(any(feature = "sandbox", feature = "mongo"))]
pub(crate) fn refuse_delete_where(field: &str, value: &Bson) -> Option<super::StoreError> {
    let operator = field.is_empty() || field.starts_with('$') || field.contains('.');
    let query = matches!(
        value,
        Bson::Document(_) | Bson::Array(_) | Bson::RegularExpression(_)
    );
    (operator || query).then(|| {
        super::StoreError::InvalidArgument(format!(
            "delete where {field:?} is {value}: a plain field and a plain value only"
        ))
    })
}

/// Why a rename may not go ahead, whatever the store: `None` when it may.
#[cfg(any(feature = "sandbox", feature = "mongo"))]
pub(crate) fn refuse_rename(from: &Namespace, to: &Namespace) -> Option<super::StoreError> {
    if from.db != to.db {
        Some(super::StoreError::InvalidArgument(format!(
            "rename {from} to {to}: renames stay within one database (across databases the server copies and drops)"
        )))
    } else if from == to {
        Some(super::StoreError::InvalidArgument(format!(
            "rename {from} to itself"
        )))
    } else {
        None
    }
}
