//! The lease document as stored, decoded by serde under its field names
//! ([`crate::model::lease_field`]: serde's renames cannot name the constants, so a test
//! holds them to one spelling), then checked into a [`Lease`].

use bson::{Bson, Document};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::bson_type::{optional, typed, FieldError};
use crate::model::lease_field as F;
use crate::model::{
    ChangeFailure, ClusterTime, FailureCause, Invalidation, Lease, LeaseProtocol, LockKind,
    ResumeToken, SourceKind, WatchTarget,
};

/// A lease document as read. Every field may be missing or null: which must be there,
/// and what a missing one means, is [`LeaseDocument::into_lease`]'s to say.
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "a lease document")]
pub(super) struct LeaseDocument {
    #[serde(rename = "_id", deserialize_with = "optional")]
    resource: Option<String>,
    #[serde(rename = "listenerId", deserialize_with = "optional")]
    holder: Option<String>,
    #[serde(rename = "expiresAt", deserialize_with = "optional")]
    expires_at: Option<DateTime<Utc>>,
    #[serde(rename = "version", deserialize_with = "optional")]
    version: Option<i64>,
    #[serde(rename = "resumeToken", deserialize_with = "optional")]
    resume_token: Option<Document>,
    #[serde(rename = "kind", deserialize_with = "optional")]
    kind: Option<String>,
    #[serde(rename = "resumeAt", deserialize_with = "optional")]
    resume_at: Option<ClusterTime>,
    #[serde(rename = "acquiredAt", deserialize_with = "optional")]
    acquired_at: Option<DateTime<Utc>>,
    #[serde(rename = "renewedAt", deserialize_with = "optional")]
    renewed_at: Option<DateTime<Utc>>,
    #[serde(rename = "committedAt", deserialize_with = "optional")]
    committed_at: Option<DateTime<Utc>>,
    #[serde(rename = "watch")]
    watch: Option<WatchDocument>,
    #[serde(rename = "note", deserialize_with = "optional")]
    note: Option<String>,
    #[serde(rename = "invalidated")]
    invalidated: Option<InvalidationDocument>,
    #[serde(rename = "failure")]
    failure: Option<FailureDocument>,
    /// Read only beside a token: without one it means nothing.
    #[serde(rename = "tokenTime")]
    token_time: Option<Bson>,
}

impl LeaseDocument {
    /// Whether `name` holds a value (present, not null): a value of the wrong type is
    /// an error before this is asked.
    fn has_value(&self, name: &str) -> bool {
        match name {
            F::ACQUIRED_AT => self.acquired_at.is_some(),
            F::RENEWED_AT => self.renewed_at.is_some(),
            F::COMMITTED_AT => self.committed_at.is_some(),
            F::WATCH => self.watch.is_some(),
            _ => false,
        }
    }

    /// The lease. `_id` is required; a missing `version` is 0 and a missing `kind` is
    /// `update` (documents written by the original algorithm).
    pub(super) fn into_lease(self) -> Result<Lease, FieldError> {
        let protocol = LeaseProtocol::of_document(|name| self.has_value(name));
        let resource = self
            .resource
            .ok_or_else(|| FieldError::new(F::RESOURCE, "missing"))?;
        let kind = match self.kind {
            None => LockKind::Update,
            Some(kind) => kind.parse().map_err(|e| FieldError::new(F::KIND, e))?,
        };
        let resume_token = match self.resume_token {
            None => None,
            Some(token) => {
                let recorded =
                    typed(self.token_time).map_err(|e| FieldError::new(F::TOKEN_TIME, e))?;
                Some(ResumeToken::from_document(token).with_recorded_time(recorded))
            }
        };
        Ok(Lease {
            resource,
            holder: self.holder,
            expires_at: self.expires_at,
            version: self.version.unwrap_or(0),
            resume_token,
            kind,
            resume_at: self.resume_at,
            acquired_at: self.acquired_at,
            renewed_at: self.renewed_at,
            committed_at: self.committed_at,
            watch: self
                .watch
                .map(WatchDocument::into_watch)
                .transpose()
                .map_err(|e| e.under(F::WATCH))?,
            note: self.note,
            invalidated: self
                .invalidated
                .map(InvalidationDocument::into_invalidation),
            failure: self
                .failure
                .map(FailureDocument::into_failure)
                .transpose()
                .map_err(|e| e.under(F::FAILURE))?,
            protocol,
        })
    }
}

/// The `watch` field: `{db, coll, pipeline, source}`, `source` only for a capped
/// collection (a lease without it, as every lease written before capped sources
/// existed, watches a change stream).
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "a document")]
struct WatchDocument {
    #[serde(deserialize_with = "optional")]
    db: Option<String>,
    #[serde(deserialize_with = "optional")]
    coll: Option<String>,
    /// A pipeline stored as an array is summarised as its JSON text.
    pipeline: Option<Bson>,
    #[serde(deserialize_with = "optional")]
    source: Option<String>,
}

impl WatchDocument {
    fn into_watch(self) -> Result<WatchTarget, FieldError> {
        Ok(WatchTarget {
            db: self.db.unwrap_or_default(),
            coll: self.coll.unwrap_or_default(),
            pipeline: match self.pipeline {
                None => String::new(),
                Some(Bson::String(s)) => s,
                Some(other) => other.into_relaxed_extjson().to_string(),
            },
            source: match self.source {
                None => SourceKind::ChangeStream,
                Some(source) => source.parse().map_err(|e| FieldError::new("source", e))?,
            },
        })
    }
}

/// The `invalidated` field: `{at: Timestamp | null, reason}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "a document")]
struct InvalidationDocument {
    #[serde(deserialize_with = "optional")]
    at: Option<ClusterTime>,
    #[serde(deserialize_with = "optional")]
    reason: Option<String>,
}

impl InvalidationDocument {
    fn into_invalidation(self) -> Invalidation {
        Invalidation {
            at: self.at,
            reason: self.reason.unwrap_or_default(),
        }
    }
}

/// The `failure` field (of a lease, and of a skipped change): `{token, at, ns, op, key,
/// error, cause, size, limit, attempts, firstAt, lastAt}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "a document")]
pub(super) struct FailureDocument {
    #[serde(deserialize_with = "optional")]
    token: Option<Document>,
    #[serde(deserialize_with = "optional")]
    at: Option<ClusterTime>,
    #[serde(deserialize_with = "optional")]
    ns: Option<String>,
    #[serde(deserialize_with = "optional")]
    op: Option<String>,
    #[serde(deserialize_with = "optional")]
    key: Option<String>,
    #[serde(deserialize_with = "optional")]
    error: Option<String>,
    #[serde(deserialize_with = "optional")]
    cause: Option<String>,
    /// Read only for a change too large.
    size: Option<Bson>,
    /// Read only for a change too large.
    limit: Option<Bson>,
    #[serde(deserialize_with = "optional")]
    attempts: Option<i64>,
    #[serde(rename = "firstAt", deserialize_with = "optional")]
    first_at: Option<DateTime<Utc>>,
    #[serde(rename = "lastAt", deserialize_with = "optional")]
    last_at: Option<DateTime<Utc>>,
}

impl FailureDocument {
    /// The failure; no `cause` is a handler's, no `attempts` one.
    pub(super) fn into_failure(self) -> Result<ChangeFailure, FieldError> {
        let cause = match self.cause.as_deref() {
            None => FailureCause::Handler,
            Some(name) => match FailureCause::parse(name) {
                Some(FailureCause::TooLarge { .. }) => FailureCause::TooLarge {
                    size: count(
                        "size",
                        typed(self.size).map_err(|e| FieldError::new("size", e))?,
                    )?,
                    limit: count(
                        "limit",
                        typed(self.limit).map_err(|e| FieldError::new("limit", e))?,
                    )?,
                },
                Some(cause) => cause,
                None => {
                    return Err(FieldError::new(
                        "cause",
                        format!(
                            "unknown cause {name:?}: expected \"handler\", \"too large\", \
                             \"pre-image missing\" or \"post-image missing\""
                        ),
                    ))
                }
            },
        };
        let attempts = count("attempts", self.attempts)?.unwrap_or(1);
        Ok(ChangeFailure {
            token: self.token.map(ResumeToken::from_document),
            at: self.at,
            namespace: self.ns.unwrap_or_default(),
            operation: self.op.unwrap_or_default(),
            document_key: self.key.unwrap_or_default(),
            error: self.error.unwrap_or_default(),
            cause,
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            first_at: self
                .first_at
                .ok_or_else(|| FieldError::new("firstAt", "missing"))?,
            last_at: self
                .last_at
                .ok_or_else(|| FieldError::new("lastAt", "missing"))?,
        })
    }
}

/// A count, which is never negative.
fn count(field: &str, value: Option<i64>) -> Result<Option<u64>, FieldError> {
    value
        .map(|n| u64::try_from(n).map_err(|_| FieldError::new(field, format!("negative: {n}"))))
        .transpose()
}

#[cfg(test)]
#[path = "lease_document_tests.rs"]
mod tests;
