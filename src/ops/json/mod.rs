//! What `--output json` prints of leases, plans, outcomes and audit records: one serde
//! type per thing, each built from the model with `of` and borrowing from it. Field
//! names are the ones scripts and docs/ know; a lease's are its document's
//! ([`crate::model::lease_field`], checked by a test). Text for people is
//! [`super::describe`]'s.

mod audit;
mod lease;
mod plan;
mod time;

pub use audit::{AuditJson, AuditStepJson, ExecutedJson, PendingJson};
pub use lease::{FailureJson, InvalidationJson, LeaseJson};
pub use plan::{
    CapturedJson, ChangeJson, EffectJson, FieldWrite, FilterJson, PlanJson, RefusalJson,
    ResumeMoveJson, ResumeWriteJson, SteppedOverJson,
};
pub use time::{ClusterTimeJson, Rfc3339};

use serde::Serialize;

use crate::store::MalformedDocument;

/// A document that could not be read, as a row of a JSON listing: `status` says so.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MalformedJson<'a> {
    pub id: Option<&'a str>,
    pub status: &'static str,
    pub malformed: &'a str,
}

impl<'a> MalformedJson<'a> {
    pub fn of(document: &'a MalformedDocument) -> Self {
        Self {
            id: document.id.as_deref(),
            status: "MALFORMED",
            malformed: &document.problem,
        }
    }
}

/// A row of a JSON listing (`leases`, `audit`, `processes`): a document as read, or one
/// that could not be read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ListedJson<'a, T> {
    Read(T),
    Malformed(MalformedJson<'a>),
}

#[cfg(test)]
mod tests;
