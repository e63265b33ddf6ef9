//! Checkpoints: a listener records its committed resume point at most once per
//! interval (the first commit of a tenure always), each resource keeps its newest few,
//! and `rewind --to-checkpoint N` goes back to one — on the sandbox and on a real
//! replica set. How a store keeps and lists them is the store contract's
//! (`streamward::contract::checkpoints`).

mod support;

use std::time::Duration;

use assert_cmd::Command;
use bson::doc;
use streamward::engine::{CommitPolicy, ListenerConfig, ListenerHandle, NoopHandler};
use streamward::model::Checkpoint;
use streamward::store::{CheckpointStore, DocumentStore, LeaseStore, Namespace, Store};
use support::live::{live, LiveDb};

const RESOURCE: &str = "orders";
const PATIENCE: Duration = Duration::from_secs(30);

fn config(watch: Namespace, listener: &str, every: Duration) -> ListenerConfig {
    let mut config = support::sandbox::config(RESOURCE, listener, watch);
    config.checkpoint_every = Some(every);
    config.checkpoints_kept = 3;
    config.heartbeat = Duration::from_millis(300);
    // A commit per batch, so checkpoints are judged against many commits a second.
    config.commit = CommitPolicy::Strict;
    config
}

async fn checkpoints<S: CheckpointStore>(store: &S) -> Vec<Checkpoint> {
    let listing = store.checkpoints(RESOURCE, 100).await.expect("checkpoints");
    assert!(listing.malformed.is_empty(), "{:?}", listing.malformed);
    listing.items
}

/// Every commit recorded (interval zero), three kept: the newest three, newest first,
/// the newest the lease's committed token; then a new tenure with a long interval
/// records its first commit only.
async fn newest_kept_and_one_per_interval<S: Store + DocumentStore + CheckpointStore>(
    store: S,
    watch: Namespace,
) {
    let first = ListenerHandle::spawn(
        store.clone(),
        config(watch.clone(), "first", Duration::ZERO),
        NoopHandler,
    );
    for i in 0..8 {
        store
            .put(&watch, doc! { "_id": i, "n": i })
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::wait::eventually(PATIENCE, "five commits", || first.snapshot().commits >= 5).await;
    first.stop().await;
    let lease = store.get(RESOURCE).await.expect("read").expect("lease");
    // Checkpoints are written on their own task: the last commit's lands soon after.
    let committed = lease.resume_token.clone().expect("committed");
    support::wait::eventually_async(PATIENCE, "the last commit's checkpoint", || async {
        checkpoints(&store)
            .await
            .first()
            .is_some_and(|c| c.token.as_document() == committed.as_document())
    })
    .await;
    let kept = checkpoints(&store).await;
    assert_eq!(kept.len(), 3, "the newest three are kept: {kept:?}");
    assert!(kept.windows(2).all(|w| w[0].at >= w[1].at), "newest first");
    assert_eq!(
        kept[0].token.as_document(),
        lease
            .resume_token
            .as_ref()
            .expect("committed")
            .as_document(),
        "the newest is the last commit"
    );
    assert!(kept
        .iter()
        .all(|c| c.holder == "first" && c.version == lease.version));

    let second = ListenerHandle::spawn(
        store.clone(),
        config(watch.clone(), "second", Duration::from_secs(3600)),
        NoopHandler,
    );
    for i in 8..14 {
        store
            .put(&watch, doc! { "_id": i, "n": i })
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::wait::eventually(PATIENCE, "three commits", || second.snapshot().commits >= 3).await;
    second.stop().await;
    support::wait::eventually_async(PATIENCE, "the second's checkpoint", || async {
        checkpoints(&store).await[0].holder == "second"
    })
    .await;
    let kept = checkpoints(&store).await;
    let by_second: Vec<&Checkpoint> = kept.iter().filter(|c| c.holder == "second").collect();
    assert_eq!(by_second.len(), 1, "one per interval: {kept:?}");
    assert_eq!(kept[0].holder, "second");
    assert_eq!(kept.len(), 3);
}

/// With an interval, one checkpoint per interval while commits go on; a listener that
/// may not write its checkpoints streams on and says so.
#[tokio::test(start_paused = true)]
async fn one_per_interval_and_a_failed_one_does_not_stop_the_stream() {
    let store = support::sandbox::sandbox(10_000);
    let watch = Namespace::new("shop", "orders");
    let listener = ListenerHandle::spawn(
        store.clone(),
        config(watch.clone(), "steady", Duration::from_secs(1)),
        NoopHandler,
    );
    for i in 0..70 {
        store
            .put(&watch, doc! { "_id": i, "n": i })
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let commits = listener.snapshot().commits;
    listener.stop().await;
    let recorded = store
        .calls()
        .record_checkpoint
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(commits >= 30, "{commits} commits");
    // 3.5 s of commits: the first, then one a second.
    assert!(
        (3..=5).contains(&recorded),
        "{recorded} checkpoints in 3.5 s"
    );

    let refused = streamward::store::sandbox::SandboxStore::new(
        streamward::store::sandbox::SandboxConfig {
            checkpoints_writable: false,
            ..streamward::store::sandbox::SandboxConfig::default()
        },
        streamward::store::sandbox::Clock::virtual_from(chrono::Utc::now()),
    );
    let listener = ListenerHandle::spawn(
        refused.clone(),
        config(watch.clone(), "refused", Duration::ZERO),
        NoopHandler,
    );
    for i in 0..10 {
        refused
            .put(&watch, doc! { "_id": i, "n": i })
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    support::wait::eventually(PATIENCE, "commits go on", || {
        listener.snapshot().commits >= 5
    })
    .await;
    let snapshot = listener.snapshot();
    let error = snapshot.last_error.unwrap_or_default();
    assert!(error.contains("could not record a checkpoint"), "{error}");
    assert_ne!(
        snapshot.state,
        streamward::engine::ListenerState::Standby,
        "it holds"
    );
    listener.stop().await;
}

#[tokio::test(start_paused = true)]
async fn on_the_sandbox_the_newest_are_kept_one_per_interval() {
    let store = support::sandbox::sandbox(10_000);
    newest_kept_and_one_per_interval(store, Namespace::new("shop", "orders")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_mongodb_the_newest_are_kept_and_a_rewind_goes_back_to_one() {
    live("checkpoints", |live: LiveDb| async move {
        newest_kept_and_one_per_interval(live.store.clone(), live.ns("orders")).await;

        // A document that is not a checkpoint is named, the others still listed.
        live.store
            .client()
            .database(&live.db)
            .collection::<bson::Document>("checkpoints")
            .insert_one(doc! { "resource": RESOURCE, "at": "noon" })
            .await
            .expect("insert");
        let listing = live
            .store
            .checkpoints(RESOURCE, 100)
            .await
            .expect("listing");
        assert_eq!(listing.items.len(), 3);
        assert_eq!(listing.malformed.len(), 1, "{:?}", listing.malformed);

        let streamward = |args: &[&str]| {
            let mut cmd = Command::cargo_bin("streamward").expect("binary");
            cmd.env("NO_COLOR", "1")
                .env_remove("STREAMWARD_URI")
                .args([
                    "--uri",
                    &live.uri,
                    "--leases",
                    &format!("{}.leases", live.db),
                ])
                .args(args)
                .timeout(Duration::from_secs(60));
            cmd.output().expect("runs")
        };
        let listed = streamward(&["checkpoints", RESOURCE, "--output", "json"]);
        assert!(listed.status.success(), "{listed:?}");
        let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
        let third = listed[2]["token"].as_str().expect("a token").to_string();
        assert_eq!(listed[0]["n"], 1);

        let missing = streamward(&["rewind", RESOURCE, "--to-checkpoint", "9"]);
        assert_eq!(missing.status.code(), Some(3), "{missing:?}");
        let said = String::from_utf8_lossy(&missing.stderr);
        assert!(
            said.contains("has 3 checkpoints, so there is no checkpoint 9"),
            "{said}"
        );

        let done = streamward(&[
            "rewind",
            RESOURCE,
            "--to-checkpoint",
            "3",
            "--execute",
            "--operator",
            "tester",
        ]);
        let out = String::from_utf8_lossy(&done.stdout);
        assert!(
            done.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&done.stderr)
        );
        let third_id = listed[2]["id"].as_str().expect("an id");
        assert!(
            out.contains(&format!("rewind to checkpoint {third_id} (recorded ")),
            "the plan names the checkpoint: {out}"
        );
        let lease = live
            .store
            .get(RESOURCE)
            .await
            .expect("read")
            .expect("lease");
        assert_eq!(
            lease.resume_token.map(|t| t.to_string()),
            Some(third),
            "the lease resumes after checkpoint 3"
        );
    })
    .await;
}
