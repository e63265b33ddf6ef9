//! One change stream on the lease collection per store, shared by every lease watch in
//! the process (docs/protocol.md, "Standby"). A standby used to open its own stream on
//! its own lease; each waiting getMore holds a pooled connection, so a process with a
//! few dozen standbys starved its own renewals. Now the first watch opens the stream,
//! every later one subscribes to it, and events are routed to the watches of their
//! resource in the order the stream delivered them.
//!
//! The stream ends when its last watch is gone (looked at once per idle read), or on an
//! error: every watch then receives that error, and the next watch opens a new stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bson::{Bson, Document};
use mongodb::change_stream::ChangeStream;
use mongodb::options::FullDocumentType;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::codec::{lease_from_document, malformed_document};
use super::errors::{bounded, next_within};
use super::MongoStore;
use crate::model::StreamProfile;
use crate::store::{LeaseChange, LeaseScope, StoreError, StoreResult};

/// The server's default `maxAwaitTimeMS` for a change stream's getMore.
const LEASE_WATCH_AWAIT: Duration = Duration::from_secs(1);
const WATCH_ACTION: &str = "watch the leases";
/// Changes of one lease a watch may fall behind by before it reads the lease instead.
const ROUTE_CAPACITY: usize = 64;
/// Changes of all leases a watch on all may fall behind by before it is told so.
const ALL_CAPACITY: usize = 4096;
/// How often a busy stream looks whether anyone still watches.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// What the shared stream hands a watch: a change, or why the stream ended.
type Delivery = Result<LeaseChange, StoreError>;

/// The store's shared stream, when one is running.
#[derive(Debug, Default)]
pub(super) struct LeaseHub {
    /// Held while a stream is opened, so concurrent watches wait for that one.
    current: tokio::sync::Mutex<Current>,
    /// Opens that failed so far: a watch that waited behind a failed open gets its
    /// error instead of trying again itself, so a thousand standbys facing a server out
    /// of reach are told in one timeout, not in a thousand in a row.
    failed_opens: AtomicU64,
}

#[derive(Debug, Default)]
struct Current {
    routes: Option<Arc<Routes>>,
    last_failure: Option<StoreError>,
}

/// Where the running stream's changes go: per resource, and to watches on all leases.
#[derive(Debug)]
struct Routes {
    by_resource: Mutex<HashMap<String, broadcast::Sender<Delivery>>>,
    all: broadcast::Sender<Delivery>,
}

impl Routes {
    fn new() -> Self {
        Self {
            by_resource: Mutex::default(),
            all: broadcast::channel(ALL_CAPACITY).0,
        }
    }

    fn by_resource(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, broadcast::Sender<Delivery>>> {
        self.by_resource
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn subscribe(&self, scope: &LeaseScope) -> broadcast::Receiver<Delivery> {
        match scope {
            LeaseScope::All => self.all.subscribe(),
            LeaseScope::One(resource) => self
                .by_resource()
                .entry(resource.clone())
                .or_insert_with(|| broadcast::channel(ROUTE_CAPACITY).0)
                .subscribe(),
        }
    }

    fn route(&self, change: LeaseChange) {
        if self.all.receiver_count() > 0 {
            let _ = self.all.send(Ok(change.clone()));
        }
        let mut routes = self.by_resource();
        if let Some(route) = routes.get(&change.resource) {
            let resource = change.resource.clone();
            if route.send(Ok(change)).is_err() {
                // Its last watch is gone.
                routes.remove(&resource);
            }
        }
    }

    fn fail(&self, error: &StoreError) {
        let _ = self.all.send(Err(error.clone()));
        for route in self.by_resource().values() {
            let _ = route.send(Err(error.clone()));
        }
    }

    /// No watch left; routes whose watches are gone are dropped on the way.
    fn unwatched(&self) -> bool {
        let mut routes = self.by_resource();
        routes.retain(|_, route| route.receiver_count() > 0);
        routes.is_empty() && self.all.receiver_count() == 0
    }
}

impl LeaseHub {
    /// A watch of `scope` on the store's shared stream, opening the stream first when
    /// none runs. Returns once the stream is open, so every change after it is seen.
    pub(super) async fn watch(
        self: &Arc<Self>,
        store: &MongoStore,
        scope: LeaseScope,
    ) -> StoreResult<MongoLeaseWatch> {
        let failed_before = self.failed_opens.load(Ordering::SeqCst);
        let mut current = self.current.lock().await;
        let receiver = match current.routes.as_ref() {
            Some(routes) => routes.subscribe(&scope),
            None => {
                if self.failed_opens.load(Ordering::SeqCst) != failed_before {
                    if let Some(failure) = &current.last_failure {
                        return Err(failure.clone());
                    }
                }
                let stream = match store.open_lease_stream().await {
                    Ok(stream) => stream,
                    Err(failure) => {
                        current.last_failure = Some(failure.clone());
                        self.failed_opens.fetch_add(1, Ordering::SeqCst);
                        return Err(failure);
                    }
                };
                let routes = Arc::new(Routes::new());
                // Subscribed before the stream is read: its first batch is not missed.
                let receiver = routes.subscribe(&scope);
                current.routes = Some(Arc::clone(&routes));
                tokio::spawn(Arc::clone(self).run(stream, routes, store.lease_watch_bound()));
                receiver
            }
        };
        Ok(MongoLeaseWatch {
            receiver,
            scope,
            store: store.clone(),
        })
    }

    /// Reads the stream and routes its changes until no watch is left or it fails.
    async fn run(
        self: Arc<Self>,
        mut stream: ChangeStream<Document>,
        routes: Arc<Routes>,
        read_bound: Duration,
    ) {
        let mut checked = Instant::now();
        loop {
            // One getMore at a time, each bounded, so a server that stops answering is
            // reported instead of leaving every standby waiting forever.
            let next = next_within(&mut stream, read_bound, WATCH_ACTION).await;
            let read = match next {
                Ok(Some(event)) => lease_change(&event),
                Ok(None) if stream.is_alive() => Ok(None),
                Ok(None) => Err(StoreError::Closed),
                Err(e) => Err(e.into_store(WATCH_ACTION)),
            };
            let look = match read {
                Ok(Some(change)) => {
                    routes.route(change);
                    checked.elapsed() >= IDLE_CHECK
                }
                // An idle read: look now.
                Ok(None) => true,
                Err(error) => {
                    self.end(&routes).await;
                    routes.fail(&error);
                    return;
                }
            };
            if look {
                checked = Instant::now();
                // Watches subscribe under the lock, so none can slip in between.
                let mut current = self.current.lock().await;
                if routes.unwatched() {
                    clear_if_current(&mut current, &routes);
                    return;
                }
            }
        }
    }

    async fn end(&self, routes: &Arc<Routes>) {
        clear_if_current(&mut *self.current.lock().await, routes);
    }
}

fn clear_if_current(current: &mut Current, routes: &Arc<Routes>) {
    if current
        .routes
        .as_ref()
        .is_some_and(|c| Arc::ptr_eq(c, routes))
    {
        current.routes = None;
    }
}

/// The lease change an event is, `None` for events without a lease key (a drop, a
/// rename, a foreign document), `Err(Closed)` for an `invalidate`.
fn lease_change(event: &Document) -> StoreResult<Option<LeaseChange>> {
    if event.get_str("operationType") == Ok("invalidate") {
        return Err(StoreError::Closed);
    }
    let resource = match event.get_document("documentKey").map(|k| k.get("_id")) {
        Ok(Some(Bson::String(id))) => id.clone(),
        _ => return Ok(None),
    };
    let (lease, malformed) = match event.get("fullDocument") {
        Some(Bson::Document(document)) => match lease_from_document(document) {
            Ok(lease) => (Some(lease), None),
            Err(error) => (None, Some(malformed_document(document, error)?)),
        },
        _ => (None, None),
    };
    Ok(Some(LeaseChange {
        resource,
        lease,
        malformed,
    }))
}

impl MongoStore {
    /// The shared stream: every change of the lease collection, with the document after it.
    async fn open_lease_stream(&self) -> StoreResult<ChangeStream<Document>> {
        let pipeline = match self.profile {
            StreamProfile::MongoDb => vec![],
            // The pipeline Cosmos DB requires.
            StreamProfile::CosmosDb => super::cosmos::change_stream_pipeline(),
        };
        let leases = self.leases();
        let stream = bounded(self.timeout(), WATCH_ACTION, async {
            leases
                .watch()
                .pipeline(pipeline)
                .full_document(FullDocumentType::UpdateLookup)
                .await
        })
        .await
        .map_err(|e| e.into_store_hinted(WATCH_ACTION, &self.lease_hint()))?;
        Ok(stream.with_type::<Document>())
    }

    /// One getMore answers within the server's await time; past this it is not answering.
    fn lease_watch_bound(&self) -> Duration {
        self.timeout() + LEASE_WATCH_AWAIT
    }
}

/// Lease changes of one lease, or of all, from the store's shared stream.
pub struct MongoLeaseWatch {
    receiver: broadcast::Receiver<Delivery>,
    scope: LeaseScope,
    store: MongoStore,
}

impl crate::store::LeaseWatch for MongoLeaseWatch {
    async fn changed(&mut self) -> StoreResult<LeaseChange> {
        use crate::store::LeaseStore;
        match self.receiver.recv().await {
            Ok(delivery) => delivery,
            // Changes were missed: the lease as it is now says what they came to.
            Err(broadcast::error::RecvError::Lagged(missed)) => match &self.scope {
                LeaseScope::One(resource) => Ok(LeaseChange {
                    resource: resource.clone(),
                    lease: self.store.get(resource).await?,
                    malformed: None,
                }),
                LeaseScope::All => Err(StoreError::Network(format!(
                    "{WATCH_ACTION}: fell {missed} changes behind the lease stream; read the leases again"
                ))),
            },
            Err(broadcast::error::RecvError::Closed) => Err(StoreError::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn an_event_is_the_lease_change_of_its_key_or_nothing() {
        let event = doc! {
            "operationType": "update",
            "documentKey": { "_id": "shop.orders" },
            "fullDocument": { "_id": "shop.orders", "version": "seven" },
        };
        let change = lease_change(&event).unwrap().unwrap();
        assert_eq!(change.resource, "shop.orders");
        assert!(change.lease.is_none() && change.malformed.is_some());
        let deleted = doc! { "operationType": "delete", "documentKey": { "_id": "a" } };
        let change = lease_change(&deleted).unwrap().unwrap();
        assert_eq!((change.lease, change.malformed), (None, None));
        let drop = doc! { "operationType": "drop", "ns": { "db": "sw", "coll": "leases" } };
        assert_eq!(lease_change(&drop).unwrap(), None);
        let foreign = doc! { "operationType": "insert", "documentKey": { "_id": 7 } };
        assert_eq!(lease_change(&foreign).unwrap(), None);
        let invalidate = doc! { "operationType": "invalidate" };
        assert!(matches!(lease_change(&invalidate), Err(StoreError::Closed)));
    }

    fn change(resource: &str) -> LeaseChange {
        LeaseChange {
            resource: resource.into(),
            lease: None,
            malformed: None,
        }
    }

    #[test]
    fn changes_reach_the_watches_of_their_lease_and_those_of_all() {
        let routes = Routes::new();
        let mut a = routes.subscribe(&LeaseScope::One("a".into()));
        let mut all = routes.subscribe(&LeaseScope::All);
        routes.route(change("b"));
        routes.route(change("a"));
        assert_eq!(a.try_recv().unwrap().unwrap().resource, "a", "b is not a's");
        assert_eq!(all.try_recv().unwrap().unwrap().resource, "b");
        assert_eq!(all.try_recv().unwrap().unwrap().resource, "a");
        routes.fail(&StoreError::Closed);
        assert!(matches!(a.try_recv().unwrap(), Err(StoreError::Closed)));
        assert!(matches!(all.try_recv().unwrap(), Err(StoreError::Closed)));
    }

    #[test]
    fn a_stream_nobody_watches_any_more_is_unwatched() {
        let routes = Routes::new();
        let a = routes.subscribe(&LeaseScope::One("a".into()));
        let all = routes.subscribe(&LeaseScope::All);
        assert!(!routes.unwatched());
        drop(all);
        assert!(!routes.unwatched());
        drop(a);
        assert!(routes.unwatched());
        assert!(routes.by_resource().is_empty(), "its route is dropped");
    }
}
