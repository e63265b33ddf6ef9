//! What an operator asks for, before anything is read or decided.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::{Checkpoint, ClusterTime, ResumeToken};

/// The guarded actions (docs/runbook.md).
#[derive(Debug, Clone, PartialEq)]
pub enum ActionRequest {
    /// Without `to` or `hold`: release to any standby. `to`: hand to one named
    /// listener. `hold`: the operator holds it for that long (processing pauses).
    Takeover {
        resource: String,
        to: Option<String>,
        hold: Option<Duration>,
    },
    Rewind {
        resource: String,
        to: RewindTarget,
    },
    Reset {
        resource: String,
        to: ResetTarget,
        /// `--accept-skip`: required to skip unprocessed changes (`--to now`).
        accept_skip: bool,
    },
    /// Step over exactly one change: the one the lease records as failing, or the one
    /// `to_token` names; the lease resumes right after it.
    Skip {
        resource: String,
        to_token: Option<ResumeToken>,
    },
    /// `skip --whole-transaction`: step over every change, on the lease's namespace, of
    /// the multi-document transaction that change (named as for `Skip`) belongs to; the
    /// lease resumes right after the transaction's last change there.
    SkipTransaction {
        resource: String,
        to_token: Option<ResumeToken>,
    },
    /// Run the rebuild definition `name` under the bulk lock of its resource.
    Rebuild {
        name: String,
    },
    AbortBulk {
        resource: String,
    },
    /// Restore the resume point recorded before the audited action `audit_id`.
    Undo {
        audit_id: String,
    },
}

/// The action's name as the command line, the audit log and the console say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    Takeover,
    Rewind,
    Reset,
    Skip,
    Rebuild,
    AbortBulk,
    Undo,
}

impl ActionKind {
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::Takeover => "takeover",
            ActionKind::Rewind => "rewind",
            ActionKind::Reset => "reset",
            ActionKind::Skip => "skip",
            ActionKind::Rebuild => "rebuild",
            ActionKind::AbortBulk => "abort-bulk",
            ActionKind::Undo => "undo",
        }
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl ActionRequest {
    pub fn kind(&self) -> ActionKind {
        match self {
            ActionRequest::Takeover { .. } => ActionKind::Takeover,
            ActionRequest::Rewind { .. } => ActionKind::Rewind,
            ActionRequest::Reset { .. } => ActionKind::Reset,
            ActionRequest::Skip { .. } | ActionRequest::SkipTransaction { .. } => ActionKind::Skip,
            ActionRequest::Rebuild { .. } => ActionKind::Rebuild,
            ActionRequest::AbortBulk { .. } => ActionKind::AbortBulk,
            ActionRequest::Undo { .. } => ActionKind::Undo,
        }
    }

    /// For a skip: the change `--to-token` names (`None`: the lease's failing one), and
    /// whether its whole transaction is stepped over.
    pub fn skip_target(&self) -> Option<(Option<&ResumeToken>, bool)> {
        match self {
            ActionRequest::Skip { to_token, .. } => Some((to_token.as_ref(), false)),
            ActionRequest::SkipTransaction { to_token, .. } => Some((to_token.as_ref(), true)),
            _ => None,
        }
    }

    /// The resource the request names itself (a rebuild's and an undo's come from
    /// their definition and audit record).
    pub fn named_resource(&self) -> Option<&str> {
        match self {
            ActionRequest::Takeover { resource, .. }
            | ActionRequest::Rewind { resource, .. }
            | ActionRequest::Reset { resource, .. }
            | ActionRequest::Skip { resource, .. }
            | ActionRequest::SkipTransaction { resource, .. }
            | ActionRequest::AbortBulk { resource } => Some(resource),
            ActionRequest::Rebuild { .. } | ActionRequest::Undo { .. } => None,
        }
    }
}

/// Where a rewind moves the resume point.
#[derive(Debug, Clone, PartialEq)]
pub enum RewindTarget {
    /// `resumeAt = TIME`: changes at or after it are replayed.
    Time(TimeSpec),
    /// Back by this long from the lease's current resume point (from the newest
    /// oplog entry when the lease has no resume time).
    By(Duration),
    /// `resumeToken = T`: changes after the token are replayed.
    Token(ResumeToken),
    /// The token of one of the resource's checkpoints (`streamward checkpoints`).
    Checkpoint(CheckpointRef),
}

/// Which checkpoint: the Nth newest as listed (1 the newest; the list moves as new
/// ones are recorded), or one by its id (for good).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointRef {
    Newest(u32),
    Id(String),
}

impl CheckpointRef {
    /// The one of `listed` (newest first) this names.
    pub fn find<'a>(&self, listed: &'a [Checkpoint]) -> Option<&'a Checkpoint> {
        match self {
            CheckpointRef::Newest(n) => listed.get((*n as usize).checked_sub(1)?),
            CheckpointRef::Id(id) => listed.iter().find(|c| &c.id == id),
        }
    }
}

impl fmt::Display for CheckpointRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointRef::Newest(n) => write!(f, "{n}"),
            CheckpointRef::Id(id) => f.write_str(id),
        }
    }
}

impl FromStr for CheckpointRef {
    type Err = String;
    /// `N` (1 the newest, at most the number kept) or a checkpoint's 24-hex-digit id.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim().trim_start_matches('#');
        if text.len() == 24 && text.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(CheckpointRef::Id(text.to_ascii_lowercase()));
        }
        match text.parse::<u32>() {
            Ok(n) if (1..=crate::store::CHECKPOINTS_KEPT * 10).contains(&n) => {
                Ok(CheckpointRef::Newest(n))
            }
            _ => Err(format!(
                "{text:?} is neither a checkpoint number (1 the newest) nor a checkpoint id \
                 (24 hex digits, `streamward checkpoints RESOURCE` lists them)"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTarget {
    /// Both resume fields null: bootstrap from the oldest oplog entry.
    Oldest,
    /// `resumeAt` = the newest oplog entry: unprocessed changes are skipped.
    Now,
}

impl FromStr for ResetTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "oldest" => Ok(ResetTarget::Oldest),
            "now" => Ok(ResetTarget::Now),
            other => Err(format!("{other:?}: expected oldest or now")),
        }
    }
}

/// A point in time as an operator types it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSpec {
    Cluster(ClusterTime),
    Wall(DateTime<Utc>),
}

impl TimeSpec {
    /// The cluster time a stream would start at: a wall time starts with the first
    /// entry of its second (increments start at 1).
    pub fn cluster_time(self) -> ClusterTime {
        match self {
            TimeSpec::Cluster(time) => time,
            TimeSpec::Wall(at) => {
                ClusterTime::new(u32::try_from(at.timestamp().max(0)).unwrap_or(u32::MAX), 1)
            }
        }
    }
}

impl FromStr for TimeSpec {
    type Err = String;
    /// RFC 3339 (`2026-01-01T00:10:00Z`), `Timestamp(SECS, INC)` or `SECS:INC`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if let Ok(at) = DateTime::parse_from_rfc3339(text) {
            return Ok(TimeSpec::Wall(at.with_timezone(&Utc)));
        }
        let inner = text
            .strip_prefix("Timestamp(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or(text);
        let parts: Vec<&str> = inner.split([',', ':']).map(str::trim).collect();
        if let [secs, inc] = parts.as_slice() {
            if let (Ok(secs), Ok(inc)) = (secs.parse::<u32>(), inc.parse::<u32>()) {
                return Ok(TimeSpec::Cluster(ClusterTime::new(secs, inc)));
            }
        }
        Err(format!(
            "{text:?} is not a time: expected RFC 3339 (2026-01-01T00:10:00Z), Timestamp(SECS, INC) or SECS:INC"
        ))
    }
}

/// Parses a resume token as printed by `leases` (the `_data` hex) or as extended JSON
/// (`{"_data": "8263…"}`).
pub fn parse_token(text: &str) -> Result<ResumeToken, String> {
    let text = text.trim();
    if text.starts_with('{') {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("resume token is not JSON: {e}"))?;
        return match bson::Bson::try_from(value) {
            Ok(bson::Bson::Document(document)) if document.contains_key("_data") => {
                Ok(ResumeToken::from_document(document))
            }
            _ => Err("resume token JSON must be a document with a _data field".into()),
        };
    }
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!(
            "{text:?} is not a resume token: expected its _data hex or {{\"_data\": \"…\"}}"
        ));
    }
    Ok(ResumeToken::from_document(
        bson::doc! { "_data": text.to_ascii_uppercase() },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_three_forms() {
        assert_eq!(
            "Timestamp(1700000000, 3)".parse::<TimeSpec>(),
            Ok(TimeSpec::Cluster(ClusterTime::new(1_700_000_000, 3)))
        );
        assert_eq!(
            "1700000000:3".parse::<TimeSpec>(),
            Ok(TimeSpec::Cluster(ClusterTime::new(1_700_000_000, 3)))
        );
        let wall: TimeSpec = "2023-11-14T22:13:20Z".parse().unwrap();
        assert_eq!(wall.cluster_time(), ClusterTime::new(1_700_000_000, 1));
        assert!("yesterday".parse::<TimeSpec>().is_err());
        assert!("1:2:3".parse::<TimeSpec>().is_err());
    }

    #[test]
    fn tokens_parse_as_hex_or_json() {
        let hex = parse_token("8263e5b9d2000000012b04").unwrap();
        assert_eq!(hex.data_hex(), Some("8263E5B9D2000000012B04"));
        let json = parse_token(r#"{"_data": "8263E5B9D2000000012B04"}"#).unwrap();
        assert_eq!(json, hex);
        assert!(parse_token("not hex").is_err());
        assert!(parse_token(r#"{"x": 1}"#).is_err());
        assert!(parse_token("").is_err());
    }
}
