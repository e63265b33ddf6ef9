//! The console's action runner on the sandbox: a plan is read-only, a confirmed plan
//! writes once with one audit record, a plan gone stale writes nothing, and a rebuild
//! reports progress and can be cancelled into STUCK BULK.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use streamward::console::action_runner::{ActionCommand, ActionRunner};
use streamward::console::data::DataEvent;
use streamward::demo::pets::PET_RESOURCE;
use streamward::demo::rebuild::PetRebuild;
use streamward::model::{AuditState, LeaseHealth, LeaseStatus, LockKind};
use streamward::ops::{ActionRequest, GatherOptions, Plan};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::AuditLog;
use streamward::store::{AcquireRequest, LeaseStore};

fn request(resource: &str, listener: &str) -> AcquireRequest {
    AcquireRequest {
        resource: resource.into(),
        listener: listener.into(),
        kind: LockKind::Update,
        lease: Duration::from_secs(10),
        watch: None,
        seen_version: None,
    }
}

struct Harness {
    store: SandboxStore,
    commands: mpsc::Sender<ActionCommand>,
    events: mpsc::Receiver<DataEvent>,
}

fn start(rebuild: PetRebuild) -> Harness {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    let (commands, received) = mpsc::channel(8);
    let (sender, events) = mpsc::channel(256);
    ActionRunner {
        store: store.clone(),
        options: GatherOptions::new("ann@console"),
        rebuilds: vec![(PetRebuild::target(), Arc::new(rebuild))],
        reason: "from the console".into(),
    }
    .spawn(received, sender);
    Harness {
        store,
        commands,
        events,
    }
}

impl Harness {
    async fn next(&mut self) -> DataEvent {
        tokio::time::timeout(Duration::from_secs(10), self.events.recv())
            .await
            .expect("an answer within 10 s")
            .expect("runner alive")
    }

    async fn plan(&mut self, request: ActionRequest) -> Box<Plan> {
        self.commands
            .send(ActionCommand::Plan(request))
            .await
            .unwrap();
        match self.next().await {
            DataEvent::Planned(Ok(plan)) => plan,
            other => panic!("a plan: {other:?}"),
        }
    }

    async fn done(&mut self) -> Result<String, String> {
        loop {
            if let DataEvent::ActionDone { result, .. } = self.next().await {
                return result;
            }
        }
    }
}

fn execute(plan: Box<Plan>, reason: Option<String>) -> ActionCommand {
    ActionCommand::Execute { plan, reason }
}

fn takeover(resource: &str) -> ActionRequest {
    ActionRequest::Takeover {
        resource: resource.into(),
        to: None,
        hold: None,
    }
}

#[tokio::test]
async fn planning_writes_nothing_and_a_confirmed_plan_writes_once_with_its_audit() {
    let mut h = start(PetRebuild::default());
    h.store
        .acquire(&request("shop.orders", "w1"))
        .await
        .unwrap();
    let before = h.store.get("shop.orders").await.unwrap().unwrap();
    let plan = h.plan(takeover("shop.orders")).await;
    assert_eq!(
        plan.captured.as_ref().map(|c| c.version),
        Some(before.version)
    );
    assert_eq!(
        h.store.get("shop.orders").await.unwrap(),
        Some(before.clone())
    );
    assert!(
        h.store.audit_log(10).await.unwrap().items.is_empty(),
        "planning audits nothing"
    );

    h.commands.send(execute(plan, None)).await.unwrap();
    let text = h.done().await.expect("applied");
    assert!(text.contains("takeover shop.orders"), "{text}");
    let after = h.store.get("shop.orders").await.unwrap().unwrap();
    assert_eq!((after.holder, after.version), (None, before.version + 1));
    let audit = h.store.audit_log(10).await.unwrap().items;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].reason.as_deref(), Some("from the console"));
    assert_eq!(audit[0].operator, "ann@console");
}

#[tokio::test]
async fn a_plan_gone_stale_writes_nothing() {
    let mut h = start(PetRebuild::default());
    h.store
        .acquire(&request("shop.orders", "w1"))
        .await
        .unwrap();
    let plan = h.plan(takeover("shop.orders")).await;
    // Someone else acts first: the version moves on.
    let first = h.plan(takeover("shop.orders")).await;
    h.commands.send(execute(first, None)).await.unwrap();
    h.done().await.expect("the first applies");
    let lease = h.store.get("shop.orders").await.unwrap();
    h.commands.send(execute(plan, None)).await.unwrap();
    let error = h.done().await.expect_err("the stale plan is refused");
    assert!(error.contains("changed"), "{error}");
    assert!(
        error.contains("not applied"),
        "says how it was recorded: {error}"
    );
    assert_eq!(h.store.get("shop.orders").await.unwrap(), lease);
    let states: Vec<AuditState> = h
        .store
        .audit_log(10)
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(
        states,
        [AuditState::NotApplied, AuditState::Applied],
        "the stale attempt is recorded as not applied"
    );
}

#[tokio::test]
async fn a_cancelled_rebuild_reports_progress_and_leaves_stuck_bulk() {
    let mut h = start(PetRebuild {
        step_delay: Duration::from_millis(200),
        fail_after: None,
        ..PetRebuild::default()
    });
    h.store.acquire(&request(PET_RESOURCE, "w1")).await.unwrap();
    let plan = h
        .plan(ActionRequest::Rebuild {
            name: PetRebuild::target().name,
        })
        .await;
    assert!(plan.refusal.is_none(), "{:?}", plan.refusal);
    h.commands
        .send(execute(plan.clone(), Some("aggregates drifted".into())))
        .await
        .unwrap();
    loop {
        if let DataEvent::RebuildProgress(progress) = h.next().await {
            if progress.done > 0 {
                break;
            }
        }
    }
    // One rebuild at a time: a second one is refused while the first runs.
    h.commands.send(execute(plan, None)).await.unwrap();
    let refused = h.done().await.expect_err("one at a time");
    assert!(refused.contains("already running"), "{refused}");
    h.commands.send(ActionCommand::CancelRebuild).await.unwrap();
    let error = h.done().await.expect_err("cancelled");
    assert!(error.contains("abort-bulk"), "says how to recover: {error}");
    let lease = h.store.get(PET_RESOURCE).await.unwrap().unwrap();
    assert_eq!(lease.kind, LockKind::Bulk);
    let now = h.store.server_now().await.unwrap();
    let health = LeaseHealth::assess(&lease, None, now, &Default::default());
    assert_eq!(health.status, LeaseStatus::StuckBulk);
    let audit = h.store.audit_log(10).await.unwrap().items;
    assert_eq!(audit.len(), 1);
    assert_eq!(
        audit[0].reason.as_deref(),
        Some("from the console: aggregates drifted"),
        "the reason typed in the dialog reaches the audit record"
    );
}
