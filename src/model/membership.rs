//! Process membership (docs/protocol.md, "Membership and balancing"): the document a
//! process keeps renewed on the server's clock while it runs, saying which listeners
//! (resources) it runs.

use chrono::{DateTime, Utc};

/// One listener a process runs: the resource and the listener id that holds its lease
/// when this process does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberListener {
    pub resource: String,
    pub listener: String,
}

/// A process as its membership document says, times by the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The document's `_id`: unique per running process.
    pub process: String,
    pub host: String,
    pub pid: u32,
    /// When this membership began: the first announce, or the first after it had expired.
    pub started_at: DateTime<Utc>,
    pub renewed_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// The listeners it runs, sorted by resource.
    pub listeners: Vec<MemberListener>,
}

impl Member {
    /// A member is live while `expiresAt > now` (the same rule as a lease's holder).
    pub fn is_live(&self, now: DateTime<Utc>) -> bool {
        self.expires_at > now
    }

    /// Whether one of its listeners is `listener`.
    pub fn runs_listener(&self, listener: &str) -> bool {
        self.listeners.iter().any(|l| l.listener == listener)
    }
}

/// What a process announces; the store adds the server's times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub process: String,
    pub host: String,
    pub pid: u32,
    pub listeners: Vec<MemberListener>,
}

/// The membership document's field names, spelled once.
pub mod member_field {
    pub const PROCESS: &str = "_id";
    pub const HOST: &str = "host";
    pub const PID: &str = "pid";
    pub const STARTED_AT: &str = "startedAt";
    pub const RENEWED_AT: &str = "renewedAt";
    pub const EXPIRES_AT: &str = "expiresAt";
    pub const LISTENERS: &str = "listeners";
    pub const RESOURCE: &str = "resource";
    pub const LISTENER_ID: &str = "listenerId";
}
