//! What a plan shows as "after" is what the store writes. `ops::predict_after`, the
//! sandbox's operator swap and the MongoDB update pipeline each encode what an action
//! does to a lease; this test keeps the first two in step for every action the
//! sandbox can run without listeners (the Mongo pipeline's documents are pinned in
//! tests/ops_mongo.rs and tests/mongo_adapter.rs).

mod support;

use std::time::Duration;

use bson::doc;
use streamward::model::{LockKind, ResumeToken, TokenKind};
use streamward::ops::{self, ActionRequest, GatherOptions, ResetTarget, RewindTarget};
use streamward::store::{
    AcquireRequest, ChangeFeed, DocumentStore, LeaseStore, Namespace, Tenure, TenureWrite,
};
use support::sandbox::sandbox;

const RESOURCE: &str = "shop.orders";

async fn held_with_history() -> streamward::store::sandbox::SandboxStore {
    let store = sandbox(10_000);
    let ns = Namespace::new("shop", "orders");
    for i in 0..20 {
        store.put(&ns, doc! { "_id": i, "n": i }).await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let acquired = store
        .acquire(&AcquireRequest {
            resource: RESOURCE.into(),
            listener: "w1".into(),
            kind: LockKind::Update,
            lease: Duration::from_secs(10),
            watch: None,
            seen_version: None,
        })
        .await
        .unwrap();
    let streamward::store::AcquireOutcome::Acquired(lease) = acquired else {
        panic!("acquired")
    };
    let last = store.oplog_window().await.unwrap().last;
    let tenure = Tenure::of(&lease).unwrap();
    let token = ResumeToken::encode(last, TokenKind::Event, 0);
    let committed = store
        .commit(&tenure, &token, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(committed, TenureWrite::Done);
    store
}

#[tokio::test(start_paused = true)]
async fn every_executed_action_leaves_the_lease_its_plan_predicted() {
    let requests = [
        ActionRequest::Takeover {
            resource: RESOURCE.into(),
            to: None,
            hold: None,
        },
        ActionRequest::Takeover {
            resource: RESOURCE.into(),
            to: Some("w2".into()),
            hold: None,
        },
        ActionRequest::Takeover {
            resource: RESOURCE.into(),
            to: None,
            hold: Some(Duration::from_secs(600)),
        },
        ActionRequest::Rewind {
            resource: RESOURCE.into(),
            to: RewindTarget::By(Duration::from_secs(120)),
        },
        ActionRequest::Reset {
            resource: RESOURCE.into(),
            to: ResetTarget::Oldest,
            accept_skip: false,
        },
        ActionRequest::Reset {
            resource: RESOURCE.into(),
            to: ResetTarget::Now,
            accept_skip: true,
        },
    ];
    for request in requests {
        let store = held_with_history().await;
        let facts = ops::gather(&store, &request, &GatherOptions::new("ann@ops"))
            .await
            .unwrap();
        let plan = ops::plan(&request, &facts);
        assert!(plan.refusal.is_none(), "{request:?}: {:?}", plan.refusal);
        // The virtual clock stands still between planning and executing, so the
        // server's `$$NOW` is the plan's `now` and every field must agree.
        let done = ops::execute(&store, &plan, None).await.unwrap();
        assert_eq!(
            Some(&done.after),
            plan.after.as_ref(),
            "{request:?}: the plan's after differs from what the store wrote"
        );
        assert_eq!(
            store.get(RESOURCE).await.unwrap().as_ref(),
            Some(&done.after)
        );
    }
}
