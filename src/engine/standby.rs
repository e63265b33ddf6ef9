//! Standby: wait on the lease document (a change feed on it plus a timer at its
//! expiry) instead of polling, so a waiting listener costs a bounded number of
//! store calls however long it waits.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::ListenerConfig;
use crate::model::{Lease, LockKind};
use crate::store::{LeaseScope, LeaseStore, LeaseWatch, StoreResult};

pub enum Vacancy {
    /// The lease was released or expired (as far as we can tell): try to acquire.
    Maybe,
    Shutdown,
}

/// Maps server times onto the local monotonic clock, from one reading of the server's clock.
struct ServerClock {
    server: DateTime<Utc>,
    local: Instant,
}

impl ServerClock {
    fn local_instant(&self, server_time: DateTime<Utc>) -> Instant {
        match (server_time - self.server).to_std() {
            Ok(ahead) => self.local + ahead,
            Err(_) => self.local, // already in the past
        }
    }
}

/// When to try again for `lease`, or `None` to wait for a change only.
fn retry_at(
    lease: Option<&Lease>,
    config: &ListenerConfig,
    clock: &ServerClock,
) -> Option<Instant> {
    let floor = Instant::now() + min_retry_gap(config);
    let Some(lease) = lease else {
        return Some(floor);
    };
    // An incremental listener can never take a bulk lease, expired or not: only the
    // rebuild or an operator gives it back, and that arrives as a change.
    if lease.kind == LockKind::Bulk && config.kind == LockKind::Update {
        return None;
    }
    // An operator handed it to us by name (`takeover --to`): claim it now.
    if lease.holder.as_deref() == Some(config.listener_id.as_str()) {
        return Some(floor);
    }
    let expiry = match (&lease.holder, lease.expires_at) {
        (Some(_), Some(expires_at)) => clock.local_instant(expires_at),
        _ => Instant::now(),
    };
    Some(expiry.max(floor))
}

/// A small gap between attempts, so clock skew between us and the server cannot cause a spin.
fn min_retry_gap(config: &ListenerConfig) -> Duration {
    (config.lease / 20).max(Duration::from_millis(10))
}

/// Waits until the lease may be free. Store calls: one watch, one read, one clock read.
pub async fn wait_for_vacancy<S: LeaseStore>(
    store: &S,
    config: &ListenerConfig,
    shutdown: &CancellationToken,
) -> StoreResult<Vacancy> {
    let mut watch = store
        .watch(LeaseScope::One(config.resource.clone()))
        .await?;
    let lease = store.get(&config.resource).await?;
    let clock = ServerClock {
        server: store.server_now().await?,
        local: Instant::now(),
    };
    let mut deadline = retry_at(lease.as_ref(), config, &clock);
    loop {
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(Vacancy::Shutdown),
            change = watch.changed() => {
                let change = change?;
                deadline = retry_at(change.lease.as_ref(), config, &clock);
                if deadline.is_some_and(|d| d <= Instant::now() + min_retry_gap(config)) {
                    return Ok(Vacancy::Maybe);
                }
            }
            () = sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => return Ok(Vacancy::Maybe),
        }
    }
}
