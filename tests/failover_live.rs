//! Real failovers and fail points on a real three-member replica set
//! (`STREAMWARD_TEST_URI_RS3`, started by `scripts/test.sh`), with real listeners
//! (`streamward::engine`) on `MongoStore`. Without the URI each test says it is skipped
//! and returns; under `CI=true` or `STREAMWARD_REQUIRE_LIVE=1` it fails instead.
//!
//! What is checked is the downstream, not the engine's bookkeeping: every order the
//! application inserted has exactly one outbox message (keyed by the change's resume
//! token, lease-fenced) whose `_fence` is the newest version that wrote it, and one
//! projection written once (source-version fence). Each test prints what the listeners
//! showed (state, version, last error) and what each fault did, for the closing notes.
//!
//! The tests share one replica set and stop or step down its members, so they run one
//! at a time (`SERIAL`), and each starts from the same place: every member running, no
//! fail point, the first member primary and every member caught up.
//!
//! What the driver does here, since the adapter builds its client with
//! `retryWrites=false` and `retryReads=false` (docs/protocol.md §13), and what the
//! listeners showed on MongoDB 6.0.5 (each test prints its timeline):
//! - No command is retried by the driver. The adapter retries once after a network
//!   error or a not-primary code, never after a write-concern error or its own time
//!   limit. A `closeConnection` or a 10107 once on the acquire or the commit is absorbed
//!   by that retry: no error shown, same version. Twice: the call fails (`Network`
//!   "unexpected end of file"); a failed commit releases, the next tenure (version + 1)
//!   gets the batch again, and the lease-fenced message is rewritten in place.
//! - A `writeConcernError` (64, 91, 100) comes with the write applied: a failed acquire
//!   is followed by one that refreshes the same version; a failed commit releases, and
//!   the next tenure resumes after the batch (the commit landed), so nothing is
//!   delivered twice. A 91 also marks the server unknown and clears its pool: with the
//!   streaming heartbeat the driver selects no primary for about 10 s.
//! - An open change stream is resumed by the driver on a network error or a server error
//!   labelled `ResumableChangeStreamError`, inside one `next_if_any`: the listener sees
//!   nothing. A `failCommand` error code carries no label unless the fail point adds
//!   it, so an unlabelled 11602 on `getMore` ends the tenure (version + 1) instead.
//!   Opening the stream is not retried: a failed `aggregate` ends the tenure.
//! - `replSetStepDown` (election handoff, a new primary within about 50 ms) and
//!   `replSetStepUp` are mostly absorbed by the one retry and the stream resume: no
//!   error, no new version, nothing delivered twice. In about half of the runs a
//!   commit or handler write was caught by an election: as `writeErrors` 189 "Not
//!   primary while writing" (not applied; now retried once, like the command error) or
//!   as a `writeConcernError` 11602 "operation was interrupted" (applied, not retried).
//!   The latter ends the tenure: the next version resumes after the last commit that
//!   landed, so a handler write's batch is delivered again and its message rewritten
//!   in place, a commit's batch is not.
//! - A primary stopped with SIGSTOP: a new one after the election timeout (11–21 s
//!   here); reads and writes to the old one end at the adapter's bounds ("no reply
//!   within …"), and whichever listener acquires first on the new primary holds the
//!   lease (the old holder keeps its version, or the standby takes the next one).
//! - Both secondaries stopped: majority writes end with `writeConcernError` 64 after
//!   `wtimeout`, applied on the primary only (a local read shows them, a majority read
//!   does not); no commit reports success; once the secondaries continue, those writes
//!   become majority-committed and the listeners go on from there.

#[path = "support/failpoint.rs"]
mod failpoint;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document};
use failpoint::{with_app_name, FailPoint, ReplicaSet, Stopped, RS3_URI_VAR};
use mongodb::options::{Acknowledgment, ReadConcern, WriteConcern};
use streamward::demo::orders::message_id;
use streamward::engine::fenced::{write_with_lease_fence, write_with_source_version, Applied};
use streamward::engine::{
    Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerSnapshot, ListenerState,
};
use streamward::model::{AuditState, Fence, Lease};
use streamward::ops::{self, ActionRequest, GatherOptions};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{AuditLog, ChangeEvent, DocumentStore, LeaseStore, Namespace, StoreError};
use support::live::live_uri;
use tokio::time::Instant;

/// Leases as short as the other live suites use, so a lost lease is taken over in seconds.
const LEASE: Duration = Duration::from_secs(2);
/// The adapter's per-call bound and write-concern `wtimeout` in these tests (default 10 s):
/// shorter than the 10 s after which a primary that sees no majority steps down.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(3);
/// Bounds every wait for the listeners to catch up.
const PATIENCE: Duration = Duration::from_secs(60);

/// One test at a time on the shared replica set (each test has its own runtime; a
/// tokio mutex works across runtimes and is not poisoned by a failed test).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------- harness

/// One test's view of the replica set: its own database, and clients named by role so
/// a fail point (`appName`) can pick one client's commands.
#[derive(Clone)]
struct Rig {
    set: Arc<ReplicaSet>,
    db: String,
    tag: String,
    /// For the checks: reads of the downstream, the leases and the audit log.
    check: MongoStore,
    app: mongodb::Client,
}

impl Rig {
    fn app_name(&self, role: &str) -> String {
        format!("sw-fo-{}-{role}", self.tag)
    }

    /// A store whose client is named `role`, with this suite's timeouts.
    async fn store(&self, role: &str) -> MongoStore {
        let mut settings = MongoSettings::new(with_app_name(&self.set.uri, &self.app_name(role)));
        settings.leases = Namespace::new(self.db.clone(), "leases");
        settings.operation_timeout = OPERATION_TIMEOUT;
        settings.server_selection_timeout = Duration::from_secs(3);
        MongoStore::connect(settings).await.expect("connect")
    }

    fn ns(&self, coll: &str) -> Namespace {
        Namespace::new(self.db.clone(), coll)
    }

    fn config(&self, resource: &str, listener: &str, watch: &str) -> ListenerConfig {
        let mut config = ListenerConfig::new(resource, listener, self.ns(watch));
        config.lease = LEASE;
        config.max_batch_wait = Duration::from_millis(200);
        config.heartbeat = Duration::from_secs(1);
        config.retry_backoff = Duration::from_millis(200);
        config
    }

    /// The application inserts order `id` into `coll` (majority), trying again until the
    /// server has it: an insert is acknowledged exactly once here, however the set fails.
    async fn insert(&self, coll: &str, id: &str, w: Acknowledgment) {
        let orders = self.app.database(&self.db).collection::<Document>(coll);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let attempt = orders
                .insert_one(doc! { "_id": id, "status": "placed", "v": 1_i64 })
                .write_concern(WriteConcern::builder().w(w.clone()).build());
            match tokio::time::timeout(Duration::from_secs(10), attempt).await {
                Ok(Ok(_)) => return,
                Ok(Err(e)) if e.to_string().contains("E11000") => return,
                Ok(Err(e)) => println!("  app: insert {id} failed, trying again: {e}"),
                Err(_) => println!("  app: insert {id} had no reply in 10 s, trying again"),
            }
            assert!(
                Instant::now() < deadline,
                "the application could not insert {id}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Listener `name` on the orders, followed by `timeline`, once it is `state`.
    async fn listener(
        &self,
        sink: &Sink,
        timeline: &Timeline,
        name: &str,
        state: ListenerState,
    ) -> ListenerHandle {
        let listener = ListenerHandle::spawn(
            self.store(name).await,
            self.config("orders", name, "orders"),
            sink.handler(self, name, None).await,
        );
        timeline.follow(&listener);
        support::wait::eventually_async(PATIENCE, &format!("{name} is {state:?}"), || async {
            listener.snapshot().state == state
        })
        .await;
        listener
    }

    async fn lease(&self, resource: &str) -> Lease {
        self.check
            .get(resource)
            .await
            .expect("read the lease")
            .expect("the lease exists")
    }
}

/// Runs `body` on the three-member set, in its own database, one test at a time; puts
/// the set back (members continued, fail points off, first member primary) before and
/// after, and drops the database, also when the body panics.
async fn rs3<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Rig) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let _serial = SERIAL.lock().await;
    let Some(uri) = live_uri(test, RS3_URI_VAR) else {
        return;
    };
    let started = Instant::now();
    let set = Arc::new(ReplicaSet::connect(&uri).await);
    set.restore().await;
    let tag: String = test.chars().take(12).collect();
    let db = format!("sw_fo_{tag}_{:08x}", rand::random::<u32>());
    let mut settings = MongoSettings::new(with_app_name(&uri, &format!("sw-fo-{tag}-check")));
    settings.leases = Namespace::new(db.clone(), "leases");
    let check = MongoStore::connect(settings).await.expect("connect");
    let app = mongodb::Client::with_uri_str(with_app_name(&uri, &format!("sw-fo-{tag}-app")))
        .await
        .expect("the application's client");
    let rig = Rig {
        set: set.clone(),
        db: db.clone(),
        tag,
        check: check.clone(),
        app,
    };
    println!("== {test}: {}", set.uri);
    let outcome = tokio::spawn(body(rig)).await;
    set.restore().await;
    let dropped = check.client().database(&db).drop().await;
    println!("== {test}: {:.1} s", started.elapsed().as_secs_f64());
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
    dropped.expect("drop the test database");
}

// ---------------------------------------------------------------- what the listeners show

/// Every distinct (state, version, last error) a listener showed, with the time since
/// the test's clock started. A reader sees states, not every transition
/// (docs/architecture.md §5), so brief states may be missing.
#[derive(Clone)]
struct Timeline {
    start: Instant,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Timeline {
    fn new() -> Timeline {
        Timeline {
            start: Instant::now(),
            lines: Arc::default(),
        }
    }

    fn note(&self, line: impl Into<String>) {
        let line = format!(
            "{:7.2}s  {}",
            self.start.elapsed().as_secs_f64(),
            line.into()
        );
        self.lines.lock().unwrap().push(line);
    }

    /// Follows one listener's snapshots until it ends.
    fn follow(&self, handle: &ListenerHandle) {
        let mut status = handle.status.clone();
        let timeline = self.clone();
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let s: ListenerSnapshot = status.borrow_and_update().clone();
                // Committing and back to streaming after every batch is not news.
                let state = match s.state {
                    ListenerState::Committing => ListenerState::Streaming,
                    other => other,
                };
                let seen = (state, s.version, s.last_error.clone(), s.lost_locks);
                if last.as_ref() != Some(&seen) {
                    timeline.note(format!(
                        "{} {} v{} lost_locks={} commits={}{}",
                        s.listener_id,
                        state,
                        s.version.map_or("-".into(), |v| v.to_string()),
                        s.lost_locks,
                        s.commits,
                        s.last_error
                            .as_deref()
                            .map(|e| format!(" last_error: {e}"))
                            .unwrap_or_default()
                    ));
                    last = Some(seen);
                }
                if status.changed().await.is_err() {
                    break;
                }
            }
        });
    }

    fn print(&self) {
        for line in self.lines.lock().unwrap().iter() {
            println!("  {line}");
        }
    }
}

// ---------------------------------------------------------------- the downstream

/// What one handler write did.
#[derive(Debug, Clone)]
struct Delivery {
    listener: String,
    version: i64,
    order: String,
    message: String,
    /// The lease-fenced outbox write landed (`Ok`), or why not.
    outbox: Result<(), String>,
    /// The source-versioned projection write, when the outbox write landed.
    projection: Option<Result<Applied, String>>,
}

/// Called with each order a handler has just handled, before it returns.
type Hook = Arc<dyn Fn(&str) + Send + Sync>;

/// An outbox per change (id `order@token`, lease fence) and a projection per order
/// (source version `v`), written through the handler's own client; every write is
/// logged with the version it carried.
#[derive(Clone)]
struct Downstream {
    store: MongoStore,
    outbox: Namespace,
    projection: Namespace,
    listener: String,
    log: Arc<Mutex<Vec<Delivery>>>,
    hook: Option<Hook>,
}

impl Handler for Downstream {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            let order = event
                .document_key
                .get_str("_id")
                .unwrap_or_default()
                .to_string();
            let message = message_id(event);
            let mut delivery = Delivery {
                listener: self.listener.clone(),
                version: fence.version,
                order: order.clone(),
                message: message.clone(),
                outbox: Ok(()),
                projection: None,
            };
            let written = write_with_lease_fence(
                &self.store,
                &self.outbox,
                &Bson::String(message),
                fence,
                doc! { "order": &order, "by": &self.listener },
            )
            .await;
            if let Err(e) = written {
                delivery.outbox = Err(e.to_string());
                self.log.lock().unwrap().push(delivery);
                return Err(e);
            }
            let projected = write_with_source_version(
                &self.store,
                &self.projection,
                &Bson::String(order.clone()),
                1,
                doc! { "status": "placed", "by": &self.listener, "version": fence.version },
            )
            .await;
            delivery.projection = Some(projected.as_ref().map(|a| *a).map_err(|e| e.to_string()));
            self.log.lock().unwrap().push(delivery);
            projected?;
            if let Some(hook) = &self.hook {
                hook(&order);
            }
        }
        Ok(())
    }
}

/// The downstream of one resource: its collections and the log shared by its handlers.
#[derive(Clone)]
struct Sink {
    outbox: Namespace,
    projection: Namespace,
    log: Arc<Mutex<Vec<Delivery>>>,
}

impl Sink {
    fn new(rig: &Rig, name: &str) -> Sink {
        Sink {
            outbox: rig.ns(&format!("{name}_outbox")),
            projection: rig.ns(&format!("{name}_projection")),
            log: Arc::default(),
        }
    }

    async fn handler(&self, rig: &Rig, listener: &str, hook: Option<Hook>) -> Downstream {
        Downstream {
            store: rig.store(&format!("h{listener}")).await,
            outbox: self.outbox.clone(),
            projection: self.projection.clone(),
            listener: listener.into(),
            log: self.log.clone(),
            hook,
        }
    }

    async fn messages(&self, rig: &Rig) -> Vec<Document> {
        rig.check
            .find_all(&self.outbox)
            .await
            .expect("read the outbox")
    }

    /// Whether every order in `orders` has its message.
    async fn has_all(&self, rig: &Rig, orders: &[String]) -> bool {
        let Ok(messages) = rig.check.find_all(&self.outbox).await else {
            return false;
        };
        let seen: BTreeSet<&str> = messages
            .iter()
            .filter_map(|m| m.get_str("order").ok())
            .collect();
        orders.iter().all(|o| seen.contains(o.as_str()))
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.log.lock().unwrap().clone()
    }

    /// The checks every test ends with; returns a summary line.
    async fn verify(&self, rig: &Rig, orders: &[String]) -> String {
        let log = self.deliveries();
        let messages = self.messages(rig).await;
        // No change lost, none published twice: one message per order, none other.
        let mut per_order: BTreeMap<String, Vec<&Document>> = BTreeMap::new();
        for m in &messages {
            per_order
                .entry(m.get_str("order").unwrap_or_default().to_string())
                .or_default()
                .push(m);
        }
        let expected: BTreeSet<&String> = orders.iter().collect();
        let found: BTreeSet<&String> = per_order.keys().collect();
        assert_eq!(
            found, expected,
            "the outbox holds exactly the inserted orders"
        );
        for (order, ms) in &per_order {
            assert_eq!(ms.len(), 1, "one message for order {order}: {ms:?}");
        }
        // The last write to each message is the newest version's: a fenced-out holder
        // never overwrote a newer holder's message.
        for m in &messages {
            let id = m.get_str("_id").unwrap();
            let newest = log
                .iter()
                .filter(|d| d.message == id && d.outbox.is_ok())
                .map(|d| d.version)
                .max();
            assert_eq!(
                m.get_i64("_fence").ok(),
                newest,
                "message {id} carries the newest version that wrote it: {m:?}"
            );
        }
        // One projection per order, applied by exactly one write (a retried write whose
        // first attempt landed reads as already applied, hence at most one).
        let projections = rig
            .check
            .find_all(&self.projection)
            .await
            .expect("read the projection");
        let projected: BTreeSet<String> = projections
            .iter()
            .map(|p| p.get_str("_id").unwrap().to_string())
            .collect();
        assert_eq!(projected, orders.iter().cloned().collect::<BTreeSet<_>>());
        assert!(projections.iter().all(|p| p.get_i64("_v") == Ok(1)));
        let mut applied: BTreeMap<&str, usize> = BTreeMap::new();
        let mut handled: BTreeMap<&str, usize> = BTreeMap::new();
        for d in &log {
            *handled.entry(d.order.as_str()).or_default() += 1;
            if matches!(d.projection, Some(Ok(Applied::Yes))) {
                *applied.entry(d.order.as_str()).or_default() += 1;
            }
        }
        for (order, n) in &applied {
            assert!(*n <= 1, "order {order} applied {n} times");
        }
        let redelivered: Vec<String> = handled
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(o, n)| format!("{o}×{n}"))
            .collect();
        let fenced: Vec<String> = log
            .iter()
            .filter(|d| d.outbox.is_err() || matches!(d.projection, Some(Err(_))))
            .map(|d| {
                format!(
                    "{} v{} {}: {}",
                    d.listener,
                    d.version,
                    d.order,
                    d.outbox
                        .clone()
                        .err()
                        .or_else(|| d.projection.clone().and_then(Result::err))
                        .unwrap_or_default()
                )
            })
            .collect();
        let versions: BTreeSet<(String, i64)> = log
            .iter()
            .map(|d| (d.listener.clone(), d.version))
            .collect();
        format!(
            "{} orders, {} messages, {} handler writes; handled more than once: {:?}; \
             refused or failed handler writes: {:?}; (listener, version) that wrote: {:?}",
            orders.len(),
            messages.len(),
            log.len(),
            redelivered,
            fenced,
            versions
        )
    }
}

fn order_ids(prefix: &str, range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i:03}")).collect()
}

// ---------------------------------------------------------------- a. elections

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stepped_down_primary_loses_no_change_and_applies_none_twice() {
    rs3("stepdown", |rig| async move {
        let sink = Sink::new(&rig, "orders");
        let timeline = Timeline::new();
        let a = rig
            .listener(&sink, &timeline, "a", ListenerState::Streaming)
            .await;
        let b = rig
            .listener(&sink, &timeline, "b", ListenerState::Standby)
            .await;

        // The application writes all along, one order every 40 ms.
        let orders = order_ids("o", 1..=120);
        let writer = {
            let rig = rig.clone();
            let orders = orders.clone();
            tokio::spawn(async move {
                for id in &orders {
                    rig.insert("orders", id, Acknowledgment::Majority).await;
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
            })
        };
        support::wait::eventually_async(PATIENCE, "the first orders are handled", || async {
            sink.has_all(&rig, &orders[..10]).await
        })
        .await;

        // First election: the primary steps down while the holder streams and commits.
        let primary = rig.set.wait_for_primary(PATIENCE).await;
        timeline.note(format!("replSetStepDown on {}", rig.set.hosts[primary]));
        let reply = rig.set.step_down(primary, 30).await;
        timeline.note(format!("replSetStepDown replied: {reply:?}"));
        let elected = Instant::now();
        let new_primary = rig.set.wait_for_primary(PATIENCE).await;
        timeline.note(format!(
            "new primary {} after {:.2} s",
            rig.set.hosts[new_primary],
            elected.elapsed().as_secs_f64()
        ));
        assert_ne!(new_primary, primary);

        // Second election, two seconds on: the first member stands up again.
        tokio::time::sleep(Duration::from_secs(2)).await;
        rig.set
            .admin(primary, doc! { "replSetFreeze": 0 })
            .await
            .unwrap();
        let up = rig.set.admin(primary, doc! { "replSetStepUp": 1 }).await;
        timeline.note(format!(
            "replSetStepUp on {}: {up:?}",
            rig.set.hosts[primary]
        ));
        let back = rig.set.wait_for_primary(PATIENCE).await;
        timeline.note(format!("primary now {}", rig.set.hosts[back]));

        writer.await.unwrap();
        timeline.note("the application inserted every order");
        support::wait::eventually_async(PATIENCE, "every order is handled", || async {
            sink.has_all(&rig, &orders).await
        })
        .await;
        let holder = rig.lease("orders").await;
        timeline.note(format!(
            "lease: holder {:?} version {}",
            holder.holder, holder.version
        ));
        let running = [a.snapshot(), b.snapshot()];
        assert!(
            running.iter().any(|s| s.state == ListenerState::Streaming
                && Some(s.listener_id.as_str()) == holder.holder.as_deref()),
            "the holder streams after the elections: {running:?}"
        );
        a.stop().await;
        b.stop().await;
        let summary = sink.verify(&rig, &orders).await;
        timeline.print();
        println!("  downstream: {summary}");
    })
    .await;
}

/// The primary stops answering (SIGSTOP: a partition, not a polite step-down). The
/// secondaries elect a new primary once the election timeout (10 s) has passed, longer
/// than the lease, so the lease has expired by the new primary's clock when it takes
/// writes, and whichever listener acquires first holds the next version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_stops_answering_is_replaced_and_nothing_is_lost_or_applied_twice() {
    rs3("partition", |rig| async move {
        let sink = Sink::new(&rig, "orders");
        let timeline = Timeline::new();
        let a = rig
            .listener(&sink, &timeline, "a", ListenerState::Streaming)
            .await;
        let b = rig
            .listener(&sink, &timeline, "b", ListenerState::Standby)
            .await;

        let orders = order_ids("o", 1..=60);
        let writer = {
            let rig = rig.clone();
            let orders = orders.clone();
            tokio::spawn(async move {
                for id in &orders {
                    rig.insert("orders", id, Acknowledgment::Majority).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        support::wait::eventually_async(PATIENCE, "the first orders are handled", || async {
            sink.has_all(&rig, &orders[..10]).await
        })
        .await;

        let old = rig.set.wait_for_primary(PATIENCE).await;
        let stopped = rig.set.stop(&[old]);
        let cut = Instant::now();
        timeline.note(format!(
            "stopped the primary {} (SIGSTOP)",
            rig.set.hosts[old]
        ));
        let new = rig.set.wait_for_primary(PATIENCE).await;
        timeline.note(format!(
            "new primary {} after {:.1} s",
            rig.set.hosts[new],
            cut.elapsed().as_secs_f64()
        ));
        assert_ne!(new, old);
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(stopped);
        timeline.note(format!("continued {}", rig.set.hosts[old]));

        writer.await.unwrap();
        timeline.note("the application inserted every order");
        support::wait::eventually_async(PATIENCE, "every order is handled", || async {
            sink.has_all(&rig, &orders).await
        })
        .await;
        let lease = rig.lease("orders").await;
        timeline.note(format!(
            "lease: holder {:?} version {}",
            lease.holder, lease.version
        ));
        let running = [a.snapshot(), b.snapshot()];
        assert!(
            running.iter().any(|s| s.state == ListenerState::Streaming
                && Some(s.listener_id.as_str()) == lease.holder.as_deref()),
            "the holder streams after the election: {running:?}"
        );
        a.stop().await;
        b.stop().await;
        let summary = sink.verify(&rig, &orders).await;
        timeline.print();
        println!("  downstream: {summary}");
    })
    .await;
}

// ---------------------------------------------------------------- b. no majority

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_majority_no_commit_succeeds_and_nothing_is_lost_or_applied_twice() {
    rs3("nomajority", |rig| async move {
        let sink = Sink::new(&rig, "orders");
        let timeline = Timeline::new();
        let primary = rig.set.wait_for_primary(PATIENCE).await;
        let secondaries: Vec<usize> = (0..rig.set.hosts.len()).filter(|&i| i != primary).collect();

        // Right after a handler has handled o005 (its writes majority-acknowledged), both
        // secondaries stop: the commit of o005 is the first write without a majority.
        let stopped: Arc<Mutex<Option<Stopped>>> = Arc::default();
        let armed = Arc::new(AtomicBool::new(true));
        let hook: Hook = {
            let stopped = stopped.clone();
            let armed = armed.clone();
            let pids = rig.set.pids(&secondaries);
            Arc::new(move |order: &str| {
                if order == "o005" && armed.swap(false, Ordering::SeqCst) {
                    *stopped.lock().unwrap() = Some(Stopped::new(pids.clone()));
                }
            })
        };
        // A lease of our own, to show what one commit call says without a majority.
        let probe_store = rig.store("probe").await;
        let probe = probe_store
            .acquire(&streamward::store::AcquireRequest {
                resource: "probe".into(),
                listener: "probe".into(),
                kind: streamward::model::LockKind::Update,
                lease: Duration::from_secs(60),
                watch: None,
                seen_version: None,
            })
            .await
            .unwrap();
        let streamward::store::AcquireOutcome::Acquired(probe) = probe else {
            panic!("the probe lease is free");
        };
        let probe_tenure = streamward::store::Tenure::of(&probe).unwrap();

        let a = ListenerHandle::spawn(
            rig.store("a").await,
            rig.config("orders", "a", "orders"),
            sink.handler(&rig, "a", Some(hook.clone())).await,
        );
        timeline.follow(&a);
        support::wait::eventually_async(PATIENCE, "a streams", || async {
            a.snapshot().state == ListenerState::Streaming
        })
        .await;
        let b = ListenerHandle::spawn(
            rig.store("b").await,
            rig.config("orders", "b", "orders"),
            sink.handler(&rig, "b", Some(hook)).await,
        );
        timeline.follow(&b);
        support::wait::eventually_async(PATIENCE, "b stands by", || async {
            b.snapshot().state == ListenerState::Standby
        })
        .await;

        let orders = order_ids("o", 1..=10);
        for id in &orders[..5] {
            rig.insert("orders", id, Acknowledgment::Majority).await;
        }
        support::wait::eventually_async(
            PATIENCE,
            "the secondaries are stopped after o005",
            || async { stopped.lock().unwrap().is_some() },
        )
        .await;
        let outage = Instant::now();
        timeline.note(format!(
            "stopped {:?} (SIGSTOP): no majority",
            secondaries
                .iter()
                .map(|&i| &rig.set.hosts[i])
                .collect::<Vec<_>>()
        ));
        let commits_before = (a.snapshot().commits, b.snapshot().commits);
        let committed_before = (a.snapshot().last_committed, b.snapshot().last_committed);

        // The application still writes o006, acknowledged by the primary alone.
        rig.insert("orders", &orders[5], Acknowledgment::Nodes(1))
            .await;
        timeline.note("the application inserted o006 with w: 1");

        // One commit call without a majority, on the probe's own lease.
        let token_doc = rig.lease("orders").await.resume_token;
        let called = Instant::now();
        let probe_commit = match token_doc {
            Some(token) => Some(probe_store.commit(&probe_tenure, &token, LEASE).await),
            None => None,
        };
        timeline.note(format!(
            "LeaseStore::commit without a majority, after {:.2} s: {probe_commit:?}",
            called.elapsed().as_secs_f64()
        ));
        // Not success, and not a lost reply either: the server's own answer, which says
        // the write is on the primary but not confirmed (the client waits past wtimeout).
        assert!(
            matches!(
                &probe_commit,
                Some(Err(StoreError::WriteConcern(m))) if m.contains("(code 64)")
            ),
            "a commit without a majority: {probe_commit:?}"
        );

        // What the primary holds (read concern local) and what a majority holds.
        let member = rig.set.member(primary);
        let leases = member.database(&rig.db).collection::<Document>("leases");
        let local = leases.find_one(doc! { "_id": "orders" }).await.unwrap();
        let majority = leases
            .find_one(doc! { "_id": "orders" })
            .read_concern(ReadConcern::majority())
            .await
            .unwrap();
        let summary = |d: &Option<Document>| {
            d.as_ref().map(|d| {
                format!(
                    "listenerId {:?} version {:?} resumeToken {:?}",
                    d.get("listenerId"),
                    d.get("version"),
                    d.get_document("resumeToken")
                        .ok()
                        .and_then(|t| t.get_str("_data").ok())
                )
            })
        };
        timeline.note(format!(
            "lease on the primary (local): {:?}",
            summary(&local)
        ));
        timeline.note(format!(
            "lease on the primary (majority): {:?}",
            summary(&majority)
        ));

        // Keep the majority away for 7 s in all: less than the 10 s after which the
        // primary steps down, so this is the outage alone, not an election.
        tokio::time::sleep(Duration::from_secs(7).saturating_sub(outage.elapsed())).await;
        let commits_during = (a.snapshot().commits, b.snapshot().commits);
        let committed_during = (a.snapshot().last_committed, b.snapshot().last_committed);
        assert_eq!(
            commits_during, commits_before,
            "no commit reported success without a majority"
        );
        assert_eq!(committed_during, committed_before);
        drop(stopped.lock().unwrap().take());
        timeline.note(format!(
            "continued the secondaries after {:.1} s",
            outage.elapsed().as_secs_f64()
        ));

        for id in &orders[6..] {
            rig.insert("orders", id, Acknowledgment::Majority).await;
        }
        support::wait::eventually_async(PATIENCE, "every order is handled", || async {
            sink.has_all(&rig, &orders).await
        })
        .await;
        let lease = rig.lease("orders").await;
        timeline.note(format!(
            "lease: holder {:?} version {}; primary {:?}",
            lease.holder,
            lease.version,
            rig.set.primary().await.map(|i| &rig.set.hosts[i])
        ));
        a.stop().await;
        b.stop().await;
        let summary = sink.verify(&rig, &orders).await;
        timeline.print();
        println!("  downstream: {summary}");
    })
    .await;
}

// ---------------------------------------------------------------- c. fail points

/// One `failCommand` configuration, without the command and client it applies to.
struct Fault {
    name: &'static str,
    times: i64,
    data: Document,
}

fn write_faults() -> Vec<Fault> {
    vec![
        Fault {
            name: "closeConnection, once",
            times: 1,
            data: doc! { "closeConnection": true },
        },
        Fault {
            name: "closeConnection, twice",
            times: 2,
            data: doc! { "closeConnection": true },
        },
        Fault {
            name: "errorCode 10107 NotWritablePrimary, once",
            times: 1,
            data: doc! { "errorCode": 10107 },
        },
        // The shapes a real 6.0.5 sends: wtimeout (both secondaries stopped) …
        Fault {
            name: "writeConcernError 64 WriteConcernFailed (wtimeout)",
            times: 1,
            data: doc! { "writeConcernError": {
                "code": 64, "codeName": "WriteConcernFailed",
                "errmsg": "waiting for replication timed out",
                "errInfo": { "wtimeout": true },
            } },
        },
        // … shutdown while waiting for replication …
        Fault {
            name: "writeConcernError 91 ShutdownInProgress",
            times: 1,
            data: doc! { "writeConcernError": {
                "code": 91, "codeName": "ShutdownInProgress",
                "errmsg": "Replication is being shut down",
            } },
        },
        // … and a write concern the set cannot satisfy (w: 4 on three members).
        Fault {
            name: "writeConcernError 100 UnsatisfiableWriteConcern",
            times: 1,
            data: doc! { "writeConcernError": {
                "code": 100, "codeName": "UnsatisfiableWriteConcern",
                "errmsg": "Not enough data-bearing nodes",
            } },
        },
    ]
}

/// Arms `fault` for `command` from the client named `app`, on the primary.
async fn arm(rig: &Rig, fault: &Fault, command: &str, app: &str) -> FailPoint {
    let primary = rig.set.wait_for_primary(PATIENCE).await;
    let mut data = fault.data.clone();
    data.insert("failCommands", vec![command]);
    data.insert("appName", app);
    rig.set.fail_command(primary, fault.times, data).await
}

/// What one fault did to a listener, once it streams again with every order handled.
struct Seen {
    fault: &'static str,
    fired: i64,
    version: i64,
    handled: usize,
    errors: Vec<String>,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: fired {}×; lease version {}; handler calls {}; listener errors {:?}",
            self.fault, self.fired, self.version, self.handled, self.errors
        )
    }
}

/// The errors a listener showed, in order, without repeats.
fn errors_of(timeline: &Timeline, listener: &str) -> Vec<String> {
    let mut errors: Vec<String> = Vec::new();
    for line in timeline.lines.lock().unwrap().iter() {
        if let Some((head, error)) = line.split_once(" last_error: ") {
            if head.contains(&format!(" {listener} "))
                && errors.last().map(String::as_str) != Some(error)
            {
                errors.push(error.to_string());
            }
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_points_on_the_acquire_neither_lose_nor_double_apply_a_change() {
    rs3("acquire", |rig| async move {
        let mut seen = Vec::new();
        for (i, fault) in write_faults().into_iter().enumerate() {
            let resource = format!("r{i}");
            let sink = Sink::new(&rig, &resource);
            let timeline = Timeline::new();
            let app = format!("acq{i}");
            let store = rig.store(&app).await;
            // The first acquire is the first findAndModify this client sends.
            let fail_point = arm(&rig, &fault, "findAndModify", &rig.app_name(&app)).await;
            let listener = ListenerHandle::spawn(
                store,
                rig.config(&resource, "a", &resource),
                sink.handler(&rig, "a", None).await,
            );
            timeline.follow(&listener);
            let orders = order_ids(&format!("{resource}-o"), 1..=2);
            rig.insert(&resource, &orders[0], Acknowledgment::Majority)
                .await;
            support::wait::eventually_async(PATIENCE, "the first order is handled", || async {
                sink.has_all(&rig, &orders[..1]).await
            })
            .await;
            let fired = fail_point.off(&rig.set).await;
            rig.insert(&resource, &orders[1], Acknowledgment::Majority)
                .await;
            support::wait::eventually_async(PATIENCE, "every order is handled", || async {
                sink.has_all(&rig, &orders).await
            })
            .await;
            let lease = rig.lease(&resource).await;
            listener.stop().await;
            let summary = sink.verify(&rig, &orders).await;
            let s = Seen {
                fault: fault.name,
                fired,
                version: lease.version,
                handled: sink.deliveries().len(),
                errors: errors_of(&timeline, "a"),
            };
            println!("-- acquire (findAndModify), {s}");
            timeline.print();
            println!("  downstream: {summary}");
            assert_eq!(fired, fault.times, "the fail point fired as armed");
            // However the first acquire failed, the listener holds version 0 in the end:
            // a failed attempt wrote nothing, an applied one is refreshed by the next.
            assert_eq!(lease.version, 0, "{s}");
            seen.push(s.to_string());
        }
        println!("acquire faults:\n  {}", seen.join("\n  "));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_points_on_the_commit_neither_lose_nor_double_apply_a_change() {
    rs3("commit", |rig| async move {
        let mut seen = Vec::new();
        for (i, fault) in write_faults().into_iter().enumerate() {
            let resource = format!("r{i}");
            let sink = Sink::new(&rig, &resource);
            let timeline = Timeline::new();
            let app = format!("com{i}");
            let mut config = rig.config(&resource, "a", &resource);
            // No heartbeat commit in the way: the next update this client sends after
            // the first commit is the commit of the next order.
            config.heartbeat = Duration::from_secs(3600);
            let listener = ListenerHandle::spawn(
                rig.store(&app).await,
                config,
                sink.handler(&rig, "a", None).await,
            );
            timeline.follow(&listener);
            let orders = order_ids(&format!("{resource}-o"), 1..=2);
            rig.insert(&resource, &orders[0], Acknowledgment::Majority)
                .await;
            support::wait::eventually_async(
                PATIENCE,
                "the first order is handled and committed",
                || async {
                    sink.has_all(&rig, &orders[..1]).await && listener.snapshot().events == 1
                },
            )
            .await;
            let fail_point = arm(&rig, &fault, "update", &rig.app_name(&app)).await;
            timeline.note(format!("armed {} on update", fault.name));
            rig.insert(&resource, &orders[1], Acknowledgment::Majority)
                .await;
            let last = {
                let sink = sink.clone();
                let second = orders[1].clone();
                move || {
                    sink.deliveries()
                        .iter()
                        .rev()
                        .find(|d| d.order == second)
                        .map(|d| d.message.clone())
                }
            };
            // Handled, its token committed, and the listener streaming again.
            support::wait::eventually_async(
                PATIENCE,
                "the second order is handled and committed",
                || async {
                    let Some(message) = last() else { return false };
                    let token = message.split_once('@').map(|(_, t)| t.to_string());
                    let lease = rig.check.get(&resource).await.ok().flatten();
                    lease.is_some_and(|l| {
                        l.resume_token.map(|t| t.to_string()) == token
                            && l.holder.as_deref() == Some("a")
                    }) && listener.snapshot().state == ListenerState::Streaming
                },
            )
            .await;
            let fired = fail_point.off(&rig.set).await;
            let lease = rig.lease(&resource).await;
            listener.stop().await;
            let summary = sink.verify(&rig, &orders).await;
            let s = Seen {
                fault: fault.name,
                fired,
                version: lease.version,
                handled: sink.deliveries().len(),
                errors: errors_of(&timeline, "a"),
            };
            println!("-- commit (update), {s}");
            timeline.print();
            println!("  downstream: {summary}");
            assert_eq!(fired, fault.times, "the fail point fired as armed");
            seen.push(s.to_string());
        }
        println!("commit faults:\n  {}", seen.join("\n  "));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_points_on_the_change_stream_neither_lose_nor_double_apply_a_change() {
    rs3("stream", |rig| async move {
        let faults = [
            ("getMore", Fault {
                name: "closeConnection, once",
                times: 1,
                data: doc! { "closeConnection": true },
            }),
            ("getMore", Fault {
                name: "errorCode 11602 InterruptedDueToReplStateChange, once",
                times: 1,
                data: doc! { "errorCode": 11602 },
            }),
            ("getMore", Fault {
                name: "errorCode 11602 labelled ResumableChangeStreamError, once",
                times: 1,
                data: doc! { "errorCode": 11602, "errorLabels": ["ResumableChangeStreamError"] },
            }),
            ("aggregate", Fault {
                name: "closeConnection, once",
                times: 1,
                data: doc! { "closeConnection": true },
            }),
        ];
        let mut seen = Vec::new();
        for (i, (command, fault)) in faults.into_iter().enumerate() {
            let resource = format!("r{i}");
            let sink = Sink::new(&rig, &resource);
            let timeline = Timeline::new();
            let app = format!("cs{i}");
            let mut config = rig.config(&resource, "a", &resource);
            config.heartbeat = Duration::from_secs(3600);
            let store = rig.store(&app).await;
            let orders = order_ids(&format!("{resource}-o"), 1..=2);
            rig.insert(&resource, &orders[0], Acknowledgment::Majority).await;
            // The open (aggregate) is armed before the listener starts; a getMore once
            // it streams with the first order handled.
            let early = if command == "aggregate" {
                let armed = arm(&rig, &fault, command, &rig.app_name(&app)).await;
                timeline.note(format!("armed {} on {command}", fault.name));
                Some(armed)
            } else {
                None
            };
            let listener = ListenerHandle::spawn(store, config, sink.handler(&rig, "a", None).await);
            timeline.follow(&listener);
            support::wait::eventually_async(PATIENCE, "the first order is handled", || async {
                sink.has_all(&rig, &orders[..1]).await
                    && listener.snapshot().state == ListenerState::Streaming
            })
            .await;
            let fail_point = match early {
                Some(fail_point) => fail_point,
                None => {
                    let armed = arm(&rig, &fault, command, &rig.app_name(&app)).await;
                    timeline.note(format!("armed {} on {command}", fault.name));
                    armed
                }
            };
            // Let the fail point meet the next read, then write.
            tokio::time::sleep(Duration::from_millis(600)).await;
            rig.insert(&resource, &orders[1], Acknowledgment::Majority).await;
            support::wait::eventually_async(PATIENCE, "every order is handled", || async {
                sink.has_all(&rig, &orders).await
                    && listener.snapshot().state == ListenerState::Streaming
            })
            .await;
            let fired = fail_point.off(&rig.set).await;
            let lease = rig.lease(&resource).await;
            listener.stop().await;
            let summary = sink.verify(&rig, &orders).await;
            let s = Seen {
                fault: fault.name,
                fired,
                version: lease.version,
                handled: sink.deliveries().len(),
                errors: errors_of(&timeline, "a"),
            };
            println!("-- change stream ({command}), {s}");
            timeline.print();
            println!("  downstream: {summary}");
            assert_eq!(fired, fault.times, "the fail point fired as armed");
            seen.push(format!("{command}: {s}"));
        }
        println!("change stream faults:\n  {}", seen.join("\n  "));
    })
    .await;
}

// ---------------------------------------------------------------- operator side

/// The operator's compare-and-swap loses its connection once, on the three-member set
/// (majority writes): sent again, it applies, the tool says so, and the audit record is
/// finalized applied with the lease the swap left. (tests/operator_faults_live.rs covers
/// the other operator faults on the single-member set.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_swap_that_loses_its_connection_is_sent_again_applied_and_audited() {
    rs3("opswap", |rig| async move {
        let sink = Sink::new(&rig, "orders");
        let timeline = Timeline::new();
        let a = rig
            .listener(&sink, &timeline, "a", ListenerState::Streaming)
            .await;

        let operator = rig.store("op").await;
        let request = ActionRequest::Takeover {
            resource: "orders".into(),
            to: None,
            hold: None,
        };
        let facts = ops::gather(&operator, &request, &GatherOptions::new("op@failover"))
            .await
            .expect("gather");
        let plan = ops::plan(&request, &facts);
        let planned = rig.lease("orders").await;
        let fault = Fault {
            name: "closeConnection, once",
            times: 1,
            data: doc! { "closeConnection": true },
        };
        let fail_point = arm(&rig, &fault, "findAndModify", &rig.app_name("op")).await;
        let result = ops::execute(&operator, &plan, Some("failover test".into())).await;
        let fired = fail_point.off(&rig.set).await;
        let after = rig.lease("orders").await;
        let records = rig
            .check
            .audit_log(50)
            .await
            .expect("read the audit log")
            .items;
        timeline.note(format!("ops::execute: {result:?}"));
        timeline.note(format!(
            "lease before v{} {:?}, after v{} {:?}; audit records: {}",
            planned.version,
            planned.holder,
            after.version,
            after.holder,
            records.len()
        ));
        a.stop().await;
        timeline.print();
        println!(
            "-- operator swap (findAndModify), {}: fired {fired}×",
            fault.name
        );
        assert_eq!(fired, 1);
        let done = result.expect("sent again after the lost reply, the swap applies");
        assert!(
            done.remark
                .as_deref()
                .is_some_and(|r| r.contains("sent again")),
            "{:?}",
            done.remark
        );
        // `a` may have taken the released lease again since (one more version).
        assert!(after.version > planned.version, "{after:?}");
        let record = records
            .iter()
            .find(|r| r.id == done.audit_id)
            .expect("the audit record the tool named");
        assert_eq!(record.state, AuditState::Applied, "{record:?}");
        let left = record.after.as_ref().expect("the lease the swap left");
        assert_eq!(
            (left.version, left.holder.as_deref()),
            (planned.version + 1, None),
            "released to any standby: {record:?}"
        );
    })
    .await;
}

/// The primary steps down while an operator's compare-and-swap is on it: the swap is
/// held on the primary (`failCommand` with `blockConnection`, 2 s) and the primary is
/// asked to step down meanwhile. The held swap then meets a node that is no longer
/// primary (10107, nothing applied); it is sent to the new primary once and applies,
/// and the tool, the lease and the audit record all say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_swap_caught_in_a_step_down_is_told_and_audited_truthfully() {
    rs3("opstepdown", |rig| async move {
        let sink = Sink::new(&rig, "orders");
        let timeline = Timeline::new();
        let a = rig
            .listener(&sink, &timeline, "a", ListenerState::Streaming)
            .await;

        let operator = rig.store("op").await;
        // Held by the operator afterwards, so `a` cannot take it back and blur the result.
        let request = ActionRequest::Takeover {
            resource: "orders".into(),
            to: None,
            hold: Some(Duration::from_secs(120)),
        };
        let facts = ops::gather(&operator, &request, &GatherOptions::new("op@stepdown"))
            .await
            .expect("gather");
        let plan = ops::plan(&request, &facts);
        assert!(plan.refusal.is_none(), "{:?}", plan.refusal);
        let planned = rig.lease("orders").await;
        let primary = rig.set.wait_for_primary(PATIENCE).await;
        let fail_point = rig
            .set
            .fail_command(
                primary,
                1,
                doc! {
                    "blockConnection": true,
                    "blockTimeMS": 2000,
                    "failCommands": ["findAndModify"],
                    "appName": rig.app_name("op"),
                },
            )
            .await;
        let execute = tokio::spawn(async move {
            ops::execute(&operator, &plan, Some("step-down test".into())).await
        });
        // Step down only once the swap is held on the primary (the fail point blocks it).
        let held_there = doc! {
            "currentOp": 1,
            "appName": rig.app_name("op"),
            "command.findAndModify": { "$exists": true },
        };
        support::wait::eventually_async(PATIENCE, "the swap is held on the primary", || async {
            rig.set
                .admin(primary, held_there.clone())
                .await
                .ok()
                .and_then(|r| r.get_array("inprog").ok().map(|ops| !ops.is_empty()))
                .unwrap_or(false)
        })
        .await;
        timeline.note(format!(
            "replSetStepDown on {} while the swap is held there",
            rig.set.hosts[primary]
        ));
        let reply = rig.set.step_down(primary, 30).await;
        timeline.note(format!("replSetStepDown replied: {reply:?}"));
        let new_primary = rig.set.wait_for_primary(PATIENCE).await;
        timeline.note(format!("new primary {}", rig.set.hosts[new_primary]));
        let result = execute.await.expect("the execute task");
        let fired = fail_point.off(&rig.set).await;
        let after = rig.lease("orders").await;
        let records = rig
            .check
            .audit_log(50)
            .await
            .expect("read the audit log")
            .items;
        timeline.note(format!("ops::execute: {result:?}"));
        timeline.note(format!(
            "lease before v{} {:?}, after v{} {:?}",
            planned.version, planned.holder, after.version, after.holder
        ));
        a.stop().await;
        timeline.print();
        assert_eq!(fired, 1, "the swap reached the primary and was held there");
        assert_eq!(records.len(), 1, "one action, one record: {records:?}");
        let record = &records[0];
        let operator_holds = |l: &Lease| {
            l.version == planned.version + 1 && l.holder.as_deref() == Some("op@stepdown")
        };
        // Refused by the node that stepped down (nothing ran), the swap is sent once
        // more, to the new primary, and applies there.
        let done = result.expect("sent to the new primary, applied");
        println!("-- swap through a step-down: applied ({:?})", done.remark);
        assert!(
            done.remark
                .as_deref()
                .is_some_and(|r| r.contains("no longer primary")),
            "{:?}",
            done.remark
        );
        assert_eq!(record.id, done.audit_id);
        assert_eq!(record.state, AuditState::Applied, "{record:?}");
        assert!(
            record.after.as_ref().is_some_and(operator_holds),
            "{record:?}"
        );
        assert!(operator_holds(&after), "the hold stands: {after:?}");
    })
    .await;
}
