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
