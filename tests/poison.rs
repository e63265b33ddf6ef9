//! A change the handler can never process (issue 25): the listener finds it in its
//! batch, names it on the lease (fenced on its tenure), commits the changes before it,
//! and every listener of the lease retries it no more often than the back-off allows —
//! on the sandbox's virtual clock and on a real replica set, which is the judge.

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::doc;
use chrono::Utc;
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle, ListenerState};
use streamward::model::{
    failure_backoff, FailureCause, Fence, HealthThresholds, Lease, LeaseHealth, LeaseStatus,
    ResumeToken,
};
use streamward::ops::{self, ActionRequest, GatherOptions};
use streamward::store::{
    ChangeEvent, DocumentStore, LeaseStore, Namespace, OpsStore, SkippedLog, Store,
};
use support::live::{live, LiveDb};

/// Fails on every document marked `poison` while `broken`; notes the `n` of each
/// change it handled, with its token.
#[derive(Clone)]
struct Poisoned {
    broken: Arc<AtomicBool>,
    handled: Arc<Mutex<Vec<(i32, ResumeToken)>>>,
}

impl Handler for Poisoned {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            let document = event.full_document.as_ref();
            let n = document.and_then(|d| d.get_i32("n").ok()).unwrap_or(-1);
            if self.broken.load(Ordering::SeqCst)
                && document.is_some_and(|d| d.get_bool("poison").unwrap_or(false))
            {
                return Err(HandlerError::Failed(format!(
                    "animal {n} has no valid \"tags\""
                )));
            }
            self.handled
                .lock()
                .expect("lock")
                .push((n, event.token.clone()));
        }
        Ok(())
    }
}

impl Poisoned {
    fn handled(&self) -> BTreeSet<i32> {
        self.handled
            .lock()
            .expect("lock")
            .iter()
            .map(|(n, _)| *n)
            .collect()
    }

    fn token_of(&self, n: i32) -> Option<ResumeToken> {
        let handled = self.handled.lock().expect("lock");
        handled
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, t)| t.clone())
    }
}

/// Writes animals 1 to `count` into `ns`, number `poisoned` marked poison, and returns
/// a handler that fails on it (until fixed).
async fn animals<S: DocumentStore>(
    store: &S,
    ns: &Namespace,
    count: i32,
    poisoned: i32,
) -> Poisoned {
    for n in 1..=count {
        let mut animal = doc! { "_id": n, "n": n };
        if n == poisoned {
            animal.insert("poison", true);
        }
        store.put(ns, animal).await.expect("write");
    }
    Poisoned {
        broken: Arc::new(AtomicBool::new(true)),
        handled: Arc::default(),
    }
}

/// A listener of the `animals` lease on `ns`: a 10 s lease, from the oldest entry.
fn listener_config(ns: &Namespace, id: &str) -> ListenerConfig {
    let mut config = ListenerConfig::new("animals", id, ns.clone());
    config.lease = Duration::from_secs(10);
    config.bootstrap = streamward::engine::Bootstrap::Oldest;
    config
}

/// Waits until the lease's listeners got past every failing change, through animal
/// `n` (as `handler` handled it); returns the lease.
async fn wait_past<S: Store>(
    store: &S,
    limit: Duration,
    what: &str,
    handler: &Poisoned,
    n: i32,
) -> Lease {
    let handler = handler.clone();
    wait_for_lease(store, limit, what, move |l| {
        l.failure.is_none() && l.resume_token.is_some() && l.resume_token == handler.token_of(n)
    })
    .await
}

/// The most attempts that fit in `span` after the first, by the back-off schedule.
fn most_attempts_within(span: Duration, base: Duration) -> u32 {
    let mut attempts = 1;
    let mut elapsed = Duration::ZERO;
    loop {
        elapsed += failure_backoff(attempts, base);
        if elapsed > span {
            return attempts;
        }
        attempts += 1;
    }
}

/// Reads the lease until `check` holds, or panics after `limit`; returns it.
async fn wait_for_lease<S: Store>(
    store: &S,
    limit: Duration,
    what: &str,
    check: impl Fn(&Lease) -> bool,
) -> Lease {
    support::wait::until(limit, what, || async {
        let lease = store.get("animals").await.ok().flatten()?;
        check(&lease).then_some(lease)
    })
    .await
}

/// Five changes, the third poisoned, watched by two listeners of one lease; after
/// `span` of failing the handler is fixed.
async fn a_poison_change_is_named_retried_slowly_and_passed_once_fixed<S>(
    store: S,
    ns: Namespace,
    base: Duration,
    span: Duration,
) where
    S: Store + DocumentStore + Clone,
{
    let handler = animals(&store, &ns, 5, 3).await;
    let listener = |id: &str| {
        let mut config = listener_config(&ns, id);
        config.retry_backoff = base;
        ListenerHandle::spawn(store.clone(), config, handler.clone())
    };
    let (a, b) = (listener("a"), listener("b"));
    let patience = Duration::from_secs(30);

    let first = wait_for_lease(&store, patience, "the failure on the lease", |l| {
        l.failure.is_some()
    })
    .await;
    let failure = first.failure.clone().unwrap();
    assert_eq!(
        (
            failure.namespace.as_str(),
            failure.operation.as_str(),
            failure.document_key.as_str(),
            &failure.cause,
        ),
        (
            ns.to_string().as_str(),
            "insert",
            r#"{"_id":3}"#,
            &FailureCause::Handler
        ),
        "the one change that fails is named, not its batch"
    );
    assert!(
        failure.error.contains("animal 3 has no valid"),
        "{failure:?}"
    );
    assert!(
        handler.handled().is_superset(&BTreeSet::from([1, 2])) && !handler.handled().contains(&3),
        "{:?}",
        handler.handled()
    );
    assert_eq!(
        first.resume_token,
        handler.token_of(2),
        "the changes before it are committed: the resume point is right before it"
    );

    // Both listeners fail on it in turn, no more often than the back-off allows.
    tokio::time::sleep(span).await;
    let later = store.get("animals").await.unwrap().unwrap();
    let failing = later.failure.clone().expect("still failing");
    let attempts = failing.attempts - failure.attempts;
    let acquires = later.version - first.version;
    let bound = most_attempts_within(span, base);
    println!(
        "failing for {span:?}: {attempts} more attempts ({} in all), the version {} → {} \
         ({:.1} acquires a minute), at most {bound} attempts fit the back-off",
        failing.attempts,
        first.version,
        later.version,
        acquires as f64 * 60.0 / span.as_secs_f64()
    );
    assert!(
        (1..=bound).contains(&attempts),
        "{attempts} attempts in {span:?}; the back-off allows 1 to {bound}"
    );
    assert!(
        acquires <= i64::from(attempts) + 1,
        "{acquires} acquires for {attempts} attempts: one acquire per attempt"
    );
    assert_eq!(failing.first_at, failure.first_at, "counted as one change");
    let health = LeaseHealth::assess(&later, None, Utc::now(), &HealthThresholds::default());
    assert!(failing.attempts >= 3, "{failing:?}");
    assert_eq!(health.status, LeaseStatus::Failing);
    let states = [a.snapshot(), b.snapshot()];
    assert!(
        states.iter().any(|s| s
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("animal 3"))),
        "a listener says what fails: {states:?}"
    );

    // Fixed: the next attempt goes through and the failure is gone.
    handler.broken.store(false, Ordering::SeqCst);
    let wait = failure_backoff(failing.attempts, base) + patience;
    wait_past(
        &store,
        wait,
        "the fixed handler past the change",
        &handler,
        5,
    )
    .await;
    assert_eq!(handler.handled(), BTreeSet::from([1, 2, 3, 4, 5]));
    for handle in [a, b] {
        assert_ne!(handle.snapshot().state, ListenerState::Failing);
        handle.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn sandbox_a_poison_change_is_named_retried_slowly_and_passed_once_fixed() {
    a_poison_change_is_named_retried_slowly_and_passed_once_fixed(
        support::sandbox::sandbox(1000),
        Namespace::new("zoo", "animals"),
        Duration::from_secs(1),
        Duration::from_secs(300),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mongo_a_poison_change_is_named_retried_slowly_and_passed_once_fixed() {
    live("poison", |db: LiveDb| async move {
        let ns = db.ns("animals");
        a_poison_change_is_named_retried_slowly_and_passed_once_fixed(
            db.store,
            ns,
            Duration::from_millis(500),
            Duration::from_secs(20),
        )
        .await;
    })
    .await;
}

/// Plans and executes `request` as the command line does; returns the audit record id.
async fn act<S: OpsStore>(store: &S, request: ActionRequest) -> String {
    let facts = ops::gather(store, &request, &GatherOptions::new("oncall@test"))
        .await
        .expect("gather");
    let plan = ops::plan(&request, &facts);
    assert_eq!(plan.refusal, None, "{:?}", plan.effect);
    ops::execute(store, &plan, Some("poison".into()))
        .await
        .expect("applied")
        .audit_id
}

/// Three changes, the second poisoned: `skip` steps over exactly it (kept with its
/// oplog entry), the listeners go on past it; `undo` puts it back and they fail on it
/// again, until the handler is fixed.
async fn a_skip_steps_over_the_failing_change_and_undo_brings_it_back<S>(store: S, ns: Namespace)
where
    S: Store + OpsStore + DocumentStore,
{
    let handler = animals(&store, &ns, 3, 2).await;
    let config = listener_config(&ns, "a");
    let listener = ListenerHandle::spawn(store.clone(), config, handler.clone());
    let patience = Duration::from_secs(30);
    let failing = wait_for_lease(&store, patience, "the failure", |l| l.failure.is_some()).await;
    let failure = failing.failure.clone().unwrap();
    assert_eq!(failure.document_key, r#"{"_id":2}"#);

    let skip_id = act(
        &store,
        ActionRequest::Skip {
            resource: "animals".into(),
            to_token: None,
        },
    )
    .await;
    let skipped = wait_past(
        &store,
        patience,
        "the listener past the skipped change",
        &handler,
        3,
    )
    .await;
    assert!(
        skipped.version > failing.version,
        "the holder was fenced out"
    );
    assert_eq!(
        handler.handled(),
        BTreeSet::from([1, 3]),
        "2 was stepped over"
    );
    let kept = store.skipped_changes("animals", 10).await.expect("read");
    assert_eq!(kept.len(), 1, "{kept:?}");
    let kept = &kept[0];
    assert_eq!(kept.audit_id, skip_id);
    assert_eq!(kept.token, failure.token.clone().unwrap());
    assert_eq!(
        kept.failure.as_ref().map(|f| &f.document_key),
        Some(&failure.document_key)
    );
    let entry = kept
        .entry
        .as_ref()
        .unwrap_or_else(|| panic!("the oplog entry: {kept:?}"));
    assert_eq!(
        (
            entry.get_str("op"),
            entry
                .get_document("o")
                .ok()
                .and_then(|o| o.get_i32("_id").ok())
        ),
        (Ok("i"), Some(2)),
        "the change as the oplog holds it: {entry}"
    );

    // Undo: the change comes back, and fails again.
    act(&store, ActionRequest::Undo { audit_id: skip_id }).await;
    wait_for_lease(&store, patience, "the change failing again", |l| {
        l.failure
            .as_ref()
            .is_some_and(|f| f.document_key == r#"{"_id":2}"#)
    })
    .await;
    handler.broken.store(false, Ordering::SeqCst);
    wait_past(
        &store,
        patience + Duration::from_secs(60),
        "the fixed handler past it",
        &handler,
        3,
    )
    .await;
    assert_eq!(handler.handled(), BTreeSet::from([1, 2, 3]));
    listener.stop().await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_a_skip_steps_over_the_failing_change_and_undo_brings_it_back() {
    a_skip_steps_over_the_failing_change_and_undo_brings_it_back(
        support::sandbox::sandbox(1000),
        Namespace::new("zoo", "animals"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mongo_a_skip_steps_over_the_failing_change_and_undo_brings_it_back() {
    live("poison_skip", |db: LiveDb| async move {
        let ns = db.ns("animals");
        a_skip_steps_over_the_failing_change_and_undo_brings_it_back(db.store, ns).await;
    })
    .await;
}

/// An update whose event with its looked-up document is over 16 MB: MongoDB 6.0.5
/// cannot return it (10334 on the getMore). The listener records it on the lease with
/// its size, the server's limit and its token, retries no faster than the back-off, and
/// `skip` steps over it (its oplog entry kept). Only a real server has the limit.
#[tokio::test(flavor = "multi_thread")]
async fn mongo_a_change_too_large_to_return_is_recorded_and_skipped() {
    live("poison_too_large", |db: LiveDb| async move {
        let store = db.store.clone();
        let ns = db.ns("animals");
        let big = |c: char| c.to_string().repeat(6_000_000);
        store
            .put(&ns, doc! { "_id": 1, "n": 1, "a": big('y') })
            .await
            .expect("write");
        let handler = Poisoned {
            broken: Arc::new(AtomicBool::new(false)),
            handled: Arc::default(),
        };
        let base = Duration::from_millis(500);
        let mut config = listener_config(&ns, "a");
        config.retry_backoff = base;
        let listener = ListenerHandle::spawn(store.clone(), config, handler.clone());
        let patience = Duration::from_secs(30);
        let seen = handler.clone();
        wait_for_lease(&store, patience, "the insert handled", move |_| {
            seen.handled().contains(&1)
        })
        .await;
        // 6 MB more: the event carries the 6 MB change and the 12 MB document.
        store
            .client()
            .database(&ns.db)
            .collection::<bson::Document>(&ns.coll)
            .update_one(doc! { "_id": 1 }, doc! { "$set": { "b": big('z') } })
            .await
            .expect("update");
        let failing = wait_for_lease(&store, patience, "the too-large change recorded", |l| {
            l.failure.is_some()
        })
        .await;
        let failure = failing.failure.clone().unwrap();
        let FailureCause::TooLarge { size, limit } = failure.cause else {
            panic!("{failure:?}")
        };
        assert!(size.is_some_and(|s| s > 16_793_600), "{failure:?}");
        assert_eq!(limit, Some(16_793_600));
        assert!(
            failure.token.is_some(),
            "the server named its token: {failure:?}"
        );
        assert_eq!(failure.namespace, ns.to_string());
        println!("recorded: {}", failure.error);

        // Not a reopen loop: attempts follow the back-off.
        let span = Duration::from_secs(8);
        tokio::time::sleep(span).await;
        let later = store.get("animals").await.unwrap().unwrap();
        let attempts = later.failure.as_ref().map_or(0, |f| f.attempts) - failure.attempts;
        assert!(
            attempts <= most_attempts_within(span, base),
            "{attempts} attempts in {span:?}"
        );

        let skip_id = act(
            &store,
            ActionRequest::Skip {
                resource: "animals".into(),
                to_token: None,
            },
        )
        .await;
        store
            .put(&ns, doc! { "_id": 2, "n": 2 })
            .await
            .expect("write");
        wait_past(&store, patience, "the listener past it", &handler, 2).await;
        let kept = store.skipped_changes("animals", 10).await.expect("read");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].audit_id, skip_id);
        let entry = kept[0].entry.as_ref().expect("the update's oplog entry");
        assert_eq!(
            entry.get_str("op"),
            Ok("u"),
            "{}",
            entry.keys().cloned().collect::<Vec<_>>().join(",")
        );
        listener.stop().await;
    })
    .await;
}

/// `skip_after`: a listener that opted in steps over a change by itself after that many
/// attempts, with the same record as an operator's skip and an audit record naming it.
async fn a_listener_with_skip_after_steps_over_by_itself<S>(store: S, ns: Namespace)
where
    S: Store + OpsStore + DocumentStore,
{
    let handler = animals(&store, &ns, 3, 2).await;
    let mut config = listener_config(&ns, "a");
    config.retry_backoff = Duration::from_millis(200);
    config.skip_after = Some(3);
    let listener = ListenerHandle::spawn(store.clone(), config, handler.clone());
    let lease = wait_past(&store, Duration::from_secs(60), "stepped over", &handler, 3).await;
    assert_eq!(handler.handled(), BTreeSet::from([1, 3]));
    let kept = store.skipped_changes("animals", 10).await.expect("read");
    assert_eq!(kept.len(), 1, "{kept:?}");
    let kept = &kept[0];
    assert_eq!(kept.operator, "a", "the listener is the operator");
    assert_eq!(kept.failure.as_ref().map(|f| f.attempts), Some(3));
    assert!(kept.entry.is_some(), "{kept:?}");
    let record = store
        .audit_record(&kept.audit_id)
        .await
        .expect("read")
        .expect("its audit record");
    assert_eq!(
        (
            record.operator.as_str(),
            record.action.as_str(),
            record.state
        ),
        ("a", "skip", streamward::model::AuditState::Applied)
    );
    assert!(
        record
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("skip_after = 3")),
        "{record:?}"
    );
    assert_eq!(
        record.after.as_ref().and_then(|a| a.resume_token.as_ref()),
        Some(&kept.token),
        "the record's lease resumes right after the change"
    );
    assert!(lease.version >= record.after.as_ref().map_or(0, |a| a.version));
    listener.stop().await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_a_listener_with_skip_after_steps_over_by_itself() {
    a_listener_with_skip_after_steps_over_by_itself(
        support::sandbox::sandbox(1000),
        Namespace::new("zoo", "animals"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mongo_a_listener_with_skip_after_steps_over_by_itself() {
    live("poison_skip_after", |db: LiveDb| async move {
        let ns = db.ns("animals");
        a_listener_with_skip_after_steps_over_by_itself(db.store, ns).await;
    })
    .await;
}

/// A listener of `animals` failing inside a multi-document transaction: animal 0 is
/// handled, then one transaction inserts animals 1, 2 (poison) and 3 into `ns` and, when
/// `elsewhere` is given, a payment there; returns the listener, its handler and the
/// lease once it records the failure on animal 2.
async fn failing_in_a_transaction(
    db: &LiveDb,
    ns: &Namespace,
    elsewhere: Option<&Namespace>,
) -> (ListenerHandle, Poisoned, Lease) {
    let store = db.store.clone();
    // The collections exist before the transaction (6.0 creates none inside one).
    store
        .put(ns, doc! { "_id": 0, "n": 0 })
        .await
        .expect("write");
    if let Some(other) = elsewhere {
        store.put(other, doc! { "_id": 0 }).await.expect("write");
    }
    let handler = Poisoned {
        broken: Arc::new(AtomicBool::new(true)),
        handled: Arc::default(),
    };
    let config = listener_config(ns, "a");
    let listener = ListenerHandle::spawn(store.clone(), config, handler.clone());
    let seen = handler.clone();
    wait_for_lease(
        &store,
        Duration::from_secs(30),
        "the first insert",
        move |_| seen.handled().contains(&0),
    )
    .await;
    let collection = |ns: &Namespace| {
        store
            .client()
            .database(&ns.db)
            .collection::<bson::Document>(&ns.coll)
    };
    let mut session = store.client().start_session().await.expect("session");
    session.start_transaction().await.expect("transaction");
    for animal in [
        doc! { "_id": 1, "n": 1 },
        doc! { "_id": 2, "n": 2, "poison": true },
        doc! { "_id": 3, "n": 3 },
    ] {
        collection(ns)
            .insert_one(animal)
            .session(&mut session)
            .await
            .expect("insert");
    }
    if let Some(other) = elsewhere {
        collection(other)
            .insert_one(doc! { "_id": 10, "paid": true })
            .session(&mut session)
            .await
            .expect("insert");
    }
    session.commit_transaction().await.expect("commit");
    let failing = wait_for_lease(&store, Duration::from_secs(30), "the failure", |l| {
        l.failure.is_some()
    })
    .await;
    assert_eq!(
        failing.failure.as_ref().unwrap().document_key,
        r#"{"_id":2}"#
    );
    (listener, handler, failing)
}

/// A change inside a multi-document transaction: the plan says which transaction and how
/// many changes it holds (and names `--whole-transaction`), the move within the one
/// oplog entry is not taken for "no move", and only that change is skipped. Only a
/// real server has transactions.
#[tokio::test(flavor = "multi_thread")]
async fn mongo_a_skip_inside_a_transaction_says_so_and_skips_only_that_change() {
    live("poison_transaction", |db: LiveDb| async move {
        let store = db.store.clone();
        let ns = db.ns("animals");
        let (listener, handler, _) = failing_in_a_transaction(&db, &ns, None).await;

        let request = ActionRequest::Skip {
            resource: "animals".into(),
            to_token: None,
        };
        let facts = ops::gather(&store, &request, &GatherOptions::new("oncall@test"))
            .await
            .expect("gather");
        let plan = ops::plan(&request, &facts);
        assert_eq!(plan.refusal, None);
        let lines = plan.effect.lines.join("\n");
        assert!(!lines.contains("does not move"), "{lines}");
        let warning = plan
            .warnings
            .iter()
            .find(|w| w.contains("multi-document transaction"))
            .unwrap_or_else(|| panic!("{:?}", plan.warnings));
        assert!(
            warning.contains("of 3 changes") && warning.contains("--whole-transaction"),
            "{warning}"
        );
        println!("plan: {lines}\nwarning: {warning}");
        ops::execute(&store, &plan, None).await.expect("skipped");
        wait_past(
            &store,
            Duration::from_secs(30),
            "past the skipped change",
            &handler,
            3,
        )
        .await;
        assert_eq!(
            handler.handled(),
            BTreeSet::from([0, 1, 3]),
            "only 2 skipped"
        );
        listener.stop().await;
    })
    .await;
}

/// `skip --whole-transaction`: a transaction of 3 inserts on the lease's collection and
/// 1 on another, the handler failing on the 2nd (the 1st was handled and committed
/// before it). The plan lists the 2 changes still to handle, counts the handled one and
/// the one elsewhere, and is refused read-only; executed, each is kept under the audit
/// id, the listener handles what follows; `undo` brings both back.
#[tokio::test(flavor = "multi_thread")]
async fn mongo_a_whole_transaction_skip_steps_over_its_changes_and_undo_brings_them_back() {
    live("poison_whole_transaction", |db: LiveDb| async move {
        let store = db.store.clone();
        let ns = db.ns("animals");
        let payments = db.ns("payments");
        let (listener, handler, failing) =
            failing_in_a_transaction(&db, &ns, Some(&payments)).await;
        let request = ActionRequest::SkipTransaction {
            resource: "animals".into(),
            to_token: None,
        };
        let mut read_only = GatherOptions::new("oncall@test");
        read_only.read_only = true;
        let facts = ops::gather(&store, &request, &read_only)
            .await
            .expect("gather");
        assert_eq!(
            ops::plan(&request, &facts).refusal.map(|r| r.kind),
            Some(ops::RefusalKind::ReadOnly)
        );

        // The failing listener takes the lease again after each back-off, which moves
        // its version: a plan it overtook is not applied (Changed), and is made again.
        let mut tries = 0;
        let (plan, audit_id) = loop {
            let facts = ops::gather(&store, &request, &GatherOptions::new("oncall@test"))
                .await
                .expect("gather");
            let plan = ops::plan(&request, &facts);
            assert_eq!(plan.refusal, None, "{:?}", plan.effect);
            match ops::execute(&store, &plan, Some("poison transaction".into())).await {
                Ok(done) => break (plan, done.audit_id),
                Err(ops::OpsError::Changed { .. }) if tries < 5 => tries += 1,
                Err(e) => panic!("not applied: {e}"),
            }
        };
        let lines = plan.effect.lines.join("\n");
        println!("plan:\n{lines}\nwarnings: {:?}", plan.warnings);
        let keys: Vec<&str> = plan
            .effect
            .stepped_over
            .iter()
            .map(|c| c.key.as_str())
            .collect();
        assert_eq!(keys, [r#"{"_id":2}"#, r#"{"_id":3}"#]);
        assert_eq!(
            plan.effect.stepped_over[0].token.as_document(),
            failing
                .failure
                .as_ref()
                .unwrap()
                .token
                .as_ref()
                .unwrap()
                .as_document(),
            "the first stepped over is the failing change"
        );
        assert!(
            lines.contains("steps over 2 changes")
                && lines.contains(&format!("1 on {payments}"))
                && lines.contains("— the failing one: "),
            "{lines}"
        );
        assert!(
            plan.warnings
                .iter()
                .any(|w| w.contains("the first 1 of its 3 changes")),
            "{:?}",
            plan.warnings
        );
        let stepped = plan.effect.stepped_over.clone();

        // Each change stepped over is kept under the one audit id, with its entry.
        let kept = store.skipped_changes("animals", 10).await.expect("read");
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept.iter().all(|k| k.audit_id == audit_id), "{kept:?}");
        let mut tokens: Vec<_> = kept.iter().map(|k| k.token.as_document().clone()).collect();
        tokens.sort_by_key(|t| t.get_str("_data").unwrap_or_default().to_string());
        let expected: Vec<_> = stepped
            .iter()
            .map(|c| c.token.as_document().clone())
            .collect();
        assert_eq!(tokens, expected);
        assert_eq!(
            kept.iter().filter(|k| k.failure.is_some()).count(),
            1,
            "what the lease recorded goes with the failing change only"
        );
        assert!(
            kept.iter().all(|k| k
                .entry
                .as_ref()
                .and_then(|e| e.get_document("o").ok())
                .and_then(|o| o.get_array("applyOps").ok())
                .is_some_and(|ops| ops.len() == 1)),
            "each kept with its own operation alone of its transaction's entry: {kept:?}"
        );

        // The listener goes on past the transaction.
        store
            .put(&ns, doc! { "_id": 4, "n": 4 })
            .await
            .expect("write");
        wait_past(
            &store,
            Duration::from_secs(30),
            "past the transaction",
            &handler,
            4,
        )
        .await;
        assert_eq!(handler.handled(), BTreeSet::from([0, 1, 4]));

        // Undo: back before the first change stepped over; fixed, the handler takes both.
        handler.broken.store(false, Ordering::SeqCst);
        let undo = act(&store, ActionRequest::Undo { audit_id }).await;
        assert!(!undo.is_empty());
        let seen = handler.clone();
        wait_for_lease(
            &store,
            Duration::from_secs(30),
            "2 and 3 handled again",
            move |_| {
                let handled = seen.handled();
                handled.contains(&2) && handled.contains(&3)
            },
        )
        .await;
        listener.stop().await;
    })
    .await;
}
