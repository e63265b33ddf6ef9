//! What a listener tells as it goes, for whoever counts it. The engine knows nothing of
//! how it is counted: `metrics::EngineMetrics` keeps Prometheus series of it, and a
//! service may count it its own way. Every method has a default that does nothing.

use std::time::Duration;

use super::ListenerState;

/// Told by one listener as things happen: from its own task, between batches, except
/// [`ListenerObserver::state`], told from a task `Listener::run` starts beside it. Calls
/// must be cheap and never block.
pub trait ListenerObserver: Send + Sync + 'static {
    /// It acquired its lease, at fencing `version`.
    fn acquired(&self, _version: i64) {}

    /// It found its lease taken away (fenced out).
    fn lost_lock(&self) {}

    /// Its resume point was found off the history.
    fn history_lost(&self) {}

    /// A commit landed after `took`, covering `events` changes in `batches` handler
    /// calls (both 0 for a heartbeat).
    fn committed(&self, _took: Duration, _batches: usize, _events: usize) {}

    /// It failed on a change and recorded it on the lease, `attempts` in all so far.
    fn change_failed(&self, _attempts: u32) {}

    /// The lease records a failing change after `attempts` (0: none, or got past it).
    fn failure_attempts(&self, _attempts: u32) {}

    /// How far the point it handled is behind the cluster time its stream's latest
    /// reply carried. Asked for only where there is an observer: it decodes a token.
    fn lag(&self, _lag: Duration) {}

    /// Its state changed (also told once when it starts).
    fn state(&self, _state: ListenerState) {}
}
