//! A plan as printed: what was read, the write it would send, and what that means.

use serde::{Serialize, Serializer};

use super::lease::LeaseJson;
use super::time::{ClusterTimeJson, Rfc3339};
use crate::model::{LeaseProtocol, LockKind, ResumeToken, WatchedCollection};
use crate::ops::plan::{Captured, Plan, PlanEffect};
use crate::ops::refusal::Refusal;
use crate::ops::resume::{Direction, ResumeMove};
use crate::ops::transaction::SteppedChange;
use crate::store::{OperatorChange, ResumeChange};

/// A plan in JSON: the dry run, and the plan beside an outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanJson<'a> {
    pub action: &'static str,
    pub resource: Option<&'a str>,
    pub operator: &'a str,
    #[serde(rename = "plannedAt")]
    pub planned_at: Rfc3339,
    pub captured: Option<CapturedJson<'a>>,
    pub before: Option<LeaseJson<'a>>,
    pub after: Option<LeaseJson<'a>>,
    pub change: Option<ChangeJson<'a>>,
    pub effect: EffectJson<'a>,
    pub warnings: &'a [String],
    pub confirmation: Option<&'a str>,
    pub refusal: Option<RefusalJson<'a>>,
}

impl<'a> PlanJson<'a> {
    pub fn of(plan: &'a Plan) -> Self {
        Self {
            action: plan.action.name(),
            resource: plan.resource.as_deref(),
            operator: &plan.operator,
            planned_at: Rfc3339(plan.planned_at),
            captured: plan.captured.as_ref().map(CapturedJson::of),
            before: plan.before.as_ref().map(LeaseJson::of),
            after: plan.after.as_ref().map(LeaseJson::of),
            change: plan.change.as_ref().map(ChangeJson::of),
            effect: EffectJson::of(&plan.effect),
            warnings: &plan.warnings,
            confirmation: plan.confirmation.as_deref(),
            refusal: plan.refusal.as_ref().map(RefusalJson::of),
        }
    }

    /// With the exit code its refusal, if any, ends the command with (the command
    /// line's business: see [`RefusalJson::exit_code`]).
    pub fn with_exit_code(self, exit_code: impl Fn(&Refusal) -> u8) -> Self {
        Self {
            refusal: self.refusal.map(|r| r.with_exit_code(exit_code)),
            ..self
        }
    }
}

/// The (holder, version) the plan was made against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapturedJson<'a> {
    pub holder: Option<&'a str>,
    pub version: i64,
}

impl<'a> CapturedJson<'a> {
    pub fn of(captured: &'a Captured) -> Self {
        Self {
            holder: captured.holder.as_deref(),
            version: captured.version,
        }
    }
}

/// Why a plan may not run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefusalJson<'a> {
    /// The [`crate::ops::RefusalKind`] by its Rust name (`WouldSkip`).
    pub kind: String,
    pub reason: &'a str,
    /// The exit code it ends the command with: the command line's business, which
    /// adds it ([`PlanJson::with_exit_code`]).
    #[serde(rename = "exitCode", skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    #[serde(skip)]
    refusal: &'a Refusal,
}

impl<'a> RefusalJson<'a> {
    pub fn of(refusal: &'a Refusal) -> Self {
        Self {
            kind: format!("{:?}", refusal.kind),
            reason: &refusal.reason,
            exit_code: None,
            refusal,
        }
    }

    pub fn with_exit_code(self, exit_code: impl Fn(&Refusal) -> u8) -> Self {
        Self {
            exit_code: Some(exit_code(self.refusal)),
            ..self
        }
    }
}

/// The compare-and-swap the plan sends: its filter and what it writes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangeJson<'a> {
    pub filter: FilterJson<'a>,
    #[serde(rename = "listenerId")]
    pub holder: Option<&'a str>,
    #[serde(rename = "expiresInSecs")]
    pub expires_in_secs: f64,
    /// Null on a seed lease, whose kind is not written.
    pub kind: Option<LockKind>,
    pub protocol: LeaseProtocol,
    pub version: i64,
    pub resume: ResumeWriteJson,
    pub note: &'a str,
}

impl<'a> ChangeJson<'a> {
    pub fn of(change: &'a OperatorChange) -> Self {
        let seed = change.protocol.is_seed();
        Self {
            filter: FilterJson {
                resource: &change.resource,
                version: change.expected_version,
            },
            holder: change.holder.as_deref(),
            expires_in_secs: change.expires_in.as_secs_f64(),
            kind: (!seed).then_some(change.kind),
            protocol: change.protocol,
            version: change.expected_version + 1,
            resume: ResumeWriteJson::of(&change.resume, seed),
            note: &change.note,
        }
    }
}

/// The swap's filter: `{_id, version}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilterJson<'a> {
    #[serde(rename = "_id")]
    pub resource: &'a str,
    pub version: i64,
}

/// What the swap does to the resume point: `"keep"`, or both fields as written.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ResumeWriteJson {
    /// `"keep"`.
    Keep(&'static str),
    Set {
        #[serde(rename = "resumeToken")]
        token: FieldWrite<Option<String>>,
        #[serde(rename = "resumeAt")]
        at: FieldWrite<Option<ClusterTimeJson>>,
    },
}

impl ResumeWriteJson {
    /// On a seed lease no token removes the field (never null) and `resumeAt` is
    /// always removed.
    pub fn of(resume: &ResumeChange, seed: bool) -> Self {
        let token = |token: &Option<ResumeToken>| token.as_ref().map(ResumeToken::to_string);
        match resume {
            ResumeChange::Keep => ResumeWriteJson::Keep("keep"),
            ResumeChange::Set { token: None, .. } if seed => ResumeWriteJson::Set {
                token: FieldWrite::Removed,
                at: FieldWrite::Removed,
            },
            ResumeChange::Set { token: t, .. } if seed => ResumeWriteJson::Set {
                token: FieldWrite::Set(token(t)),
                at: FieldWrite::Removed,
            },
            ResumeChange::Set { token: t, at } => ResumeWriteJson::Set {
                token: FieldWrite::Set(token(t)),
                at: FieldWrite::Set(ClusterTimeJson::of_optional(*at)),
            },
        }
    }
}

/// A field as a write leaves it: set to a value (printed as the value, null
/// included) or removed (`"removed"`).
#[derive(Debug, Clone, PartialEq)]
pub enum FieldWrite<T> {
    Set(T),
    Removed,
}

impl<T: Serialize> Serialize for FieldWrite<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            FieldWrite::Set(value) => value.serialize(serializer),
            FieldWrite::Removed => serializer.serialize_str("removed"),
        }
    }
}

/// What the action means, beyond the lease fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EffectJson<'a> {
    #[serde(rename = "fencesOut")]
    pub fences_out: Option<&'a str>,
    pub resume: Option<ResumeMoveJson>,
    pub lines: &'a [String],
    #[serde(rename = "steppedOver")]
    pub stepped_over: Vec<SteppedOverJson<'a>>,
}

impl<'a> EffectJson<'a> {
    pub fn of(effect: &'a PlanEffect) -> Self {
        Self {
            fences_out: effect.fences_out.as_deref(),
            resume: effect.resume.as_ref().map(ResumeMoveJson::of),
            lines: &effect.lines,
            stepped_over: effect
                .stepped_over
                .iter()
                .map(SteppedOverJson::of)
                .collect(),
        }
    }
}

/// A move of the resume point: which way, over what, and how many changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResumeMoveJson {
    pub direction: &'static str,
    pub ns: Option<String>,
    #[serde(rename = "collectionUuid")]
    pub collection_uuid: Option<String>,
    pub from: ClusterTimeJson,
    pub to: ClusterTimeJson,
    #[serde(rename = "spanSecs")]
    pub span_secs: u64,
    pub counted: Option<u64>,
    #[serde(rename = "atLeast")]
    pub at_least: Option<bool>,
    pub text: String,
}

impl ResumeMoveJson {
    pub fn of(move_: &ResumeMove) -> Self {
        Self {
            direction: match move_.direction {
                Direction::Replay => "replay",
                Direction::Skip => "skip",
            },
            ns: move_
                .on
                .as_ref()
                .and_then(WatchedCollection::namespace)
                .map(|(db, coll)| format!("{db}.{coll}")),
            collection_uuid: match &move_.on {
                Some(WatchedCollection::Collection(uuid)) => Some(hex::encode(uuid)),
                _ => None,
            },
            from: ClusterTimeJson::of(move_.from),
            to: ClusterTimeJson::of(move_.to),
            span_secs: move_.span.as_secs(),
            counted: move_.count.as_ref().map(|c| c.counted),
            at_least: move_.count.as_ref().map(|c| c.at_least()),
            text: move_.describe(),
        }
    }
}

/// A change `skip --whole-transaction` steps over.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SteppedOverJson<'a> {
    pub token: String,
    pub op: &'a str,
    pub key: &'a str,
}

impl<'a> SteppedOverJson<'a> {
    pub fn of(change: &'a SteppedChange) -> Self {
        Self {
            token: change.token.to_string(),
            op: &change.operation,
            key: &change.key,
        }
    }
}
