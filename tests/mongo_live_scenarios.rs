//! The lease timelines of `tests/scenarios.rs`, run by real listeners through
//! `MongoStore` against a real replica set. Runs only when `STREAMWARD_TEST_URI` is
//! set (e.g. from `scripts/mongo-replset.sh`); otherwise each test says it is skipped
//! and returns. Every test uses its own database (leases, audit, orders and outbox
//! all live in it) and drops it afterwards, also when the test fails.
//!
//! Leases are 2 s, so takeovers happen within seconds and the suite runs well under
//! a minute. History lost at the store level is in the store contract suite
//! (`tests/contract_mongo.rs`, on the 1 MB oplog).

mod support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document};
use streamward::demo::orders::message_id;
use streamward::engine::fenced::{write_with_lease_fence, write_with_source_version, Applied};
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerState};
use streamward::model::{Fence, HealthThresholds, Lease, LeaseHealth, LeaseStatus, LockKind};
use streamward::ops::apply_audited;
use streamward::ops::OperatorOutcome;
use streamward::ops::{self, ActionRequest, GatherOptions, RewindTarget, TimeSpec};
use streamward::store::mongo::MongoStore;
use streamward::store::AuditLog;
use streamward::store::{
    AcquireOutcome, AcquireRequest, AuditContext, ChangeEvent, ChangeFeed, DocumentStore,
    LeaseStore, Namespace, OperationType, OperatorChange, ResumeChange,
};
use support::live::{live, LiveDb};
use support::sandbox::{state, DiesBeforeCommit, Paused};
use tokio::sync::{mpsc, Notify};

const LEASE: Duration = Duration::from_secs(2);
/// Bounds every wait: a takeover needs one lease period plus a bootstrap.
const PATIENCE: Duration = Duration::from_secs(30);
const ORDERS: &str = "orders";

// ---------------------------------------------------------------- harness

type Live = LiveDb;

impl Live {
    fn orders(&self) -> Namespace {
        self.ns("orders")
    }

    fn outbox(&self) -> Namespace {
        self.ns("outbox")
    }

    fn config(&self, listener: &str) -> ListenerConfig {
        let mut config = ListenerConfig::new(ORDERS, listener, self.orders());
        config.lease = LEASE;
        config.max_batch_wait = Duration::from_millis(200);
        config.heartbeat = Duration::from_secs(1);
        config.retry_backoff = Duration::from_millis(200);
        config
    }

    fn spawn(&self, listener: &str, handler: impl Handler) -> ListenerHandle {
        ListenerHandle::spawn(self.store.clone(), self.config(listener), handler)
    }

    fn outbox_handler(&self, listener: &str) -> Outbox {
        Outbox {
            store: self.store.clone(),
            outbox: self.outbox(),
            projection: self.ns("order_status"),
            listener: listener.into(),
            applied: Arc::default(),
        }
    }

    async fn put_order(&self, id: &str, status: &str, v: i64) {
        self.store
            .put(&self.orders(), doc! { "_id": id, "status": status, "v": v })
            .await
            .unwrap();
    }

    async fn lease(&self) -> Lease {
        self.store
            .get(ORDERS)
            .await
            .unwrap()
            .expect("the lease exists")
    }

    async fn messages(&self) -> Vec<Document> {
        self.store.find_all(&self.outbox()).await.unwrap()
    }
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out after {PATIENCE:?} waiting for: {what}"))
}

// ---------------------------------------------------------------- handlers

/// An order outbox in the test's database: one message per change, keyed by the
/// change's resume token and fenced by the lease version (`write_with_lease_fence`),
/// and a status projection per order fenced by the order's own version `v`
/// (`write_with_source_version`). Records what each projection write did.
#[derive(Clone)]
struct Outbox {
    store: MongoStore,
    outbox: Namespace,
    projection: Namespace,
    listener: String,
    applied: Arc<Mutex<Vec<(String, String, Applied)>>>,
}

impl Outbox {
    fn projection_writes(&self) -> Vec<(String, String, Applied)> {
        self.applied.lock().unwrap().clone()
    }
}

impl Handler for Outbox {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            let kind = match event.operation {
                OperationType::Insert => "created",
                OperationType::Update | OperationType::Replace => "changed",
                OperationType::Delete => "deleted",
                OperationType::Upsert => "created or changed",
                OperationType::Other(_) => continue,
            };
            let order = event
                .document_key
                .get_str("_id")
                .unwrap_or_default()
                .to_string();
            let status = event
                .full_document
                .as_ref()
                .and_then(|d| d.get_str("status").ok())
                .map(str::to_string);
            let message = message_id(event);
            write_with_lease_fence(
                &self.store,
                &self.outbox,
                &Bson::String(message),
                fence,
                doc! { "order": &order, "event": kind, "status": status.clone(), "by": &self.listener },
            )
            .await?;
            if let Some(v) = event
                .full_document
                .as_ref()
                .and_then(|d| d.get_i64("v").ok())
            {
                let applied = write_with_source_version(
                    &self.store,
                    &self.projection,
                    &Bson::String(order.clone()),
                    v,
                    doc! { "status": status, "by": &self.listener },
                )
                .await?;
                self.applied
                    .lock()
                    .unwrap()
                    .push((self.listener.clone(), order, applied));
            }
        }
        Ok(())
    }
}

/// Before handling its first batch, reports and waits for the gate: a holder paused

// ---------------------------------------------------------------- timelines

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_listeners_racing_for_a_new_lease_exactly_one_wins() {
    live("race", |live| async move {
        // The bare race on the port is a store contract check
        // (streamward::contract::leases::racing_inserts_leave_exactly_one_holder); this is the race
        // between two running listeners.
        let a = live.spawn("a", live.outbox_handler("a"));
        let b = live.spawn("b", live.outbox_handler("b"));
        support::wait::eventually(PATIENCE, "one streaming, one standby", || {
            let states = [state(&a), state(&b)];
            states.contains(&ListenerState::Streaming) && states.contains(&ListenerState::Standby)
        })
        .await;
        let (holder, standby) = if state(&a) == ListenerState::Streaming {
            (a, b)
        } else {
            (b, a)
        };
        let lease = live.lease().await;
        assert_eq!(
            lease.holder.as_deref(),
            Some(holder.snapshot().listener_id.as_str())
        );
        assert_eq!(lease.version, 0, "one acquisition, at version 0");
        assert_eq!(holder.snapshot().version, Some(0));

        // The holder keeps it across several lease lengths (its refreshes and commits
        // extend it); the standby never takes it meanwhile. Measured on the server's
        // clock, which is the one lease expiry is decided by.
        let acquired_at = lease.acquired_at.expect("acquiredAt is set on acquire");
        let held =
            chrono::TimeDelta::from_std(LEASE * 2).unwrap() + chrono::TimeDelta::milliseconds(500);
        support::wait::eventually_async(
            PATIENCE,
            "the holder held for over two lease lengths",
            || async { live.store.server_now().await.unwrap() > acquired_at + held },
        )
        .await;
        let lease = live.lease().await;
        assert_eq!(
            lease.holder.as_deref(),
            Some(holder.snapshot().listener_id.as_str())
        );
        assert_eq!(lease.version, 0, "no takeover while the holder is alive");
        assert_eq!(lease.acquired_at, Some(acquired_at));
        assert!(
            lease.expires_at.is_some_and(|at| at > acquired_at + held),
            "the holder kept extending its lease: {lease:?}"
        );
        assert_eq!(state(&standby), ListenerState::Standby);
        assert_eq!(standby.snapshot().version, None);
        assert_eq!(standby.snapshot().commits, 0);

        // A graceful stop releases; the standby takes over with the next version.
        holder.stop().await;
        support::wait::eventually(PATIENCE, "the standby took over", || {
            standby.snapshot().version == Some(1) && state(&standby) == ListenerState::Streaming
        })
        .await;
        standby.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_fenced_out_after_a_takeover() {
    live("paused", |live| async move {
        live.put_order("o1", "placed", 1).await;
        let gate = Arc::new(Notify::new());
        let (reached_tx, mut reached) = mpsc::unbounded_channel();
        let a = live.spawn(
            "a",
            Paused {
                inner: live.outbox_handler("a"),
                gate: gate.clone(),
                reached: reached_tx,
                armed: true,
            },
        );
        within("a holds version 0 with o1 in hand", reached.recv())
            .await
            .unwrap();
        assert_eq!(a.snapshot().version, Some(0));

        // a's lease runs out while it is paused; b takes over with version 1 and
        // handles o1 and a newer change.
        let b_outbox = live.outbox_handler("b");
        let b = live.spawn("b", b_outbox.clone());
        support::wait::eventually(PATIENCE, "b took over", || {
            b.snapshot().version == Some(1) && state(&b) == ListenerState::Streaming
        })
        .await;
        live.put_order("o1", "paid", 2).await;
        support::wait::eventually(PATIENCE, "b handled both changes", || {
            b.snapshot().events == 2
        })
        .await;
        let before = live.messages().await;
        assert_eq!(before.len(), 2);

        // a wakes and writes o1's first message under version 0: refused.
        gate.notify_one();
        support::wait::eventually(PATIENCE, "a reports the stale fenced write", || {
            a.snapshot()
                .last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("stale fenced write"))
        })
        .await;
        support::wait::eventually(PATIENCE, "a stopped processing and stands by", || {
            state(&a) == ListenerState::Standby
        })
        .await;
        let after = live.messages().await;
        assert_eq!(after, before, "the late write changed nothing");
        assert!(
            after
                .iter()
                .all(|m| m.get_i64("_fence") == Ok(1) && m.get_str("by") == Ok("b")),
            "{after:?}"
        );
        assert_eq!(a.snapshot().events, 0, "a handled nothing it could count");
        assert_eq!(a.snapshot().version, None);
        let lease = live.lease().await;
        assert_eq!((lease.holder.as_deref(), lease.version), (Some("b"), 1));
        let status = live
            .store
            .find_one(&live.ns("order_status"), &Bson::String("o1".into()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (status.get_str("status"), status.get_i64("_v")),
            (Ok("paid"), Ok(2))
        );
        assert!(b_outbox
            .projection_writes()
            .iter()
            .all(|(_, _, applied)| *applied == Applied::Yes));
        a.stop().await;
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_without_a_token_handles_writes_made_before_any_listener() {
    live("bootstrap", |live| async move {
        live.put_order("o1", "placed", 1).await;
        live.put_order("o2", "placed", 1).await;
        // One written with the driver directly, as an application would.
        live.store
            .client()
            .database(&live.db)
            .collection::<Document>("orders")
            .insert_one(doc! { "_id": "o3", "status": "placed", "v": 1_i64 })
            .await
            .unwrap();
        assert_eq!(live.store.get(ORDERS).await.unwrap(), None, "no lease yet");

        let a = live.spawn("a", live.outbox_handler("a"));
        support::wait::eventually(PATIENCE, "all three handled", || a.snapshot().events == 3).await;
        let messages = live.messages().await;
        let mut orders: Vec<&str> = messages
            .iter()
            .map(|m| m.get_str("order").unwrap())
            .collect();
        orders.sort_unstable();
        assert_eq!(orders, ["o1", "o2", "o3"]);
        assert!(messages.iter().all(|m| m.get_i64("_fence") == Ok(0)));
        assert!(messages.iter().all(|m| m.get_str("event") == Ok("created")));
        let lease = live.lease().await;
        assert_eq!(lease.version, 0);
        assert!(lease.resume_token.is_some(), "the progress is committed");
        a.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_handling_and_commit_redelivers_and_applies_once() {
    live("crash", |live| async move {
        live.put_order("o1", "placed", 1).await;
        let (applied_tx, mut applied) = mpsc::unbounded_channel();
        let a_outbox = live.outbox_handler("a");
        let a = live.spawn(
            "a",
            DiesBeforeCommit {
                inner: a_outbox.clone(),
                applied: applied_tx,
            },
        );
        within("a applied o1", applied.recv()).await.unwrap();
        a.crash();
        let crashed = live.lease().await;
        assert_eq!((crashed.holder.as_deref(), crashed.version), (Some("a"), 0));
        assert_eq!(
            a_outbox.projection_writes(),
            [("a".to_string(), "o1".to_string(), Applied::Yes)]
        );

        // b waits out a's lease, resumes from a's last commit (before o1) and gets o1 again.
        let b_outbox = live.outbox_handler("b");
        let b = live.spawn("b", b_outbox.clone());
        support::wait::eventually(PATIENCE, "b re-delivered o1 and committed it", || {
            b.snapshot().events == 1
        })
        .await;
        assert_eq!(b.snapshot().version, Some(1));
        assert_eq!(
            b_outbox.projection_writes(),
            [("b".to_string(), "o1".to_string(), Applied::AlreadyApplied)],
            "the source-versioned write refused the replay"
        );
        let messages = live.messages().await;
        assert_eq!(
            messages.len(),
            1,
            "one message for one change: {messages:?}"
        );
        assert_eq!(
            (messages[0].get_i64("_fence"), messages[0].get_str("by")),
            (Ok(1), Ok("b")),
            "rewritten in place by the new holder under its version"
        );
        let status = live.store.find_all(&live.ns("order_status")).await.unwrap();
        assert_eq!(status.len(), 1);
        assert_eq!(status[0].get_str("by"), Ok("a"), "applied once, by a");
        let lease = live.lease().await;
        assert_eq!((lease.holder.as_deref(), lease.version), (Some("b"), 1));
        assert!(lease.resume_token.is_some());
        b.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_lease_excludes_update_listeners_even_after_it_expires() {
    live("bulk", |live| async move {
        let a = live.spawn("a", live.outbox_handler("a"));
        support::wait::eventually(PATIENCE, "a streaming", || {
            state(&a) == ListenerState::Streaming
        })
        .await;
        let lease = live.lease().await;
        let bulk = OperatorChange {
            resource: ORDERS.into(),
            expected_version: lease.version,
            holder: Some("operator".into()),
            expires_in: LEASE,
            kind: LockKind::Bulk,
            resume: ResumeChange::Keep,
            note: "rebuild".into(),
            protocol: Default::default(),
        };
        let ctx = AuditContext {
            operator: "op@test".into(),
            action: "rebuild".into(),
            reason: Some("live scenario".into()),
        };
        let OperatorOutcome::Applied { after, .. } =
            apply_audited(&live.store, &bulk, None, &ctx).await.unwrap()
        else {
            panic!("the operator's compare-and-swap should apply");
        };
        assert_eq!(
            (after.kind, after.version),
            (LockKind::Bulk, lease.version + 1)
        );

        // a finds out at its next commit or refresh and stands by.
        support::wait::eventually(PATIENCE, "the fenced-out holder stands by", || {
            let s = a.snapshot();
            s.state == ListenerState::Standby
                && s.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains(&format!("version {}", lease.version)))
        })
        .await;
        live.put_order("o1", "placed", 1).await;

        // Wait, on the server's clock, until the bulk lease has expired.
        let expiry = after.expires_at.expect("the bulk lease has an expiry");
        support::wait::eventually_async(PATIENCE, "the bulk lease expired", || async {
            live.store.server_now().await.unwrap() > expiry + chrono::TimeDelta::seconds(1)
        })
        .await;
        let probe = AcquireRequest {
            resource: ORDERS.into(),
            listener: "probe".into(),
            kind: LockKind::Update,
            lease: LEASE,
            watch: None,
            seen_version: None,
        };
        assert_eq!(
            live.store.acquire(&probe).await.unwrap(),
            AcquireOutcome::HeldByOther,
            "an expired bulk lease is not taken by an incremental listener"
        );
        let still = live.lease().await;
        assert_eq!(
            (still.kind, still.holder.as_deref(), still.version),
            (LockKind::Bulk, Some("operator"), after.version)
        );
        assert_eq!(state(&a), ListenerState::Standby);
        assert_eq!(
            a.snapshot().events,
            0,
            "nothing processed under the bulk lease"
        );
        assert!(live.messages().await.is_empty());

        // The operator gives it back: a takes over promptly and handles o1.
        let give_back = OperatorChange {
            expected_version: after.version,
            holder: None,
            expires_in: Duration::ZERO,
            kind: LockKind::Update,
            ..bulk
        };
        assert!(matches!(
            apply_audited(&live.store, &give_back, None, &ctx)
                .await
                .unwrap(),
            OperatorOutcome::Applied { .. }
        ));
        support::wait::eventually(PATIENCE, "a took over", || {
            a.snapshot().version == Some(after.version + 2)
        })
        .await;
        support::wait::eventually(PATIENCE, "a handled the change made meanwhile", || {
            a.snapshot().events == 1
        })
        .await;
        let messages = live.messages().await;
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].get_i64("_fence"), Ok(after.version + 2));
        let log = live.store.audit_log(10).await.unwrap().items;
        assert_eq!(log.len(), 2, "both operator actions are audited");
        a.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_collection_leaves_the_listener_invalidated_until_an_operator_rewinds_past_it() {
    live("invalidated", |live| async move {
        let a = live.spawn("a", live.outbox_handler("a"));
        live.put_order("o1", "placed", 1).await;
        live.put_order("o2", "placed", 1).await;
        support::wait::eventually(PATIENCE, "o1 and o2 handled", || a.snapshot().events == 2).await;

        live.store.drop_collection(&live.orders()).await.unwrap();
        support::wait::eventually(PATIENCE, "invalidated", || {
            state(&a) == ListenerState::Invalidated
        })
        .await;
        let message = a.snapshot().last_error.unwrap_or_default();
        assert!(
            message.contains(&format!("{}.orders was dropped", live.db)),
            "{message}"
        );
        assert!(
            message.contains(&format!("reset {ORDERS} --to now --accept-skip")),
            "{message}"
        );

        let stuck = live.lease().await;
        let invalidated = stuck.invalidated.clone().expect("recorded on the lease");
        assert_eq!(
            invalidated.reason,
            format!("{}.orders was dropped", live.db)
        );
        let dropped_at = invalidated.at.expect("the drop's cluster time");
        let token_time = stuck.resume_token.as_ref().and_then(|t| t.time());
        assert!(
            token_time.is_some_and(|t| t < dropped_at),
            "the token ({token_time:?}) is not advanced to or past the drop ({dropped_at})"
        );
        assert_eq!(stuck.holder, None, "the lease was given back");
        let window = live.store.oplog_window().await.unwrap();
        let now = live.store.server_now().await.unwrap();
        let health = LeaseHealth::assess(&stuck, Some(&window), now, &HealthThresholds::default());
        assert_eq!(health.status, LeaseStatus::Invalidated);

        // Three lease periods later: no reacquire, no refresh, no commit.
        tokio::time::sleep(3 * LEASE).await;
        assert_eq!(state(&a), ListenerState::Invalidated);
        assert_eq!(live.lease().await, stuck, "the lease has not been touched");

        // The operator's way out that skips nothing: rewind to right after the drop, as
        // the listener's message says, planned and executed the way the command line does it.
        live.put_order("o3", "placed", 1).await;
        let after_drop = invalidated.resume_after().unwrap();
        assert!(
            message.contains(&format!(
                "rewind {ORDERS} --to {}:{}",
                after_drop.secs, after_drop.inc
            )),
            "{message}"
        );
        let request = ActionRequest::Rewind {
            resource: ORDERS.into(),
            to: RewindTarget::Time(TimeSpec::Cluster(after_drop)),
        };
        let facts = ops::gather(&live.store, &request, &GatherOptions::new("op@test"))
            .await
            .unwrap();
        let plan = ops::plan(&request, &facts);
        let done = ops::execute(&live.store, &plan, Some("orders recreated".into()))
            .await
            .unwrap();
        assert_eq!(done.after.resume_at, Some(after_drop));
        assert_eq!(
            done.after.invalidated, None,
            "the rewind cleared the record"
        );
        assert_eq!(live.lease().await.invalidated, None, "on the server too");

        live.put_order("o4", "placed", 1).await;
        support::wait::eventually(PATIENCE, "streaming again, o3 and o4 handled", || {
            state(&a) == ListenerState::Streaming && a.snapshot().events == 4
        })
        .await;
        support::wait::eventually_async(PATIENCE, "o4 published", || async {
            live.messages()
                .await
                .iter()
                .any(|m| m.get_str("order") == Ok("o4"))
        })
        .await;
        a.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_holding_an_invalidate_token_is_invalidated_at_once_not_retried() {
    live("invalidate_token", |live| async move {
        // What earlier versions committed after a drop: the invalidate notification's token.
        let orders = live
            .store
            .client()
            .database(&live.db)
            .collection::<Document>("orders");
        orders.insert_one(doc! {"_id": "o1"}).await.unwrap();
        let mut stream = orders
            .watch()
            .max_await_time(Duration::from_millis(200))
            .await
            .unwrap()
            .with_type::<Document>();
        orders.drop().await.unwrap();
        let invalidate = within("the invalidate event", async {
            loop {
                if let Some(event) = stream.next_if_any().await.unwrap() {
                    if event.get_str("operationType") == Ok("invalidate") {
                        break event.get_document("_id").unwrap().clone();
                    }
                }
            }
        })
        .await;
        let request = AcquireRequest {
            resource: ORDERS.into(),
            listener: "old-engine".into(),
            kind: LockKind::Update,
            lease: Duration::from_millis(1),
            watch: None,
            seen_version: None,
        };
        let AcquireOutcome::Acquired(old) = live.store.acquire(&request).await.unwrap() else {
            panic!("a new lease is free");
        };
        let token = streamward::model::ResumeToken::from_document(invalidate);
        let tenure = streamward::store::Tenure::of(&old).unwrap();
        live.store
            .commit(&tenure, &token, Duration::from_millis(1))
            .await
            .unwrap();

        let a = live.spawn("a", live.outbox_handler("a"));
        support::wait::eventually(PATIENCE, "invalidated", || {
            state(&a) == ListenerState::Invalidated
        })
        .await;
        let message = a.snapshot().last_error.unwrap_or_default();
        assert!(message.contains("invalidate notification"), "{message}");
        let stuck = live.lease().await;
        assert_eq!(stuck.version, old.version + 1, "one tenure, one version");
        assert_eq!(stuck.resume_token, Some(token), "kept for the operator");
        assert_eq!(
            stuck.invalidated.map(|i| (i.reason, i.at)),
            Some((
                "the stored resume token is the invalidate notification of a closed change stream"
                    .to_string(),
                token_time(&stuck.resume_token),
            ))
        );
        tokio::time::sleep(3 * LEASE).await;
        assert_eq!(live.lease().await.version, old.version + 1, "no retry loop");
        assert_eq!(state(&a), ListenerState::Invalidated);
        a.stop().await;
    })
    .await;
}

/// Dropping the lease collection under running listeners recreated every lease at
/// version 0 within seconds, with the token at the oldest entry and status OK
/// (issue 26). A listener that has seen its lease never creates it: the holder and
/// the standby stop, say why, and the lease stays gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lease_collection_is_not_recreated_at_version_zero() {
    live("lease_dropped", |live| async move {
        let a = live.spawn("a", live.outbox_handler("a"));
        support::wait::eventually(PATIENCE, "a holds version 0", || {
            a.snapshot().version == Some(0) && state(&a) == ListenerState::Streaming
        })
        .await;
        let b = live.spawn("b", live.outbox_handler("b"));
        support::wait::eventually(PATIENCE, "b stands by", || {
            state(&b) == ListenerState::Standby
        })
        .await;
        within("a stops", a.stop()).await;
        support::wait::eventually(PATIENCE, "b took over at version 1", || {
            b.snapshot().version == Some(1) && state(&b) == ListenerState::Streaming
        })
        .await;
        let c = live.spawn("c", live.outbox_handler("c"));
        support::wait::eventually(PATIENCE, "c stands by", || {
            state(&c) == ListenerState::Standby
        })
        .await;

        live.store
            .client()
            .database(&live.db)
            .collection::<Document>("leases")
            .drop()
            .await
            .unwrap();
        support::wait::eventually(PATIENCE, "the holder and the standby stop", || {
            state(&b) == ListenerState::Refused && state(&c) == ListenerState::Refused
        })
        .await;
        for (who, handle) in [("b", &b), ("c", &c)] {
            let error = handle.snapshot().last_error.unwrap_or_default();
            assert!(
                error.contains("was at version 1 and is gone") && error.contains("never go back"),
                "{who}: {error}"
            );
        }
        tokio::time::sleep(2 * LEASE).await;
        assert_eq!(
            live.store.get(ORDERS).await.unwrap(),
            None,
            "nobody created the lease again"
        );
    })
    .await;
}

fn token_time(
    token: &Option<streamward::model::ResumeToken>,
) -> Option<streamward::model::ClusterTime> {
    token.as_ref().and_then(|t| t.time())
}
