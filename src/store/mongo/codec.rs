//! Lease, audit record and change event <-> BSON. Reading never panics: a field of
//! the wrong type is `StoreError::Malformed` naming the field.

use bson::{doc, Bson, DateTime as BsonDateTime, Document, RawBsonRef, RawDocumentBuf};
use chrono::{DateTime, Utc};

use crate::model::lease_field as F;
use crate::model::{
    AuditRecord, AuditState, AuditStep, ChangeFailure, ClusterTime, FailureCause, Invalidation,
    Lease, LeaseProtocol, LockKind, ResumeToken, SourceKind, StreamProfile, WatchTarget,
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
pub fn integer(what: &str, value: &Bson, field: &str) -> Result<i64, StoreError> {
    match value {
        Bson::Int64(v) => Ok(*v),
        Bson::Int32(v) => Ok(i64::from(*v)),
        Bson::Double(v) if v.fract() == 0.0 && v.abs() < 9.0e15 => Ok(*v as i64),
        other => Err(malformed(
            what,
            field,
            format!("expected an integer, found {}", type_name(other)),
        )),
    }
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

pub(super) fn failure_from_document(what: &str, f: &Document) -> Result<ChangeFailure, StoreError> {
    let field = |name: &str| format!("{}.{name}", F::FAILURE);
    let required_date = |name: &str| {
        opt_date(what, f, name)?.ok_or_else(|| malformed(what, &field(name), "missing"))
    };
    let count = |name: &str| -> Result<Option<u64>, StoreError> {
        match optional(f, name) {
            None => Ok(None),
            Some(v) => {
                let n = integer(what, v, &field(name))?;
                u64::try_from(n)
                    .map(Some)
                    .map_err(|_| malformed(what, &field(name), format!("negative: {n}")))
            }
        }
    };
    let cause = match opt_string(what, f, "cause")?.as_deref() {
        None => FailureCause::Handler,
        Some(name) => match FailureCause::parse(name) {
            Some(FailureCause::TooLarge { .. }) => FailureCause::TooLarge {
                size: count("size")?,
                limit: count("limit")?,
            },
            Some(cause) => cause,
            None => {
                return Err(malformed(
                    what,
                    &field("cause"),
                    format!(
                        "unknown cause {name:?}: expected \"handler\", \"too large\", \
                         \"pre-image missing\" or \"post-image missing\""
                    ),
                ))
            }
        },
    };
    let attempts = count("attempts")?.unwrap_or(1);
    Ok(ChangeFailure {
        token: opt_document(what, f, "token")?.map(|t| ResumeToken::from_document(t.clone())),
        at: opt_timestamp(what, f, "at")?,
        namespace: opt_string(what, f, "ns")?.unwrap_or_default(),
        operation: opt_string(what, f, "op")?.unwrap_or_default(),
        document_key: opt_string(what, f, "key")?.unwrap_or_default(),
        error: opt_string(what, f, "error")?.unwrap_or_default(),
        cause,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        first_at: required_date("firstAt")?,
        last_at: required_date("lastAt")?,
    })
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

/// Reads a lease document. Missing optional fields are `None`; a missing `version`
/// is 0 and a missing `kind` is `update` (documents written by the original algorithm).
pub(super) fn lease_from_document(document: &Document) -> Result<Lease, StoreError> {
    const WHAT: &str = "lease document";
    let resource = match document.get(F::RESOURCE) {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => {
            return Err(malformed(
                WHAT,
                F::RESOURCE,
                format!("expected a string, found {}", type_name(other)),
            ))
        }
        None => return Err(malformed(WHAT, F::RESOURCE, "missing")),
    };
    // Errors name the lease; the name is only formatted when something is wrong.
    lease_fields(document, resource.clone()).map_err(|e| match e {
        StoreError::Malformed { detail, .. } => StoreError::Malformed {
            what: format!("{WHAT} {resource:?}"),
            detail,
        },
        other => other,
    })
}

fn lease_fields(document: &Document, resource: String) -> Result<Lease, StoreError> {
    let what = "lease document";
    let version = match optional(document, F::VERSION) {
        None => 0,
        Some(v) => integer(what, v, F::VERSION)?,
    };
    let kind = match opt_string(what, document, F::KIND)? {
        None => LockKind::Update,
        Some(k) => k
            .parse::<LockKind>()
            .map_err(|e| malformed(what, F::KIND, e))?,
    };
    let watch = match opt_document(what, document, F::WATCH)? {
        None => None,
        Some(w) => Some(WatchTarget {
            db: opt_string(what, w, "db")?.unwrap_or_default(),
            coll: opt_string(what, w, "coll")?.unwrap_or_default(),
            pipeline: match optional(w, "pipeline") {
                None => String::new(),
                Some(Bson::String(s)) => s.clone(),
                // A pipeline stored as an array is summarised as its JSON text.
                Some(other) => other.clone().into_relaxed_extjson().to_string(),
            },
            source: match opt_string(what, w, "source")? {
                None => SourceKind::ChangeStream,
                Some(source) => source
                    .parse()
                    .map_err(|e| malformed(what, "watch.source", e))?,
            },
        }),
    };
    Ok(Lease {
        holder: opt_string(what, document, F::HOLDER)?,
        expires_at: opt_date(what, document, F::EXPIRES_AT)?,
        version,
        resume_token: match opt_document(what, document, F::RESUME_TOKEN)? {
            Some(token) => Some(
                ResumeToken::from_document(token.clone()).with_recorded_time(opt_date(
                    what,
                    document,
                    F::TOKEN_TIME,
                )?),
            ),
            None => None,
        },
        kind,
        resume_at: opt_timestamp(what, document, F::RESUME_AT)?,
        acquired_at: opt_date(what, document, F::ACQUIRED_AT)?,
        renewed_at: opt_date(what, document, F::RENEWED_AT)?,
        committed_at: opt_date(what, document, F::COMMITTED_AT)?,
        watch,
        note: opt_string(what, document, F::NOTE)?,
        invalidated: match opt_document(what, document, F::INVALIDATED)? {
            None => None,
            Some(i) => Some(Invalidation {
                at: opt_timestamp(what, i, "at")?,
                reason: opt_string(what, i, "reason")?.unwrap_or_default(),
            }),
        },
        failure: opt_document(what, document, F::FAILURE)?
            .map(|f| failure_from_document(what, f))
            .transpose()?,
        protocol: LeaseProtocol::of_document(|name| {
            document.get(name).is_some_and(|v| *v != Bson::Null)
        }),
        resource,
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

pub fn audit_from_document(document: &Document) -> Result<AuditRecord, StoreError> {
    const WHAT: &str = "audit record";
    let id = match document.get("_id") {
        Some(Bson::ObjectId(oid)) => oid.to_hex(),
        Some(Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => return Err(malformed(WHAT, "_id", "missing")),
    };
    let lease = |field: &str| -> Result<Option<Lease>, StoreError> {
        opt_document(WHAT, document, field)?
            .map(lease_from_document)
            .transpose()
    };
    let required = |field: &str| -> Result<String, StoreError> {
        opt_string(WHAT, document, field)?.ok_or_else(|| malformed(WHAT, field, "missing"))
    };
    // Read in the order of the document, so the first field in error is named.
    let operator = required("operator")?;
    let at = opt_date(WHAT, document, "at")?.ok_or_else(|| malformed(WHAT, "at", "missing"))?;
    let action = required("action")?;
    let resource = required("resource")?;
    let outcome = required("outcome")?;
    // Records from before intent-first auditing have no state: their outcome says it.
    let state = match opt_string(WHAT, document, "state")? {
        Some(text) => AuditState::parse(&text).ok_or_else(|| {
            malformed(
                WHAT,
                "state",
                format!("unknown state {text:?}: expected pending, applied, not applied or failed"),
            )
        })?,
        None if outcome.starts_with("applied") => AuditState::Applied,
        None => AuditState::Failed,
    };
    Ok(AuditRecord {
        operator,
        at,
        action,
        resource,
        state,
        before: lease("before")?,
        intended: lease("intended")?,
        after: lease("after")?,
        steps: audit_steps(document)?,
        reason: opt_string(WHAT, document, "reason")?,
        outcome,
        finished_at: opt_date(WHAT, document, "finishedAt")?,
        id,
    })
}

fn audit_steps(document: &Document) -> Result<Vec<AuditStep>, StoreError> {
    const WHAT: &str = "audit record";
    let steps = match optional(document, "steps") {
        None => return Ok(Vec::new()),
        Some(Bson::Array(steps)) => steps,
        Some(other) => {
            return Err(malformed(
                WHAT,
                "steps",
                format!("expected an array, found {}", type_name(other)),
            ))
        }
    };
    steps
        .iter()
        .enumerate()
        .map(|(n, step)| {
            let field = format!("steps.{n}");
            let Bson::Document(step) = step else {
                return Err(malformed(WHAT, &field, "expected a document"));
            };
            Ok(AuditStep {
                at: opt_date(WHAT, step, "at")?
                    .ok_or_else(|| malformed(WHAT, &format!("{field}.at"), "missing"))?,
                what: opt_string(WHAT, step, "what")?
                    .ok_or_else(|| malformed(WHAT, &format!("{field}.what"), "missing"))?,
            })
        })
        .collect()
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
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn full_lease() -> Lease {
        let at = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        Lease {
            resource: "shop.orders".into(),
            holder: Some("worker-1".into()),
            expires_at: Some(at),
            version: 7,
            resume_token: Some(ResumeToken::from_document(doc! {"_data": "8263E5"})),
            kind: LockKind::Bulk,
            resume_at: Some(ClusterTime::new(100, 2)),
            acquired_at: Some(at),
            renewed_at: Some(at),
            committed_at: None,
            watch: Some(WatchTarget {
                db: "shop".into(),
                coll: "orders".into(),
                pipeline: "[]".into(),
                source: SourceKind::Capped,
            }),
            note: Some("takeover by ops".into()),
            invalidated: Some(Invalidation {
                at: Some(ClusterTime::new(100, 3)),
                reason: "shop.orders was dropped".into(),
            }),
            failure: Some(ChangeFailure {
                token: None,
                at: Some(ClusterTime::new(99, 1)),
                namespace: "shop.orders".into(),
                operation: "update".into(),
                document_key: r#"{"_id":7}"#.into(),
                error: "BSONObj size: 24117673 (0x17001A9) is invalid".into(),
                cause: FailureCause::TooLarge {
                    size: Some(24_117_673),
                    limit: Some(16_793_600),
                },
                attempts: 4,
                first_at: at,
                last_at: at + chrono::TimeDelta::seconds(9),
            }),
            protocol: LeaseProtocol::Streamward,
        }
    }

    #[test]
    fn a_handler_failure_round_trips_and_an_unknown_cause_is_named() {
        let mut lease = full_lease();
        let failure = lease.failure.as_mut().unwrap();
        failure.cause = FailureCause::Handler;
        failure.token = Some(ResumeToken::from_document(doc! {"_data": "8263E6"}));
        let document = lease_to_document(&lease);
        let stored = document.get_document(F::FAILURE).unwrap();
        assert!(!stored.contains_key("size"), "{stored}");
        assert_eq!(lease_from_document(&document).unwrap(), lease);

        let mut odd = document.clone();
        odd.get_document_mut(F::FAILURE)
            .unwrap()
            .insert("cause", "cosmic ray");
        let error = lease_from_document(&odd).unwrap_err().to_string();
        assert!(
            error.contains("failure.cause") && error.contains("cosmic ray"),
            "{error}"
        );
        let mut negative = document;
        negative
            .get_document_mut(F::FAILURE)
            .unwrap()
            .insert("attempts", -1_i64);
        let error = lease_from_document(&negative).unwrap_err().to_string();
        assert!(error.contains("failure.attempts"), "{error}");
    }

    #[test]
    fn lease_round_trips() {
        let lease = full_lease();
        let document = lease_to_document(&lease);
        assert_eq!(document.get_i64("version").unwrap(), 7);
        assert_eq!(lease_from_document(&document).unwrap(), lease);
    }

    #[test]
    fn a_watch_without_a_source_is_a_change_stream_and_an_unknown_source_is_named() {
        let plain = doc! {"_id": "r", "watch": {"db": "a", "coll": "b", "pipeline": ""}};
        let lease = lease_from_document(&plain).unwrap();
        assert_eq!(lease.watch.unwrap().source, SourceKind::ChangeStream);
        let stream = WatchTarget::default();
        assert!(!watch_to_document(&stream).contains_key("source"));
        let odd = doc! {"_id": "r", "watch": {"db": "a", "coll": "b", "source": "queue"}};
        match lease_from_document(&odd) {
            Err(StoreError::Malformed { detail, .. }) => {
                assert!(
                    detail.contains("watch.source") && detail.contains("queue"),
                    "{detail}"
                )
            }
            other => panic!("expected malformed, got {other:?}"),
        }
    }

    #[test]
    fn a_token_time_is_stored_beside_its_token_and_read_back_with_it() {
        let at = Utc.with_ymd_and_hms(2024, 5, 1, 11, 59, 30).unwrap();
        let mut lease = full_lease();
        lease.resume_token = Some(
            ResumeToken::from_document(doc! {
                "_data": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"{}".to_vec() },
                "_kind": 1,
            })
            .with_recorded_time(Some(at)),
        );
        let document = lease_to_document(&lease);
        assert_eq!(document.get_datetime("tokenTime").unwrap().to_chrono(), at);
        assert_eq!(lease_from_document(&document).unwrap(), lease);
        // Without a token, a stored time means nothing and is not read.
        let orphan = doc! {"_id": "r", "tokenTime": BsonDateTime::from_chrono(at)};
        assert_eq!(lease_from_document(&orphan).unwrap().resume_token, None);
        // The field has one type.
        let wrong = doc! {"_id": "r", "resumeToken": {"_data": "x"}, "tokenTime": "noon"};
        match lease_from_document(&wrong) {
            Err(StoreError::Malformed { detail, .. }) => {
                assert!(detail.contains("tokenTime"), "{detail}")
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
        // MongoDB's tokens carry their own time: no field.
        assert!(!lease_to_document(&full_lease()).contains_key("tokenTime"));
    }

    #[test]
    fn the_invalidation_is_stored_under_its_own_field() {
        let document = lease_to_document(&full_lease());
        assert_eq!(
            document.get_document("invalidated").unwrap(),
            &doc! {"at": bson::Timestamp { time: 100, increment: 3 }, "reason": "shop.orders was dropped"}
        );
        let mut clear = full_lease();
        clear.invalidated = None;
        assert!(!lease_to_document(&clear).contains_key("invalidated"));
        let null = lease_from_document(&doc! {"_id": "r", "invalidated": null}).unwrap();
        assert_eq!(null.invalidated, None, "null reads as not invalidated");
    }

    #[test]
    fn a_document_with_none_of_streamwards_own_fields_reads_as_a_seed_lease() {
        let seed =
            doc! {"_id": "r", "listenerId": "s1", "version": 3_i32, "resumeToken": {"_data": "82"}};
        assert_eq!(
            lease_from_document(&seed).unwrap().protocol,
            LeaseProtocol::Seed
        );
        let mut after_action = seed.clone();
        after_action.insert("note", "hold 5m by ann");
        after_action.insert("kind", "update");
        after_action.insert("acquiredAt", Bson::Null);
        assert_eq!(
            lease_from_document(&after_action).unwrap().protocol,
            LeaseProtocol::Seed,
            "note, kind and a null date do not make it streamward's"
        );
        assert_eq!(
            lease_from_document(&lease_to_document(&full_lease()))
                .unwrap()
                .protocol,
            LeaseProtocol::Streamward
        );
        let mut seed_lease = lease_from_document(&seed).unwrap();
        seed_lease.holder = None;
        assert_eq!(
            lease_from_document(&lease_to_document(&seed_lease))
                .unwrap()
                .protocol,
            LeaseProtocol::Seed,
            "an audit record's copy of a seed lease reads back as one"
        );
    }

    #[test]
    fn legacy_documents_read_with_defaults() {
        let lease =
            lease_from_document(&doc! {"_id": "r", "listenerId": null, "version": 3}).unwrap();
        assert_eq!(lease.version, 3);
        assert_eq!(lease.kind, LockKind::Update);
        assert_eq!(lease.holder, None);
    }

    #[test]
    fn wrong_shapes_name_the_field() {
        for (document, field) in [
            (doc! {"_id": 5}, "_id"),
            (doc! {"_id": "r", "version": "x"}, "version"),
            (doc! {"_id": "r", "expiresAt": "tomorrow"}, "expiresAt"),
            (doc! {"_id": "r", "kind": "BULK"}, "kind"),
            (doc! {"_id": "r", "resumeAt": 5}, "resumeAt"),
            (doc! {"_id": "r", "resumeToken": "abc"}, "resumeToken"),
            (doc! {"_id": "r", "watch": {"db": 1}}, "db"),
            (doc! {"_id": "r", "invalidated": "yes"}, "invalidated"),
            (doc! {"_id": "r", "invalidated": {"at": "then"}}, "at"),
            (doc! {"_id": "r", "invalidated": {"reason": 5}}, "reason"),
        ] {
            match lease_from_document(&document) {
                Err(StoreError::Malformed { detail, .. }) => {
                    assert!(detail.contains(field), "{detail} should name {field}")
                }
                other => panic!("{document}: expected Malformed, got {other:?}"),
            }
        }
    }

    #[test]
    fn drops_and_renames_of_the_watched_collection_close_its_stream() {
        let watched = Namespace::new("shop", "orders");
        let ts = bson::Timestamp {
            time: 1_795_442_561,
            increment: 4,
        };
        // Shaped as a real 6.0.5 sends them (tests/mongo_live_invalidate.rs).
        let event = |op: &str, ns: Document, to: Option<Document>| {
            let mut d = doc! {
                "_id": {"_data": "826B044781000000042B022C0100296E5A10047ABF04"},
                "operationType": op, "clusterTime": ts, "ns": ns,
            };
            if let Some(to) = to {
                d.insert("to", to);
            }
            d
        };
        let at = ClusterTime::from(ts);
        let orders = doc! {"db": "shop", "coll": "orders"};
        let old = doc! {"db": "shop", "coll": "orders_old"};
        let tmp = doc! {"db": "shop", "coll": "tmp.agg_out.1"};
        let cases = [
            (
                event("drop", orders.clone(), None),
                InvalidationCause::Dropped(watched.clone()),
            ),
            (
                event("rename", orders.clone(), Some(old.clone())),
                InvalidationCause::Renamed {
                    from: watched.clone(),
                    to: Namespace::new("shop", "orders_old"),
                },
            ),
            (
                event("rename", tmp, Some(orders.clone())),
                InvalidationCause::Replaced {
                    from: Namespace::new("shop", "tmp.agg_out.1"),
                    to: watched.clone(),
                },
            ),
            (
                event("dropDatabase", doc! {"db": "shop"}, None),
                InvalidationCause::DatabaseDropped("shop".into()),
            ),
        ];
        for (document, cause) in cases {
            assert_eq!(
                stream_event(&watched, raw(document), StreamProfile::MongoDb).unwrap(),
                StreamEvent::Closing { cause, at }
            );
        }
        let mut invalidate = event("invalidate", doc! {}, None);
        invalidate.remove("ns");
        assert_eq!(
            stream_event(&watched, raw(invalidate), StreamProfile::MongoDb).unwrap(),
            StreamEvent::Invalidate { at }
        );
        // Another collection's drop says nothing about this stream.
        let other = event("drop", doc! {"db": "shop", "coll": "pets"}, None);
        assert!(matches!(
            stream_event(&watched, raw(other), StreamProfile::MongoDb).unwrap(),
            StreamEvent::Change(_)
        ));
        let no_time = doc! {"_id": {"_data": "82"}, "operationType": "invalidate"};
        assert!(matches!(
            stream_event(&watched, raw(no_time), StreamProfile::MongoDb),
            Err(StoreError::Malformed { .. })
        ));
    }

    #[test]
    fn audit_round_trips() {
        let record = AuditRecord {
            id: "665f1c2b9d1e8a0012345678".into(),
            operator: "ann@host".into(),
            at: Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap(),
            action: "takeover".into(),
            resource: "shop.orders".into(),
            state: AuditState::Pending,
            before: Some(full_lease()),
            intended: Some(full_lease()),
            after: None,
            steps: vec![AuditStep {
                at: Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 1).unwrap(),
                what: "bulk swap applied".into(),
            }],
            reason: Some("stuck".into()),
            outcome: "pending".into(),
            finished_at: None,
        };
        let oid = bson::oid::ObjectId::parse_str(&record.id).unwrap();
        let document = audit_to_document(&record, Bson::ObjectId(oid));
        assert_eq!(audit_from_document(&document).unwrap(), record);
    }

    fn raw(document: Document) -> bson::RawDocumentBuf {
        bson::RawDocumentBuf::from_document(&document).unwrap()
    }

    /// An update and a transaction's insert shaped exactly as a real MongoDB 6.0.5 sent
    /// them (`$set` of a new sub-document, `$unset`; two inserts in one transaction).
    #[test]
    fn a_change_event_carries_what_the_server_sent_beyond_its_core() {
        let update = raw(doc! {
            "_id": { "_data": "826B0B438F000000032B022C0100296E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B020004" },
            "operationType": "update",
            "clusterTime": bson::Timestamp { time: 1_795_900_303, increment: 3 },
            "wallTime": BsonDateTime::from_millis(1_795_900_303_924),
            "fullDocument": { "_id": 1, "a": 5, "arr": [1], "n": { "x": 1 } },
            "ns": { "db": "evshape", "coll": "t" },
            "documentKey": { "_id": 1 },
            "updateDescription": { "updatedFields": { "a": 5, "n": { "x": 1 } }, "removedFields": ["b"], "truncatedArrays": [] },
        });
        let parsed = change_event_from_raw(update).unwrap();
        let description = parsed
            .details
            .update_description
            .as_ref()
            .expect("described");
        assert_eq!(
            description.updated_fields().unwrap(),
            doc! { "a": 5, "n": { "x": 1 } }
        );
        assert_eq!(description.removed_fields().unwrap(), ["b"]);
        assert_eq!(
            parsed.details.wall_time.map(|t| t.to_rfc3339()),
            Some("2026-11-28T21:11:43.924+00:00".to_string())
        );
        assert_eq!(parsed.details.transaction, None);
        assert_eq!(
            parsed.collection_uuid().map(hex::encode),
            Some("691862c8afd844bb9128bb07b54b2a6a".to_string()),
            "from the token, without collectionUUID"
        );

        let session = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: vec![
                8, 0x6A, 0x8B, 0xFC, 6, 0xCC, 0x42, 0xB5, 0x85, 0x4F, 0x6A, 2, 0x1E, 0xF6, 0x0D,
                0x7D,
            ],
        };
        let in_transaction = raw(doc! {
            "txnNumber": 3_i64,
            "lsid": { "id": session.clone(), "uid": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0xE3; 32] } },
            "_id": { "_data": "826B0B438F000000052B022C01002B026E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B060004" },
            "operationType": "insert",
            "clusterTime": bson::Timestamp { time: 1_795_900_303, increment: 5 },
            "wallTime": BsonDateTime::from_millis(1_795_900_303_930),
            "fullDocument": { "_id": 3 },
            "ns": { "db": "evshape", "coll": "t" },
            "documentKey": { "_id": 3 },
        });
        let parsed = change_event_from_raw(in_transaction).unwrap();
        assert_eq!(
            parsed.details.transaction,
            Some(crate::store::TransactionId {
                session: session.bytes,
                txn_number: 3
            })
        );
        assert_eq!(
            parsed.token.txn_op_index(),
            Some(1),
            "the second of its transaction"
        );
        assert_eq!(parsed.details.update_description, None);

        // A field of the wrong type is named.
        let garbled = raw(doc! {
            "_id": { "_data": "82" },
            "operationType": "insert",
            "clusterTime": bson::Timestamp { time: 1, increment: 1 },
            "txnNumber": "three",
        });
        let error = change_event_from_raw(garbled).unwrap_err().to_string();
        assert!(error.contains("txnNumber"), "{error}");
    }

    #[test]
    fn a_change_event_reads_what_handlers_get() {
        let event = raw(doc! {
            "_id": { "_data": "8263E5B9D2000000012B042C0100296E5A1004" },
            "operationType": "update",
            "clusterTime": bson::Timestamp { time: 0x63E5_B9D2, increment: 1 },
            "wallTime": BsonDateTime::from_millis(1),
            "collectionUUID": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![0; 16] },
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": "o1" },
            "updateDescription": { "updatedFields": { "status": "paid" }, "removedFields": [] },
            "fullDocument": { "_id": "o1", "status": "paid" },
        });
        let parsed = change_event_from_raw(event).unwrap();
        assert_eq!(
            parsed,
            ChangeEvent {
                token: ResumeToken::from_document(
                    doc! { "_data": "8263E5B9D2000000012B042C0100296E5A1004" }
                ),
                cluster_time: Some(ClusterTime::new(0x63E5_B9D2, 1)),
                operation: OperationType::Update,
                ns: Namespace::new("shop", "orders"),
                document_key: doc! { "_id": "o1" },
                full_document: Some(doc! { "_id": "o1", "status": "paid" }),
                details: crate::store::EventDetails {
                    update_description: Some(crate::store::UpdateDescription::from_raw(raw(
                        doc! { "updatedFields": { "status": "paid" }, "removedFields": [] }
                    ))),
                    full_document_before_change: None,
                    transaction: None,
                    wall_time: BsonDateTime::from_millis(1).to_chrono().into(),
                    collection_uuid: Some([0; 16]),
                    raw: Default::default(),
                },
            }
        );
        // A delete has no post-image; a null one is the same.
        let delete = raw(doc! {
            "_id": { "_data": "82" },
            "operationType": "delete",
            "clusterTime": bson::Timestamp { time: 1, increment: 2 },
            "documentKey": { "_id": 7 },
            "fullDocument": null,
        });
        let parsed = change_event_from_raw(delete).unwrap();
        assert_eq!(parsed.full_document, None);
        assert_eq!(parsed.ns, Namespace::new("", ""));
        assert_eq!(parsed.operation, OperationType::Delete);
    }

    #[test]
    fn a_cosmos_event_is_an_upsert_with_no_cluster_time_and_only_under_its_profile() {
        // Shaped as Microsoft documents Cosmos DB's change events (custom-commands,
        // "Parallelizing change streams"): `_id`, `fullDocument`, `ns`, `documentKey`.
        let token = doc! {
            "_data": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"{\"V\":2}".to_vec() },
            "_kind": 1,
        };
        let event = raw(doc! {
            "_id": token.clone(),
            "fullDocument": { "_id": "o1", "status": "paid" },
            "ns": { "db": "shop", "coll": "orders" },
            "documentKey": { "_id": "o1" },
        });
        let watched = Namespace::new("shop", "orders");
        let StreamEvent::Change(parsed) =
            stream_event(&watched, event.clone(), StreamProfile::CosmosDb).unwrap()
        else {
            panic!("a Cosmos DB event is a change");
        };
        assert_eq!(
            parsed.raw().unwrap().as_bytes(),
            event.as_bytes(),
            "the server's own bytes"
        );
        assert_eq!(
            parsed,
            ChangeEvent {
                token: ResumeToken::from_document(token),
                cluster_time: None,
                operation: OperationType::Upsert,
                ns: watched.clone(),
                document_key: doc! { "_id": "o1" },
                full_document: Some(doc! { "_id": "o1", "status": "paid" }),
                details: Default::default(),
            }
        );
        // MongoDB's profile stays strict: such an event is malformed there.
        assert!(matches!(
            stream_event(&watched, event, StreamProfile::MongoDb),
            Err(StoreError::Malformed { detail, .. }) if detail.contains("operationType")
        ));
        // The token is still required, and wrong types are still named.
        assert!(matches!(
            cosmos_change_from_raw(raw(doc! { "fullDocument": {} })),
            Err(StoreError::Malformed { detail, .. }) if detail.contains("_id")
        ));
        assert!(matches!(
            cosmos_change_from_raw(raw(doc! { "_id": {"_data": "x"}, "fullDocument": 5 })),
            Err(StoreError::Malformed { detail, .. }) if detail.contains("fullDocument")
        ));
        // What Cosmos DB does send beyond the documented fields is read, not guessed.
        let with_type = raw(doc! { "_id": {"_data": "x"}, "operationType": "insert" });
        assert_eq!(
            cosmos_change_from_raw(with_type).unwrap().operation,
            OperationType::Insert
        );
    }

    /// A kind no server sends today, carrying fields no server sends today: decoded as
    /// `Other(name)`, never an error, and the handler is handed the server's bytes
    /// themselves (moved into the event, not copied), the unknown fields included.
    #[test]
    fn an_unknown_kind_is_other_and_its_raw_event_is_every_byte_the_server_sent() {
        let sent = raw(doc! {
            "_id": { "_data": "826B0B438F000000072B022C0100296E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B080004" },
            "operationType": "reshardBlock",
            "clusterTime": bson::Timestamp { time: 1_795_900_303, increment: 7 },
            "wallTime": BsonDateTime::from_millis(1_795_900_303_940),
            "ns": { "db": "evshape", "coll": "t" },
            "operationDescription": { "donor": "shard-a", "blocks": [1, 2] },
            "epoch": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![7; 12] },
        });
        let bytes = sent.as_bytes().to_vec();
        let buffer = sent.as_bytes().as_ptr();
        let watched = Namespace::new("evshape", "t");
        let StreamEvent::Change(event) =
            stream_event(&watched, sent, StreamProfile::MongoDb).unwrap()
        else {
            panic!("a kind of its own is a change for the handler");
        };
        assert_eq!(event.operation, OperationType::Other("reshardBlock".into()));
        assert_eq!(event.ns, watched);
        let handed = event.raw().unwrap();
        assert!(matches!(handed, std::borrow::Cow::Borrowed(_)));
        assert_eq!(handed.as_bytes(), bytes);
        assert_eq!(handed.as_bytes().as_ptr(), buffer, "not a copy");
        let description = handed.get_document("operationDescription").unwrap();
        assert_eq!(description.get_str("donor").unwrap(), "shard-a");
        let clone = event.clone();
        assert_eq!(
            clone.raw().unwrap().as_bytes().as_ptr(),
            buffer,
            "clones share the bytes"
        );

        // A field a newer server adds to a kind this program knows is kept as well.
        let insert = raw(doc! {
            "_id": { "_data": "82" },
            "operationType": "insert",
            "clusterTime": bson::Timestamp { time: 1, increment: 2 },
            "documentKey": { "_id": 1 },
            "fullDocument": { "_id": 1 },
            "shardKeyVersion": 9_i64,
        });
        let event = change_event_from_raw(insert.clone()).unwrap();
        assert_eq!(event.operation, OperationType::Insert);
        assert_eq!(event.raw().unwrap().as_bytes(), insert.as_bytes());
        assert_eq!(event.raw().unwrap().get_i64("shardKeyVersion").unwrap(), 9);
    }

    /// Events laid out field for field as MongoDB 6.0.5 sent them (the order seen in
    /// pymongo's raw documents on `scripts/mongo-replset.sh`; `lsid` without the `uid`
    /// the typed fields do not carry): an event no server sent, laid out from the
    /// fields read from each, is those same bytes, so a handler reads the sandbox's raw
    /// event as it reads a server's. tests/event_details_live.rs checks it on the server.
    #[test]
    fn an_event_laid_out_from_its_fields_is_the_bytes_mongodb_sends() {
        let token = doc! { "_data": "826B0B79920000001E2B022C0100296E5A100432650C6CC9144F46873D82BBF2440D4B461E5F6964002B0C0004" };
        let at = bson::Timestamp {
            time: 1_795_914_130,
            increment: 30,
        };
        let wall = BsonDateTime::from_millis(1_795_914_130_716);
        let ns = doc! { "db": "probe_raw", "coll": "t" };
        let uuid = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: vec![0x32; 16],
        };
        let sent = [
            doc! { "_id": token.clone(), "operationType": "insert", "clusterTime": at, "wallTime": wall,
            "fullDocument": { "_id": 6, "a": 1 }, "ns": ns.clone(), "documentKey": { "_id": 6 } },
            doc! { "_id": token.clone(), "operationType": "update", "clusterTime": at, "wallTime": wall,
            "ns": ns.clone(), "documentKey": { "_id": 6 },
            "updateDescription": { "updatedFields": { "a": 2 }, "removedFields": [], "truncatedArrays": [] } },
            doc! { "_id": token.clone(), "operationType": "update", "clusterTime": at, "collectionUUID": uuid.clone(),
            "wallTime": wall, "fullDocument": { "_id": 6, "a": 2 }, "ns": ns.clone(), "documentKey": { "_id": 6 },
            "updateDescription": { "updatedFields": { "a": 2 }, "removedFields": [], "truncatedArrays": [] },
            "fullDocumentBeforeChange": { "_id": 6, "a": 1 } },
            doc! { "_id": token.clone(), "operationType": "replace", "clusterTime": at, "wallTime": wall,
            "fullDocument": { "_id": 6, "a": 3 }, "ns": ns.clone(), "documentKey": { "_id": 6 },
            "fullDocumentBeforeChange": { "_id": 6, "a": 2 } },
            doc! { "_id": token.clone(), "operationType": "delete", "clusterTime": at, "wallTime": wall,
            "ns": ns.clone(), "documentKey": { "_id": 6 } },
            doc! { "txnNumber": 1_i64, "lsid": { "id": uuid.clone() }, "_id": token.clone(),
            "operationType": "insert", "clusterTime": at, "wallTime": wall, "fullDocument": { "_id": 2 },
            "ns": ns.clone(), "documentKey": { "_id": 2 } },
        ];
        for document in sent {
            let sent = raw(document);
            let mut event = change_event_from_raw(sent.clone()).unwrap();
            event.details.raw = Default::default();
            let laid_out = event.raw().unwrap();
            assert!(matches!(laid_out, std::borrow::Cow::Owned(_)));
            assert_eq!(
                laid_out.to_raw_document_buf(),
                sent,
                "{:?}",
                Document::try_from(&*laid_out)
            );
        }
    }

    /// The raw event of an event the server split is the whole event put back
    /// together, under its last fragment's token.
    #[test]
    fn a_split_events_raw_event_is_the_whole() {
        let mut fragments = super::super::split_event::Fragments::default();
        let first = raw(doc! {
            "_id": { "_data": "A1" }, "splitEvent": { "fragment": 1, "of": 2 },
            "operationType": "insert", "clusterTime": bson::Timestamp { time: 5, increment: 1 },
            "documentKey": { "_id": 7 },
        });
        let last = raw(doc! {
            "_id": { "_data": "A2" }, "splitEvent": { "fragment": 2, "of": 2 },
            "fullDocument": { "_id": 7, "big": "x" },
        });
        assert_eq!(fragments.take(first).unwrap(), None);
        let whole = fragments.take(last).unwrap().expect("the last fragment");
        let event = change_event_from_raw(whole).unwrap();
        assert_eq!(
            Document::try_from(&*event.raw().unwrap()).unwrap(),
            doc! {
                "_id": { "_data": "A2" },
                "operationType": "insert",
                "clusterTime": bson::Timestamp { time: 5, increment: 1 },
                "documentKey": { "_id": 7 },
                "fullDocument": { "_id": 7, "big": "x" },
            }
        );
    }

    #[test]
    fn a_malformed_change_event_names_its_field() {
        let base = doc! {
            "_id": { "_data": "82" },
            "operationType": "insert",
            "clusterTime": bson::Timestamp { time: 1, increment: 2 },
        };
        let detail = |patch: Document| {
            let mut event = base.clone();
            event.extend(patch);
            match change_event_from_raw(raw(event)) {
                Err(StoreError::Malformed { detail, .. }) => detail,
                other => panic!("expected Malformed, got {other:?}"),
            }
        };
        assert!(detail(doc! { "clusterTime": "yesterday" }).contains("clusterTime"));
        assert!(detail(doc! { "operationType": 3 }).contains("operationType"));
        assert!(detail(doc! { "_id": "token" }).contains("_id"));
        assert!(detail(doc! { "ns": { "db": 1 } }).contains("ns"));
        assert!(detail(doc! { "fullDocument": [1] }).contains("fullDocument"));
        let mut no_time = base.clone();
        no_time.remove("clusterTime");
        assert!(matches!(
            change_event_from_raw(raw(no_time)),
            Err(StoreError::Malformed { detail, .. }) if detail.contains("clusterTime: missing")
        ));
    }
}
