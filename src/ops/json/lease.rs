//! A lease as printed: under its document's field names, with its protocol.

use serde::Serialize;

use super::time::{ClusterTimeJson, Rfc3339};
use crate::model::{
    ChangeFailure, FailureCause, Invalidation, Lease, LeaseProtocol, LockKind, ResumeToken,
};

/// A lease in JSON (plans, outcomes, audit records and `leases`), its fields named as
/// in the document ([`crate::model::lease_field`]), except `resource` for `_id`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaseJson<'a> {
    pub resource: &'a str,
    #[serde(rename = "listenerId")]
    pub holder: Option<&'a str>,
    #[serde(rename = "expiresAt")]
    pub expires_at: Option<Rfc3339>,
    pub version: i64,
    pub kind: LockKind,
    #[serde(rename = "resumeToken")]
    pub resume_token: Option<String>,
    #[serde(rename = "resumeAt")]
    pub resume_at: Option<ClusterTimeJson>,
    #[serde(rename = "acquiredAt")]
    pub acquired_at: Option<Rfc3339>,
    #[serde(rename = "renewedAt")]
    pub renewed_at: Option<Rfc3339>,
    #[serde(rename = "committedAt")]
    pub committed_at: Option<Rfc3339>,
    pub note: Option<&'a str>,
    pub invalidated: Option<InvalidationJson<'a>>,
    pub failure: Option<FailureJson<'a>>,
    /// `seed` for a lease written by another implementation ([`LeaseProtocol`]).
    pub protocol: LeaseProtocol,
}

impl<'a> LeaseJson<'a> {
    pub fn of(lease: &'a Lease) -> Self {
        Self {
            resource: &lease.resource,
            holder: lease.holder.as_deref(),
            expires_at: Rfc3339::of(lease.expires_at),
            version: lease.version,
            kind: lease.kind,
            resume_token: lease.resume_token.as_ref().map(ResumeToken::to_string),
            resume_at: ClusterTimeJson::of_optional(lease.resume_at),
            acquired_at: Rfc3339::of(lease.acquired_at),
            renewed_at: Rfc3339::of(lease.renewed_at),
            committed_at: Rfc3339::of(lease.committed_at),
            note: lease.note.as_deref(),
            invalidated: lease.invalidated.as_ref().map(InvalidationJson::of),
            failure: lease.failure.as_ref().map(FailureJson::of),
            protocol: lease.protocol,
        }
    }
}

/// The `invalidated` field: `{at, reason}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvalidationJson<'a> {
    pub at: Option<ClusterTimeJson>,
    pub reason: &'a str,
}

impl<'a> InvalidationJson<'a> {
    pub fn of(invalidation: &'a Invalidation) -> Self {
        Self {
            at: ClusterTimeJson::of_optional(invalidation.at),
            reason: &invalidation.reason,
        }
    }
}

/// The `failure` field: the change its listeners keep failing on. `size` and `limit`
/// are those of a change too large, null otherwise.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureJson<'a> {
    pub token: Option<String>,
    pub at: Option<ClusterTimeJson>,
    pub ns: &'a str,
    pub op: &'a str,
    pub key: &'a str,
    pub error: &'a str,
    pub cause: &'static str,
    pub size: Option<u64>,
    pub limit: Option<u64>,
    pub attempts: u32,
    #[serde(rename = "firstAt")]
    pub first_at: Rfc3339,
    #[serde(rename = "lastAt")]
    pub last_at: Rfc3339,
}

impl<'a> FailureJson<'a> {
    pub fn of(failure: &'a ChangeFailure) -> Self {
        let (size, limit) = match failure.cause {
            FailureCause::TooLarge { size, limit } => (size, limit),
            FailureCause::Handler | FailureCause::ImageMissing { .. } => (None, None),
        };
        Self {
            token: failure.token.as_ref().map(ResumeToken::to_string),
            at: ClusterTimeJson::of_optional(failure.at),
            ns: &failure.namespace,
            op: &failure.operation,
            key: &failure.document_key,
            error: &failure.error,
            cause: failure.cause.as_str(),
            size,
            limit,
            attempts: failure.attempts,
            first_at: Rfc3339(failure.first_at),
            last_at: Rfc3339(failure.last_at),
        }
    }
}
