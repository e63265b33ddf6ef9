//! The lease document and the values derived from it.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ChangeFailure, ClusterTime, ResumeToken};

/// Lock kind: incremental listeners take `update`; a batch rebuild takes `bulk`,
/// which no incremental listener may take over, however old it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LockKind {
    #[default]
    Update,
    Bulk,
}

impl LockKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Update => "update",
            LockKind::Bulk => "bulk",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LockKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "update" => Ok(LockKind::Update),
            "bulk" => Ok(LockKind::Bulk),
            other => Err(format!(
                "unknown lock kind {other:?}: expected \"update\" or \"bulk\""
            )),
        }
    }
}

/// Which implementation of the lease algorithm writes a lease: streamward, or another
/// implementation of the seed algorithm whose first fields streamward keeps (`_id`,
/// `listenerId`, `expiresAt`, `version`, `resumeToken`). docs/protocol.md, "Leases
/// written by other implementations", says how such a listener behaves and what
/// streamward's actions do about it.
///
/// **The rule, in one place:** a lease is [`LeaseProtocol::Seed`] when it holds a value
/// (present, not null) in none of [`LeaseProtocol::OWN_FIELDS`]: the fields every
/// streamward holder writes when it acquires (`acquiredAt`, `renewedAt`), commits
/// (`committedAt`) or says what it watches (`watch`). `kind` is not among them: a
/// missing one reads as `update`, and streamward's actions before this rule wrote it
/// onto seed leases, where the seed listener ignores it. Streamward's own actions on
/// a seed lease write none of these fields ([`crate::store::OperatorChange::write`]),
/// so it stays seed; a streamward listener that takes it writes them, and from then on
/// it is streamward's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseProtocol {
    #[default]
    Streamward,
    Seed,
}

impl LeaseProtocol {
    /// The fields only streamward writes: a lease with a value in none is a seed lease.
    pub const OWN_FIELDS: [&'static str; 4] = [
        super::lease_field::ACQUIRED_AT,
        super::lease_field::RENEWED_AT,
        super::lease_field::COMMITTED_AT,
        super::lease_field::WATCH,
    ];

    /// The protocol of a stored document, from whether it holds a value (not null) in
    /// the field named.
    pub fn of_document(has_value: impl Fn(&str) -> bool) -> Self {
        if Self::OWN_FIELDS.iter().any(|name| has_value(name)) {
            LeaseProtocol::Streamward
        } else {
            LeaseProtocol::Seed
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LeaseProtocol::Streamward => "streamward",
            LeaseProtocol::Seed => "seed",
        }
    }

    pub fn is_seed(self) -> bool {
        self == LeaseProtocol::Seed
    }
}

impl fmt::Display for LeaseProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a listener resumes: the committed token wins, else the operator's start time.
#[derive(Debug, Clone, PartialEq)]
pub enum ResumePoint {
    Token(ResumeToken),
    At(ClusterTime),
    /// Neither is set: bootstrap from the oldest oplog entry.
    Oldest,
}

impl ResumePoint {
    /// The time of the point, when it has one: a token's decoded time, else the time
    /// recorded beside it (Azure Cosmos DB's tokens: a document's time, to the second);
    /// an undecodable token with nothing recorded has none.
    pub fn time(&self) -> Option<ClusterTime> {
        match self {
            ResumePoint::Token(token) => token.time(),
            ResumePoint::At(time) => Some(*time),
            ResumePoint::Oldest => None,
        }
    }

    /// For people: "after token at 1700000000:4", "at …", "the oldest oplog entry".
    pub fn describe(&self) -> String {
        match self {
            ResumePoint::Token(token) if super::resume_token::token_entry(token).is_some() => {
                format!("after entry {token}")
            }
            ResumePoint::Token(token) => match (token.decode(), token.recorded_time()) {
                (Ok(decoded), _) => format!("after token at {}", decoded.time),
                (Err(_), Some(at)) => {
                    format!("after token {token} ({})", super::text::document_time(at))
                }
                (Err(_), None) => format!("after token {token}"),
            },
            ResumePoint::At(time) => format!("at {time}"),
            ResumePoint::Oldest => "the oldest oplog entry".into(),
        }
    }
}

/// What one listener resource watches; shown by the console.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchTarget {
    pub db: String,
    pub coll: String,
    pub pipeline: String,
    /// A change stream, or a capped collection read by a tailable cursor.
    pub source: super::SourceKind,
}

/// A watched collection's change stream was closed by the server (an `invalidate`
/// event after a drop, rename or `dropDatabase`), as the listener that met it records
/// it on its lease. Cleared by every operator action that moves the resume point.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalidation {
    /// Cluster time of the change that closed the stream, when known.
    pub at: Option<ClusterTime>,
    /// What happened, for people: "shop.orders was dropped".
    pub reason: String,
}

impl Invalidation {
    /// The first cluster time after the change that closed the stream: a stream
    /// started there goes on past it, on whatever now has the collection's name.
    pub fn resume_after(&self) -> Option<ClusterTime> {
        self.at
            .map(|t| ClusterTime::from_u64(t.as_u64().saturating_add(1)))
    }

    /// What an operator can do about a closed stream of `resource`, as the listener,
    /// the command line and the console say it. Resuming from before the change that
    /// closed it closes it again, so every way out moves the resume point past it.
    pub fn recovery(&self, resource: &str) -> String {
        let rewind = self
            .resume_after()
            .map(|t| {
                format!(
                    "rewind {resource} --to {}:{} (right after it, skipping nothing), ",
                    t.secs, t.inc
                )
            })
            .unwrap_or_default();
        format!(
            "recreate the collection or fix the configuration if needed, then {rewind}\
             reset {resource} --to now --accept-skip, or rebuild"
        )
    }
}

/// One lease document, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub resource: String,
    pub holder: Option<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub version: i64,
    pub resume_token: Option<ResumeToken>,
    pub kind: LockKind,
    pub resume_at: Option<ClusterTime>,
    pub acquired_at: Option<DateTime<Utc>>,
    pub renewed_at: Option<DateTime<Utc>>,
    pub committed_at: Option<DateTime<Utc>>,
    pub watch: Option<WatchTarget>,
    pub note: Option<String>,
    /// Set when the watched collection's stream was closed for good (INVALIDATED).
    pub invalidated: Option<Invalidation>,
    /// The change its listeners keep failing on, until a commit passes it.
    pub failure: Option<ChangeFailure>,
    /// Who writes it: derived from the stored fields ([`LeaseProtocol`]'s rule).
    pub protocol: LeaseProtocol,
}

impl Lease {
    /// A lease as it is first inserted for `resource`.
    pub fn vacant(resource: impl Into<String>) -> Self {
        Self {
            resource: resource.into(),
            holder: None,
            expires_at: None,
            version: 0,
            resume_token: None,
            kind: LockKind::Update,
            resume_at: None,
            acquired_at: None,
            renewed_at: None,
            committed_at: None,
            watch: None,
            note: None,
            invalidated: None,
            failure: None,
            protocol: LeaseProtocol::Streamward,
        }
    }

    /// A lease as a seed-protocol listener inserts it: the seed fields only.
    pub fn seed(resource: impl Into<String>) -> Self {
        Self {
            protocol: LeaseProtocol::Seed,
            ..Self::vacant(resource)
        }
    }

    pub fn resume_point(&self) -> ResumePoint {
        match (&self.resume_token, self.resume_at) {
            (Some(token), _) => ResumePoint::Token(token.clone()),
            (None, Some(at)) => ResumePoint::At(at),
            (None, None) => ResumePoint::Oldest,
        }
    }

    /// What the resource reads, as its listener recorded it in `watch`; `None` before
    /// a listener has (a lease an operator made, or one written before sources existed).
    pub fn source(&self) -> Option<super::SourceKind> {
        self.watch.as_ref().map(|w| w.source)
    }

    /// A holder is live while its lease has not expired at `now` (server time).
    pub fn live_holder(&self, now: DateTime<Utc>) -> Option<&str> {
        match (&self.holder, self.expires_at) {
            (Some(holder), Some(expires)) if expires > now => Some(holder),
            _ => None,
        }
    }

    /// How long the lease has been free for the taking without anyone taking it: since
    /// its expiry (or release), while no holder is live. `None` while held, and for a
    /// lease that never had an expiry.
    pub fn unclaimed_for(&self, now: DateTime<Utc>) -> Option<std::time::Duration> {
        if self.live_holder(now).is_some() {
            return None;
        }
        self.expires_at
            .map(|at| (now - at).to_std().unwrap_or_default())
    }

    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_none_or(|at| at <= now)
    }

    /// The fence a holder of this lease hands to its handler.
    pub fn fence(&self) -> Fence {
        Fence {
            resource: self.resource.clone(),
            version: self.version,
        }
    }
}

/// Handed to the handler with every batch: writes to shared state carry it so a
/// paused ex-holder's late writes are rejected.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    pub resource: String,
    pub version: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use chrono::TimeDelta;

    #[test]
    fn resume_point_prefers_token_then_resume_at() {
        let mut lease = Lease::vacant("r");
        assert_eq!(lease.resume_point(), ResumePoint::Oldest);
        lease.resume_at = Some(ClusterTime::new(5, 1));
        assert_eq!(
            lease.resume_point(),
            ResumePoint::At(ClusterTime::new(5, 1))
        );
        let token = ResumeToken::from_document(doc! {"_data": "82"});
        lease.resume_token = Some(token.clone());
        assert_eq!(lease.resume_point(), ResumePoint::Token(token));
        assert_eq!(
            lease.resume_point().time(),
            None,
            "undecodable token has no time"
        );
    }

    #[test]
    fn holder_is_live_only_before_expiry() {
        let now = Utc::now();
        let mut lease = Lease::vacant("r");
        lease.holder = Some("a".into());
        assert_eq!(lease.live_holder(now), None);
        lease.expires_at = Some(now);
        assert_eq!(lease.live_holder(now), None, "expiry is inclusive");
        assert!(lease.is_expired(now));
        lease.expires_at = Some(now + TimeDelta::seconds(1));
        assert_eq!(lease.live_holder(now), Some("a"));
        assert!(!lease.is_expired(now));
    }

    #[test]
    fn a_lease_is_seed_until_one_of_streamwards_own_fields_has_a_value() {
        let seed_fields = ["_id", "listenerId", "expiresAt", "version", "resumeToken"];
        let with = |present: &[&str]| {
            let present = present.to_vec();
            LeaseProtocol::of_document(move |name| present.contains(&name))
        };
        assert_eq!(with(&seed_fields), LeaseProtocol::Seed);
        assert_eq!(
            with(&["_id", "kind", "note", "resumeAt", "version"]),
            LeaseProtocol::Seed,
            "kind, note and resumeAt do not make a lease streamward's"
        );
        for own in LeaseProtocol::OWN_FIELDS {
            assert_eq!(with(&["_id", own]), LeaseProtocol::Streamward, "{own}");
        }
    }

    #[test]
    fn lock_kind_parses_its_names_only() {
        assert_eq!("bulk".parse::<LockKind>(), Ok(LockKind::Bulk));
        assert!("BULK".parse::<LockKind>().is_err());
    }
}
