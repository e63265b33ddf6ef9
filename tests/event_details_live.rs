//! What a change event carries beyond its core, on the real replica set of
//! `STREAMWARD_TEST_URI` (issue 27): an update's description with `$set` of a nested
//! path and `$unset`, the transaction a change belongs to and its place in it, the
//! wall clock, and the collection's UUID.

mod support;

use std::time::Duration;

use bson::{doc, Document};
use streamward::store::{
    ChangeEvent, ChangeFeed, ChangeStream, FeedOptions, OperationType, StartPoint,
};
use support::live::live;

async fn read(stream: &mut impl ChangeStream, count: usize) -> Vec<ChangeEvent> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while events.len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {events:?} within 30 s"
        );
        events.extend(stream.next_batch().await.expect("a batch").events);
    }
    events
}

#[tokio::test(flavor = "multi_thread")]
async fn events_carry_the_update_description_transaction_wall_time_and_collection() {
    live("event_details", |live| async move {
        let client = live.store.client();
        let orders = client.database(&live.db).collection::<Document>("orders");
        orders
            .insert_one(doc! {"_id": 1, "status": "new", "coupon": "X"})
            .await
            .unwrap();
        let uuid = client
            .database(&live.db)
            .run_command(doc! {"listCollections": 1, "filter": {"name": "orders"}})
            .await
            .unwrap()
            .get_document("cursor")
            .and_then(|c| c.get_array("firstBatch"))
            .ok()
            .and_then(|b| b.first()?.as_document()?.get_document("info").ok())
            .and_then(|info| match info.get("uuid") {
                Some(bson::Bson::Binary(b)) => Some(b.bytes.clone()),
                _ => None,
            })
            .expect("the collection's UUID");
        let start = live.store.cluster_time().await.unwrap();
        let mut stream = live
            .store
            .open(
                &live.ns("orders"),
                StartPoint::At(start),
                FeedOptions {
                    batch_size: 10,
                    max_await: Duration::from_millis(200),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        orders
            .update_one(
                doc! {"_id": 1},
                doc! {"$set": {"status": "paid", "lines.first": 3}, "$unset": {"coupon": ""}},
            )
            .await
            .unwrap();
        let mut session = client.start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        for id in 2..=4 {
            orders
                .insert_one(doc! {"_id": id})
                .session(&mut session)
                .await
                .unwrap();
        }
        session.commit_transaction().await.unwrap();

        // The stream starts at a time at or before the first insert (inclusive): that
        // insert may come first, and is not what this test reads.
        let mut events = read(&mut stream, 4).await;
        if events[0].operation == OperationType::Insert && events[0].document_key == doc! {"_id": 1}
        {
            events.remove(0);
            events.extend(read(&mut stream, 4 - events.len()).await);
        }
        assert_eq!(events.len(), 4, "{events:?}");
        let update = &events[0];
        let description = update
            .details
            .update_description
            .as_ref()
            .expect("described");
        assert_eq!(
            description.updated_fields().unwrap(),
            doc! {"status": "paid", "lines": {"first": 3}},
            "a path into a missing sub-document is set as the sub-document"
        );
        assert_eq!(description.removed_fields().unwrap(), ["coupon"]);
        assert!(description.truncated_arrays().unwrap().is_empty());
        assert_eq!(update.details.transaction, None);

        let inserts = &events[1..];
        let transaction = inserts[0]
            .details
            .transaction
            .clone()
            .expect("in a transaction");
        assert_eq!(transaction.session.len(), 16, "lsid.id is a UUID");
        for (place, event) in inserts.iter().enumerate() {
            assert_eq!(event.details.transaction.as_ref(), Some(&transaction));
            assert_eq!(event.token.txn_op_index(), Some(place as u64), "{event:?}");
            assert_eq!(event.cluster_time, inserts[0].cluster_time, "one commit");
        }
        // Asked for, data definition arrives as a kind of its own.
        let mut expanded = live
            .store
            .open(
                &live.ns("orders"),
                StartPoint::At(live.store.cluster_time().await.unwrap()),
                FeedOptions {
                    batch_size: 10,
                    max_await: Duration::from_millis(200),
                    expanded_events: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        orders
            .create_index(
                mongodb::IndexModel::builder()
                    .keys(doc! {"status": 1})
                    .build(),
            )
            .await
            .unwrap();
        let ddl = loop {
            let batch = read(&mut expanded, 1).await;
            if let Some(found) = batch
                .into_iter()
                .find(|e| e.operation == OperationType::Other("createIndexes".into()))
            {
                break found;
            }
        };
        assert_eq!(
            ddl.details.collection_uuid.map(Vec::from),
            Some(uuid.clone())
        );
        for event in &events {
            assert_eq!(event.collection_uuid().map(Vec::from), Some(uuid.clone()));
            let (Some(wall), Some(time)) = (event.details.wall_time, event.cluster_time) else {
                panic!("a wall time: {event:?}");
            };
            assert!((wall.timestamp() - i64::from(time.secs)).abs() <= 1);
        }
    })
    .await;
}

/// Keeps every event it is handed.
#[derive(Clone, Default)]
struct Kept(std::sync::Arc<std::sync::Mutex<Vec<ChangeEvent>>>);

impl streamward::engine::Handler for Kept {
    async fn handle(
        &mut self,
        events: &[ChangeEvent],
        _fence: &streamward::model::Fence,
    ) -> Result<(), streamward::engine::HandlerError> {
        self.0.lock().unwrap().extend_from_slice(events);
        Ok(())
    }
}

/// A listener that requires the document before each change: on a collection that
/// keeps pre-images it gets them (and the post-image as the update left it); on one
/// that does not, the change is recorded on the lease as failing with what to do,
/// and the listener does not reopen in a loop.
#[tokio::test(flavor = "multi_thread")]
async fn a_required_pre_image_is_delivered_or_named_as_missing() {
    use streamward::engine::{ListenerConfig, ListenerHandle};
    use streamward::store::{LeaseStore, PostImage, PreImage};
    live("event_images", |live| async move {
        let database = live.store.client().database(&live.db);
        for coll in ["kept", "unkept"] {
            database.create_collection(coll).await.unwrap();
            database
                .collection::<Document>(coll)
                .insert_one(doc! {"_id": 1, "n": 1})
                .await
                .unwrap();
        }
        database
            .run_command(
                doc! {"collMod": "kept", "changeStreamPreAndPostImages": {"enabled": true}},
            )
            .await
            .unwrap();
        let config = |coll: &str| {
            let mut config = ListenerConfig::new(coll, "w1", live.ns(coll));
            config.max_batch_wait = Duration::from_millis(200);
            config.retry_backoff = Duration::from_millis(500);
            config.full_document_before_change = PreImage::Required;
            config.full_document = PostImage::WhenAvailable;
            config
        };
        let kept = Kept::default();
        let with_images = ListenerHandle::spawn(live.store.clone(), config("kept"), kept.clone());
        let without = ListenerHandle::spawn(live.store.clone(), config("unkept"), Kept::default());
        // Both stream from the oldest entry; wait until each has its lease.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while live
            .store
            .get("kept")
            .await
            .unwrap()
            .and_then(|l| l.resume_token)
            .is_none()
            || live
                .store
                .get("unkept")
                .await
                .unwrap()
                .and_then(|l| l.resume_token)
                .is_none()
        {
            assert!(tokio::time::Instant::now() < deadline, "leases taken");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for coll in ["kept", "unkept"] {
            database
                .collection::<Document>(coll)
                .update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
                .await
                .unwrap();
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let update = loop {
            let update = kept
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|e| e.operation == OperationType::Update)
                .cloned();
            if let Some(update) = update {
                break update;
            }
            assert!(tokio::time::Instant::now() < deadline, "the update handled");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            update.details.full_document_before_change,
            Some(doc! {"_id": 1, "n": 1})
        );
        assert_eq!(update.full_document, Some(doc! {"_id": 1, "n": 2}));
        // Once its commit landed, the listener shows it as its last change.
        let last = loop {
            if let Some(last) = with_images
                .snapshot()
                .last_change
                .map(|event| streamward::engine::LastChange::of(&event))
                .filter(|l| l.operation == "update")
            {
                break last;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the last change shown"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(last.ns, format!("{}.kept", live.db));
        assert_eq!(last.key, r#"{"_id":1}"#);
        assert_eq!(last.wall_time, update.details.wall_time);

        let failure = loop {
            let lease = live.store.get("unkept").await.unwrap().unwrap();
            if let Some(failure) = lease.failure {
                break failure;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the missing image recorded"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(failure.cause.as_str(), "pre-image missing", "{failure:?}");
        assert_eq!(failure.operation, "update");
        assert!(
            failure.at.is_some(),
            "placed by its cluster time: {failure:?}"
        );
        assert!(
            failure
                .error
                .contains("changeStreamPreAndPostImages: {enabled: true}"),
            "says what to do: {}",
            failure.error
        );
        // Retried at its back-off, not reopened in a loop: a few attempts in 3 s.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let attempts = live
            .store
            .get("unkept")
            .await
            .unwrap()
            .unwrap()
            .failure
            .map_or(0, |f| f.attempts);
        assert!((1..=6).contains(&attempts), "{attempts} attempts in 3 s");
        with_images.stop().await;
        without.stop().await;
    })
    .await;
}
