//! What a running listener shows to the console: its state and counters.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::model::ClusterTime;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenerState {
    Starting,
    Standby,
    Acquiring,
    Streaming,
    Committing,
    /// The lease was taken away; the listener stopped processing and goes back to standby.
    LostLock,
    /// The resume point fell off the oplog: waits on its lease until an operator
    /// moves the resume point, then starts again.
    HistoryLost,
    /// The watched collection was dropped or renamed and the server closed the stream:
    /// waits on its lease like `HistoryLost`.
    Invalidated,
    /// The handler keeps failing on one change (recorded on the lease): the listener
    /// waits out its back-off before handing it again, holding the lease or not.
    Failing,
    /// Would not start (e.g. no oplog access for a lease with no resume point, and
    /// `ListenerConfig::bootstrap` not `Bootstrap::Now`).
    Refused,
    Stopped,
}

impl ListenerState {
    pub fn label(self) -> &'static str {
        match self {
            ListenerState::Starting => "starting",
            ListenerState::Standby => "standby",
            ListenerState::Acquiring => "acquiring",
            ListenerState::Streaming => "streaming",
            ListenerState::Committing => "committing",
            ListenerState::LostLock => "lost-lock",
            ListenerState::HistoryLost => "history-lost",
            ListenerState::Invalidated => "invalidated",
            ListenerState::Failing => "failing",
            ListenerState::Refused => "refused",
            ListenerState::Stopped => "stopped",
        }
    }

    /// Whether the listener has ended and will do nothing more.
    pub fn is_final(self) -> bool {
        matches!(self, ListenerState::Refused | ListenerState::Stopped)
    }
}

impl fmt::Display for ListenerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ListenerSnapshot {
    pub resource: String,
    pub listener_id: String,
    pub state: ListenerState,
    /// The fencing version while holding.
    pub version: Option<i64>,
    pub events: u64,
    pub batches: u64,
    pub last_batch_size: usize,
    pub events_per_sec: f64,
    pub commits: u64,
    /// How often this listener lost its lease (the `LostLock` state is brief: it
    /// goes straight back to acquiring, so count rather than watch for it).
    pub lost_locks: u64,
    pub last_committed: Option<ClusterTime>,
    pub last_error: Option<String>,
    /// The last change of the last batch whose commit landed, as the handler got it
    /// (moved out of the batch, not copied: the engine loop formats nothing for it;
    /// [`LastChange::of`] does, when it is shown).
    pub last_change: Option<std::sync::Arc<crate::store::ChangeEvent>>,
}

/// A handled change as the console shows it: its kind, collection, key and when.
#[derive(Debug, Clone, PartialEq)]
pub struct LastChange {
    pub operation: String,
    pub ns: String,
    /// The document key as relaxed extended JSON, at most
    /// [`crate::model::FAILURE_KEY_MAX_CHARS`] characters.
    pub key: String,
    /// `wallTime` where the server sent it (MongoDB 6.0+, the sandbox).
    pub wall_time: Option<chrono::DateTime<chrono::Utc>>,
    pub cluster_time: Option<ClusterTime>,
}

impl LastChange {
    pub fn of(event: &crate::store::ChangeEvent) -> Self {
        let key = bson::Bson::Document(event.document_key.clone())
            .into_relaxed_extjson()
            .to_string();
        Self {
            operation: event.operation.name().to_string(),
            ns: event.ns.to_string(),
            key: crate::model::text::clip(&key, crate::model::FAILURE_KEY_MAX_CHARS),
            wall_time: event.details.wall_time,
            cluster_time: event.cluster_time,
        }
    }
}

impl ListenerSnapshot {
    pub fn new(resource: &str, listener_id: &str) -> Self {
        Self {
            resource: resource.to_string(),
            listener_id: listener_id.to_string(),
            state: ListenerState::Starting,
            version: None,
            events: 0,
            batches: 0,
            last_batch_size: 0,
            events_per_sec: 0.0,
            commits: 0,
            lost_locks: 0,
            last_committed: None,
            last_error: None,
            last_change: None,
        }
    }
}

/// Events per second over windows of at least one second.
#[derive(Debug)]
pub struct RateMeter {
    window_start: Instant,
    events_in_window: u64,
    rate: f64,
}

impl RateMeter {
    const WINDOW: Duration = Duration::from_secs(1);

    pub fn new() -> Self {
        Self {
            window_start: Instant::now(),
            events_in_window: 0,
            rate: 0.0,
        }
    }

    /// Counts `events` and returns the latest full-window rate.
    pub fn record(&mut self, events: u64) -> f64 {
        self.events_in_window += events;
        let elapsed = self.window_start.elapsed();
        if elapsed >= Self::WINDOW {
            self.rate = self.events_in_window as f64 / elapsed.as_secs_f64();
            self.window_start = Instant::now();
            self.events_in_window = 0;
        }
        self.rate
    }
}

impl Default for RateMeter {
    fn default() -> Self {
        Self::new()
    }
}
