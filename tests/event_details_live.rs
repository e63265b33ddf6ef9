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

/// What a handler read from each event's raw event (`operationType` as sent, and the
/// fields the typed ones do not carry: `lsid.uid`, a data definition's
/// `operationDescription`), with the event.
#[derive(Clone, Default)]
struct ReadsRaw(std::sync::Arc<std::sync::Mutex<Vec<(String, Document, ChangeEvent)>>>);

impl streamward::engine::Handler for ReadsRaw {
    async fn handle(
        &mut self,
        events: &[ChangeEvent],
        _fence: &streamward::model::Fence,
    ) -> Result<(), streamward::engine::HandlerError> {
        for event in events {
            let raw = event.raw()?;
            let kind = raw.get_str("operationType").unwrap_or("?").to_string();
            let mut untyped = Document::new();
            for field in ["lsid", "operationDescription"] {
                if let Ok(value) = raw.get_document(field) {
                    let value = Document::try_from(value)
                        .map_err(|e| streamward::engine::HandlerError::Failed(e.to_string()))?;
                    untyped.insert(field, value);
                }
            }
            self.0.lock().unwrap().push((kind, untyped, event.clone()));
        }
        Ok(())
    }
}

/// A handler reads, from the raw event the server sent, what the typed fields do not
/// carry: a transaction's `lsid.uid`, the `operationDescription` of a `modify` (an
/// `Other` kind). And an event laid out from its typed fields (as the sandbox's are)
/// is the server's own bytes, for each kind and for both a listener asking for
/// nothing and one asking for everything (images, expanded events).
#[tokio::test(flavor = "multi_thread")]
async fn a_handler_reads_the_raw_event_as_the_server_sent_it() {
    use streamward::engine::{ListenerConfig, ListenerHandle};
    use streamward::store::{PostImage, PreImage};
    live("event_raw", |live| async move {
        let client = live.store.client();
        let database = client.database(&live.db);
        database.create_collection("orders").await.unwrap();
        database
            .run_command(
                doc! {"collMod": "orders", "changeStreamPreAndPostImages": {"enabled": true}},
            )
            .await
            .unwrap();
        let orders = database.collection::<Document>("orders");
        orders.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();
        orders
            .update_one(doc! {"_id": 1}, doc! {"$set": {"a": 2}})
            .await
            .unwrap();
        orders
            .replace_one(doc! {"_id": 1}, doc! {"a": 3})
            .await
            .unwrap();
        orders.delete_one(doc! {"_id": 1}).await.unwrap();
        let mut session = client.start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        orders
            .insert_one(doc! {"_id": 2})
            .session(&mut session)
            .await
            .unwrap();
        session.commit_transaction().await.unwrap();

        // Both start from the oldest oplog entry, so both see everything above.
        let plain = ReadsRaw::default();
        let everything = ReadsRaw::default();
        let mut config = ListenerConfig::new("plain", "w1", live.ns("orders"));
        config.max_batch_wait = Duration::from_millis(200);
        let plain_listener = ListenerHandle::spawn(live.store.clone(), config, plain.clone());
        let mut config = ListenerConfig::new("everything", "w1", live.ns("orders"));
        config.max_batch_wait = Duration::from_millis(200);
        config.full_document = PostImage::WhenAvailable;
        config.full_document_before_change = PreImage::WhenAvailable;
        config.expanded_events = true;
        let everything_listener =
            ListenerHandle::spawn(live.store.clone(), config, everything.clone());
        let crud = ["insert", "update", "replace", "delete", "insert"];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        for (reads, expected) in [(&plain, 5), (&everything, 7)] {
            while reads.0.lock().unwrap().len() < expected {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{expected} events handled"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        plain_listener.stop().await;
        everything_listener.stop().await;

        let plain = plain.0.lock().unwrap().clone();
        let kinds: Vec<&str> = plain.iter().map(|(kind, ..)| kind.as_str()).collect();
        assert_eq!(kinds, crud, "operationType as sent");
        let everything = everything.0.lock().unwrap().clone();
        let kinds: Vec<&str> = everything.iter().map(|(kind, ..)| kind.as_str()).collect();
        assert_eq!(kinds[..2], ["create", "modify"], "{kinds:?}");
        assert_eq!(kinds[2..], crud);
        let (_, modify, event) = &everything[1];
        assert_eq!(event.operation, OperationType::Other("modify".into()));
        assert_eq!(
            modify.get_document("operationDescription").unwrap(),
            &doc! {"changeStreamPreAndPostImages": {"enabled": true}},
            "what the collMod changed, which no typed field carries"
        );
        let (_, in_transaction, event) = &everything[6];
        let lsid = in_transaction.get_document("lsid").unwrap();
        let session = &event.details.transaction.as_ref().unwrap().session;
        assert!(
            matches!(lsid.get("id"), Some(bson::Bson::Binary(id)) if id.bytes == *session),
            "{lsid}"
        );
        assert!(
            matches!(lsid.get("uid"), Some(bson::Bson::Binary(uid)) if uid.bytes.len() == 32),
            "the session's user digest, which TransactionId does not carry: {lsid}"
        );

        // Laid out from its fields, each change of a document is the server's bytes,
        // but for two things docs/reference/change-events.md says: a transaction's `lsid`
        // has no `uid` (the field order is still the server's), and a `fullDocument` the
        // server sent as null (the plain listener's updates are read after the delete, so
        // their lookup finds nothing) is left out.
        let mut nulls = 0;
        for (_, _, event) in plain.iter().chain(&everything[2..]) {
            let mut sent = bson::RawDocumentBuf::new();
            for element in event.raw().unwrap().iter() {
                match element.unwrap() {
                    ("fullDocument", bson::RawBsonRef::Null) => nulls += 1,
                    (key, value) => sent.append_ref(key, value),
                }
            }
            let mut built = event.clone();
            built.details.raw = Default::default();
            let laid_out = built.raw().unwrap().into_owned();
            if event.details.transaction.is_none() {
                assert_eq!(laid_out, sent, "{:?}", sent.to_document());
            } else {
                let keys = |raw: &bson::RawDocumentBuf| -> Vec<String> {
                    raw.iter().map(|e| e.unwrap().0.to_string()).collect()
                };
                assert_eq!(keys(&laid_out), keys(&sent));
            }
        }
        assert_eq!(nulls, 1, "the plain listener's update");
    })
    .await;
}
