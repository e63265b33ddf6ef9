//! The whole demo in one process: a sandbox, several listeners per resource (so
//! standbys exist), and the workload.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::orders::{OrderOutbox, MAILER_RESOURCE, ORDERS_RESOURCE};
use super::pets::{PetAggregates, PET_RESOURCE};
use super::workload::{Workload, WorkloadConfig};
use super::{DemoNamespaces, DemoStore};
use crate::engine::{ListenerConfig, ListenerHandle};
use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use crate::store::StoreResult;

#[derive(Debug, Clone)]
pub struct DemoConfig {
    pub listeners_per_resource: usize,
    pub workload: WorkloadConfig,
    /// Changes the sandbox log keeps: small enough that the window visibly moves.
    pub log_capacity: usize,
    pub lease: Duration,
    /// Holders hand over after this long, so leases move between listeners.
    pub rotate_after: Option<Duration>,
    pub batch_size: u32,
    /// Runs the slow mailer resource with this delay per message (it falls behind).
    pub mailer_delay: Option<Duration>,
    /// Where the animals, orders and derived collections live.
    pub namespaces: DemoNamespaces,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            listeners_per_resource: 3,
            workload: WorkloadConfig::default(),
            log_capacity: 50_000,
            lease: Duration::from_secs(10),
            rotate_after: Some(Duration::from_secs(20)),
            batch_size: 1,
            mailer_delay: None,
            namespaces: DemoNamespaces::default(),
        }
    }
}

pub struct DemoRuntime<S = SandboxStore> {
    pub store: S,
    pub listeners: Vec<ListenerHandle>,
    shutdown: CancellationToken,
    /// `None` once [`DemoRuntime::stop_workload`] has collected it.
    workload: Option<JoinHandle<StoreResult<u64>>>,
}

/// The demo sandbox's log holds at most this much, like an oplog sized in megabytes,
/// so a demo left running all night stays within its memory.
pub const DEMO_LOG_BYTES: usize = 48 * 1024 * 1024;

impl DemoRuntime<SandboxStore> {
    /// Starts everything on a new sandbox on the wall clock. Must run inside a tokio runtime.
    pub fn start(config: &DemoConfig) -> Self {
        let store = SandboxStore::new(
            SandboxConfig {
                log_capacity: config.log_capacity,
                log_bytes: DEMO_LOG_BYTES,
                ..SandboxConfig::default()
            },
            Clock::System,
        );
        Self::start_on(store, config)
    }
}

impl<S: DemoStore> DemoRuntime<S> {
    /// Starts the listeners and the workload on `store` (the sandbox, or a cluster for
    /// `console --run`). Must run inside a tokio runtime.
    pub fn start_on(store: S, config: &DemoConfig) -> Self {
        let host = hostname();
        let ns = &config.namespaces;
        let mut listeners = Vec::new();
        for n in 1..=config.listeners_per_resource {
            let id = format!("{host}/{}-{n}", std::process::id());
            listeners.push(ListenerHandle::spawn(
                store.clone(),
                listener_config(
                    config,
                    PET_RESOURCE,
                    &format!("{id}-pets"),
                    ns.animals.clone(),
                ),
                PetAggregates::writing_to(store.clone(), ns.aggregates.clone()),
            ));
            listeners.push(ListenerHandle::spawn(
                store.clone(),
                listener_config(
                    config,
                    ORDERS_RESOURCE,
                    &format!("{id}-orders"),
                    ns.orders.clone(),
                ),
                OrderOutbox::writing_to(store.clone(), ns.outbox.clone()),
            ));
            if let Some(delay) = config.mailer_delay {
                listeners.push(ListenerHandle::spawn(
                    store.clone(),
                    listener_config(
                        config,
                        MAILER_RESOURCE,
                        &format!("{id}-mailer"),
                        ns.orders.clone(),
                    ),
                    OrderOutbox::mailer_writing_to(
                        store.clone(),
                        ns.orders.clone(),
                        ns.mails.clone(),
                        delay,
                    ),
                ));
            }
        }
        let shutdown = CancellationToken::new();
        let workload = tokio::spawn(
            Workload::writing_to(store.clone(), config.workload.clone(), ns.clone())
                .run(shutdown.clone()),
        );
        Self {
            store,
            listeners,
            shutdown,
            workload: Some(workload),
        }
    }

    /// Stops the workload and waits for its last write; the listeners go on, so they
    /// can catch up. Returns how many writes it made, or why it ended early (a store
    /// error ends the workload). `None` when it was already stopped.
    pub async fn stop_workload(&mut self) -> Option<Result<u64, String>> {
        self.shutdown.cancel();
        let workload = self.workload.take()?;
        Some(match workload.await {
            Ok(Ok(writes)) => Ok(writes),
            Ok(Err(e)) => Err(format!("the workload stopped on a store error: {e}")),
            Err(e) => Err(format!("the workload task ended abnormally: {e}")),
        })
    }

    /// Stops the workload, then every listener gracefully (each releases its lease).
    pub async fn stop(mut self) {
        let _ = self.stop_workload().await;
        // All at once, so no standby takes over a lease another listener just released.
        for listener in &self.listeners {
            listener.request_stop();
        }
        for listener in self.listeners {
            listener.stop().await;
        }
    }
}

fn listener_config(
    config: &DemoConfig,
    resource: &str,
    id: &str,
    watch: crate::store::Namespace,
) -> ListenerConfig {
    let mut c = ListenerConfig::new(resource, id, watch);
    c.lease = config.lease;
    c.max_tenure = config.rotate_after;
    c.batch_size = config.batch_size;
    c
}

fn hostname() -> String {
    whoami::hostname()
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LeaseStore;

    #[tokio::test]
    async fn stopping_releases_every_lease_without_handing_it_over() {
        let demo = DemoRuntime::start(&DemoConfig {
            rotate_after: None,
            ..DemoConfig::default()
        });
        let store = demo.store.clone();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let held = loop {
            let leases = store.list().await.unwrap().items;
            if leases.len() == 2 && leases.iter().all(|l| l.holder.is_some()) {
                break leases;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "both leases held: {leases:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        demo.stop().await;
        let released = store.list().await.unwrap().items;
        for (before, after) in held.iter().zip(&released) {
            assert_eq!(after.holder, None, "{} released", after.resource);
            assert_eq!(
                after.version, before.version,
                "nobody took {} over on the way out",
                after.resource
            );
        }
    }
}
