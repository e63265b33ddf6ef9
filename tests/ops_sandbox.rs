//! The guarded actions on the sandbox, with the demo application's listeners running
//! and its workload writing, on a virtual clock (issue 5, proof a–g).

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use streamward::cli::commands::actions::{run_action, ActionOptions, ActionSettings};
use streamward::cli::commands::audit::run_audit;
use streamward::cli::commands::rebuild::{run_rebuild, ProgressDisplay};
use streamward::cli::common::settings::OutputFormat;
use streamward::demo::orders::{message_id, orders_ns, outbox_ns, OrderOutbox, ORDERS_RESOURCE};
use streamward::demo::pets::{
    aggregates_ns, animals_ns, expected_counts, read_animals, stored_counts, PetAggregates,
    PET_RESOURCE,
};
use streamward::demo::rebuild::{PetRebuild, PET_REBUILD};
use streamward::demo::workload::{Workload, WorkloadConfig};
use streamward::engine::{ListenerHandle, ListenerState};
use streamward::model::{AuditState, HealthThresholds, Lease, LeaseHealth, LeaseStatus, LockKind};
use streamward::ops::{
    self, ActionRequest, Direction, Executed, GatherOptions, OpsError, Progress, RefusalKind,
    ResetTarget, RewindTarget,
};
use streamward::store::sandbox::{HistoryEntry, SandboxStore, StartMark};
use streamward::store::AuditLog;
use streamward::store::{
    ChangeFeed, ChangeStream, DocumentStore, FeedOptions, LeaseStore, StartPoint,
};
use support::sandbox::{config, sandbox, state, Paused};
use support::wait::eventually;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const SECOND: Duration = Duration::from_secs(1);
const OPERATOR: &str = "ann@oncall";

fn options() -> GatherOptions {
    GatherOptions::new(OPERATOR)
}

fn spawn_pets(store: &SandboxStore, name: &str) -> ListenerHandle {
    ListenerHandle::spawn(
        store.clone(),
        config(PET_RESOURCE, name, animals_ns()),
        PetAggregates::new(store.clone()),
    )
}

fn spawn_outbox(store: &SandboxStore, name: &str) -> ListenerHandle {
    ListenerHandle::spawn(
        store.clone(),
        config(ORDERS_RESOURCE, name, orders_ns()),
        OrderOutbox::new(store.clone()),
    )
}

/// The demo's workload writing animals and orders on the virtual clock.
struct Writer {
    stop: CancellationToken,
    task: JoinHandle<u64>,
}

impl Writer {
    fn start(store: &SandboxStore, rate_per_sec: f64, seed: u64) -> Self {
        let stop = CancellationToken::new();
        let workload = Workload::new(
            store.clone(),
            WorkloadConfig {
                rate_per_sec,
                max_animals: 40,
                order_share: 0.3,
                seed,
                ..WorkloadConfig::default()
            },
        );
        let task = tokio::spawn(workload.run(stop.clone()));
        Self { stop, task }
    }

    async fn stop(self) -> u64 {
        self.stop.cancel();
        self.task.await.expect("workload task")
    }
}

async fn lease(store: &SandboxStore, resource: &str) -> Lease {
    store.get(resource).await.unwrap().expect("lease exists")
}

/// Plans and executes `request`, checking that it left exactly one audit record with
/// the lease before and after (proof g).
async fn act(store: &SandboxStore, request: ActionRequest) -> Result<Executed, OpsError> {
    let audit_before = store.audit_log(usize::MAX).await.unwrap().items.len();
    let facts = ops::gather(store, &request, &options()).await?;
    let plan = ops::plan(&request, &facts);
    let result = ops::execute(store, &plan, Some("test".into())).await;
    let records = store.audit_log(usize::MAX).await.unwrap().items;
    match &result {
        Ok(done) => {
            assert_eq!(
                records.len(),
                audit_before + 1,
                "one audit record per action"
            );
            let record = &records[0];
            assert_eq!(record.id, done.audit_id);
            assert_eq!(record.action, request.kind().name());
            assert_eq!(record.operator, OPERATOR);
            assert_eq!(record.reason.as_deref(), Some("test"));
            assert_eq!(record.before.as_ref(), Some(&done.before));
            assert_eq!(record.after.as_ref(), Some(&done.after));
            assert_eq!(done.after.version, done.before.version + 1);
        }
        Err(_) => assert_eq!(records.len(), audit_before, "no audit without an action"),
    }
    result
}

/// Stops the workload, lets the listeners catch up, checks the aggregates against a
/// recomputation, then stops the listeners.
async fn settle_and_check_aggregates(
    store: &SandboxStore,
    writer: Writer,
    listeners: impl IntoIterator<Item = ListenerHandle>,
) {
    writer.stop().await;
    tokio::time::sleep(30 * SECOND).await;
    assert_aggregates_exact(store).await;
    for handle in listeners {
        handle.stop().await;
    }
}

async fn assert_aggregates_exact(store: &SandboxStore) {
    let animals = read_animals(store).await.unwrap();
    assert!(!animals.is_empty(), "the workload wrote animals");
    assert_eq!(
        stored_counts(store).await.unwrap(),
        expected_counts(&animals),
        "the aggregates equal a recomputation from the animals"
    );
}

fn status(
    store: &SandboxStore,
    lease: &Lease,
    window: streamward::model::OplogWindow,
) -> LeaseStatus {
    LeaseHealth::assess(
        lease,
        Some(&window),
        store.clock().now(),
        &HealthThresholds::default(),
    )
    .status
}

/// Every change on `ns` still in the log.
async fn changes_on(
    store: &SandboxStore,
    ns: &streamward::store::Namespace,
) -> Vec<streamward::store::ChangeEvent> {
    let window = store.oplog_window().await.unwrap();
    let mut stream = store
        .open(
            ns,
            StartPoint::At(window.first),
            FeedOptions {
                batch_size: 10_000,
                max_await: Duration::from_millis(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    loop {
        let batch = stream.next_batch().await.unwrap();
        if batch.events.is_empty() {
            return events;
        }
        events.extend(batch.events);
    }
}

// ---------------------------------------------------------------- (a) takeover

#[tokio::test(start_paused = true)]
async fn a_takeover_of_a_live_holder_fences_it_out_and_a_standby_loses_nothing() {
    let store = sandbox(100_000);
    let pets = [spawn_pets(&store, "pets-1"), spawn_pets(&store, "pets-2")];
    store
        .put(
            &orders_ns(),
            bson::doc! {"_id": "o-first", "status": "placed"},
        )
        .await
        .unwrap();
    // The holder hangs inside its handler with o-first: alive, holding, making no progress.
    let gate = Arc::new(Notify::new());
    let (reached_tx, mut reached) = mpsc::unbounded_channel();
    let hung = ListenerHandle::spawn(
        store.clone(),
        config(ORDERS_RESOURCE, "orders-hung", orders_ns()),
        Paused {
            inner: OrderOutbox::new(store.clone()),
            gate: gate.clone(),
            reached: reached_tx,
            armed: true,
        },
    );
    reached.recv().await.unwrap();
    let standby = spawn_outbox(&store, "orders-standby");
    eventually(5 * SECOND, "standing by", || {
        state(&standby) == ListenerState::Standby
    })
    .await;
    let writer = Writer::start(&store, 5.0, 7);
    tokio::time::sleep(3 * SECOND).await;

    let request = ActionRequest::Takeover {
        resource: ORDERS_RESOURCE.into(),
        to: None,
        hold: None,
    };
    let facts = ops::gather(&store, &request, &options()).await.unwrap();
    let plan = ops::plan(&request, &facts);
    assert_eq!(plan.effect.fences_out.as_deref(), Some("orders-hung"));
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("orders-hung renewed") && w.ends_with("it looks alive")),
        "{:?}",
        plan.warnings
    );
    assert_eq!(plan.confirm_text(), Some(ORDERS_RESOURCE));
    let captured = plan.captured.clone().unwrap();
    assert_eq!(captured.holder.as_deref(), Some("orders-hung"));
    let done = act(&store, request).await.unwrap();
    assert_eq!(done.before.version, captured.version);
    assert_eq!(done.after.holder, None);

    eventually(30 * SECOND, "the standby took over", || {
        state(&standby) == ListenerState::Streaming
    })
    .await;
    assert!(standby.snapshot().version.unwrap() > done.after.version - 1);
    // The hung holder wakes up: its next fenced write is rejected and it stops.
    gate.notify_one();
    eventually(10 * SECOND, "the ex-holder was fenced out", || {
        hung.snapshot()
            .last_error
            .is_some_and(|e| e.contains("stale fenced write"))
    })
    .await;
    assert_eq!(hung.snapshot().lost_locks, 1);
    assert_eq!(
        hung.snapshot().events,
        0,
        "it committed nothing after the takeover"
    );
    let late = store.history().into_iter().any(|h| {
        matches!(h, HistoryEntry::Committed { listener, version, .. }
            if listener == "orders-hung" && version == captured.version)
    });
    assert!(!late, "no commit of the fenced-out version");

    tokio::time::sleep(30 * SECOND).await;
    writer.stop().await;
    tokio::time::sleep(20 * SECOND).await;
    // No change lost: every order change has its message, written under a later version.
    let changes = changes_on(&store, &orders_ns()).await;
    assert!(
        changes.len() > 20,
        "the workload kept writing orders: {}",
        changes.len()
    );
    let messages: BTreeSet<String> = store
        .find_all(&outbox_ns())
        .await
        .unwrap()
        .iter()
        .map(|m| m.get_str("_id").unwrap().to_string())
        .collect();
    for change in &changes {
        assert!(
            messages.contains(&message_id(change)),
            "message for {}",
            message_id(change)
        );
    }
    assert_eq!(
        messages.len(),
        changes.len(),
        "exactly one message per change"
    );
    for handle in [hung, standby] {
        handle.stop().await;
    }
    for handle in pets {
        handle.stop().await;
    }
}

// ---------------------------------------------------------------- (b) rewind

#[tokio::test(start_paused = true)]
async fn b_rewind_by_ten_minutes_replays_and_the_aggregates_stay_exact() {
    let store = sandbox(100_000);
    let pets = [spawn_pets(&store, "pets-1"), spawn_pets(&store, "pets-2")];
    let orders = spawn_outbox(&store, "orders-1");
    let writer = Writer::start(&store, 2.0, 11);
    tokio::time::sleep(15 * 60 * SECOND).await; // fifteen minutes of history
    let before = lease(&store, PET_RESOURCE).await;
    let events_before: u64 = pets.iter().map(|p| p.snapshot().events).sum();

    let request = ActionRequest::Rewind {
        resource: PET_RESOURCE.into(),
        to: RewindTarget::By(10 * 60 * SECOND),
    };
    let facts = ops::gather(&store, &request, &options()).await.unwrap();
    let plan = ops::plan(&request, &facts);
    let moved = plan.effect.resume.clone().expect("a resume move");
    assert_eq!(moved.direction, Direction::Replay);
    assert_eq!(moved.span, 10 * 60 * SECOND);
    let counted = moved.count.as_ref().expect("counted").counted;
    assert!(
        counted > 200,
        "about 840 animal changes in ten minutes, counted {counted}"
    );
    let done = act(&store, request).await.unwrap();
    let target = done.after.resume_at.expect("resumeAt set");
    assert_eq!(done.after.resume_token, None);
    assert_eq!(
        target.secs,
        before.resume_point().time().unwrap().secs - 600,
        "ten minutes back from the resume point"
    );

    // A listener starts again at the target and replays what it had processed.
    eventually(30 * SECOND, "a new tenure from the rewound point", || {
        store.history().iter().any(|h| {
            matches!(h,
            HistoryEntry::Acquired { resource, start: StartMark::At(t), .. }
                if resource == PET_RESOURCE && *t == target)
        })
    })
    .await;
    tokio::time::sleep(5 * 60 * SECOND).await;
    writer.stop().await;
    tokio::time::sleep(60 * SECOND).await;
    let events_after: u64 = pets.iter().map(|p| p.snapshot().events).sum();
    assert!(
        events_after - events_before >= counted,
        "the {counted} changes were replayed (handled {})",
        events_after - events_before
    );
    assert_aggregates_exact(&store).await;
    for handle in pets {
        handle.stop().await;
    }
    orders.stop().await;
}

// ---------------------------------------------------------------- (c) history lost, reset

#[tokio::test(start_paused = true)]
async fn c_after_history_is_lost_a_reset_to_oldest_lets_the_listener_recover() {
    let store = sandbox(60);
    let first = spawn_outbox(&store, "orders-1");
    let writer = Writer::start(&store, 1.0, 3);
    eventually(30 * SECOND, "handled orders", || {
        first.snapshot().events > 2
    })
    .await;
    first.stop().await; // the service is down…
    tokio::time::sleep(4 * 60 * SECOND).await; // …while the log rolls over
    let lost = lease(&store, ORDERS_RESOURCE).await;
    let window = store.oplog_window().await.unwrap();
    assert_eq!(status(&store, &lost, window), LeaseStatus::Lost);
    let restarted = spawn_outbox(&store, "orders-2");
    eventually(10 * SECOND, "history lost", || {
        state(&restarted) == ListenerState::HistoryLost
    })
    .await;

    let request = ActionRequest::Reset {
        resource: ORDERS_RESOURCE.into(),
        to: ResetTarget::Oldest,
        accept_skip: false,
    };
    let facts = ops::gather(&store, &request, &options()).await.unwrap();
    let plan = ops::plan(&request, &facts);
    assert!(
        plan.warnings.iter().any(|w| w.contains("LOST")),
        "{:?}",
        plan.warnings
    );
    let done = act(&store, request).await.unwrap();
    assert_eq!(
        (done.after.resume_token.clone(), done.after.resume_at),
        (None, None)
    );

    // The listener that stopped waits on its lease: it starts again by itself, from
    // the oldest entry, without a restart.
    let recovered = restarted;
    eventually(30 * SECOND, "streaming again", || {
        state(&recovered) == ListenerState::Streaming
    })
    .await;
    tokio::time::sleep(60 * SECOND).await;
    writer.stop().await;
    tokio::time::sleep(20 * SECOND).await;
    assert!(recovered.snapshot().events > 10, "it processes again");
    let now = lease(&store, ORDERS_RESOURCE).await;
    let window = store.oplog_window().await.unwrap();
    assert_ne!(status(&store, &now, window), LeaseStatus::Lost);
    let messages: BTreeSet<String> = store
        .find_all(&outbox_ns())
        .await
        .unwrap()
        .iter()
        .map(|m| m.get_str("_id").unwrap().to_string())
        .collect();
    for change in changes_on(&store, &orders_ns()).await {
        assert!(
            messages.contains(&message_id(&change)),
            "every change still in the log was published"
        );
    }
    recovered.stop().await;
}

// ---------------------------------------------------------------- (d) rebuild

async fn rebuild_with(
    store: &SandboxStore,
    definition: &PetRebuild,
) -> Result<ops::RebuildOutcome, OpsError> {
    let request = ActionRequest::Rebuild {
        name: PET_REBUILD.into(),
    };
    let mut gather = options();
    gather.rebuild = Some(PetRebuild::target());
    let audit_before = store.audit_log(usize::MAX).await.unwrap().items.len();
    let facts = ops::gather(store, &request, &gather).await?;
    let plan = ops::plan(&request, &facts);
    let (progress, mut seen) = Progress::channel();
    let watcher = tokio::spawn(async move {
        let mut last = None;
        while seen.changed().await.is_ok() {
            last = Some(seen.borrow_and_update().clone());
        }
        last
    });
    let result = ops::rebuild(
        store,
        &plan,
        definition,
        &progress,
        &CancellationToken::new(),
        Some("test".into()),
    )
    .await;
    drop(progress);
    let last = watcher.await.unwrap().expect("progress was reported");
    assert!(last.finished);
    assert_eq!(last.total, Some(7), "six tag documents and the cleanup");
    let records = store.audit_log(usize::MAX).await.unwrap().items;
    assert_eq!(
        records.len(),
        audit_before + 1,
        "one audit record per rebuild, whatever happened"
    );
    assert_eq!(records[0].action, "rebuild");
    assert!(records[0].before.is_some() && records[0].after.is_some());
    if let Ok(outcome) = &result {
        assert_eq!(last.done, 7);
        assert_eq!(records[0].id, outcome.executed.audit_id);
        assert_eq!(records[0].after.as_ref(), Some(&outcome.executed.after));
    }
    result
}

#[tokio::test(start_paused = true)]
async fn d_a_rebuild_while_the_workload_runs_keeps_listeners_out_and_ends_exact() {
    let store = sandbox(100_000);
    let pets = [spawn_pets(&store, "pets-1"), spawn_pets(&store, "pets-2")];
    let writer = Writer::start(&store, 4.0, 5);
    tokio::time::sleep(60 * SECOND).await;
    // A corrupted aggregate: a document no tag has, which incremental handling never fixes.
    store
        .put(
            &aggregates_ns(),
            bson::doc! {"_id": "bogus", "counts": {"house": 5_i64}, "members": {}},
        )
        .await
        .unwrap();
    let animals = read_animals(&store).await.unwrap();
    assert_ne!(
        stored_counts(&store).await.unwrap(),
        expected_counts(&animals)
    );

    let history_mark = store.history().len();
    let outcome = rebuild_with(
        &store,
        &PetRebuild {
            step_delay: 3 * SECOND,
            fail_after: None,
            ..PetRebuild::default()
        },
    )
    .await
    .unwrap();
    let after = &outcome.executed.after;
    assert_eq!(after.kind, LockKind::Update);
    assert_eq!(after.holder, None, "released");
    assert_eq!(
        (after.resume_token.clone(), after.resume_at),
        (None, Some(outcome.t0))
    );
    assert_eq!(outcome.executed.before.kind, LockKind::Update);

    // Between taking the bulk lease and giving it back no listener acquired or committed.
    let during: Vec<HistoryEntry> = store.history()[history_mark..].to_vec();
    let bulk_at = during
        .iter()
        .position(|h| matches!(h, HistoryEntry::OperatorChanged { resource, holder: Some(h), .. } if resource == PET_RESOURCE && h == OPERATOR))
        .expect("the bulk write");
    let released_at = during
        .iter()
        .position(|h| matches!(h, HistoryEntry::OperatorChanged { resource, holder: None, .. } if resource == PET_RESOURCE))
        .expect("the release");
    let window = &during[bulk_at + 1..released_at];
    let writes_meanwhile = window
        .iter()
        .filter(|h| matches!(h, HistoryEntry::Changed { ns, .. } if *ns == animals_ns()))
        .count();
    assert!(
        writes_meanwhile > 20,
        "the workload wrote during the rebuild: {writes_meanwhile}"
    );
    assert!(
        !window.iter().any(|h| matches!(h,
            HistoryEntry::Acquired { resource, .. } | HistoryEntry::Committed { resource, .. }
                if resource == PET_RESOURCE)),
        "update listeners stayed out"
    );
    // Afterwards a listener replays from T0.
    let t0 = outcome.t0;
    eventually(30 * SECOND, "a listener replays from T0", || {
        store.history().iter().any(|h| matches!(h,
            HistoryEntry::Acquired { resource, start: StartMark::At(t), .. } if resource == PET_RESOURCE && *t == t0))
    })
    .await;
    tokio::time::sleep(30 * SECOND).await;
    settle_and_check_aggregates(&store, writer, pets).await;
}

// ---------------------------------------------------------------- (e) stuck bulk

#[tokio::test(start_paused = true)]
async fn e_a_rebuild_failing_half_way_is_stuck_bulk_and_both_recoveries_work() {
    let store = sandbox(100_000);
    let pets = [spawn_pets(&store, "pets-1"), spawn_pets(&store, "pets-2")];
    let writer = Writer::start(&store, 3.0, 9);
    tokio::time::sleep(30 * SECOND).await;
    let failing = PetRebuild {
        step_delay: SECOND,
        fail_after: Some(3),
        ..PetRebuild::default()
    };

    for recovery in ["re-run", "abort-bulk"] {
        let error = rebuild_with(&store, &failing).await.unwrap_err();
        assert!(matches!(error, OpsError::StuckBulk { .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("injected failure after 3 of 6"),
            "{message}"
        );
        assert!(message.contains("STUCK BULK"), "{message}");
        assert!(
            message.contains("streamward rebuild pet-aggregates --execute"),
            "{message}"
        );
        assert!(
            message.contains("streamward abort-bulk pet-aggregates --execute"),
            "{message}"
        );
        assert_eq!(streamward::cli::common::exit::for_ops(&error), 1);
        let stuck = lease(&store, PET_RESOURCE).await;
        assert_eq!(stuck.kind, LockKind::Bulk);
        assert_eq!(
            status(&store, &stuck, store.oplog_window().await.unwrap()),
            LeaseStatus::StuckBulk
        );
        let record = &store.audit_log(1).await.unwrap().items[0];
        assert!(record.outcome.contains("STUCK BULK"), "{}", record.outcome);

        // Stuck means stuck: a minute later no listener has taken it.
        let events: u64 = pets.iter().map(|p| p.snapshot().events).sum();
        tokio::time::sleep(60 * SECOND).await;
        assert_eq!(lease(&store, PET_RESOURCE).await.version, stuck.version);
        assert_eq!(
            pets.iter().map(|p| p.snapshot().events).sum::<u64>(),
            events
        );

        match recovery {
            "re-run" => {
                rebuild_with(&store, &PetRebuild::default()).await.unwrap();
            }
            _ => {
                let request = ActionRequest::AbortBulk {
                    resource: PET_RESOURCE.into(),
                };
                let plan = ops::plan(
                    &request,
                    &ops::gather(&store, &request, &options()).await.unwrap(),
                );
                assert!(plan
                    .warnings
                    .iter()
                    .any(|w| w.contains("may be inconsistent")));
                let done = act(&store, request).await.unwrap();
                assert_eq!(done.after.kind, LockKind::Update);
                assert_eq!(
                    done.after.resume_point(),
                    stuck.resume_point(),
                    "resume point kept"
                );
            }
        }
        eventually(30 * SECOND, "listeners are back", || {
            pets.iter().any(|p| state(p) == ListenerState::Streaming)
        })
        .await;
        let events = pets.iter().map(|p| p.snapshot().events).sum::<u64>();
        tokio::time::sleep(30 * SECOND).await;
        assert!(
            pets.iter().map(|p| p.snapshot().events).sum::<u64>() > events,
            "processing resumed after {recovery}"
        );
    }
    settle_and_check_aggregates(&store, writer, pets).await;
}

// ---------------------------------------------------------------- (f) undo

#[tokio::test(start_paused = true)]
async fn f_undo_restores_the_previous_resume_point() {
    let store = sandbox(100_000);
    let listener = spawn_pets(&store, "pets-1");
    let writer = Writer::start(&store, 2.0, 13);
    tokio::time::sleep(5 * 60 * SECOND).await;
    writer.stop().await;
    tokio::time::sleep(10 * SECOND).await;
    listener.stop().await;
    let before = lease(&store, PET_RESOURCE).await;
    let token = before.resume_token.clone().expect("committed");

    let rewound = act(
        &store,
        ActionRequest::Rewind {
            resource: PET_RESOURCE.into(),
            to: RewindTarget::By(2 * 60 * SECOND),
        },
    )
    .await
    .unwrap();
    assert_eq!(rewound.after.resume_token, None);
    let undone = act(
        &store,
        ActionRequest::Undo {
            audit_id: rewound.audit_id.clone(),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        undone.before.version, rewound.after.version,
        "a CAS on the current version"
    );
    assert_eq!(undone.after.resume_token, Some(token.clone()));
    assert_eq!(undone.after.resume_at, before.resume_at);
    assert!(undone
        .after
        .note
        .as_deref()
        .unwrap()
        .starts_with(&format!("undo {}", rewound.audit_id)));

    // The next holder resumes after the restored token: nothing is replayed.
    let again = spawn_pets(&store, "pets-2");
    eventually(10 * SECOND, "streaming", || {
        state(&again) == ListenerState::Streaming
    })
    .await;
    tokio::time::sleep(10 * SECOND).await;
    assert_eq!(again.snapshot().events, 0);
    let restored = token.time().unwrap();
    assert!(store.history().iter().any(|h| matches!(h,
        HistoryEntry::Acquired { listener, start: StartMark::After(t), .. } if listener == "pets-2" && *t == restored)));
    assert_aggregates_exact(&store).await;
    again.stop().await;
}

// ---------------------------------------------------------------- (g) nothing written

/// Everything an operator action could have written: leases, audit, operator calls, history.
async fn written(store: &SandboxStore) -> (Vec<Lease>, usize, u64, usize) {
    let operator_changes = store
        .history()
        .iter()
        .filter(|h| matches!(h, HistoryEntry::OperatorChanged { .. }))
        .count();
    (
        store.list().await.unwrap().items,
        store.audit_log(usize::MAX).await.unwrap().items.len(),
        store.calls().operator_writes(),
        operator_changes,
    )
}

#[tokio::test(start_paused = true)]
async fn g_dry_runs_and_refusals_write_nothing_and_executions_one_record_each() {
    let store = sandbox(100_000);
    let pets = spawn_pets(&store, "pets-1");
    let orders = spawn_outbox(&store, "orders-1");
    let writer = Writer::start(&store, 2.0, 17);
    tokio::time::sleep(3 * 60 * SECOND).await;
    writer.stop().await;
    tokio::time::sleep(10 * SECOND).await;
    // Stopped listeners: the leases no longer move by themselves.
    pets.stop().await;
    orders.stop().await;

    let settings = ActionSettings {
        gather: options(),
        output: OutputFormat::Table,
    };
    let dry = ActionOptions::default();
    let by = |resource: &str| ActionRequest::Rewind {
        resource: resource.into(),
        to: RewindTarget::By(60 * SECOND),
    };
    let everything = [
        ActionRequest::Takeover {
            resource: ORDERS_RESOURCE.into(),
            to: None,
            hold: None,
        },
        by(PET_RESOURCE),
        ActionRequest::Reset {
            resource: ORDERS_RESOURCE.into(),
            to: ResetTarget::Oldest,
            accept_skip: false,
        },
        ActionRequest::Undo {
            audit_id: "nothing".into(),
        },
    ];
    let start = written(&store).await;
    for request in everything.iter().cloned() {
        let mut out = Vec::new();
        let result = run_action(&store, request.clone(), &settings, &dry, &mut out).await;
        let text = String::from_utf8(out).unwrap();
        match request {
            ActionRequest::Undo { .. } => assert!(text.contains("REFUSED"), "{text}"),
            _ => {
                result.unwrap();
                assert!(
                    text.ends_with("nothing written; re-run with --execute to apply\n"),
                    "{text}"
                );
            }
        }
    }
    let mut json = Vec::new();
    run_action(
        &store,
        by(PET_RESOURCE),
        &ActionSettings {
            output: OutputFormat::Json,
            ..settings.clone()
        },
        &dry,
        &mut json,
    )
    .await
    .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(plan["written"], false);
    assert_eq!(plan["plan"]["effect"]["resume"]["direction"], "replay");
    assert!(
        plan["plan"]["effect"]["resume"]["counted"]
            .as_u64()
            .unwrap()
            > 0
    );

    // Refused, each with its exit code, in read-only mode too.
    let mut read_only = settings.clone();
    read_only.gather.read_only = true;
    let refused = [
        (
            read_only.clone(),
            everything[0].clone(),
            RefusalKind::ReadOnly,
        ),
        (
            read_only.clone(),
            everything[1].clone(),
            RefusalKind::ReadOnly,
        ),
        (
            settings.clone(),
            ActionRequest::Reset {
                resource: ORDERS_RESOURCE.into(),
                to: ResetTarget::Now,
                accept_skip: false,
            },
            RefusalKind::SkipNotAccepted,
        ),
        (
            settings.clone(),
            ActionRequest::Rewind {
                resource: PET_RESOURCE.into(),
                to: RewindTarget::By(24 * 3600 * SECOND),
            },
            RefusalKind::OutsideWindow,
        ),
        (
            settings.clone(),
            by("no-such-lease"),
            RefusalKind::UnknownResource,
        ),
        (
            settings.clone(),
            ActionRequest::AbortBulk {
                resource: PET_RESOURCE.into(),
            },
            RefusalKind::NotBulk,
        ),
    ];
    let execute = ActionOptions {
        execute: true,
        reason: Some("should not happen".into()),
    };
    for (settings, request, kind) in refused {
        let error = run_action(
            &store,
            request.clone(),
            &settings,
            &execute,
            &mut Vec::new(),
        )
        .await
        .unwrap_err();
        match error.downcast_ref::<OpsError>() {
            Some(OpsError::Refused(refusal)) => assert_eq!(refusal.kind, kind, "{request:?}"),
            other => panic!("{request:?}: expected a refusal, got {other:?}"),
        }
        assert_eq!(
            streamward::cli::common::exit::code_for(&error),
            std::process::ExitCode::from(3)
        );
    }
    let mut out = Vec::new();
    let no_definition = run_rebuild::<_, PetRebuild>(
        &store,
        "nope",
        None,
        &settings,
        &execute,
        ProgressDisplay::Off,
        &CancellationToken::new(),
        &mut out,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(no_definition.downcast_ref::<OpsError>(), Some(OpsError::Refused(r)) if r.kind == RefusalKind::NoRebuildDefinition)
    );
    let mut out = Vec::new();
    run_rebuild(
        &store,
        PET_REBUILD,
        Some((&PetRebuild::default(), PetRebuild::target())),
        &settings,
        &dry,
        ProgressDisplay::Off,
        &CancellationToken::new(),
        &mut out,
    )
    .await
    .unwrap();
    assert!(String::from_utf8(out)
        .unwrap()
        .contains("takes pet-aggregates with kind bulk"));
    assert_eq!(
        written(&store).await,
        start,
        "dry runs and refusals wrote nothing at all"
    );

    // A plan whose lease moved on: exit 4, nothing written to the lease; the attempt
    // is recorded as not applied.
    let request = everything[0].clone();
    let stale = ops::plan(
        &request,
        &ops::gather(&store, &request, &options()).await.unwrap(),
    );
    act(&store, request.clone()).await.unwrap();
    let moved_on = written(&store).await;
    let error = ops::execute(&store, &stale, None).await.unwrap_err();
    assert!(matches!(error, OpsError::Changed { .. }), "{error}");
    assert_eq!(streamward::cli::common::exit::for_ops(&error), 4);
    assert!(
        error
            .to_string()
            .contains("nothing was written to the lease; plan again"),
        "{error}"
    );
    let after_conflict = written(&store).await;
    assert_eq!(
        (after_conflict.0, after_conflict.3),
        (moved_on.0, moved_on.3),
        "the failed compare-and-swap changed no lease or history"
    );
    assert_eq!(
        after_conflict.1,
        moved_on.1 + 1,
        "one record of the attempt"
    );
    let attempt = store.audit_log(1).await.unwrap().items.remove(0);
    assert_eq!(attempt.state, AuditState::NotApplied);

    // Executed through the command line: one record each, with before and after.
    for request in [
        by(PET_RESOURCE),
        ActionRequest::Takeover {
            resource: PET_RESOURCE.into(),
            to: Some("pets-9".into()),
            hold: None,
        },
        ActionRequest::Reset {
            resource: ORDERS_RESOURCE.into(),
            to: ResetTarget::Now,
            accept_skip: true,
        },
    ] {
        let records = store.audit_log(usize::MAX).await.unwrap().items.len();
        let mut out = Vec::new();
        run_action(&store, request, &settings, &execute, &mut out)
            .await
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\napplied: "), "{text}");
        let now = store.audit_log(usize::MAX).await.unwrap().items;
        assert_eq!(now.len(), records + 1);
        assert!(now[0].before.is_some() && now[0].after.is_some());
        assert_eq!(now[0].state, AuditState::Applied);
        assert_eq!(now[0].reason.as_deref(), Some("should not happen"));
    }
    let mut listing = Vec::new();
    run_audit(&store, 3, OutputFormat::Table, &mut listing)
        .await
        .unwrap();
    let listing = String::from_utf8(listing).unwrap();
    assert_eq!(listing.lines().count(), 4, "{listing}");
    assert!(
        listing.lines().nth(1).unwrap().contains("reset"),
        "{listing}"
    );
}
