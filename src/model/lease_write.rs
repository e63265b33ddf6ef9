//! Every write to a lease, as data: which fields it sets, whether the version moves,
//! and what it is conditional on. [`LeaseWrite::apply`] is what such a write does to a
//! [`Lease`] (the planner's prediction and the sandbox both use it); the MongoDB adapter
//! renders the same description as a filter and an update pipeline. Nothing here knows
//! which action a write belongs to.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{
    ChangeFailure, ClusterTime, Invalidation, Lease, LeaseProtocol, LockKind, ResumeToken,
    WatchTarget,
};

/// The lease document's field names, spelled once for every store, codec and view of
/// the raw document.
pub mod field {
    pub const RESOURCE: &str = "_id";
    pub const HOLDER: &str = "listenerId";
    pub const EXPIRES_AT: &str = "expiresAt";
    pub const VERSION: &str = "version";
    pub const RESUME_TOKEN: &str = "resumeToken";
    pub const KIND: &str = "kind";
    pub const RESUME_AT: &str = "resumeAt";
    pub const ACQUIRED_AT: &str = "acquiredAt";
    pub const RENEWED_AT: &str = "renewedAt";
    pub const COMMITTED_AT: &str = "committedAt";
    pub const WATCH: &str = "watch";
    pub const NOTE: &str = "note";
    pub const INVALIDATED: &str = "invalidated";
    pub const FAILURE: &str = "failure";
    /// The time of the change `resumeToken` follows, where the token cannot tell it
    /// (Azure Cosmos DB's): a date, absent otherwise.
    pub const TOKEN_TIME: &str = "tokenTime";
}

/// A time a write stores, on the server's clock (`$$NOW` on MongoDB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    Now,
    NowPlus(Duration),
}

impl Moment {
    pub fn at(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Moment::Now => now,
            Moment::NowPlus(duration) => TimeDelta::from_std(duration)
                .ok()
                .and_then(|d| now.checked_add_signed(d))
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        }
    }
}

/// One field a write sets, with its value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldSet {
    Holder(Option<String>),
    Kind(LockKind),
    ExpiresAt(Moment),
    AcquiredAt(Moment),
    RenewedAt(Moment),
    CommittedAt(Moment),
    ResumeToken(Option<ResumeToken>),
    /// Removes `resumeToken`: on a seed lease, where a missing token means "start at
    /// the oldest oplog entry" and a null one stops the seed listener for good.
    ResumeTokenRemoved,
    /// Removes `resumeAt`: a seed lease's start point is its token alone.
    ResumeAtRemoved,
    /// The time recorded for the resume token (see [`FieldSet::resume_token`]); `None`
    /// removes the field.
    TokenTime(Option<DateTime<Utc>>),
    ResumeAt(Option<ClusterTime>),
    Watch(WatchTarget),
    Note(String),
    /// `None` removes the field.
    Invalidated(Option<Invalidation>),
    /// `None` removes the field.
    Failure(Option<ChangeFailure>),
}

impl FieldSet {
    /// The document field this sets.
    pub fn name(&self) -> &'static str {
        match self {
            FieldSet::Holder(_) => field::HOLDER,
            FieldSet::Kind(_) => field::KIND,
            FieldSet::ExpiresAt(_) => field::EXPIRES_AT,
            FieldSet::AcquiredAt(_) => field::ACQUIRED_AT,
            FieldSet::RenewedAt(_) => field::RENEWED_AT,
            FieldSet::CommittedAt(_) => field::COMMITTED_AT,
            FieldSet::ResumeToken(_) | FieldSet::ResumeTokenRemoved => field::RESUME_TOKEN,
            FieldSet::ResumeAtRemoved => field::RESUME_AT,
            FieldSet::TokenTime(_) => field::TOKEN_TIME,
            FieldSet::ResumeAt(_) => field::RESUME_AT,
            FieldSet::Watch(_) => field::WATCH,
            FieldSet::Note(_) => field::NOTE,
            FieldSet::Invalidated(_) => field::INVALIDATED,
            FieldSet::Failure(_) => field::FAILURE,
        }
    }

    /// The fields a write of resume token `token` sets: `resumeToken`, and `tokenTime`
    /// beside every token that cannot tell its own time (Azure Cosmos DB's: the time
    /// recorded for it, or removed when none is known) and beside no token at all
    /// (removed), so a recorded time never outlives its token. A token that tells its
    /// own time (MongoDB's) needs none, and its writes stay as they were.
    pub fn resume_token(token: Option<&ResumeToken>) -> Vec<FieldSet> {
        let time = match token {
            Some(token) if token.tells_its_time() => None,
            Some(token) => Some(FieldSet::TokenTime(token.recorded_time())),
            None => Some(FieldSet::TokenTime(None)),
        };
        std::iter::once(FieldSet::ResumeToken(token.cloned()))
            .chain(time)
            .collect()
    }

    fn apply(&self, lease: &mut Lease, now: DateTime<Utc>) {
        // Writing one of streamward's own fields makes the lease streamward's: the
        // same rule the codec applies to a stored document.
        if LeaseProtocol::OWN_FIELDS.contains(&self.name()) {
            lease.protocol = LeaseProtocol::Streamward;
        }
        match self {
            FieldSet::Holder(holder) => lease.holder = holder.clone(),
            FieldSet::Kind(kind) => lease.kind = *kind,
            FieldSet::ExpiresAt(at) => lease.expires_at = Some(at.at(now)),
            FieldSet::AcquiredAt(at) => lease.acquired_at = Some(at.at(now)),
            FieldSet::RenewedAt(at) => lease.renewed_at = Some(at.at(now)),
            FieldSet::CommittedAt(at) => lease.committed_at = Some(at.at(now)),
            FieldSet::ResumeToken(token) => lease.resume_token = token.clone(),
            FieldSet::ResumeTokenRemoved => lease.resume_token = None,
            FieldSet::ResumeAtRemoved => lease.resume_at = None,
            // The model keeps the time with its token; without a token there is none.
            FieldSet::TokenTime(at) => {
                if let Some(token) = lease.resume_token.take() {
                    lease.resume_token = Some(token.with_recorded_time(*at));
                }
            }
            FieldSet::ResumeAt(at) => lease.resume_at = *at,
            FieldSet::Watch(watch) => lease.watch = Some(watch.clone()),
            FieldSet::Note(note) => lease.note = Some(note.clone()),
            FieldSet::Invalidated(invalidated) => lease.invalidated = invalidated.clone(),
            FieldSet::Failure(failure) => lease.failure = failure.clone(),
        }
    }
}

/// One thing a write requires of the stored lease; a write applies where all hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `version` equals this (the fencing version of a tenure, or the one an
    /// operator planned against).
    VersionIs(i64),
    /// `listenerId` equals this.
    HolderIs(String),
    /// `expiresAt` is at or before the server's now (missing or null counts as expired).
    Expired,
    /// `kind` is not `bulk`: an incremental listener never takes a bulk lease.
    NotBulk,
}

impl Requirement {
    /// Whether `lease` meets this at the server's `now`.
    pub fn holds(&self, lease: &Lease, now: DateTime<Utc>) -> bool {
        match self {
            Requirement::VersionIs(version) => lease.version == *version,
            Requirement::HolderIs(holder) => lease.holder.as_deref() == Some(holder.as_str()),
            Requirement::Expired => lease.is_expired(now),
            Requirement::NotBulk => lease.kind != LockKind::Bulk,
        }
    }

    /// Whether a document that does not exist yet meets this: every field is missing,
    /// so no holder or version matches, and it has expired and is not bulk (a missing
    /// field sorts below every date and equals no string).
    pub fn holds_on_missing(&self) -> bool {
        match self {
            Requirement::VersionIs(_) | Requirement::HolderIs(_) => false,
            Requirement::Expired | Requirement::NotBulk => true,
        }
    }
}

/// A conditional write to one lease document.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseWrite {
    pub resource: String,
    pub requires: Vec<Requirement>,
    /// Whether a missing document is created (then every requirement is judged on
    /// a document with no fields, and the version starts at 0).
    pub may_insert: bool,
    /// `version + 1`: the write changes who holds the lease (or an operator changed it).
    pub bumps_version: bool,
    pub sets: Vec<FieldSet>,
}

impl LeaseWrite {
    /// The lease after this write at the server's `now`, or `None` when the write
    /// does not apply (a requirement fails, or the document is missing and the write
    /// does not insert).
    pub fn apply(&self, existing: Option<&Lease>, now: DateTime<Utc>) -> Option<Lease> {
        match existing {
            Some(lease) if self.admits(lease, now) => {
                let mut after = lease.clone();
                self.set_fields(&mut after, now);
                Some(after)
            }
            Some(_) => None,
            None if self.may_insert && self.requires.iter().all(Requirement::holds_on_missing) => {
                let mut inserted = Lease::vacant(self.resource.clone());
                for set in &self.sets {
                    set.apply(&mut inserted, now);
                }
                Some(inserted)
            }
            None => None,
        }
    }

    /// Applies this write to a stored lease in place, if its requirements hold there;
    /// returns whether it did. The same rule as [`Self::apply`], without a copy.
    pub fn apply_in_place(&self, lease: &mut Lease, now: DateTime<Utc>) -> bool {
        let admitted = self.admits(lease, now);
        if admitted {
            self.set_fields(lease, now);
        }
        admitted
    }

    /// Its requirements hold, and a version bump stays within int64: a fencing
    /// version is never written past `i64::MAX` (it would wrap, or be stored as a
    /// double that no reader takes for a version).
    fn admits(&self, lease: &Lease, now: DateTime<Utc>) -> bool {
        self.requires.iter().all(|r| r.holds(lease, now))
            && !(self.bumps_version && lease.version == i64::MAX)
    }

    /// The version move and the fields, on a lease the write admits.
    fn set_fields(&self, lease: &mut Lease, now: DateTime<Utc>) {
        if self.bumps_version {
            lease.version += 1;
        }
        for set in &self.sets {
            set.apply(lease, now);
        }
    }

    /// The first of `writes` that applies, applied; `None` when none does. How one
    /// command made of alternatives (acquire: refresh, else take) acts.
    pub fn apply_first(
        writes: &[LeaseWrite],
        existing: Option<&Lease>,
        now: DateTime<Utc>,
    ) -> Option<Lease> {
        writes.iter().find_map(|w| w.apply(existing, now))
    }

    /// A write by the holder of one tenure (commit, renew, release, recording an
    /// invalidation): applies only while `holder` still holds `version`.
    pub fn by_tenure(resource: &str, holder: &str, version: i64, sets: Vec<FieldSet>) -> Self {
        Self {
            resource: resource.to_string(),
            requires: vec![
                Requirement::HolderIs(holder.to_string()),
                Requirement::VersionIs(version),
            ],
            may_insert: false,
            bumps_version: false,
            sets,
        }
    }

    /// Commit after a batch: the resume token (with its recorded time where it needs
    /// one, [`FieldSet::resume_token`]), `committedAt`, and a longer lease; and, for a
    /// batch that got past the change the lease records as failing, no failure.
    pub fn commit(
        resource: &str,
        holder: &str,
        version: i64,
        token: &ResumeToken,
        lease: Duration,
        past_failure: bool,
    ) -> Self {
        let mut sets = FieldSet::resume_token(Some(token));
        sets.push(FieldSet::CommittedAt(Moment::Now));
        sets.push(FieldSet::ExpiresAt(Moment::NowPlus(lease)));
        if past_failure {
            sets.push(FieldSet::Failure(None));
        }
        Self::by_tenure(resource, holder, version, sets)
    }

    /// A longer lease and `renewedAt`, nothing else.
    pub fn renew(resource: &str, holder: &str, version: i64, lease: Duration) -> Self {
        Self::by_tenure(
            resource,
            holder,
            version,
            vec![
                FieldSet::ExpiresAt(Moment::NowPlus(lease)),
                FieldSet::RenewedAt(Moment::Now),
            ],
        )
    }

    /// No holder, expired now: any standby may take it.
    pub fn release(resource: &str, holder: &str, version: i64) -> Self {
        Self::by_tenure(
            resource,
            holder,
            version,
            vec![FieldSet::Holder(None), FieldSet::ExpiresAt(Moment::Now)],
        )
    }

    /// The holder met a closed change stream.
    pub fn record_invalidation(
        resource: &str,
        holder: &str,
        version: i64,
        invalidation: &Invalidation,
    ) -> Self {
        Self::by_tenure(
            resource,
            holder,
            version,
            vec![FieldSet::Invalidated(Some(invalidation.clone()))],
        )
    }

    /// The holder failed on a change (`failure` counts every attempt so far).
    pub fn record_failure(
        resource: &str,
        holder: &str,
        version: i64,
        failure: &ChangeFailure,
    ) -> Self {
        Self::by_tenure(
            resource,
            holder,
            version,
            vec![FieldSet::Failure(Some(failure.clone()))],
        )
    }

    /// Acquire as alternatives tried in order: refresh the lease `listener` already
    /// holds (version kept), else take one that has expired or does not exist yet
    /// (version + 1, 0 on insert). A `Update` listener never takes or keeps a bulk lease.
    pub fn acquire(
        resource: &str,
        listener: &str,
        kind: LockKind,
        lease: Duration,
        watch: Option<&WatchTarget>,
    ) -> [LeaseWrite; 2] {
        let kind_rule = match kind {
            LockKind::Update => Some(Requirement::NotBulk),
            LockKind::Bulk => None,
        };
        let watch = watch.cloned().map(FieldSet::Watch);
        let mut refresh_sets = vec![
            FieldSet::Holder(Some(listener.to_string())),
            FieldSet::Kind(kind),
            FieldSet::ExpiresAt(Moment::NowPlus(lease)),
            FieldSet::RenewedAt(Moment::Now),
        ];
        refresh_sets.extend(watch.clone());
        let mut take_sets = vec![
            FieldSet::Holder(Some(listener.to_string())),
            FieldSet::Kind(kind),
            FieldSet::AcquiredAt(Moment::Now),
            FieldSet::ExpiresAt(Moment::NowPlus(lease)),
            FieldSet::RenewedAt(Moment::Now),
        ];
        take_sets.extend(watch);
        let refresh = LeaseWrite {
            resource: resource.to_string(),
            requires: std::iter::once(Requirement::HolderIs(listener.to_string()))
                .chain(kind_rule.clone())
                .collect(),
            may_insert: false,
            bumps_version: false,
            sets: refresh_sets,
        };
        let take = LeaseWrite {
            resource: resource.to_string(),
            requires: std::iter::once(Requirement::Expired)
                .chain(kind_rule)
                .collect(),
            may_insert: true,
            bumps_version: true,
            sets: take_sets,
        };
        [refresh, take]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(10);

    fn acquire(
        existing: Option<&Lease>,
        listener: &str,
        kind: LockKind,
        now: DateTime<Utc>,
    ) -> Option<Lease> {
        LeaseWrite::apply_first(
            &LeaseWrite::acquire("r", listener, kind, LEASE, None),
            existing,
            now,
        )
    }

    #[test]
    fn insert_starts_at_version_zero_and_refresh_keeps_it() {
        let now = Utc::now();
        let first = acquire(None, "a", LockKind::Update, now).unwrap();
        assert_eq!(first.version, 0);
        assert_eq!(first.acquired_at, Some(now));
        let later = now + TimeDelta::seconds(3);
        let refreshed = acquire(Some(&first), "a", LockKind::Update, later).unwrap();
        assert_eq!(refreshed.version, 0);
        assert_eq!(
            refreshed.acquired_at,
            Some(now),
            "acquiredAt moves only with the holder"
        );
        assert_eq!(refreshed.expires_at, Some(later + TimeDelta::seconds(10)));
    }

    #[test]
    fn others_wait_for_expiry_then_bump_the_version() {
        let now = Utc::now();
        let held = acquire(None, "a", LockKind::Update, now).unwrap();
        assert_eq!(acquire(Some(&held), "b", LockKind::Update, now), None);
        let at_expiry = now + TimeDelta::seconds(10);
        let taken = acquire(Some(&held), "b", LockKind::Update, at_expiry).unwrap();
        assert_eq!(taken.version, 1);
        assert_eq!(taken.holder.as_deref(), Some("b"));
    }

    #[test]
    fn bulk_is_never_taken_by_update_however_old() {
        let now = Utc::now();
        let mut bulk = acquire(None, "op", LockKind::Bulk, now).unwrap();
        bulk.expires_at = Some(now - TimeDelta::days(365));
        assert_eq!(acquire(Some(&bulk), "b", LockKind::Update, now), None);
        assert_eq!(
            acquire(Some(&bulk), "op", LockKind::Update, now),
            None,
            "not even by its own holder asking as an update listener"
        );
        assert!(acquire(Some(&bulk), "op", LockKind::Bulk, now).is_some());
    }

    #[test]
    fn a_released_lease_goes_to_anyone_with_a_new_version() {
        let now = Utc::now();
        let held = acquire(None, "a", LockKind::Update, now).unwrap();
        let released = LeaseWrite::release("r", "a", 0)
            .apply(Some(&held), now)
            .unwrap();
        assert_eq!(
            (released.holder.as_deref(), released.expires_at),
            (None, Some(now))
        );
        let again = acquire(Some(&released), "a", LockKind::Update, now).unwrap();
        assert_eq!(
            again.version, 1,
            "every tenure has its own version, even the same listener's"
        );
    }

    #[test]
    fn tenure_writes_apply_only_to_their_holder_and_version() {
        let now = Utc::now();
        let held = acquire(None, "a", LockKind::Update, now).unwrap();
        let token = ResumeToken::from_document(bson::doc! { "_data": "82" });
        let commit = |holder: &str, version: i64| {
            LeaseWrite::commit("r", holder, version, &token, LEASE, false).apply(Some(&held), now)
        };
        assert_eq!(commit("b", 0), None, "another holder");
        assert_eq!(commit("a", 1), None, "another version");
        let committed = commit("a", 0).unwrap();
        assert_eq!(committed.resume_token, Some(token.clone()));
        assert_eq!(committed.committed_at, Some(now));
        assert_eq!(
            committed.version, 0,
            "a holder's writes never move the version"
        );
        assert_eq!(
            LeaseWrite::commit("r", "a", 0, &token, LEASE, false).apply(None, now),
            None,
            "a tenure write never creates a lease"
        );
    }

    #[test]
    fn a_token_that_cannot_tell_its_time_is_committed_with_the_time_recorded_for_it() {
        let now = Utc::now();
        let held = acquire(None, "a", LockKind::Update, now).unwrap();
        let mongo = ResumeToken::from_document(
            bson::doc! { "_data": "8263E5B9D2000000022B042C0100296E5A10046B" },
        );
        let names = |write: &LeaseWrite| write.sets.iter().map(FieldSet::name).collect::<Vec<_>>();
        assert_eq!(
            names(&LeaseWrite::commit("r", "a", 0, &mongo, LEASE, false)),
            [field::RESUME_TOKEN, field::COMMITTED_AT, field::EXPIRES_AT],
            "MongoDB's tokens say when: their commits are unchanged"
        );
        let cosmos = ResumeToken::from_document(bson::doc! {
            "_data": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![7; 8] },
            "_kind": 1,
        });
        let at = now - TimeDelta::seconds(90);
        let timed = cosmos.clone().with_recorded_time(Some(at));
        let commit = LeaseWrite::commit("r", "a", 0, &timed, LEASE, false);
        assert_eq!(
            names(&commit),
            [
                field::RESUME_TOKEN,
                field::TOKEN_TIME,
                field::COMMITTED_AT,
                field::EXPIRES_AT
            ]
        );
        let committed = commit.apply(Some(&held), now).unwrap();
        assert_eq!(committed.resume_token, Some(timed.clone()));
        // A later token with no known time does not inherit the earlier one's.
        let untimed = LeaseWrite::commit("r", "a", 0, &cosmos, LEASE, false)
            .apply(Some(&committed), now)
            .unwrap();
        assert_eq!(untimed.resume_token, Some(cosmos));
        assert_eq!(untimed.resume_point().time(), None);
        assert_eq!(
            FieldSet::resume_token(None),
            [FieldSet::ResumeToken(None), FieldSet::TokenTime(None)],
            "moving the resume point off a token removes its time"
        );
    }

    #[test]
    fn durations_past_the_calendar_saturate() {
        let now = Utc::now();
        assert_eq!(
            Moment::NowPlus(Duration::MAX).at(now),
            DateTime::<Utc>::MAX_UTC
        );
    }
}
