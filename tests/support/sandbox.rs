//! Helpers for the sandbox-based integration tests.

use std::time::Duration;

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerState};
use streamward::model::Fence;
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::ChangeEvent;
use streamward::store::Namespace;
use tokio::sync::{mpsc, Notify};

/// A sandbox on a virtual clock; call from a test with `start_paused = true`.
pub fn sandbox(capacity: usize) -> SandboxStore {
    let epoch = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("valid date");
    SandboxStore::new(
        SandboxConfig {
            log_capacity: capacity,
            record_history: true,
            ..SandboxConfig::default()
        },
        Clock::virtual_from(epoch),
    )
}

pub fn config(resource: &str, listener: &str, watch: Namespace) -> ListenerConfig {
    let mut config = ListenerConfig::new(resource, listener, watch);
    config.lease = Duration::from_secs(10);
    config.max_batch_wait = Duration::from_millis(200);
    config.heartbeat = Duration::from_secs(2);
    config
}

pub fn state(handle: &ListenerHandle) -> ListenerState {
    handle.snapshot().state
}

/// Wraps a handler: before handling the first batch it reports and waits for a gate.
pub struct Paused<H> {
    pub inner: H,
    pub gate: Arc<Notify>,
    pub reached: mpsc::UnboundedSender<()>,
    pub armed: bool,
}

impl<H: Handler> Handler for Paused<H> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        if std::mem::take(&mut self.armed) {
            let _ = self.reached.send(());
            self.gate.notified().await;
        }
        self.inner.handle(events, fence).await
    }
}

/// Applies each batch, then reports and hangs: the process dies before it commits.
pub struct DiesBeforeCommit<H> {
    pub inner: H,
    pub applied: mpsc::UnboundedSender<()>,
}

impl<H: Handler> Handler for DiesBeforeCommit<H> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        self.inner.handle(events, fence).await?;
        let _ = self.applied.send(());
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// Every call made through the sandbox's ports so far: a listener that waits without
/// polling makes none.
pub fn store_calls(store: &SandboxStore) -> u64 {
    use std::sync::atomic::Ordering::Relaxed;
    let calls = store.calls();
    calls.lease_calls()
        + [
            &calls.open,
            &calls.next_batch,
            &calls.oplog_window,
            &calls.cluster_time,
            &calls.count_changes,
            &calls.documents,
        ]
        .iter()
        .map(|c| c.load(Relaxed))
        .sum::<u64>()
}
