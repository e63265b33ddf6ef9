//! Shared helpers for the sandbox-based integration tests.
// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use std::time::Duration;

use chrono::{TimeZone, Utc};
use streamward::engine::{ListenerConfig, ListenerHandle, ListenerState};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::Namespace;

/// A sandbox on a virtual clock; call from a test with `start_paused = true`.
pub fn sandbox(capacity: usize) -> SandboxStore {
    let epoch = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("valid date");
    SandboxStore::new(
        SandboxConfig {
            log_capacity: capacity,
            oplog_readable: true,
            record_history: true,
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

/// Polls `check` on the (virtual) clock until it holds, or panics after `limit`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn state(handle: &ListenerHandle) -> ListenerState {
    handle.snapshot().state
}
