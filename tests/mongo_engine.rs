//! The engine end to end through the MongoDB adapter: a real `ListenerHandle`
//! running the demo's `OrderOutbox` drives the real driver over TCP against the
//! black-pipe server, which is scripted per (command, collection) and records
//! every command. Nothing in the engine, the adapter or the driver is mocked.
//!
//! Each test runs on a current-thread runtime so the listener's `tracing` events
//! reach the test's thread-local subscriber (see [`LogCapture`]).
//!
//! The two tests at the end reproduce defects found while writing this suite
//! (outbox ids keyed by cluster time; unbounded stream reads), now fixed.

mod support;

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document, Timestamp};
use streamward::demo::orders::{orders_ns, OrderOutbox, ORDERS_RESOURCE};
use streamward::engine::{
    CommitPolicy, ListenerConfig, ListenerExit, ListenerHandle, ListenerState,
};
use streamward::model::{ClusterTime, ResumeToken, TokenKind};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::Namespace;
use support::wire::{Action, WireServer};
use tracing_subscriber::layer::SubscriberExt;

const ME: &str = "engine-a";
/// The oldest startable oplog entry the server reports: where a bootstrap starts.
const OPLOG_FIRST: Timestamp = Timestamp {
    time: 1_699_990_000,
    increment: 3,
};
const OPLOG_LAST: Timestamp = Timestamp {
    time: 1_700_000_500,
    increment: 1,
};
const T1: Timestamp = Timestamp {
    time: 1_700_000_100,
    increment: 1,
};
const T2: Timestamp = Timestamp {
    time: 1_700_000_101,
    increment: 1,
};
/// Bounds every wait; the flows themselves take well under a second.
const PATIENCE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- the scripted server

/// Answers commands per (command name, collection) from queues, in order, and logs
/// each command it answered. A `getMore` with nothing queued is an idle read: it
/// waits its `maxTimeMS` (as a server would) and returns an empty batch. Any other
/// command with nothing queued is answered with an error and remembered, so a test
/// can assert that the engine sent nothing it did not expect.
#[derive(Clone, Default)]
struct Routes {
    queues: Arc<Mutex<HashMap<String, VecDeque<Action>>>>,
    /// `(route, idle, when it arrived)` for every command answered, in arrival order.
    log: Arc<Mutex<Vec<(String, bool, std::time::Instant)>>>,
    unscripted: Arc<Mutex<Vec<Document>>>,
}

fn route_of(command: &Document) -> String {
    let name = command.keys().next().cloned().unwrap_or_default();
    let collection = match name.as_str() {
        "getMore" => command.get_str("collection"),
        _ => command.get_str(&name),
    }
    .unwrap_or_default();
    format!("{name} {collection}")
}

impl Routes {
    fn install(server: &WireServer) -> Routes {
        let routes = Routes::default();
        for name in ["findAndModify", "find", "aggregate", "getMore", "update"] {
            let r = routes.clone();
            server.on(name, move |command| r.answer(command));
        }
        routes
    }

    /// Queues `actions` for the next commands on `route` (`"update leases"`, …).
    fn then(&self, route: &str, actions: impl IntoIterator<Item = Action>) {
        self.queues
            .lock()
            .unwrap()
            .entry(route.into())
            .or_default()
            .extend(actions);
    }

    fn answer(&self, command: &Document) -> Action {
        let route = route_of(command);
        let queued = self
            .queues
            .lock()
            .unwrap()
            .get_mut(&route)
            .and_then(VecDeque::pop_front);
        let idle = queued.is_none() && route.starts_with("getMore ");
        self.log
            .lock()
            .unwrap()
            .push((route, idle, std::time::Instant::now()));
        match queued {
            Some(action) => action,
            None if idle => idle_get_more(command),
            None => {
                self.unscripted.lock().unwrap().push(command.clone());
                Action::error(8, "UnknownError", "the test did not script this command")
            }
        }
    }

    /// Every command answered from a queue (or unscripted), in order: idle reads left out.
    fn trace(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, idle, _)| !idle)
            .map(|(route, _, _)| route.clone())
            .collect()
    }

    /// When the `nth` command on `route` arrived.
    fn arrival(&self, route: &str, nth: usize) -> Option<std::time::Instant> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(r, idle, _)| r == route && !idle)
            .nth(nth)
            .map(|(_, _, at)| *at)
    }

    fn unscripted(&self) -> Vec<Document> {
        self.unscripted.lock().unwrap().clone()
    }
}

fn idle_get_more(command: &Document) -> Action {
    let id = command.get_i64("getMore").unwrap_or_default();
    let ns = format!(
        "{}.{}",
        command.get_str("$db").unwrap_or_default(),
        command.get_str("collection").unwrap_or_default()
    );
    let wait_ms = match command.get("maxTimeMS") {
        Some(Bson::Int32(ms)) => u64::try_from(*ms).unwrap_or(0),
        Some(Bson::Int64(ms)) => u64::try_from(*ms).unwrap_or(0),
        _ => 500,
    };
    Action::Stall(
        Duration::from_millis(wait_ms.clamp(50, 1000)),
        Box::new(Action::ok(
            doc! { "cursor": { "id": id, "ns": ns, "nextBatch": [] } },
        )),
    )
}

// ---------------------------------------------------------------- replies

fn token(at: Timestamp, sequence: u64) -> ResumeToken {
    ResumeToken::encode(ClusterTime::from(at), TokenKind::Event, sequence)
}

fn in_seconds(seconds: i64) -> bson::DateTime {
    bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() + seconds * 1000)
}

/// The lease document as the server returns it after an acquire.
fn lease(holder: &str, version: i64, resume: Option<&ResumeToken>, expires_in: i64) -> Document {
    doc! {
        "_id": ORDERS_RESOURCE,
        "listenerId": holder,
        "version": version,
        "kind": "update",
        "expiresAt": in_seconds(expires_in),
        "resumeToken": resume.map(|t| Bson::Document(t.as_document().clone())).unwrap_or(Bson::Null),
        "resumeAt": null,
        "acquiredAt": bson::DateTime::now(),
        "renewedAt": bson::DateTime::now(),
        "watch": { "db": "shop", "coll": "orders", "pipeline": "" },
    }
}

fn acquired(version: i64, resume: Option<&ResumeToken>) -> Action {
    Action::ok(doc! { "value": lease(ME, version, resume, 60) })
}

/// What a real server returns to an acquire while another listener holds the lease:
/// the document, unchanged by the pipeline.
fn held_by_other(version: i64) -> Action {
    Action::ok(doc! { "value": lease("worker-elsewhere", version, None, 60) })
}

fn oplog_entry(ts: Timestamp) -> Action {
    Action::ok(
        doc! { "cursor": { "id": 0_i64, "ns": "local.oplog.rs", "firstBatch": [{ "ts": ts }] } },
    )
}

fn stream_opened(cursor: i64) -> Action {
    Action::ok(doc! { "cursor": { "id": cursor, "ns": "shop.orders", "firstBatch": [] } })
}

fn order_event(token: &ResumeToken, at: Timestamp, operation: &str, status: &str) -> Document {
    doc! {
        "_id": token.as_document().clone(),
        "operationType": operation,
        "clusterTime": at,
        "wallTime": bson::DateTime::from_millis(i64::from(at.time) * 1000),
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": "o1" },
        "fullDocument": { "_id": "o1", "status": status },
    }
}

fn next_batch(cursor: i64, events: Vec<Document>) -> Action {
    Action::ok(doc! { "cursor": { "id": cursor, "ns": "shop.orders", "nextBatch": events } })
}

/// The reply to an upsert that inserted (what a first outbox write gets).
fn upserted(id: &str) -> Action {
    Action::ok(doc! { "n": 1, "nModified": 0, "upserted": [{ "index": 0, "_id": id }] })
}

fn matched(n: i32) -> Action {
    Action::ok(doc! { "n": n, "nModified": n })
}

/// Standby after `HeldByOther`: the lease watch opens, the lease is read (held by
/// someone else for an hour), then the watch idles.
fn script_standby(routes: &Routes) {
    routes.then(
        "aggregate leases",
        [Action::ok(
            doc! { "cursor": { "id": 88_i64, "ns": "sw.leases", "firstBatch": [] } },
        )],
    );
    routes.then(
        "find leases",
        [Action::ok(doc! { "cursor": {
            "id": 0_i64, "ns": "sw.leases", "firstBatch": [lease("engine-b", 1, None, 3600)],
        } })],
    );
}

fn message_id(at: Timestamp) -> String {
    format!("o1@{}", token(at, 0))
}

// ---------------------------------------------------------------- the engine side

async fn connect(server: &WireServer) -> MongoStore {
    let mut settings = MongoSettings::new(server.uri());
    settings.leases = Namespace::new("sw", "leases");
    settings.server_selection_timeout = Duration::from_secs(5);
    settings.operation_timeout = Duration::from_secs(5);
    MongoStore::connect(settings).await.expect("connect")
}

fn config() -> ListenerConfig {
    let mut config = ListenerConfig::new(ORDERS_RESOURCE, ME, orders_ns());
    // Long enough that no refresh or heartbeat happens within a test's few seconds,
    // even on a loaded machine: every lease command in a trace is one the test caused.
    config.lease = Duration::from_secs(60);
    config.heartbeat = Duration::from_secs(60);
    config.max_batch_wait = Duration::from_millis(200);
    config.retry_backoff = Duration::from_millis(100);
    // One command at a time, so a trace is one fixed sequence and each scripted
    // getMore answers the read it was written for; read-ahead has its own tests.
    config.read_ahead = false;
    // One change a read: each scripted getMore answers one.
    config.batch_size = 1;
    // A commit per batch, waited for: the order the traces pin. Group commits (on
    // their own task) are proven against the real server (tests/group_commit_live.rs).
    config.commit = CommitPolicy::Strict;
    // The traces pin the lease and stream commands; checkpoints have their own tests
    // (tests/checkpoints.rs), against the real server.
    config.checkpoint_every = None;
    config
}

fn spawn(store: &MongoStore) -> ListenerHandle {
    ListenerHandle::spawn(store.clone(), config(), OrderOutbox::new(store.clone()))
}

/// Captures the `tracing` events of this thread: the listener's "lost the lease"
/// warning is how it reports a lost lock at the moment it happens (the snapshot's
/// `lost-lock` state is overwritten by `acquiring` in the same step, see
/// docs/architecture.md §5.3, so a snapshot reader cannot be relied on to see it).
#[derive(Clone, Default)]
struct LogCapture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogCapture {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields(format!("{} ", event.metadata().level()));
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
}

impl LogCapture {
    fn install() -> (LogCapture, tracing::subscriber::DefaultGuard) {
        let capture = LogCapture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        let guard = tracing::subscriber::set_default(subscriber);
        (capture, guard)
    }

    fn lines_with(&self, needle: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .cloned()
            .collect()
    }
}

fn update_of(command: &Document) -> Document {
    command.get_array("updates").unwrap()[0]
        .as_document()
        .unwrap()
        .clone()
}

fn set_of(update: &Document) -> Document {
    match update.get("u").unwrap() {
        Bson::Document(u) => u.get_document("$set").unwrap().clone(),
        Bson::Array(pipeline) => pipeline[0]
            .as_document()
            .unwrap()
            .get_document("$set")
            .unwrap()
            .clone(),
        other => panic!("unexpected update form {other}"),
    }
}

fn with_route(server: &WireServer, name: &str, collection: &str) -> Vec<Document> {
    server
        .commands_stripped(name)
        .into_iter()
        .filter(|c| route_of(c) == format!("{name} {collection}"))
        .collect()
}

fn expected_fence_filter(id: &str, version: i64) -> Document {
    doc! {
        "_id": id,
        "$or": [{ "_fence": { "$lte": version } }, { "_fence": { "$exists": false } }],
    }
}

fn tenure_filter(version: i64) -> Document {
    doc! { "_id": ORDERS_RESOURCE, "listenerId": ME, "version": version }
}

/// The first tenure of every test: acquire version 0 with no resume point, read the
/// oplog window, open the stream at its first entry.
fn script_bootstrap(routes: &Routes) {
    routes.then("findAndModify leases", [acquired(0, None)]);
    routes.then(
        "find oplog.rs",
        [oplog_entry(OPLOG_FIRST), oplog_entry(OPLOG_LAST)],
    );
    routes.then("aggregate orders", [stream_opened(77)]);
}

/// Bootstrap, two orders streamed and published; the first commit lands, the second
/// matches nothing: someone took the lease in between.
fn script_two_orders_then_lost_commit(routes: &Routes, e1: &ResumeToken, e2: &ResumeToken) {
    script_bootstrap(routes);
    routes.then(
        "getMore orders",
        [
            next_batch(77, vec![order_event(e1, T1, "insert", "placed")]),
            next_batch(77, vec![order_event(e2, T2, "update", "paid")]),
        ],
    );
    routes.then(
        "update outbox",
        [upserted(&message_id(T1)), upserted(&message_id(T2))],
    );
    routes.then("update leases", [matched(1), matched(0)]);
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn a_commit_matching_nothing_is_a_lost_lock_and_the_listener_stands_by() {
    let (logs, _guard) = LogCapture::install();
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    let (e1, e2) = (token(T1, 0), token(T2, 0));
    script_two_orders_then_lost_commit(&routes, &e1, &e2);
    // Back to acquiring: held by someone else, so standby.
    routes.then("findAndModify leases", [held_by_other(1)]);
    script_standby(&routes);

    let store = connect(&server).await;
    let listener = spawn(&store);
    support::wait::eventually(
        PATIENCE,
        "the listener stands by after losing the lease",
        || {
            listener.snapshot().state == ListenerState::Standby
                && routes.trace().iter().any(|r| r == "find leases")
        },
    )
    .await;

    assert_eq!(
        routes.trace(),
        [
            "findAndModify leases", // acquire: version 0, no token
            "find oplog.rs",        // bootstrap: oldest startable entry
            "find oplog.rs",        // and the last
            "aggregate orders",     // $changeStream at the oldest entry
            "getMore orders",       // one change (o1 inserted)
            "update outbox",        // the handler's fenced write
            "update leases",        // commit: matched 1
            "getMore orders",       // the next change (o1 paid)
            "update outbox",        // fenced write
            "update leases",        // commit: matched 0 -> lost lock
            "findAndModify leases", // acquire again: held by another
            "aggregate leases",     // standby: watch the lease
            "find leases",          // and read it once
        ],
        "no read, write or release after the lost commit"
    );
    assert!(routes.unscripted().is_empty(), "{:?}", routes.unscripted());

    // Acquire: one upsert returning the new document, never taking a bulk lease.
    let acquire = with_route(&server, "findAndModify", "leases").remove(0);
    assert_eq!(
        (acquire.get_bool("upsert"), acquire.get_bool("new")),
        (Ok(true), Ok(true))
    );
    // `_id` alone: the server refuses `$expr` in an upsert's query; eligibility (never
    // a bulk lease) is decided in the pipeline, pinned in mongo_adapter's snapshots.
    assert_eq!(
        acquire.get_document("query").unwrap(),
        &doc! { "_id": ORDERS_RESOURCE }
    );

    // The stream starts at the oplog's first (startable) entry, inclusive.
    let finds = with_route(&server, "find", "oplog.rs");
    assert_eq!(
        finds[0].get_document("filter").unwrap(),
        &doc! { "op": { "$ne": "n" } }
    );
    assert_eq!(
        finds[0].get_document("sort").unwrap(),
        &doc! { "$natural": 1 }
    );
    let open = with_route(&server, "aggregate", "orders").remove(0);
    assert_eq!(
        open.get_array("pipeline").unwrap()[0],
        Bson::Document(doc! { "$changeStream": {
            "fullDocument": "updateLookup",
            "startAtOperationTime": OPLOG_FIRST,
        } })
    );
    assert_eq!(open.get_str("$db").unwrap(), "shop");

    // Each outbox write carries the lease fence, version 0, in its filter and its $set.
    let outbox = with_route(&server, "update", "outbox");
    for (command, at, event, status) in [
        (&outbox[0], T1, "created", "placed"),
        (&outbox[1], T2, "changed", "paid"),
    ] {
        let update = update_of(command);
        assert_eq!(
            update.get_document("q").unwrap(),
            &expected_fence_filter(&message_id(at), 0)
        );
        assert_eq!(update.get_bool("upsert"), Ok(true));
        assert_eq!(
            set_of(&update),
            doc! {
                "order": "o1", "event": event, "status": status, "clusterTime": at, "_fence": 0_i64,
            }
        );
        assert_eq!(
            command.get_document("writeConcern").unwrap().get_str("w"),
            Ok("majority")
        );
    }

    // Both commits are filtered on holder and version, each with its change's token.
    let commits = with_route(&server, "update", "leases");
    for (command, committed) in [(&commits[0], &e1), (&commits[1], &e2)] {
        let update = update_of(command);
        assert_eq!(update.get_document("q").unwrap(), &tenure_filter(0));
        assert_eq!(
            set_of(&update).get_document("resumeToken").unwrap(),
            &doc! { "$literal": committed.as_document().clone() }
        );
    }

    // The listener reported the lost lock, counted only the committed change, and
    // holds no version any more.
    let snapshot = listener.snapshot();
    assert_eq!(snapshot.version, None);
    assert_eq!((snapshot.events, snapshot.commits), (1, 1));
    assert_eq!(
        snapshot.last_error.as_deref(),
        Some("commit of version 0 matched nothing")
    );
    let lost = logs.lines_with("lost the lease");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(
        lost[0].contains("WARN") && lost[0].contains("commit of version 0 matched nothing"),
        "{lost:?}"
    );

    assert_eq!(listener.stop().await, Some(ListenerExit::Stopped));
}

#[tokio::test]
async fn a_fenced_write_refused_with_11000_is_a_lost_lock_without_a_commit() {
    let (logs, _guard) = LogCapture::install();
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    let e1 = token(T1, 0);
    script_bootstrap(&routes);
    routes.then(
        "getMore orders",
        [next_batch(
            77,
            vec![order_event(&e1, T1, "insert", "placed")],
        )],
    );
    // A newer holder already wrote this message with a higher fence: the filter
    // matches nothing and the upsert's insert collides on `_id`.
    routes.then(
        "update outbox",
        [Action::ok(doc! { "n": 0, "nModified": 0, "writeErrors": [{
            "index": 0, "code": 11000,
            "errmsg": "E11000 duplicate key error collection: shop.outbox index: _id_",
        }] })],
    );
    routes.then("findAndModify leases", [held_by_other(1)]);
    script_standby(&routes);

    let store = connect(&server).await;
    let listener = spawn(&store);
    support::wait::eventually(PATIENCE, "the fenced-out listener stands by", || {
        listener.snapshot().state == ListenerState::Standby
            && routes.trace().iter().any(|r| r == "find leases")
    })
    .await;

    assert_eq!(
        routes.trace(),
        [
            "findAndModify leases",
            "find oplog.rs",
            "find oplog.rs",
            "aggregate orders",
            "getMore orders",
            "update outbox", // refused: 11000
            "findAndModify leases",
            "aggregate leases",
            "find leases",
        ],
        "no commit and no release after a stale fenced write"
    );
    assert!(
        with_route(&server, "update", "leases").is_empty(),
        "nothing was written to the lease"
    );
    assert!(routes.unscripted().is_empty(), "{:?}", routes.unscripted());
    let write = update_of(&with_route(&server, "update", "outbox")[0]);
    assert_eq!(
        write.get_document("q").unwrap(),
        &expected_fence_filter(&message_id(T1), 0)
    );
    assert_eq!(set_of(&write).get_i64("_fence"), Ok(0));

    let snapshot = listener.snapshot();
    let error = snapshot.last_error.clone().unwrap_or_default();
    assert!(
        error.starts_with("stale fenced write:")
            && error.contains(&message_id(T1))
            && error.contains("version 0 of shop.orders"),
        "{error}"
    );
    assert_eq!((snapshot.events, snapshot.commits), (0, 0));
    assert_eq!(snapshot.version, None);
    let lost = logs.lines_with("lost the lease");
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].contains("stale fenced write"), "{lost:?}");

    assert_eq!(listener.stop().await, Some(ListenerExit::Stopped));
}

#[tokio::test]
async fn after_a_lost_lock_the_next_tenure_resumes_after_the_committed_token() {
    let (_logs, _guard) = LogCapture::install();
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    let (e1, e2) = (token(T1, 0), token(T2, 0));
    script_two_orders_then_lost_commit(&routes, &e1, &e2);
    // Meanwhile an operator took the lease (version 1) and gave it back: this
    // listener's next acquire is a new tenure, version 2, with the token it committed.
    routes.then("findAndModify leases", [acquired(2, Some(&e1))]);
    routes.then("aggregate orders", [stream_opened(78)]);
    // The uncommitted change is delivered again to the new tenure.
    routes.then(
        "getMore orders",
        [next_batch(78, vec![order_event(&e2, T2, "update", "paid")])],
    );
    routes.then("update outbox", [matched(1)]);
    routes.then("update leases", [matched(1)]);

    let store = connect(&server).await;
    let listener = spawn(&store);
    support::wait::eventually(
        PATIENCE,
        "the new tenure committed the re-delivered change",
        || {
            let s = listener.snapshot();
            s.version == Some(2) && s.commits == 2
        },
    )
    .await;
    assert_eq!(listener.snapshot().state, ListenerState::Streaming);
    assert_eq!(
        listener.snapshot().last_error.as_deref(),
        Some("commit of version 0 matched nothing"),
        "the lost-lock reason is kept after recovery"
    );

    // Stop: the new tenure releases its lease.
    routes.then("update leases", [matched(1)]);
    assert_eq!(listener.stop().await, Some(ListenerExit::Stopped));

    assert_eq!(
        routes.trace(),
        [
            "findAndModify leases",
            "find oplog.rs",
            "find oplog.rs",
            "aggregate orders",
            "getMore orders",
            "update outbox",
            "update leases",
            "getMore orders",
            "update outbox",
            "update leases",        // matched 0: lost lock
            "findAndModify leases", // version 2, token e1
            "aggregate orders",     // resumeAfter e1: no oplog read this time
            "getMore orders",       // e2 again
            "update outbox",        // under version 2
            "update leases",        // commit version 2
            "update leases",        // release on stop
        ]
    );
    assert!(routes.unscripted().is_empty(), "{:?}", routes.unscripted());

    let opens = with_route(&server, "aggregate", "orders");
    assert_eq!(
        opens[1].get_array("pipeline").unwrap()[0],
        Bson::Document(doc! { "$changeStream": {
            "fullDocument": "updateLookup",
            "resumeAfter": e1.as_document().clone(),
        } })
    );
    let outbox = with_route(&server, "update", "outbox");
    let redelivered = update_of(&outbox[2]);
    assert_eq!(
        redelivered.get_document("q").unwrap(),
        &expected_fence_filter(&message_id(T2), 2),
        "the same message id, now fenced by the new version"
    );
    assert_eq!(set_of(&redelivered).get_i64("_fence"), Ok(2));
    let leases = with_route(&server, "update", "leases");
    let commit = update_of(&leases[2]);
    assert_eq!(commit.get_document("q").unwrap(), &tenure_filter(2));
    assert_eq!(
        set_of(&commit).get_document("resumeToken").unwrap(),
        &doc! { "$literal": e2.as_document().clone() }
    );
    let release = update_of(&leases[3]);
    assert_eq!(release.get_document("q").unwrap(), &tenure_filter(2));
    assert_eq!(set_of(&release).get("listenerId"), Some(&Bson::Null));
    let ids: Vec<String> = outbox
        .iter()
        .map(|c| {
            update_of(c)
                .get_document("q")
                .unwrap()
                .get_str("_id")
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        ids,
        [message_id(T1), message_id(T2), message_id(T2)],
        "three deliveries of two changes: two messages"
    );
}

/// Two changes of one order in one transaction share a cluster time; only their
/// resume tokens differ. Their outbox messages must not share an id, or the second
/// overwrites the first and a message is lost.
#[tokio::test]
async fn changes_sharing_a_cluster_time_get_distinct_outbox_messages() {
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    let (first, second) = (token(T1, 0), token(T1, 1));
    script_bootstrap(&routes);
    routes.then(
        "getMore orders",
        [
            next_batch(77, vec![order_event(&first, T1, "insert", "placed")]),
            next_batch(77, vec![order_event(&second, T1, "update", "paid")]),
        ],
    );
    routes.then("update outbox", [matched(1), matched(1)]);
    routes.then("update leases", [matched(1), matched(1)]);
    let store = connect(&server).await;
    let listener = spawn(&store);
    support::wait::eventually(PATIENCE, "both changes committed", || {
        listener.snapshot().commits == 2
    })
    .await;
    let ids: Vec<Bson> = with_route(&server, "update", "outbox")
        .iter()
        .map(|c| {
            update_of(c)
                .get_document("q")
                .unwrap()
                .get("_id")
                .cloned()
                .unwrap()
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "two changes, one message id: {ids:?}");
    routes.then("update leases", [matched(1)]);
    listener.stop().await;
}

/// A change event over 16 MB, which a 7.0 server (the black pipe's default) splits
/// with `$changeStreamSplitLargeEvent` into fragments across replies, reaches the
/// handler once, whole, and its commit resumes after the last fragment: no commit
/// falls between fragments. (Shaped from the stage's documentation; the real server
/// of this suite, 6.0.5, has no such stage.)
#[tokio::test]
async fn an_event_split_into_fragments_is_handled_once_and_committed_after_its_last() {
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    let whole = token(T1, 0);
    let fragment_token = |n: u64| {
        let mut data = whole.as_document().get_str("_data").unwrap().to_string();
        write!(data, "{n:02X}").unwrap();
        doc! { "_data": data }
    };
    let mut first = order_event(&whole, T1, "update", "paid");
    let post_image = first.remove("fullDocument").unwrap();
    first.insert("_id", fragment_token(1));
    first.insert("splitEvent", doc! { "fragment": 1, "of": 2 });
    let second = doc! {
        "_id": fragment_token(2),
        "splitEvent": { "fragment": 2, "of": 2 },
        "fullDocument": post_image,
    };
    script_bootstrap(&routes);
    routes.then(
        "getMore orders",
        [next_batch(77, vec![first]), next_batch(77, vec![second])],
    );
    routes.then("update outbox", [upserted("o1")]);
    routes.then("update leases", [matched(1)]);
    let store = connect(&server).await;
    let listener = spawn(&store);
    support::wait::eventually(PATIENCE, "the split change committed", || {
        listener.snapshot().commits == 1
    })
    .await;
    routes.then("update leases", [matched(1)]);
    listener.stop().await;

    let opens = with_route(&server, "aggregate", "orders");
    let pipeline = opens[0].get_array("pipeline").unwrap();
    assert_eq!(
        pipeline.last(),
        Some(&Bson::Document(doc! { "$changeStreamSplitLargeEvent": {} }))
    );
    let outbox = with_route(&server, "update", "outbox");
    assert_eq!(outbox.len(), 1, "handled once");
    assert_eq!(
        set_of(&update_of(&outbox[0])).get_str("status"),
        Ok("paid"),
        "the post-image of the second fragment reached the handler"
    );
    let leases = with_route(&server, "update", "leases");
    assert_eq!(
        set_of(&update_of(&leases[0]))
            .get_document("resumeToken")
            .unwrap(),
        &doc! { "$literal": fragment_token(2) },
        "the commit resumes after the whole event"
    );
}

/// A read the server never answers (a stalled primary, a network black hole) must
/// end within the operation timeout like every other adapter call, so the holder
/// gives the lease back instead of sitting on it, unaware, until TCP gives up.
#[tokio::test]
async fn a_stalled_stream_read_ends_within_the_operation_timeout() {
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    script_bootstrap(&routes);
    routes.then(
        "getMore orders",
        [Action::Stall(
            Duration::from_secs(60),
            Box::new(next_batch(77, vec![])),
        )],
    );
    routes.then("update leases", [matched(1)]);
    let store = connect(&server).await; // operation timeout: 5 s
    let listener = spawn(&store);
    support::wait::eventually(
        PATIENCE,
        "the stalled read ends the tenure and the lease is given back",
        || routes.trace().iter().any(|r| r == "update leases"),
    )
    .await;
    let release = update_of(&with_route(&server, "update", "leases")[0]);
    assert_eq!(release.get_document("q").unwrap(), &tenure_filter(0));
    assert_eq!(set_of(&release).get("listenerId"), Some(&Bson::Null));
    let error = listener.snapshot().last_error.unwrap_or_default();
    assert!(
        error.contains("change stream on shop.orders") && error.contains("no reply"),
        "{error}"
    );
    listener.crash();
}

// ---------------------------------------------------------------- read-ahead

/// The listener as it runs by default: the next batch is read while the current one
/// is handled and committed.
fn spawn_reading_ahead(store: &MongoStore) -> ListenerHandle {
    let config = ListenerConfig {
        read_ahead: true,
        ..config()
    };
    ListenerHandle::spawn(store.clone(), config, OrderOutbox::new(store.clone()))
}

/// Position of the `nth` (0-based) command answered on `route`.
fn nth_position(trace: &[String], route: &str, nth: usize) -> Option<usize> {
    trace
        .iter()
        .enumerate()
        .filter(|(_, r)| *r == route)
        .nth(nth)
        .map(|(i, _)| i)
}

#[tokio::test]
async fn reading_ahead_hands_a_batch_over_only_after_the_previous_commit_landed() {
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    let (e1, e2) = (token(T1, 0), token(T2, 0));
    script_bootstrap(&routes);
    routes.then(
        "getMore orders",
        [
            next_batch(77, vec![order_event(&e1, T1, "insert", "placed")]),
            next_batch(77, vec![order_event(&e2, T2, "update", "paid")]),
        ],
    );
    routes.then(
        "update outbox",
        [upserted(&message_id(T1)), upserted(&message_id(T2))],
    );
    // The first commit is slow: the second batch arrives while it is in flight.
    routes.then(
        "update leases",
        [
            Action::Stall(Duration::from_millis(300), Box::new(matched(1))),
            matched(1),
        ],
    );
    let store = connect(&server).await;
    let listener = spawn_reading_ahead(&store);
    support::wait::eventually(PATIENCE, "both changes committed", || {
        listener.snapshot().commits == 2
    })
    .await;
    let trace = routes.trace();
    let second_read = nth_position(&trace, "getMore orders", 1).expect("second read");
    let first_commit = nth_position(&trace, "update leases", 0).expect("first commit");
    let second_write = nth_position(&trace, "update outbox", 1).expect("second write");
    assert!(
        second_write > first_commit,
        "o1 paid is published only after o1 placed was committed: {trace:?}"
    );
    assert!(second_read < second_write, "{trace:?}");
    // Arrival order alone cannot tell "after the commit landed" from "while it
    // stalled": the second write must wait out the first commit's stall.
    let stalled_commit = routes.arrival("update leases", 0).expect("first commit");
    let second_write_at = routes.arrival("update outbox", 1).expect("second write");
    assert!(
        second_write_at.duration_since(stalled_commit) >= Duration::from_millis(300),
        "o1 paid was published {:?} after the first commit was sent, before its reply",
        second_write_at.duration_since(stalled_commit)
    );
    let commits = with_route(&server, "update", "leases");
    assert_eq!(
        set_of(&update_of(&commits[1])).get_document("resumeToken"),
        Ok(&doc! { "$literal": e2.as_document().clone() })
    );
    assert_eq!(listener.snapshot().events, 2);
    listener.crash();
}

#[tokio::test]
async fn a_batch_read_ahead_is_dropped_unhandled_when_the_commit_before_it_is_lost() {
    let server = WireServer::start().await;
    let routes = Routes::install(&server);
    let (e1, e2) = (token(T1, 0), token(T2, 0));
    script_bootstrap(&routes);
    routes.then(
        "getMore orders",
        [
            next_batch(77, vec![order_event(&e1, T1, "insert", "placed")]),
            next_batch(77, vec![order_event(&e2, T2, "update", "paid")]),
        ],
    );
    routes.then("update outbox", [upserted(&message_id(T1))]);
    // Someone took the lease while o1 was handled; the commit is slow to say so, so
    // o1 paid has certainly been read ahead by then.
    routes.then(
        "update leases",
        [Action::Stall(
            Duration::from_millis(300),
            Box::new(matched(0)),
        )],
    );
    routes.then("findAndModify leases", [held_by_other(1)]);
    script_standby(&routes);
    let store = connect(&server).await;
    let listener = spawn_reading_ahead(&store);
    support::wait::eventually(
        PATIENCE,
        "the listener stands by after losing the lease",
        || {
            listener.snapshot().state == ListenerState::Standby
                && routes.trace().iter().any(|r| r == "find leases")
        },
    )
    .await;
    let trace = routes.trace();
    assert_eq!(
        trace.iter().filter(|r| *r == "getMore orders").count(),
        2,
        "o1 paid was read ahead: {trace:?}"
    );
    assert_eq!(
        with_route(&server, "update", "outbox").len(),
        1,
        "but never handed to the handler: {trace:?}"
    );
    assert_eq!(
        listener.snapshot().last_error.as_deref(),
        Some("commit of version 0 matched nothing")
    );
    assert_eq!(listener.snapshot().events, 0);
    assert!(routes.unscripted().is_empty(), "{:?}", routes.unscripted());
    listener.crash();
}
