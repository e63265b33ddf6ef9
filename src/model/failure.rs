//! One change its listeners cannot get past, as the lease records it: which change,
//! what went wrong, how many attempts (across holders and restarts) and when. The
//! holder writes it fenced on its tenure; a commit past the change removes it, and so
//! does every operator action that moves the resume point.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::text::{clip, escape_control};
use super::{ClusterTime, ResumeToken};

/// The most characters of a change's document key a failure keeps.
pub const FAILURE_KEY_MAX_CHARS: usize = 512;
/// The most characters of the error a failure keeps.
pub const FAILURE_ERROR_MAX_CHARS: usize = 1_024;
/// The longest a listener waits before handing a failing change again.
pub const FAILURE_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// What kept the change from being processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureCause {
    /// The handler returned an error for it.
    Handler,
    /// The server could not return it: its event is larger than a BSON document may
    /// be (`BSONObjectTooLarge`, code 10334). Sizes in bytes, when the server said.
    TooLarge {
        size: Option<u64>,
        limit: Option<u64>,
    },
    /// The stream requires the document before (`before`) or after the change, and
    /// the server keeps none for it (`NoMatchingDocument`, code 47): the collection has
    /// no `changeStreamPreAndPostImages`, or the image expired.
    ImageMissing { before: bool },
}

impl FailureCause {
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureCause::Handler => "handler",
            FailureCause::TooLarge { .. } => "too large",
            FailureCause::ImageMissing { before: true } => "pre-image missing",
            FailureCause::ImageMissing { before: false } => "post-image missing",
        }
    }

    /// The cause [`FailureCause::as_str`] names; `TooLarge` without its sizes.
    pub fn parse(name: &str) -> Option<FailureCause> {
        Some(match name {
            "handler" => FailureCause::Handler,
            "too large" => FailureCause::TooLarge {
                size: None,
                limit: None,
            },
            "pre-image missing" => FailureCause::ImageMissing { before: true },
            "post-image missing" => FailureCause::ImageMissing { before: false },
            _ => return None,
        })
    }
}

/// A change the server could not return because the stream requires an image of it
/// that is not kept, as its error says: `… require a pre-image for all update, delete
/// and replace events, but the pre-image was not found for event: {operationType:
/// "update", ns: {db: "shop", coll: "orders"}, clusterTime: Timestamp(1795900543, 3)}`
/// (MongoDB 6.0.5).
#[derive(Debug, Clone, PartialEq)]
pub struct MissingImage {
    pub before: bool,
    /// The change's cluster time: it places the change (no token is given).
    pub at: Option<ClusterTime>,
    pub operation: Option<String>,
    /// The server's message, whole.
    pub message: String,
}

impl MissingImage {
    /// What the server's message says; `None` where it is not about a missing image.
    pub fn parse(message: &str) -> Option<Self> {
        let before = if message.contains("require a pre-image") {
            true
        } else if message.contains("require a post-image") {
            false
        } else {
            return None;
        };
        let operation = message.find("operationType: \"").and_then(|start| {
            let rest = &message[start + "operationType: \"".len()..];
            Some(rest[..rest.find('"')?].to_string())
        });
        let at = message.find("clusterTime: Timestamp(").and_then(|start| {
            let rest = &message[start + "clusterTime: Timestamp(".len()..];
            let (secs, rest) = rest.split_once(", ")?;
            let inc = &rest[..rest.find(')')?];
            Some(ClusterTime::new(
                secs.trim().parse().ok()?,
                inc.trim().parse().ok()?,
            ))
        });
        Some(Self {
            before,
            at,
            operation,
            message: message.to_string(),
        })
    }

    /// What to do about it, for the failure record and the log.
    pub fn remedy(&self, namespace: &str) -> String {
        let (which, option) = if self.before {
            ("pre-image", "fullDocumentBeforeChange")
        } else {
            ("post-image", "fullDocument")
        };
        let (db, coll) = namespace.split_once('.').unwrap_or((namespace, ""));
        format!(
            "the stream requires a {which} ({option}: required) and the server keeps none for \
             this change: enable them with db.getSiblingDB({db:?}).runCommand({{collMod: \
             {coll:?}, changeStreamPreAndPostImages: {{enabled: true}}}}) (changes made before \
             that have none: skip this one), or ask for whenAvailable"
        )
    }
}

/// The change a lease's listeners keep failing on.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeFailure {
    /// The change's resume token: resuming after it steps over it. `None` when the
    /// server did not name the change (then `at` places it).
    pub token: Option<ResumeToken>,
    /// The change's cluster time, when known.
    pub at: Option<ClusterTime>,
    /// `db.collection` of the change.
    pub namespace: String,
    /// `insert`, `update`, … as the event says.
    pub operation: String,
    /// The document key as relaxed extended JSON, clipped to [`FAILURE_KEY_MAX_CHARS`].
    pub document_key: String,
    /// The error, clipped to [`FAILURE_ERROR_MAX_CHARS`].
    pub error: String,
    pub cause: FailureCause,
    /// Attempts on this change so far, by every listener of the lease.
    pub attempts: u32,
    /// Server time of the first and of the latest attempt.
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
}

impl ChangeFailure {
    /// A failure in one line: the change, the attempts and the error, control characters
    /// escaped.
    pub fn summary(&self) -> String {
        let at = self.at.map(|t| format!(" at {t}")).unwrap_or_default();
        format!(
            "{} {} {}{at}: {} attempt{} ({}): {}",
            escape_control(&self.operation),
            escape_control(&self.namespace),
            escape_control(&self.document_key),
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            self.cause.as_str(),
            escape_control(&self.error),
        )
    }

    /// The first failure on a change, at server time `now`; long texts clipped.
    #[allow(clippy::too_many_arguments)]
    pub fn first(
        token: Option<ResumeToken>,
        at: Option<ClusterTime>,
        namespace: &str,
        operation: &str,
        document_key: &str,
        error: &str,
        cause: FailureCause,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            token,
            at,
            namespace: namespace.to_string(),
            operation: operation.to_string(),
            document_key: clip(document_key, FAILURE_KEY_MAX_CHARS),
            error: clip(error, FAILURE_ERROR_MAX_CHARS),
            cause,
            attempts: 1,
            first_at: now,
            last_at: now,
        }
    }

    /// Whether `self` and `other` name the same change: the same token, or, where
    /// neither has one, the same cluster time.
    pub fn same_change(&self, other: &ChangeFailure) -> bool {
        match (&self.token, &other.token) {
            (Some(a), Some(b)) => a.as_document() == b.as_document(),
            (None, None) => self.at.is_some() && self.at == other.at,
            _ => false,
        }
    }

    /// This failure as the next attempt after `previous` (what the lease recorded):
    /// one more attempt on the same change, first seen when it was first seen; a
    /// different change starts again at one.
    pub fn after(mut self, previous: Option<&ChangeFailure>) -> Self {
        if let Some(previous) = previous.filter(|p| p.same_change(&self)) {
            self.attempts = previous.attempts.saturating_add(1);
            self.first_at = previous.first_at;
        }
        self
    }

    /// Whether the change with `token` (at `at`) is this failure's change.
    pub fn names(&self, token: &ResumeToken, at: Option<ClusterTime>) -> bool {
        match &self.token {
            Some(failed) => failed.as_document() == token.as_document(),
            None => self.at.is_some() && self.at == at,
        }
    }

    /// How long to wait after the latest attempt before handing the change again.
    pub fn backoff(&self, base: Duration) -> Duration {
        failure_backoff(self.attempts, base)
    }

    /// Server time before which no listener hands the change again.
    pub fn retry_at(&self, base: Duration) -> DateTime<Utc> {
        let wait = TimeDelta::from_std(self.backoff(base)).unwrap_or(TimeDelta::MAX);
        self.last_at
            .checked_add_signed(wait)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// A change the server could not return, as its error tells it (MongoDB's
/// `BSONObjectTooLarge`, code 10334, on the `getMore` or `aggregate` that would have
/// carried it: "BSONObj size: 18000383 (0x112A9FF) is invalid. Size must be between 0
/// and 16793600(16MB) First element: _id: { _data: "826B…" }").
#[derive(Debug, Clone, PartialEq)]
pub struct TooLargeChange {
    /// The change's resume token, from the event's `_id` the message names; `None`
    /// when it names none.
    pub token: Option<ResumeToken>,
    pub size: Option<u64>,
    pub limit: Option<u64>,
    /// The server's message, whole.
    pub message: String,
}

impl TooLargeChange {
    pub fn parse(message: &str) -> Self {
        let number_after = |marker: &str| -> Option<u64> {
            let rest = &message[message.find(marker)? + marker.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        let token = message.find("_data: \"").and_then(|start| {
            let rest = &message[start + "_data: \"".len()..];
            let data = &rest[..rest.find('"')?];
            (!data.is_empty() && data.chars().all(|c| c.is_ascii_hexdigit()))
                .then(|| ResumeToken::from_document(bson::doc! { "_data": data }))
        });
        Self {
            token,
            size: number_after("BSONObj size: "),
            limit: number_after("Size must be between 0 and "),
            message: message.to_string(),
        }
    }
}

/// A change the server could not return as the stream asked for it: reading again meets
/// it again, so it is recorded on the lease as failing, like a handler's failure.
#[derive(Debug, Clone, PartialEq)]
pub enum UnreadableChange {
    /// Its event is over the 16 MB a reply may hold (10334).
    TooLarge(TooLargeChange),
    /// The stream requires an image of it the server does not keep (47).
    ImageMissing(MissingImage),
}

impl UnreadableChange {
    /// The server's message, whole.
    pub fn message(&self) -> &str {
        match self {
            UnreadableChange::TooLarge(change) => &change.message,
            UnreadableChange::ImageMissing(missing) => &missing.message,
        }
    }
}

impl std::fmt::Display for TooLargeChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
        write!(
            f,
            "a change of {} bytes is larger than the server can return ({} bytes)",
            bytes(self.size),
            bytes(self.limit)
        )?;
        if self.token.is_none() {
            f.write_str("; the server's message names no resume token for it")?;
        }
        Ok(())
    }
}

/// The wait after `attempts` failed attempts: `base` doubled per attempt after the
/// first, at most [`FAILURE_BACKOFF_MAX`] (and never less than `base`).
pub fn failure_backoff(attempts: u32, base: Duration) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    base.saturating_mul(1 << doublings)
        .min(FAILURE_BACKOFF_MAX)
        .max(base.min(FAILURE_BACKOFF_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn token(data: &str) -> ResumeToken {
        ResumeToken::from_document(doc! { "_data": data })
    }

    /// The messages a real MongoDB 6.0.5 sent (code 47) for a required pre-image and
    /// post-image the collection does not keep.
    #[test]
    fn a_missing_image_is_read_from_the_servers_message() {
        let pre = MissingImage::parse(
            "Executor error during getMore :: caused by :: Change stream was configured to \
             require a pre-image for all update, delete and replace events, but the pre-image \
             was not found for event: {operationType: \"update\", ns: {db: \"preimg\", coll: \
             \"t\"}, clusterTime: Timestamp(1795900543, 3)}",
        )
        .expect("a missing pre-image");
        assert!(pre.before);
        assert_eq!(pre.at, Some(ClusterTime::new(1_795_900_543, 3)));
        assert_eq!(pre.operation.as_deref(), Some("update"));
        let remedy = pre.remedy("preimg.t");
        assert!(
            remedy.contains(
                "db.getSiblingDB(\"preimg\").runCommand({collMod: \"t\", changeStreamPreAndPostImages: {enabled: true}})"
            ),
            "{remedy}"
        );
        let post = MissingImage::parse(
            "Change stream was configured to require a post-image for all update events, but \
             the post-image was not found for event: {operationType: \"update\", ns: {db: \
             \"preimg\", coll: \"t\"}, clusterTime: Timestamp(1795900543, 5)}",
        )
        .expect("a missing post-image");
        assert!(!post.before);
        assert_eq!(post.at, Some(ClusterTime::new(1_795_900_543, 5)));
        assert!(post.remedy("preimg.t").contains("fullDocument: required"));
        assert_eq!(MissingImage::parse("no such document"), None);
        for cause in [
            FailureCause::Handler,
            FailureCause::ImageMissing { before: true },
            FailureCause::ImageMissing { before: false },
        ] {
            assert_eq!(FailureCause::parse(cause.as_str()), Some(cause));
        }
    }

    fn failure(data: &str, now: DateTime<Utc>) -> ChangeFailure {
        ChangeFailure::first(
            Some(token(data)),
            Some(ClusterTime::new(10, 1)),
            "shop.orders",
            "insert",
            "{\"_id\":1}",
            "boom",
            FailureCause::Handler,
            now,
        )
    }

    #[test]
    fn attempts_count_on_the_same_change_and_start_again_on_another() {
        let t0 = Utc::now();
        let t1 = t0 + TimeDelta::seconds(5);
        let first = failure("82AA", t0);
        let again = failure("82AA", t1).after(Some(&first));
        assert_eq!((again.attempts, again.first_at, again.last_at), (2, t0, t1));
        let third = failure("82AA", t1).after(Some(&again));
        assert_eq!(third.attempts, 3);
        let other = failure("82BB", t1).after(Some(&third));
        assert_eq!((other.attempts, other.first_at), (1, t1));
        assert_eq!(failure("82AA", t0).after(None).attempts, 1);
    }

    #[test]
    fn a_change_without_a_token_is_named_by_its_time() {
        let now = Utc::now();
        let mut a = failure("82AA", now);
        a.token = None;
        let mut b = a.clone();
        assert!(a.same_change(&b));
        assert!(a.names(&token("82FF"), Some(ClusterTime::new(10, 1))));
        b.at = None;
        assert!(
            !b.same_change(&b.clone()),
            "no token and no time names nothing"
        );
        assert!(!a.same_change(&failure("82AA", now)));
    }

    #[test]
    fn the_backoff_doubles_per_attempt_up_to_a_minute() {
        let base = Duration::from_secs(1);
        let waits: Vec<u64> = [1, 2, 3, 4, 6, 7, 8, 100, u32::MAX]
            .iter()
            .map(|&n| failure_backoff(n, base).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 32, 60, 60, 60, 60]);
        assert_eq!(failure_backoff(0, base), base);
        assert_eq!(
            failure_backoff(1, Duration::from_secs(3600)),
            FAILURE_BACKOFF_MAX,
            "a huge base is still bounded"
        );
        let now = Utc::now();
        let mut f = failure("82AA", now);
        f.attempts = 3;
        assert_eq!(f.retry_at(base), now + TimeDelta::seconds(4));
    }

    #[test]
    fn a_too_large_change_is_read_from_the_servers_message() {
        // As MongoDB 6.0.5 answered a getMore over an 18 MB update event.
        let message = "read a batch of changes: Executor error during getMore :: caused by :: \
            BSONObj size: 18000383 (0x112A9FF) is invalid. Size must be between 0 and \
            16793600(16MB) First element: _id: { _data: \"826B0ABF9F000000042B022C0100296E5A\
            10044DD8BF3903444658AEADECC92CC78181461E5F6964002B020004\" }";
        let parsed = TooLargeChange::parse(message);
        assert_eq!(
            (parsed.size, parsed.limit),
            (Some(18_000_383), Some(16_793_600))
        );
        let token = parsed.token.as_ref().unwrap();
        assert_eq!(
            token.data_hex(),
            Some("826B0ABF9F000000042B022C0100296E5A10044DD8BF3903444658AEADECC92CC78181461E5F6964002B020004")
        );
        assert_eq!(token.time(), Some(ClusterTime::new(1_795_866_527, 4)));
        assert!(parsed.to_string().contains("18000383 bytes"), "{parsed}");

        let unnamed = TooLargeChange::parse("BSONObj size: 17000000 (0x1) is invalid");
        assert_eq!(
            (&unnamed.token, unnamed.size, unnamed.limit),
            (&None, Some(17_000_000), None)
        );
        assert!(unnamed.to_string().contains("names no resume token"));
        assert_eq!(TooLargeChange::parse("").size, None);
    }

    #[test]
    fn long_keys_and_errors_are_clipped() {
        let long = "x".repeat(10_000);
        let f = ChangeFailure::first(
            None,
            None,
            "a.b",
            "update",
            &long,
            &long,
            FailureCause::TooLarge {
                size: Some(24_117_673),
                limit: Some(16_793_600),
            },
            Utc::now(),
        );
        assert_eq!(f.document_key.chars().count(), FAILURE_KEY_MAX_CHARS);
        assert_eq!(f.error.chars().count(), FAILURE_ERROR_MAX_CHARS);
        assert!(f.error.ends_with('…'));
    }
}
