//! The file `leases export` writes and `leases import` reads: every lease's resume
//! point, as JSON. Pure: rendering and parsing, no I/O.
//!
//! Resume tokens and `resumeAt` are canonical extended JSON, so a token round-trips
//! byte for byte whatever it holds (a binary `_data` of Azure Cosmos DB, an
//! ObjectId, an int32 that must not come back as a double). The other fields are for
//! people and for the import's plan; only the resume point is restored.

use std::collections::BTreeMap;

use bson::{Bson, Document};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::model::{ClusterTime, Lease, LockKind, ResumePoint, ResumeToken, SourceKind};

/// What the file says it is.
pub const FORMAT: &str = "streamward-leases";
/// The one version this program writes and reads.
pub const FORMAT_VERSION: u64 = 1;
/// A file larger than this is refused before it is parsed.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// At most this many leases in one file.
pub const MAX_LEASES: usize = 100_000;
/// A resume token's BSON size, at most (MongoDB's are well under 1 KiB).
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;
/// A resource name, at most (as `limits::name` on the command line).
pub const MAX_RESOURCE_CHARS: usize = 256;

/// Where an export came from. Never holds a password: the URI is the redacted one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportOrigin {
    /// The connection string with its password masked, if known.
    pub uri: Option<String>,
    /// The lease collection, `db.coll`.
    pub leases: String,
    /// The replica set's name (`hello.setName`), if it is one.
    pub replica_set: Option<String>,
}

/// The collection a lease watched, as the file says it (for the plan's warnings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedNamespace {
    pub db: String,
    pub coll: String,
    /// A change stream or a capped collection (files without it: a change stream).
    pub source: SourceKind,
}

/// One lease as exported.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedLease {
    pub resource: String,
    /// Exactly as stored, with the time recorded beside it (`tokenTime`), if any.
    pub resume_token: Option<ResumeToken>,
    pub resume_at: Option<ClusterTime>,
    pub version: i64,
    pub holder: Option<String>,
    pub kind: LockKind,
    pub watch: Option<WatchedNamespace>,
}

impl ExportedLease {
    pub fn of(lease: &Lease) -> Self {
        Self {
            resource: lease.resource.clone(),
            resume_token: lease.resume_token.clone(),
            resume_at: lease.resume_at,
            version: lease.version,
            holder: lease.holder.clone(),
            kind: lease.kind,
            watch: lease.watch.as_ref().map(|w| WatchedNamespace {
                db: w.db.clone(),
                coll: w.coll.clone(),
                source: w.source,
            }),
        }
    }

    /// Where a listener of this lease resumed when it was exported.
    pub fn point(&self) -> ResumePoint {
        match (&self.resume_token, self.resume_at) {
            (Some(token), _) => ResumePoint::Token(token.clone()),
            (None, Some(at)) => ResumePoint::At(at),
            (None, None) => ResumePoint::Oldest,
        }
    }
}

/// A whole export.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseExport {
    /// The server's clock when the leases were read.
    pub exported_at: DateTime<Utc>,
    pub origin: ExportOrigin,
    /// Sorted by resource, no two the same.
    pub leases: Vec<ExportedLease>,
    /// Lease documents that could not be read, each named (`_id: problem`): not in
    /// `leases`, so not restorable from this file.
    pub unreadable: Vec<String>,
}

impl LeaseExport {
    /// An export of `leases`, sorted by resource (deterministic output).
    pub fn new(
        exported_at: DateTime<Utc>,
        origin: ExportOrigin,
        leases: &[Lease],
        unreadable: Vec<String>,
    ) -> Self {
        let mut leases: Vec<ExportedLease> = leases.iter().map(ExportedLease::of).collect();
        leases.sort_by(|a, b| a.resource.cmp(&b.resource));
        Self {
            exported_at,
            origin,
            leases,
            unreadable,
        }
    }

    /// The file's JSON.
    pub fn to_json(&self) -> ExportFileJson<'_> {
        ExportFileJson {
            format: FORMAT,
            version: FORMAT_VERSION,
            exported_at: FileTime(self.exported_at),
            cluster: ExportOriginJson::of(&self.origin),
            leases: self.leases.iter().map(ExportedLeaseJson::of).collect(),
            unreadable: &self.unreadable,
        }
    }

    /// The file's text: pretty JSON ending in a newline.
    pub fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(&self.to_json()).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// The export file as written: `{format, version, exportedAt, cluster, leases,
/// unreadable}`, `unreadable` only when a lease could not be read. [`parse_export`]
/// reads it back, field by field, so that a bad file names its field.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportFileJson<'a> {
    pub format: &'static str,
    pub version: u64,
    #[serde(rename = "exportedAt")]
    pub exported_at: FileTime,
    pub cluster: ExportOriginJson<'a>,
    pub leases: Vec<ExportedLeaseJson<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub unreadable: &'a [String],
}

/// Where an export came from: `{uri, leases, replicaSet}` (the import's plan shows the
/// same).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportOriginJson<'a> {
    pub uri: Option<&'a str>,
    pub leases: &'a str,
    #[serde(rename = "replicaSet")]
    pub replica_set: Option<&'a str>,
}

impl<'a> ExportOriginJson<'a> {
    pub fn of(origin: &'a ExportOrigin) -> Self {
        Self {
            uri: origin.uri.as_deref(),
            leases: &origin.leases,
            replica_set: origin.replica_set.as_deref(),
        }
    }
}

/// One lease of the file. Not the lease as `leases` prints it
/// ([`crate::ops::json::LeaseJson`]), for a reason: what the import reads back must
/// come back byte for byte, so the token and `resumeAt` are canonical extended JSON
/// (a binary Cosmos DB token, an int32 that must not become a double) where printing
/// shows a token as its text; and the file carries the resume point, not the tenure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportedLeaseJson<'a> {
    pub resource: &'a str,
    #[serde(rename = "resumeToken")]
    pub resume_token: Option<Value>,
    /// Beside a token that cannot tell its own time (Cosmos DB's) only.
    #[serde(rename = "recordedTokenTime", skip_serializing_if = "Option::is_none")]
    pub recorded_token_time: Option<FileTime>,
    #[serde(rename = "resumeAt")]
    pub resume_at: Option<Value>,
    /// For people: not read back.
    #[serde(rename = "resumesFrom")]
    pub resumes_from: String,
    pub version: i64,
    pub holder: Option<&'a str>,
    pub kind: LockKind,
    pub watch: Option<WatchedNamespaceJson<'a>>,
}

impl<'a> ExportedLeaseJson<'a> {
    pub fn of(lease: &'a ExportedLease) -> Self {
        Self {
            resource: &lease.resource,
            resume_token: lease
                .resume_token
                .as_ref()
                .map(|t| Bson::Document(t.as_document().clone()).into_canonical_extjson()),
            recorded_token_time: lease
                .resume_token
                .as_ref()
                .and_then(ResumeToken::recorded_time)
                .map(FileTime),
            resume_at: lease
                .resume_at
                .map(|t| Bson::Timestamp(t.into()).into_canonical_extjson()),
            resumes_from: lease.point().describe(),
            version: lease.version,
            holder: lease.holder.as_deref(),
            kind: lease.kind,
            watch: lease.watch.as_ref().map(|w| WatchedNamespaceJson {
                db: &w.db,
                coll: &w.coll,
                source: w.source.as_str(),
            }),
        }
    }
}

/// The collection a lease watched: `{db, coll, source}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WatchedNamespaceJson<'a> {
    pub db: &'a str,
    pub coll: &'a str,
    pub source: &'static str,
}

/// A time in the file: RFC 3339 in UTC, `Z`, with as many fractional digits as it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileTime(pub DateTime<Utc>);

impl Serialize for FileTime {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
    }
}

/// Why a file cannot be imported. Names the lease (by position and resource) and the
/// field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransferFileError {
    #[error("the file is {size} bytes, more than the {max} an export may have")]
    TooLarge { size: u64, max: u64 },
    #[error("the file is not JSON: {0}")]
    NotJson(String),
    #[error(
        "the file is not a streamward lease export: {0} (expected {{\"format\": \"{FORMAT}\", \"version\": {FORMAT_VERSION}, …}} as `streamward leases export` writes it)"
    )]
    NotAnExport(String),
    #[error("the file is version {found} of the lease export format; this program reads version {FORMAT_VERSION} only")]
    UnsupportedVersion { found: String },
    #[error("{at}: {problem}")]
    Field { at: String, problem: String },
    #[error("the file has {count} leases, more than the {max} an import takes")]
    TooManyLeases { count: usize, max: usize },
    #[error("lease {resource:?} is in the file twice (leases[{first}] and leases[{second}])")]
    Duplicate {
        resource: String,
        first: usize,
        second: usize,
    },
}

fn field_error(at: impl Into<String>, problem: impl Into<String>) -> TransferFileError {
    TransferFileError::Field {
        at: at.into(),
        problem: problem.into(),
    }
}

/// Parses and checks a whole file: the format marker and version, then every lease.
/// The first problem found is the error; nothing partial is returned.
pub fn parse_export(text: &str) -> Result<LeaseExport, TransferFileError> {
    let size = text.len() as u64;
    if size > MAX_FILE_BYTES {
        return Err(TransferFileError::TooLarge {
            size,
            max: MAX_FILE_BYTES,
        });
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| TransferFileError::NotJson(e.to_string()))?;
    let Value::Object(top) = value else {
        return Err(TransferFileError::NotAnExport(format!(
            "it is a JSON {}, not an object",
            kind_of(&value)
        )));
    };
    match top.get("format") {
        Some(Value::String(format)) if format == FORMAT => {}
        Some(Value::String(other)) => {
            return Err(TransferFileError::NotAnExport(format!(
                "its format is {other:?}"
            )))
        }
        Some(other) => {
            return Err(TransferFileError::NotAnExport(format!(
                "its format is a {}",
                kind_of(other)
            )))
        }
        None => return Err(TransferFileError::NotAnExport("it has no format".into())),
    }
    match top.get("version") {
        Some(Value::Number(n)) if n.as_u64() == Some(FORMAT_VERSION) => {}
        Some(other) => {
            return Err(TransferFileError::UnsupportedVersion {
                found: other.to_string(),
            })
        }
        None => {
            return Err(TransferFileError::UnsupportedVersion {
                found: "missing".into(),
            })
        }
    }
    let exported_at = match top.get("exportedAt") {
        Some(Value::String(text)) => DateTime::parse_from_rfc3339(text)
            .map(|at| at.with_timezone(&Utc))
            .map_err(|e| field_error("exportedAt", format!("not an RFC 3339 time: {e}")))?,
        Some(other) => {
            return Err(field_error(
                "exportedAt",
                format!("a {}, not a time", kind_of(other)),
            ))
        }
        None => return Err(field_error("exportedAt", "missing")),
    };
    let origin = parse_origin(top.get("cluster"))?;
    let rows = match top.get("leases") {
        Some(Value::Array(rows)) => rows,
        Some(other) => {
            return Err(field_error(
                "leases",
                format!("a {}, not a list", kind_of(other)),
            ))
        }
        None => return Err(field_error("leases", "missing")),
    };
    if rows.len() > MAX_LEASES {
        return Err(TransferFileError::TooManyLeases {
            count: rows.len(),
            max: MAX_LEASES,
        });
    }
    let mut leases = Vec::with_capacity(rows.len());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let lease = parse_lease(i, row)?;
        if let Some(first) = seen.insert(lease.resource.clone(), i) {
            return Err(TransferFileError::Duplicate {
                resource: lease.resource,
                first,
                second: i,
            });
        }
        leases.push(lease);
    }
    leases.sort_by(|a, b| a.resource.cmp(&b.resource));
    let unreadable = match top.get("unreadable") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
            .collect(),
        Some(other) => {
            return Err(field_error(
                "unreadable",
                format!("a {}, not a list", kind_of(other)),
            ))
        }
    };
    Ok(LeaseExport {
        exported_at,
        origin,
        leases,
        unreadable,
    })
}

fn parse_origin(value: Option<&Value>) -> Result<ExportOrigin, TransferFileError> {
    let cluster = match value {
        Some(Value::Object(cluster)) => cluster,
        Some(other) => {
            return Err(field_error(
                "cluster",
                format!("a {}, not an object", kind_of(other)),
            ))
        }
        None => return Err(field_error("cluster", "missing")),
    };
    let text = |name: &str| -> Result<Option<String>, TransferFileError> {
        match cluster.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(field_error(
                format!("cluster.{name}"),
                format!("a {}, not a string", kind_of(other)),
            )),
        }
    };
    Ok(ExportOrigin {
        uri: text("uri")?,
        leases: text("leases")?.unwrap_or_default(),
        replica_set: text("replicaSet")?,
    })
}

fn parse_lease(i: usize, row: &Value) -> Result<ExportedLease, TransferFileError> {
    let Value::Object(row) = row else {
        return Err(field_error(
            format!("leases[{i}]"),
            format!("a {}, not an object", kind_of(row)),
        ));
    };
    let resource = match row.get("resource") {
        Some(Value::String(r)) if r.is_empty() => {
            return Err(field_error(format!("leases[{i}].resource"), "empty"))
        }
        Some(Value::String(r)) if r.chars().count() > MAX_RESOURCE_CHARS => {
            return Err(field_error(
                format!("leases[{i}].resource"),
                format!("longer than {MAX_RESOURCE_CHARS} characters"),
            ))
        }
        Some(Value::String(r)) => r.clone(),
        Some(other) => {
            return Err(field_error(
                format!("leases[{i}].resource"),
                format!("a {}, not a string", kind_of(other)),
            ))
        }
        None => return Err(field_error(format!("leases[{i}].resource"), "missing")),
    };
    // From here on the lease is named by its resource too.
    let at = |name: &str| format!("lease {resource:?} (leases[{i}]), field {name}");
    let recorded = match row.get("recordedTokenTime") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(
            DateTime::parse_from_rfc3339(text)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    field_error(
                        at("recordedTokenTime"),
                        format!("not an RFC 3339 time: {e}"),
                    )
                })?,
        ),
        Some(other) => {
            return Err(field_error(
                at("recordedTokenTime"),
                format!("a {}, not a time", kind_of(other)),
            ))
        }
    };
    let resume_token = match row.get("resumeToken") {
        None => return Err(field_error(at("resumeToken"), "missing (null for none)")),
        Some(Value::Null) => None,
        Some(value @ Value::Object(_)) => {
            let token = parse_token(value).map_err(|p| field_error(at("resumeToken"), p))?;
            Some(ResumeToken::from_document(token).with_recorded_time(recorded))
        }
        Some(other) => {
            return Err(field_error(
                at("resumeToken"),
                format!("a {}, not a document", kind_of(other)),
            ))
        }
    };
    let resume_at =
        match row.get("resumeAt") {
            None | Some(Value::Null) => None,
            Some(value) => match Bson::try_from(value.clone()) {
                Ok(Bson::Timestamp(ts)) => Some(ClusterTime::from(ts)),
                _ => return Err(field_error(
                    at("resumeAt"),
                    "not a timestamp: expected {\"$timestamp\": {\"t\": SECS, \"i\": INC}} or null",
                )),
            },
        };
    let version = match row.get("version") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| field_error(at("version"), format!("{n} is not an integer")))?,
        Some(other) => {
            return Err(field_error(
                at("version"),
                format!("a {}, not a number", kind_of(other)),
            ))
        }
    };
    let holder = match row.get("holder") {
        None | Some(Value::Null) => None,
        Some(Value::String(h)) => Some(h.clone()),
        Some(other) => {
            return Err(field_error(
                at("holder"),
                format!("a {}, not a string", kind_of(other)),
            ))
        }
    };
    let kind = match row.get("kind") {
        None | Some(Value::Null) => LockKind::Update,
        Some(Value::String(k)) => k
            .parse::<LockKind>()
            .map_err(|e| field_error(at("kind"), e))?,
        Some(other) => {
            return Err(field_error(
                at("kind"),
                format!("a {}, not a string", kind_of(other)),
            ))
        }
    };
    let watch = match row.get("watch") {
        None | Some(Value::Null) => None,
        Some(Value::Object(w)) => match (w.get("db"), w.get("coll")) {
            (Some(Value::String(db)), Some(Value::String(coll))) => Some(WatchedNamespace {
                db: db.clone(),
                coll: coll.clone(),
                source: match w.get("source") {
                    None | Some(Value::Null) => SourceKind::ChangeStream,
                    Some(Value::String(source)) => source
                        .parse()
                        .map_err(|e: String| field_error(at("watch.source"), e))?,
                    Some(other) => {
                        return Err(field_error(
                            at("watch.source"),
                            format!("a {}, not a string", kind_of(other)),
                        ))
                    }
                },
            }),
            _ => {
                return Err(field_error(
                    at("watch"),
                    "expected {\"db\": \"…\", \"coll\": \"…\"} or null",
                ))
            }
        },
        Some(other) => {
            return Err(field_error(
                at("watch"),
                format!("a {}, not an object", kind_of(other)),
            ))
        }
    };
    Ok(ExportedLease {
        resource,
        resume_token,
        resume_at,
        version,
        holder,
        kind,
        watch,
    })
}

/// A token's extended JSON as the document it stands for, or what is wrong with it.
fn parse_token(value: &Value) -> Result<Document, String> {
    let document = match Bson::try_from(value.clone()) {
        Ok(Bson::Document(document)) => document,
        Ok(other) => {
            return Err(format!(
                "extended JSON for a {:?}, not a document",
                other.element_type()
            ))
        }
        Err(e) => return Err(format!("not valid extended JSON: {e}")),
    };
    if document.is_empty() {
        return Err("an empty document: a resume token has a _data field".into());
    }
    let capped_position =
        crate::model::token_entry(&ResumeToken::from_document(document.clone())).is_some();
    if !document.contains_key("_data") && !capped_position {
        return Err(
            "a document without _data: neither a change stream resume token nor a capped \
             collection's position ({_id: ObjectId})"
                .into(),
        );
    }
    let mut bytes = Vec::new();
    document
        .to_writer(&mut bytes)
        .map_err(|e| format!("cannot be encoded as BSON: {e}"))?;
    if bytes.len() > MAX_TOKEN_BYTES {
        return Err(format!(
            "{} bytes as BSON, more than the {MAX_TOKEN_BYTES} a resume token may have",
            bytes.len()
        ));
    }
    Ok(document)
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
