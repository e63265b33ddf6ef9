//! Group commits on the real replica set of `STREAMWARD_TEST_URI` (issue 28). The
//! handler reads the lease document itself, from the server, when each call starts and
//! when it ends: what is committed is seen there, not in the engine's account of itself.
//!
//! - a commit is in flight while the next batch is handled: at the start of some call
//!   the lease does not yet name the previous batch's last change, and by the call's
//!   end it does;
//! - a commit never covers a change the handler has not returned `Ok` for: during a
//!   call, the lease names nothing of that call's batch or later;
//! - commits are grouped (fewer commits than handler calls), and a graceful stop
//!   commits everything handled.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Document};
use streamward::engine::{CommitPolicy, Handler, HandlerError, ListenerConfig, ListenerHandle};
use streamward::model::Fence;
use streamward::store::{ChangeEvent, ChangeFeed};
use support::live::{insert_lease_resuming_at, live, token_data, LiveDb};

const CHANGES: usize = 60;
const BATCH: u32 = 5;
/// How long each handler call takes, so a commit has time to land during one.
const CALL: Duration = Duration::from_millis(60);

/// One handler call: the tokens (`_data`) it was handed, and the lease's token as the
/// server had it when the call started and when it ended.
#[derive(Debug, Clone)]
struct Call {
    handed: Vec<String>,
    at_start: Option<String>,
    at_end: Option<String>,
}

#[derive(Clone)]
struct LeaseReader {
    leases: mongodb::Collection<Document>,
    resource: String,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl LeaseReader {
    async fn committed(&self) -> Option<String> {
        let lease = self
            .leases
            .find_one(doc! {"_id": &self.resource})
            .await
            .expect("read the lease")?;
        let token = lease.get_document("resumeToken").ok()?;
        token.get_str("_data").ok().map(String::from)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Handler for LeaseReader {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        let at_start = self.committed().await;
        tokio::time::sleep(CALL).await;
        let at_end = self.committed().await;
        self.calls.lock().unwrap().push(Call {
            handed: events.iter().map(token_data).collect(),
            at_start,
            at_end,
        });
        Ok(())
    }
}

/// Inserts [`CHANGES`] documents, then runs a listener with `commit` over them from a
/// point before the first; returns its calls, the lease's token after a graceful stop,
/// and the commits and events it counted.
async fn run(
    live: &LiveDb,
    resource: &str,
    commit: CommitPolicy,
) -> (Vec<Call>, Option<String>, u64, u64) {
    let database = live.store.client().database(&live.db);
    let start = live.store.cluster_time().await.expect("cluster time");
    let orders = database.collection::<Document>(&format!("orders_{resource}"));
    let documents: Vec<Document> = (0..CHANGES).map(|n| doc! {"_id": n as i64}).collect();
    orders.insert_many(documents).await.expect("insert");
    insert_lease_resuming_at(&live.store, &live.ns("leases"), resource, start).await;
    let leases = database.collection::<Document>("leases");
    let reader = LeaseReader {
        leases,
        resource: resource.to_string(),
        calls: Arc::default(),
    };
    let mut config = ListenerConfig::new(
        resource,
        "listener-1",
        live.ns(&format!("orders_{resource}")),
    );
    config.batch_size = BATCH;
    config.max_batch_wait = Duration::from_millis(200);
    config.heartbeat = Duration::from_secs(60);
    config.commit = commit;
    let listener = ListenerHandle::spawn(live.store.clone(), config, reader.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while reader.calls().iter().map(|c| c.handed.len()).sum::<usize>() < CHANGES {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every change handled within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = listener.status.clone();
    listener.stop().await;
    let snapshot = status.borrow().clone();
    (
        reader.calls(),
        reader.committed().await,
        snapshot.commits,
        snapshot.events,
    )
}

/// Where each token was handed, counting from 0 across calls.
fn position(calls: &[Call], token: &str) -> Option<usize> {
    calls
        .iter()
        .flat_map(|c| &c.handed)
        .position(|t| t == token)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_lands_while_the_next_batch_is_handled_and_never_covers_it() {
    live("group_commit_in_flight", |live| async move {
        // Sent as soon as none is in flight: one per call, each beside the next.
        let every = Duration::ZERO;
        let (calls, committed, _, events) =
            run(&live, "in-flight", CommitPolicy::Group { every }).await;
        assert_eq!(events, CHANGES as u64);
        let mut handed_before = 0;
        let mut landed_during_a_call = 0;
        for (k, call) in calls.iter().enumerate() {
            // Nothing of this call's batch (or later) is committed while it runs.
            for seen in [&call.at_start, &call.at_end].into_iter().flatten() {
                let at = position(&calls, seen).expect("the lease names a handed change");
                assert!(
                    at < handed_before,
                    "call {k} (changes {handed_before}..) saw change {at} committed: {calls:#?}"
                );
            }
            let previous_last = k.checked_sub(1).and_then(|p| calls[p].handed.last());
            if previous_last.is_some()
                && call.at_start.as_ref() != previous_last
                && call.at_end.as_ref() == previous_last
            {
                landed_during_a_call += 1;
            }
            handed_before += call.handed.len();
        }
        assert!(
            landed_during_a_call > 0,
            "no commit of a batch landed while the next was handled: {calls:#?}"
        );
        let last = calls.last().and_then(|c| c.handed.last()).cloned();
        assert_eq!(committed, last, "the stop committed the last change");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn commits_are_grouped_and_a_graceful_stop_commits_what_was_handled() {
    live("group_commit_grouped", |live| async move {
        let every = Duration::from_millis(300);
        let (calls, committed, commits, events) =
            run(&live, "grouped", CommitPolicy::Group { every }).await;
        assert_eq!(
            events, CHANGES as u64,
            "every change counted once committed"
        );
        assert!(
            commits < calls.len() as u64,
            "{commits} commits for {} handler calls",
            calls.len()
        );
        let last = calls.last().and_then(|c| c.handed.last()).cloned();
        assert_eq!(committed, last, "the stop committed the last change");

        // Strict, for contrast: each batch committed before the next is handed.
        let (calls, committed, commits, _) = run(&live, "strict", CommitPolicy::Strict).await;
        for (k, call) in calls.iter().enumerate().skip(1) {
            assert_eq!(
                call.at_start.as_ref(),
                calls[k - 1].handed.last(),
                "strict: call {k} starts with the batch before it committed"
            );
        }
        assert!(commits >= calls.len() as u64);
        assert_eq!(
            committed,
            calls.last().and_then(|c| c.handed.last()).cloned()
        );
    })
    .await;
}
