//! Lease, audit record and change event <-> BSON. Reading never panics: a field of
//! the wrong type is `StoreError::Malformed` naming the field. Leases and audit records
//! are read through serde (`lease_document`, `audit_document`); change events field by
//! field from their raw bytes, where only what a handler gets is decoded.

mod audit_document;
mod bson_type;
mod lease_document;

use bson::{doc, Bson, DateTime as BsonDateTime, Document, RawBsonRef, RawDocumentBuf};
use chrono::{DateTime, Utc};

use audit_document::AuditDocument;
use bson_type::decode;
use lease_document::{FailureDocument, LeaseDocument};

use crate::model::lease_field as F;
use crate::model::{
    AuditRecord, AuditStep, ChangeFailure, ClusterTime, FailureCause, Invalidation, Lease,
    ResumeToken, SourceKind, StreamProfile, WatchTarget,
};
use crate::store::{
    ChangeEvent, InvalidationCause, Listing, MalformedDocument, Namespace, OperationType,
    StoreError,
};

pub(super) fn malformed(what: &str, field: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Malformed {
        what: what.to_string(),
        detail: format!("field {field}: {detail}"),
    }
}

fn type_name(value: &Bson) -> String {
    format!("{:?}", value.element_type())
}

/// A field that may be missing or null.
fn optional<'a>(document: &'a Document, field: &str) -> Option<&'a Bson> {
    match document.get(field) {
        None | Some(Bson::Null) => None,
        Some(value) => Some(value),
    }
}

pub(super) fn opt_string(
    what: &str,
    document: &Document,
    field: &str,
) -> Result<Option<String>, StoreError> {
    match optional(document, field) {
        None => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(malformed(
            what,
            field,
            format!("expected a string, found {}", type_name(other)),
        )),
    }
}

pub(super) fn opt_date(
    what: &str,
    document: &Document,
    field: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    match optional(document, field) {
        None => Ok(None),
        Some(Bson::DateTime(d)) => Ok(Some(d.to_chrono())),
        Some(other) => Err(malformed(
            what,
            field,
            format!("expected a date, found {}", type_name(other)),
        )),
    }
}

pub(super) fn opt_document<'a>(
    what: &str,
    document: &'a Document,
    field: &str,
) -> Result<Option<&'a Document>, StoreError> {
    match optional(document, field) {
        None => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(other) => Err(malformed(
            what,
            field,
            format!("expected a document, found {}", type_name(other)),
        )),
    }
}

pub(super) fn required_timestamp(
    what: &str,
    document: &Document,
    field: &str,
) -> Result<ClusterTime, StoreError> {
    opt_timestamp(what, document, field)?.ok_or_else(|| malformed(what, field, "missing"))
}

pub(super) fn required_date(
    what: &str,
    document: &Document,
    field: &str,
) -> Result<DateTime<Utc>, StoreError> {
    opt_date(what, document, field)?.ok_or_else(|| malformed(what, field, "missing"))
}

fn opt_timestamp(
    what: &str,
    document: &Document,
    field: &str,
) -> Result<Option<ClusterTime>, StoreError> {
    match optional(document, field) {
        None => Ok(None),
        Some(Bson::Timestamp(ts)) => Ok(Some(ClusterTime::from(*ts))),
        Some(other) => Err(malformed(
            what,
            field,
            format!("expected a timestamp, found {}", type_name(other)),
        )),
    }
}

/// An integer field stored as int32, int64 or an integral double.
/// The rule is `BsonType for i64`'s, which the serde-read documents use.
pub fn integer(what: &str, value: &Bson, field: &str) -> Result<i64, StoreError> {
    <i64 as bson_type::BsonType>::from_bson(value.clone()).map_err(|other| {
        malformed(
            what,
            field,
            format!("expected an integer, found {}", type_name(&other)),
        )
    })
}

pub fn date(at: DateTime<Utc>) -> Bson {
    Bson::DateTime(BsonDateTime::from_chrono(at))
}

fn opt<T>(value: Option<T>, f: impl FnOnce(T) -> Bson) -> Bson {
    value.map(f).unwrap_or(Bson::Null)
}

/// Reads every document with `read`; those it cannot read are reported, not fatal.
/// Errors other than a malformed document are impossible from a pure reader.
pub(super) fn read_each<T>(
    documents: &[Document],
    read: impl Fn(&Document) -> Result<T, StoreError>,
) -> Listing<T> {
    let mut listing = Listing::complete(Vec::with_capacity(documents.len()));
    for document in documents {
        match read(document) {
            Ok(item) => listing.items.push(item),
            Err(error) => listing.malformed.push(describe_malformed(document, &error)),
        }
    }
    listing
}

/// A document `read` refused, as the operator is told about it: its `_id` and the problem.
fn describe_malformed(document: &Document, error: &StoreError) -> MalformedDocument {
    let id = document.get(F::RESOURCE).map(|id| match id {
        Bson::String(s) => s.clone(),
        other => other.clone().into_relaxed_extjson().to_string(),
    });
    let problem = match error {
        StoreError::Malformed { detail, .. } => detail.clone(),
        other => other.to_string(),
    };
    MalformedDocument { id, problem }
}

/// One malformed lease seen on the lease watch, or the error when it is not a
/// malformed document at all.
pub(super) fn malformed_document(
    document: &Document,
    error: StoreError,
) -> Result<MalformedDocument, StoreError> {
    match error {
        StoreError::Malformed { .. } => Ok(describe_malformed(document, &error)),
        other => Err(other),
    }
}

/// The lease as the collection stores it.
pub(super) fn lease_to_document(lease: &Lease) -> Document {
    let mut document = doc! {
        F::RESOURCE: &lease.resource,
        F::HOLDER: opt(lease.holder.clone(), Bson::String),
        F::EXPIRES_AT: opt(lease.expires_at, date),
        F::VERSION: lease.version,
        F::RESUME_TOKEN: opt(lease.resume_token.clone(), |t| Bson::Document(t.into_document())),
        F::KIND: lease.kind.as_str(),
        F::RESUME_AT: opt(lease.resume_at, |t| Bson::Timestamp(t.into())),
        F::ACQUIRED_AT: opt(lease.acquired_at, date),
        F::RENEWED_AT: opt(lease.renewed_at, date),
        F::COMMITTED_AT: opt(lease.committed_at, date),
    };
    if let Some(watch) = &lease.watch {
        document.insert(F::WATCH, watch_to_document(watch));
    }
    if let Some(note) = &lease.note {
        document.insert(F::NOTE, note);
    }
    if let Some(invalidated) = &lease.invalidated {
        document.insert(F::INVALIDATED, invalidation_to_document(invalidated));
    }
    if let Some(failure) = &lease.failure {
        document.insert(F::FAILURE, failure_to_document(failure));
    }
    if let Some(at) = lease
        .resume_token
        .as_ref()
        .and_then(ResumeToken::recorded_time)
    {
        document.insert(F::TOKEN_TIME, date(at));
    }
    document
}

/// The `invalidated` field: `{at: Timestamp | null, reason}`.
pub fn invalidation_to_document(invalidation: &Invalidation) -> Document {
    doc! {
        "at": opt(invalidation.at, |t| Bson::Timestamp(t.into())),
        "reason": &invalidation.reason,
    }
}

/// The `failure` field: `{token: {_data} | null, at: Timestamp | null, ns, op, key,
/// error, cause: "handler" | "too large", size, limit, attempts, firstAt, lastAt}`
/// (`size` and `limit` only for a change too large, each null when unknown).
pub fn failure_to_document(failure: &ChangeFailure) -> Document {
    let mut document = doc! {
        "token": opt(failure.token.clone(), |t| Bson::Document(t.into_document())),
        "at": opt(failure.at, |t| Bson::Timestamp(t.into())),
        "ns": &failure.namespace,
        "op": &failure.operation,
        "key": &failure.document_key,
        "error": &failure.error,
        "cause": failure.cause.as_str(),
        "attempts": i64::from(failure.attempts),
        "firstAt": date(failure.first_at),
        "lastAt": date(failure.last_at),
    };
    if let FailureCause::TooLarge { size, limit } = failure.cause {
        let bytes = |n: Option<u64>| opt(n, |n| Bson::Int64(i64::try_from(n).unwrap_or(i64::MAX)));
        document.insert("size", bytes(size));
        document.insert("limit", bytes(limit));
    }
    document
}

/// A `failure` field (of a lease or a skipped change) read on its own, its fields
/// named under `failure`.
pub(super) fn failure_from_document(what: &str, f: &Document) -> Result<ChangeFailure, StoreError> {
    decode::<FailureDocument>(what, Some(F::FAILURE), f)?
        .into_failure()
        .map_err(|e| e.under(F::FAILURE).into_malformed(what))
}

/// `source` is written only for a capped collection: a lease without it (every lease
/// written before capped sources existed) watches a change stream.
pub fn watch_to_document(watch: &WatchTarget) -> Document {
    let mut document = doc! { "db": &watch.db, "coll": &watch.coll, "pipeline": &watch.pipeline };
    if watch.source != SourceKind::ChangeStream {
        document.insert("source", watch.source.as_str());
    }
    document
}

/// Reads a lease document ([`LeaseDocument`]). Errors name the lease by its `_id` when
/// it has one.
pub(super) fn lease_from_document(document: &Document) -> Result<Lease, StoreError> {
    const WHAT: &str = "lease document";
    decode::<LeaseDocument>(WHAT, None, document)
        .and_then(|lease| lease.into_lease().map_err(|e| e.into_malformed(WHAT)))
        .map_err(|e| match (e, document.get(F::RESOURCE)) {
            // The name is only formatted when something is wrong.
            (StoreError::Malformed { detail, .. }, Some(Bson::String(resource))) => {
                StoreError::Malformed {
                    what: format!("{WHAT} {resource:?}"),
                    detail,
                }
            }
            (other, _) => other,
        })
}

pub fn audit_to_document(record: &AuditRecord, id: Bson) -> Document {
    let lease = |l: Option<&Lease>| opt(l, |l| Bson::Document(lease_to_document(l)));
    doc! {
        "_id": id,
        "operator": &record.operator,
        "at": date(record.at),
        "action": &record.action,
        "resource": &record.resource,
        "state": record.state.as_str(),
        "before": lease(record.before.as_ref()),
        "intended": lease(record.intended.as_ref()),
        "after": lease(record.after.as_ref()),
        "steps": record.steps.iter().map(|s| Bson::Document(audit_step_document(s))).collect::<Vec<_>>(),
        "reason": opt(record.reason.clone(), Bson::String),
        "outcome": &record.outcome,
        "finishedAt": opt(record.finished_at, date),
    }
}

pub fn audit_step_document(step: &AuditStep) -> Document {
    doc! { "at": date(step.at), "what": &step.what }
}

/// Reads an audit record ([`AuditDocument`]).
pub fn audit_from_document(document: &Document) -> Result<AuditRecord, StoreError> {
    const WHAT: &str = "audit record";
    decode::<AuditDocument>(WHAT, None, document)?
        .into_record()
        .map_err(|e| e.into_malformed(WHAT))
}

/// A change stream document, by what it means for the stream on `watched`.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // consumed at once, one per read
pub enum StreamEvent {
    /// A change for the handler.
    Change(ChangeEvent),
    /// A drop or rename that closes the stream; its `invalidate` follows. Never handed
    /// to handlers, and its token is never progress.
    Closing {
        cause: InvalidationCause,
        at: ClusterTime,
    },
    /// The server closed the stream.
    Invalidate { at: ClusterTime },
}

fn namespace_field(
    what: &str,
    document: &Document,
    field: &str,
) -> Result<Option<Namespace>, StoreError> {
    Ok(match opt_document(what, document, field)? {
        Some(ns) => Some(Namespace::new(
            opt_string(what, ns, "db")?.unwrap_or_default(),
            opt_string(what, ns, "coll")?.unwrap_or_default(),
        )),
        None => None,
    })
}

/// Sorts one event of a stream on `watched`: `invalidate`, a drop or rename that closes
/// the stream (see [`InvalidationCause::of_change`]), or a change for the handler, which
/// keeps `raw` itself as its raw event.
/// Under the Cosmos DB profile every event is a change: its events are projected to
/// `_id`, `fullDocument`, `ns` and `documentKey` (a closed stream is an error there,
/// NamespaceNotFound, not an event).
pub fn stream_event(
    watched: &Namespace,
    raw: RawDocumentBuf,
    profile: StreamProfile,
) -> Result<StreamEvent, StoreError> {
    const WHAT: &str = "change event";
    if profile == StreamProfile::CosmosDb {
        return cosmos_change_from_raw(raw).map(StreamEvent::Change);
    }
    let operation = raw
        .get_str("operationType")
        .map_err(|e| malformed(WHAT, "operationType", e))?;
    if matches!(operation, "invalidate" | "drop" | "rename" | "dropDatabase") {
        // Rare: decoded whole, unlike the changes read below.
        let document = Document::try_from(&*raw).map_err(|e| malformed(WHAT, "?", e))?;
        let at = opt_timestamp(WHAT, &document, "clusterTime")?
            .ok_or_else(|| malformed(WHAT, "clusterTime", "missing"))?;
        if operation == "invalidate" {
            return Ok(StreamEvent::Invalidate { at });
        }
        let ns = namespace_field(WHAT, &document, "ns")?.unwrap_or_else(|| Namespace::new("", ""));
        let to = namespace_field(WHAT, &document, "to")?;
        if let Some(cause) = InvalidationCause::of_change(watched, operation, &ns, to.as_ref()) {
            return Ok(StreamEvent::Closing { cause, at });
        }
    }
    change_event_from_raw(raw).map(StreamEvent::Change)
}

/// A change event as MongoDB sends it: `_id`, `operationType` and `clusterTime` are
/// required (see [`read_change`]).
pub fn change_event_from_raw(raw: RawDocumentBuf) -> Result<ChangeEvent, StoreError> {
    let change = read_change(raw)?;
    let cluster_time = change
        .cluster_time
        .ok_or_else(|| malformed(CHANGE_EVENT, "clusterTime", "missing"))?;
    let operation = change
        .operation
        .ok_or_else(|| malformed(CHANGE_EVENT, "operationType", "missing"))?;
    Ok(ChangeEvent {
        cluster_time: Some(cluster_time),
        operation,
        ..change.event
    })
}

/// A change event as Azure Cosmos DB sends it under the pipeline its change streams
/// require: `_id` (the resume token), `fullDocument`, `ns` and `documentKey`; no
/// `operationType` and no `clusterTime` (Microsoft's documentation: "The
/// `operationType` and `updateDescription` properties are not yet supported in the
/// output document"). Such a change is an [`OperationType::Upsert`] with no cluster
/// time; should Cosmos DB ever send either field, it is read.
pub fn cosmos_change_from_raw(raw: RawDocumentBuf) -> Result<ChangeEvent, StoreError> {
    let change = read_change(raw)?;
    Ok(ChangeEvent {
        cluster_time: change.cluster_time,
        operation: change.operation.unwrap_or(OperationType::Upsert),
        ..change.event
    })
}

const CHANGE_EVENT: &str = "change event";

/// What [`read_change`] found: the event with `cluster_time` and `operation` still to
/// be decided by the profile.
struct ReadChange {
    event: ChangeEvent,
    cluster_time: Option<ClusterTime>,
    operation: Option<OperationType>,
}

/// A change event as the server sent it, read field by field from its raw bytes:
/// only the fields a handler gets are decoded (no map is built for the event or its
/// `ns`; `updateDescription` is kept as raw bytes until read; fields this program
/// does not know are skipped). `_id` is
/// required; a field of the wrong type is an error naming it. `raw` is then moved into
/// the event as its raw event, not copied.
fn read_change(raw: RawDocumentBuf) -> Result<ReadChange, StoreError> {
    const WHAT: &str = CHANGE_EVENT;
    let mut token = None;
    let mut cluster_time = None;
    let mut operation = None;
    let mut ns = None;
    let mut document_key = None;
    let mut full_document = None;
    let mut details = crate::store::EventDetails::default();
    let mut session = None;
    let mut txn_number = None;
    for element in &raw {
        let (key, value) = element.map_err(|e| malformed(WHAT, "?", e))?;
        match key {
            "_id" => token = raw_document(WHAT, key, value)?,
            "clusterTime" => {
                cluster_time = match value {
                    RawBsonRef::Timestamp(ts) => Some(ClusterTime::from(ts)),
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "a timestamp", other)),
                }
            }
            // Parsed from the bytes: no string is allocated for a kind this program knows.
            "operationType" => {
                operation = match value {
                    RawBsonRef::String(name) => Some(OperationType::parse(name)),
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "a string", other)),
                }
            }
            "ns" => {
                ns = match value {
                    RawBsonRef::Document(ns) => {
                        let part = |field: &str| -> Result<String, StoreError> {
                            match ns.get(field).map_err(|e| malformed(WHAT, "ns", e))? {
                                Some(value) => {
                                    Ok(raw_string(WHAT, "ns", value)?.unwrap_or_default())
                                }
                                None => Ok(String::new()),
                            }
                        };
                        Some(Namespace::new(part("db")?, part("coll")?))
                    }
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "a document", other)),
                }
            }
            "documentKey" => document_key = raw_document(WHAT, key, value)?,
            "fullDocument" => full_document = raw_document(WHAT, key, value)?,
            "fullDocumentBeforeChange" => {
                details.full_document_before_change = raw_document(WHAT, key, value)?
            }
            // Kept raw: decoded only if the handler reads it.
            "updateDescription" => {
                details.update_description = match value {
                    RawBsonRef::Document(d) => Some(crate::store::UpdateDescription::from_raw(
                        d.to_raw_document_buf(),
                    )),
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "a document", other)),
                }
            }
            "lsid" => {
                session = match value {
                    RawBsonRef::Document(lsid) => {
                        match lsid.get("id").map_err(|e| malformed(WHAT, "lsid.id", e))? {
                            Some(RawBsonRef::Binary(id)) => Some(id.bytes.to_vec()),
                            Some(other) => return Err(expected(WHAT, "lsid.id", "binary", other)),
                            None => return Err(malformed(WHAT, "lsid.id", "missing")),
                        }
                    }
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "a document", other)),
                }
            }
            "txnNumber" => {
                txn_number = match value {
                    RawBsonRef::Int64(n) => Some(n),
                    RawBsonRef::Int32(n) => Some(i64::from(n)),
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "an integer", other)),
                }
            }
            "wallTime" => {
                details.wall_time = match value {
                    RawBsonRef::DateTime(at) => Some(at.to_chrono()),
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "a date", other)),
                }
            }
            "collectionUUID" => {
                details.collection_uuid = match value {
                    RawBsonRef::Binary(uuid) => Some(
                        uuid.bytes
                            .try_into()
                            .map_err(|_| malformed(WHAT, key, "not 16 bytes"))?,
                    ),
                    RawBsonRef::Null => None,
                    other => return Err(expected(WHAT, key, "a UUID", other)),
                }
            }
            _ => {}
        }
    }
    details.transaction = match (session, txn_number) {
        (Some(session), Some(txn_number)) => Some(crate::store::TransactionId {
            session,
            txn_number,
        }),
        _ => None,
    };
    let token = token.ok_or_else(|| malformed(WHAT, "_id", "missing (the resume token)"))?;
    details.raw = crate::store::RawEvent::sent(raw);
    Ok(ReadChange {
        event: ChangeEvent {
            token: ResumeToken::from_document(token),
            cluster_time: None,
            operation: OperationType::Upsert,
            ns: ns.unwrap_or_else(|| Namespace::new("", "")),
            document_key: document_key.unwrap_or_default(),
            full_document,
            details,
        },
        cluster_time,
        operation,
    })
}

/// A raw field of the wrong type, named with what was expected.
fn expected(what: &str, field: &str, wanted: &str, found: RawBsonRef<'_>) -> StoreError {
    malformed(
        what,
        field,
        format!("expected {wanted}, found {:?}", found.element_type()),
    )
}

fn raw_string(
    what: &str,
    field: &str,
    value: RawBsonRef<'_>,
) -> Result<Option<String>, StoreError> {
    match value {
        RawBsonRef::String(s) => Ok(Some(s.to_string())),
        RawBsonRef::Null => Ok(None),
        other => Err(expected(what, field, "a string", other)),
    }
}

fn raw_document(
    what: &str,
    field: &str,
    value: RawBsonRef<'_>,
) -> Result<Option<Document>, StoreError> {
    match value {
        RawBsonRef::Document(d) => Document::try_from(d)
            .map(Some)
            .map_err(|e| malformed(what, field, e)),
        RawBsonRef::Null => Ok(None),
        other => Err(expected(what, field, "a document", other)),
    }
}

#[cfg(test)]
mod tests;
