//! The MongoDB adapter against a real replica set. Runs only when
//! `STREAMWARD_TEST_URI` is set (by `scripts/test.sh`); otherwise each
//! test prints why it is skipped and returns. Every test uses its own database and
//! drops it afterwards.

mod support;

use std::time::Duration;

use bson::{doc, Bson};
use streamward::model::{ClusterTime, Fence, LockKind, ResumeToken, TokenKind};
use streamward::store::mongo::MongoStore;
use streamward::store::*;
use support::live::live;

fn request(listener: &str, kind: LockKind, lease_ms: u64) -> AcquireRequest {
    AcquireRequest {
        resource: "res".into(),
        listener: listener.into(),
        kind,
        lease: Duration::from_millis(lease_ms),
        watch: None,
    }
}

async fn acquired(store: &MongoStore, req: &AcquireRequest) -> streamward::model::Lease {
    match store.acquire(req).await.unwrap() {
        AcquireOutcome::Acquired(lease) => lease,
        AcquireOutcome::HeldByOther => panic!("{} expected to acquire", req.listener),
    }
}

#[tokio::test]
async fn acquire_commit_release_and_lost_lock() {
    live("acquire_commit_release", |live| async move {
        let store = &live.store;
        let a = acquired(store, &request("a", LockKind::Update, 60_000)).await;
        assert_eq!(a.version, 0, "version 0 on insert");
        assert!(a.expires_at.is_some() && a.acquired_at.is_some());
        assert_eq!(
            store
                .acquire(&request("b", LockKind::Update, 60_000))
                .await
                .unwrap(),
            AcquireOutcome::HeldByOther
        );
        let refreshed = acquired(store, &request("a", LockKind::Update, 60_000)).await;
        assert_eq!(refreshed.version, 0, "a refresh keeps the version");
        assert_eq!(refreshed.acquired_at, a.acquired_at);

        let tenure_a = Tenure::of(&a).unwrap();
        let token = ResumeToken::encode(ClusterTime::new(1_700_000_000, 1), TokenKind::Event, 1);
        assert_eq!(
            store
                .commit(&tenure_a, &token, Duration::from_secs(60))
                .await
                .unwrap(),
            TenureWrite::Done
        );
        assert_eq!(
            store.get("res").await.unwrap().unwrap().resume_token,
            Some(token.clone())
        );
        assert_eq!(store.release(&tenure_a).await.unwrap(), TenureWrite::Done);

        let b = acquired(store, &request("b", LockKind::Update, 60_000)).await;
        assert_eq!(b.version, 1, "a new holder bumps the version");
        assert_eq!(
            b.resume_token,
            Some(token.clone()),
            "the token survives the hand-over"
        );
        assert_eq!(
            store
                .commit(&tenure_a, &token, Duration::from_secs(60))
                .await
                .unwrap(),
            TenureWrite::LostLock
        );
        assert_eq!(
            store.release(&tenure_a).await.unwrap(),
            TenureWrite::LostLock
        );

        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        let skew = store.server_now().await.unwrap() - chrono::Utc::now();
        assert!(
            skew.num_seconds().abs() < 60,
            "server clock {skew} away from ours"
        );
    })
    .await;
}

#[tokio::test]
async fn an_expired_lease_is_taken_over() {
    live("expired_takeover", |live| async move {
        let store = &live.store;
        acquired(store, &request("a", LockKind::Update, 200)).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        let b = acquired(store, &request("b", LockKind::Update, 60_000)).await;
        assert_eq!(b.version, 1);
    })
    .await;
}

#[tokio::test]
async fn a_bulk_lease_excludes_incremental_listeners_even_when_expired() {
    live("bulk_exclusion", |live| async move {
        let store = &live.store;
        let bulk = acquired(store, &request("rebuild", LockKind::Bulk, 200)).await;
        assert_eq!(bulk.kind, LockKind::Bulk);
        store.release(&Tenure::of(&bulk).unwrap()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            store
                .acquire(&request("w", LockKind::Update, 60_000))
                .await
                .unwrap(),
            AcquireOutcome::HeldByOther,
            "an expired, released bulk lease is still not taken by an incremental listener"
        );
        // An operator gives it back (abort-bulk): kind update, released, version + 1.
        let change = OperatorChange {
            resource: "res".into(),
            expected_version: bulk.version,
            holder: None,
            expires_in: Duration::ZERO,
            kind: LockKind::Update,
            resume: ResumeChange::Keep,
            note: "abort-bulk".into(),
        };
        let audit = AuditContext {
            operator: "tester".into(),
            action: "abort-bulk".into(),
            reason: Some("live test".into()),
        };
        let OperatorOutcome::Applied {
            before,
            after,
            audit_id,
            ..
        } = store.operator_update(&change, &audit).await.unwrap()
        else {
            panic!("operator update not applied")
        };
        assert_eq!(before.kind, LockKind::Bulk);
        assert_eq!(after.version, bulk.version + 1);
        let log = store.audit_log(5).await.unwrap();
        assert_eq!(log[0].id, audit_id);
        assert!(matches!(
            store.operator_update(&change, &audit).await.unwrap(),
            OperatorOutcome::Changed { .. }
        ));
        let w = acquired(store, &request("w", LockKind::Update, 60_000)).await;
        assert_eq!(w.version, bulk.version + 2);
    })
    .await;
}

#[tokio::test]
async fn fenced_writes_refuse_stale_writers() {
    live("fenced_writes", |live| async move {
        let store = &live.store;
        let out = live.ns("outbox");
        let id = Bson::String("m1".into());
        let fence = |v| {
            WriteFence::Lease(Fence {
                resource: "res".into(),
                version: v,
            })
        };
        // (lease version, value written, expected outcome), in order.
        for (version, x, expected) in [
            (2, 1, WriteOutcome::Applied),
            (2, 2, WriteOutcome::Applied),
            (1, 3, WriteOutcome::Stale),
        ] {
            let outcome = store
                .fenced_upsert(&out, &id, &fence(version), doc! {"x": x})
                .await
                .unwrap();
            assert_eq!(outcome, expected, "lease version {version} writing x = {x}");
        }
        assert_eq!(
            store
                .find_one(&out, &id)
                .await
                .unwrap()
                .unwrap()
                .get_i32("x")
                .unwrap(),
            2
        );

        let animals = live.ns("animals");
        let source = |v| WriteFence::SourceVersion(v);
        // (source version, value written, expected outcome), in order.
        for (version, n, expected) in [
            (3, 3, WriteOutcome::Applied),
            (3, 9, WriteOutcome::Stale),
            (2, 9, WriteOutcome::Stale),
            (4, 4, WriteOutcome::Applied),
        ] {
            let outcome = store
                .fenced_upsert(&animals, &id, &source(version), doc! {"n": n})
                .await
                .unwrap();
            assert_eq!(
                outcome, expected,
                "source version {version} writing n = {n}"
            );
        }

        let agg = live.ns("aggregates");
        // (member, its version, its location, expected outcome), in order.
        for (member, version, location, expected) in [
            ("a.b$c", 1, "house", WriteOutcome::Applied),
            ("rex", 1, "house", WriteOutcome::Applied),
            ("rex", 1, "yard", WriteOutcome::Stale),
            ("rex", 2, "backyard", WriteOutcome::Applied),
        ] {
            let outcome = store
                .fenced_member_upsert(&agg, "cute", member, version, Some(location))
                .await
                .unwrap();
            assert_eq!(outcome, expected, "{member} v{version} at {location}");
        }
        let tag = store
            .find_one(&agg, &Bson::String("cute".into()))
            .await
            .unwrap()
            .unwrap();
        let counts = tag.get_document("counts").unwrap();
        assert_eq!(counts.get_i32("house").unwrap(), 1);
        assert_eq!(counts.get_i32("backyard").unwrap(), 1);
        assert_eq!(
            store
                .fenced_member_upsert(&agg, "cute", "rex", 3, None)
                .await
                .unwrap(),
            WriteOutcome::Applied
        );
        let tag = store
            .find_one(&agg, &Bson::String("cute".into()))
            .await
            .unwrap()
            .unwrap();
        assert!(!tag.get_document("counts").unwrap().contains_key("backyard"));

        store
            .replace_all(&agg, vec![doc! {"_id": "z"}])
            .await
            .unwrap();
        assert_eq!(store.find_all(&agg).await.unwrap(), vec![doc! {"_id": "z"}]);
    })
    .await;
}

#[tokio::test]
async fn change_feed_delivers_changes_with_full_documents() {
    live("change_feed", |live| async move {
        let store = &live.store;
        let animals = live.ns("animals");
        store
            .put(&animals, doc! {"_id": 0, "warm": true})
            .await
            .unwrap();
        let start = store.cluster_time().await.unwrap();
        let window = store.oplog_window().await.unwrap();
        assert!(window.first <= window.last);
        let options = FeedOptions {
            batch_size: 10,
            max_await: Duration::from_millis(500),
        };
        let mut stream = store
            .open(&animals, StartPoint::At(start), options)
            .await
            .unwrap();
        store
            .put(&animals, doc! {"_id": 1, "name": "rex"})
            .await
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..10 {
            let batch = stream.next_batch().await.unwrap();
            assert!(batch.resume_token.is_some());
            seen.extend(batch.events);
            if seen.iter().any(|e| e.document_key == doc! {"_id": 1}) {
                break;
            }
        }
        let event = seen
            .iter()
            .find(|e| e.document_key == doc! {"_id": 1})
            .expect("the insert arrives");
        assert_eq!(
            event
                .full_document
                .as_ref()
                .unwrap()
                .get_str("name")
                .unwrap(),
            "rex"
        );
        assert!(event.token.time().is_some(), "real tokens decode");
    })
    .await;
}

/// Writes about 100 KB documents into `ns` until the oplog's first entry has passed `time`.
async fn roll_oplog_past(store: &MongoStore, ns: &Namespace, time: ClusterTime) {
    let filler = "x".repeat(100_000);
    for i in 0..2_000 {
        if store.oplog_window().await.unwrap().first > time {
            return;
        }
        store
            .put(ns, doc! {"_id": format!("filler-{i}"), "pad": &filler})
            .await
            .unwrap();
    }
    panic!("the oplog did not roll over past {time:?} after 200 MB of writes");
}

#[tokio::test]
async fn history_that_fell_off_the_oplog_is_reported_lost() {
    support::live::live_small_oplog("history_lost", |live| async move {
        let store = &live.store;
        let animals = live.ns("animals");
        let options = FeedOptions {
            batch_size: 10,
            max_await: Duration::from_millis(500),
        };
        // A token the server issued, then the history behind it overwritten.
        let start = store.cluster_time().await.unwrap();
        let mut stream = store
            .open(&animals, StartPoint::At(start), options)
            .await
            .unwrap();
        store.put(&animals, doc! {"_id": 1}).await.unwrap();
        let token = loop {
            let batch = stream.next_batch().await.unwrap();
            if let Some(event) = batch.events.first() {
                break event.token.clone();
            }
        };
        drop(stream);
        let token_time = token.time().unwrap();
        roll_oplog_past(store, &live.ns("filler"), token_time).await;

        for start in [StartPoint::After(token), StartPoint::At(token_time)] {
            let lost = match store.open(&animals, start.clone(), options).await {
                Err(e) => e,
                Ok(mut s) => s.next_batch().await.unwrap_err(),
            };
            assert!(
                matches!(lost, StoreError::HistoryLost { .. }),
                "{start:?}: {lost:?}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn lease_watch_sees_hand_overs() {
    live("lease_watch", |live| async move {
        let store = &live.store;
        let mut watch = store.watch(LeaseScope::One("res".into())).await.unwrap();
        let a = acquired(store, &request("a", LockKind::Update, 60_000)).await;
        let change = tokio::time::timeout(Duration::from_secs(10), watch.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(change.resource, "res");
        assert_eq!(change.lease.unwrap().holder.as_deref(), Some("a"));
        store.release(&Tenure::of(&a).unwrap()).await.unwrap();
        let change = tokio::time::timeout(Duration::from_secs(10), watch.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(change.lease.unwrap().holder, None);
    })
    .await;
}
