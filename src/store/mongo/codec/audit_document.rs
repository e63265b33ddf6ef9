//! The audit record as stored, decoded by serde (its leases as lease documents), then
//! checked into an [`AuditRecord`].

use bson::Bson;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::bson_type::{optional, FieldError};
use super::lease_document::LeaseDocument;
use crate::model::{AuditRecord, AuditState, AuditStep, Lease};

/// An audit record as read. Every field may be missing or null: which must be there is
/// [`AuditDocument::into_record`]'s to say.
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "an audit record")]
pub(super) struct AuditDocument {
    /// An ObjectId as the server makes it; anything else is shown as it is.
    #[serde(rename = "_id")]
    id: Option<Bson>,
    #[serde(deserialize_with = "optional")]
    operator: Option<String>,
    #[serde(deserialize_with = "optional")]
    at: Option<DateTime<Utc>>,
    #[serde(deserialize_with = "optional")]
    action: Option<String>,
    #[serde(deserialize_with = "optional")]
    resource: Option<String>,
    #[serde(deserialize_with = "optional")]
    state: Option<String>,
    before: Option<LeaseDocument>,
    intended: Option<LeaseDocument>,
    after: Option<LeaseDocument>,
    steps: Option<Vec<StepDocument>>,
    #[serde(deserialize_with = "optional")]
    reason: Option<String>,
    #[serde(deserialize_with = "optional")]
    outcome: Option<String>,
    #[serde(rename = "finishedAt", deserialize_with = "optional")]
    finished_at: Option<DateTime<Utc>>,
}

/// One step of an action that writes more than once: `{at, what}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, expecting = "a document")]
struct StepDocument {
    #[serde(deserialize_with = "optional")]
    at: Option<DateTime<Utc>>,
    #[serde(deserialize_with = "optional")]
    what: Option<String>,
}

impl AuditDocument {
    /// The record. A record from before intent-first auditing has no `state`: its
    /// outcome says it.
    pub(super) fn into_record(self) -> Result<AuditRecord, FieldError> {
        let id = match self.id {
            Some(Bson::ObjectId(oid)) => oid.to_hex(),
            Some(Bson::String(s)) => s,
            Some(other) => other.to_string(),
            None => return Err(FieldError::new("_id", "missing")),
        };
        let required = |field: &str, value: Option<String>| {
            value.ok_or_else(|| FieldError::new(field, "missing"))
        };
        // In the order of the document, so the first field missing is named.
        let operator = required("operator", self.operator)?;
        let at = self.at.ok_or_else(|| FieldError::new("at", "missing"))?;
        let action = required("action", self.action)?;
        let resource = required("resource", self.resource)?;
        let outcome = required("outcome", self.outcome)?;
        let state = match self.state {
            Some(text) => AuditState::parse(&text).ok_or_else(|| {
                FieldError::new(
                    "state",
                    format!(
                        "unknown state {text:?}: expected pending, applied, not applied or failed"
                    ),
                )
            })?,
            None if outcome.starts_with("applied") => AuditState::Applied,
            None => AuditState::Failed,
        };
        let lease =
            |field: &str, lease: Option<LeaseDocument>| -> Result<Option<Lease>, FieldError> {
                lease
                    .map(LeaseDocument::into_lease)
                    .transpose()
                    .map_err(|e| e.under(field))
            };
        let steps = self
            .steps
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(n, step)| {
                let field = |name: &str| format!("steps.{n}.{name}");
                Ok(AuditStep {
                    at: step
                        .at
                        .ok_or_else(|| FieldError::new(field("at"), "missing"))?,
                    what: step
                        .what
                        .ok_or_else(|| FieldError::new(field("what"), "missing"))?,
                })
            })
            .collect::<Result<Vec<_>, FieldError>>()?;
        Ok(AuditRecord {
            operator,
            at,
            action,
            resource,
            state,
            before: lease("before", self.before)?,
            intended: lease("intended", self.intended)?,
            after: lease("after", self.after)?,
            steps,
            reason: self.reason,
            outcome,
            finished_at: self.finished_at,
            id,
        })
    }
}

#[cfg(test)]
#[path = "audit_document_tests.rs"]
mod tests;
