//! Running listeners as tasks and stopping them.

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use super::{Handler, Listener, ListenerConfig, ListenerExit, ListenerObserver, ListenerSnapshot};
use crate::store::Store;

/// A listener running on its own task.
pub struct ListenerHandle {
    pub status: watch::Receiver<ListenerSnapshot>,
    shutdown: CancellationToken,
    task: JoinHandle<ListenerExit>,
}

impl ListenerHandle {
    pub fn spawn<S: Store, H: Handler>(store: S, config: ListenerConfig, handler: H) -> Self {
        let shutdown = CancellationToken::new();
        let listener = Listener::new(store, config, handler, shutdown.clone());
        Self::start(listener, shutdown)
    }

    /// [`ListenerHandle::spawn`] as one of `fleet`'s listeners: it hands its lease over
    /// at a batch boundary when the fleet's plan asks (docs/protocol.md, "Membership and
    /// balancing").
    pub fn spawn_in_fleet<S: Store, H: Handler>(
        store: S,
        config: ListenerConfig,
        handler: H,
        fleet: &super::Fleet,
    ) -> Self {
        Self::spawn_with(store, config, handler, None, Some(fleet))
    }

    /// [`ListenerHandle::spawn`], telling `observer` what happens (for Prometheus
    /// series: `metrics::EngineMetrics::observer`; docs/metrics.md).
    pub fn spawn_observed<S: Store, H: Handler>(
        store: S,
        config: ListenerConfig,
        handler: H,
        observer: Arc<dyn ListenerObserver>,
    ) -> Self {
        Self::spawn_with(store, config, handler, Some(observer), None)
    }

    /// [`ListenerHandle::spawn`], telling `observer` and as one of `fleet`'s listeners,
    /// each where given.
    pub fn spawn_with<S: Store, H: Handler>(
        store: S,
        config: ListenerConfig,
        handler: H,
        observer: Option<Arc<dyn ListenerObserver>>,
        fleet: Option<&super::Fleet>,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let mut listener = Listener::new(store, config, handler, shutdown.clone());
        if let Some(fleet) = fleet {
            listener = listener.with_fleet(fleet);
        }
        if let Some(observer) = observer {
            listener = listener.with_observer(observer);
        }
        Self::start(listener, shutdown)
    }

    fn start<S: Store, H: Handler>(listener: Listener<S, H>, shutdown: CancellationToken) -> Self {
        let status = listener.subscribe();
        let task = tokio::spawn(listener.run());
        Self {
            status,
            shutdown,
            task,
        }
    }

    pub fn snapshot(&self) -> ListenerSnapshot {
        self.status.borrow().clone()
    }

    /// Asks the listener to stop without waiting for it; see `stop`.
    pub fn request_stop(&self) {
        self.shutdown.cancel();
    }

    /// Graceful: finish the current batch, commit, release the lease.
    pub async fn stop(self) -> Option<ListenerExit> {
        self.shutdown.cancel();
        self.task.await.ok()
    }

    /// Waits for the listener to return by itself (it refused to start), without
    /// asking it to stop.
    pub async fn join(self) -> Option<ListenerExit> {
        self.task.await.ok()
    }

    /// A crash: the task dies where it is, without committing or releasing.
    pub fn crash(self) {
        self.task.abort();
    }
}
