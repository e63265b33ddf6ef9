//! Batches end at transaction boundaries, on the real replica set of
//! `STREAMWARD_TEST_URI` (issue 27). A listener whose reads hold 10 changes is given a
//! transaction of 50 inserts between two plain ones: it hands the transaction in one
//! handler call and commits only after its last change; with a bound of 20 it hands it
//! in parts of at most 20 and still commits only after the last. Every commit is seen
//! on the lease document through a change stream of the test's own, not through the
//! engine's account of itself.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Document};
use futures_util::StreamExt;
use streamward::engine::{Bootstrap, Handler, HandlerError, ListenerConfig, ListenerHandle};
use streamward::model::Fence;
use streamward::store::ChangeEvent;
use support::live::{live, token_data as data, LiveDb};

const TRANSACTION: usize = 50;

/// Keeps every batch it is handed.
#[derive(Clone, Default)]
struct Batches(Arc<Mutex<Vec<Vec<ChangeEvent>>>>);

impl Batches {
    fn all(&self) -> Vec<Vec<ChangeEvent>> {
        self.0.lock().unwrap().clone()
    }

    fn changes(&self) -> usize {
        self.0.lock().unwrap().iter().map(Vec::len).sum()
    }
}

impl Handler for Batches {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        self.0.lock().unwrap().push(events.to_vec());
        Ok(())
    }
}

/// The `_data` of every resume token committed to lease `resource`, in order, as a
/// change stream on the leases collection sees each write of the lease document.
async fn watch_commits(live: &LiveDb, resource: &str) -> Arc<Mutex<Vec<String>>> {
    let commits = Arc::new(Mutex::new(Vec::new()));
    let leases = live
        .store
        .client()
        .database(&live.db)
        .collection::<Document>("leases");
    let mut stream = leases
        .watch()
        .pipeline([doc! {"$match": {"documentKey._id": resource}}])
        .await
        .expect("watch the leases");
    let seen = Arc::clone(&commits);
    tokio::spawn(async move {
        while let Some(Ok(change)) = stream.next().await {
            // What this write set: an update's own fields, or the document an
            // insert or replacement wrote (never a later one looked up).
            let written = match (&change.update_description, &change.full_document) {
                (Some(update), _) => Some(&update.updated_fields),
                (None, Some(document)) => Some(document),
                (None, None) => None,
            };
            let token = written
                .and_then(|w| w.get_document("resumeToken").ok())
                .and_then(|t| t.get_str("_data").ok());
            if let Some(token) = token {
                seen.lock().unwrap().push(token.to_string());
            }
        }
    });
    commits
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs a listener bounded at `bound` changes per transaction over a plain insert,
/// a transaction of [`TRANSACTION`] inserts and another plain insert; returns the
/// batches it handed and the tokens it committed.
async fn read_a_transaction(live: LiveDb, bound: usize) -> (Vec<Vec<ChangeEvent>>, Vec<String>) {
    let resource = "orders-projection";
    let commits = watch_commits(&live, resource).await;
    let mut config = ListenerConfig::new(resource, "listener-1", live.ns("orders"));
    config.batch_size = 10;
    config.max_transaction_changes = bound;
    config.max_batch_wait = Duration::from_millis(300);
    config.heartbeat = Duration::from_secs(60);
    config.bootstrap = Bootstrap::Now;
    let batches = Batches::default();
    let listener = ListenerHandle::spawn(live.store.clone(), config, batches.clone());
    // Its first commit (where it starts) comes before any write it must see.
    until("first commit", || listener.snapshot().commits > 0).await;

    let client = live.store.client();
    let orders = client.database(&live.db).collection::<Document>("orders");
    orders.insert_one(doc! {"_id": "before"}).await.unwrap();
    let mut session = client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    for n in 0..TRANSACTION {
        orders
            .insert_one(doc! {"_id": format!("t{n:02}")})
            .session(&mut session)
            .await
            .unwrap();
    }
    session.commit_transaction().await.unwrap();
    orders.insert_one(doc! {"_id": "after"}).await.unwrap();

    until("52 changes handled", || {
        batches.changes() == TRANSACTION + 2
    })
    .await;
    let handled = batches.all();
    let after = data(handled.last().and_then(|b| b.last()).expect("handled"));
    until("the commit of the last change", || {
        commits.lock().unwrap().last() == Some(&after)
    })
    .await;
    listener.stop().await;
    let committed = commits.lock().unwrap().clone();
    (handled, committed)
}

/// The transaction's changes in the order handed, and the calls that held them.
fn transaction_calls(handled: &[Vec<ChangeEvent>]) -> Vec<Vec<&ChangeEvent>> {
    handled
        .iter()
        .map(|batch| {
            batch
                .iter()
                .filter(|e| e.details.transaction.is_some())
                .collect::<Vec<_>>()
        })
        .filter(|calls| !calls.is_empty())
        .collect()
}

/// No commit names a change of the transaction but its last.
fn assert_no_commit_inside(handled: &[Vec<ChangeEvent>], committed: &[String]) {
    let inside: Vec<String> = handled
        .iter()
        .flatten()
        .filter(|e| {
            e.details.transaction.is_some()
                && e.token.txn_op_index() != Some(TRANSACTION as u64 - 1)
        })
        .map(data)
        .collect();
    for token in committed {
        assert!(
            !inside.contains(token),
            "committed {token}, inside the transaction; commits: {committed:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_read_ten_changes_at_a_time_is_handed_whole_and_committed_after_its_last() {
    live("transaction_whole", |live| async move {
        let (handled, committed) = read_a_transaction(live, 1000).await;
        let calls = transaction_calls(&handled);
        assert_eq!(
            calls.len(),
            1,
            "one handler call holds the whole transaction"
        );
        let order: Vec<Option<u64>> = calls[0].iter().map(|e| e.token.txn_op_index()).collect();
        let expected: Vec<Option<u64>> = (0..TRANSACTION as u64).map(Some).collect();
        assert_eq!(order, expected, "in the transaction's order");
        assert_no_commit_inside(&handled, &committed);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_over_the_bound_is_handed_in_parts_and_committed_after_its_last() {
    live("transaction_parts", |live| async move {
        let (handled, committed) = read_a_transaction(live, 20).await;
        let calls = transaction_calls(&handled);
        assert!(
            calls.len() >= 3,
            "50 changes in parts of at most 20: {}",
            calls.len()
        );
        for part in &calls {
            assert!(part.len() <= 20, "a part of {}", part.len());
        }
        let order: Vec<Option<u64>> = calls
            .iter()
            .flatten()
            .map(|e| e.token.txn_op_index())
            .collect();
        let expected: Vec<Option<u64>> = (0..TRANSACTION as u64).map(Some).collect();
        assert_eq!(order, expected, "every change once, in order");
        assert_no_commit_inside(&handled, &committed);
    })
    .await;
}
