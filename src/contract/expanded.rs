//! Expanded events (`showExpandedEvents`, MongoDB 6.0+): the data definition on a
//! watched collection reaches a stream that asks for it as `Other(name)`, with the
//! fields MongoDB 6.0.5 sends (`ns`, `collectionUUID`, `wallTime`, `clusterTime`); a
//! stream that does not ask sees none of it, and no `collectionUUID` on any change.

use bson::{doc, Document};

use crate::model::ClusterTime;
use crate::store::{
    ChangeEvent, ChangeFeed, ChangeStream, DocumentStore, FeedOptions, InvalidationCause,
    Namespace, OperationType, StartPoint, StoreError,
};

use super::support::*;
use super::{DataDefinition, Ddl};

fn expanded() -> FeedOptions {
    FeedOptions {
        expanded_events: true,
        ..options()
    }
}

/// Each event's `operationType`.
fn kinds(events: &[ChangeEvent]) -> Vec<&str> {
    events.iter().map(|e| e.operation.name()).collect()
}

/// The events of a stream on `ns` from `start` through the insert of `id`.
async fn read_from<H: DataDefinition<Store: ChangeFeed + DocumentStore>>(
    h: &H,
    ns: &Namespace,
    start: ClusterTime,
    options: FeedOptions,
    id: &str,
) -> Vec<ChangeEvent> {
    let mut stream = h
        .store()
        .open(ns, StartPoint::At(start), options)
        .await
        .unwrap();
    read_through(&mut stream, id).await
}

/// Reads until the stream ends: what it handed out, and the error it ended with.
async fn read_to_end(stream: &mut impl ChangeStream) -> (Vec<ChangeEvent>, StoreError) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    loop {
        match stream.next_batch().await {
            Ok(batch) => seen.extend(batch.events),
            Err(e) => return (seen, e),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream did not end within {PATIENCE:?}; read {seen:?}"
        );
    }
}

pub async fn expanded_events_carry_the_data_definition_of_the_collection<
    H: DataDefinition<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("kennels");
    let start = store.cluster_time().await.unwrap();
    h.ddl(&ns, Ddl::Create).await.unwrap();
    h.ddl(&ns, Ddl::CreateIndex("breed_1", doc! {"breed": 1}))
        .await
        .unwrap();
    store
        .put(&ns, doc! {"_id": "rex", "breed": "collie"})
        .await
        .unwrap();
    h.ddl(&ns, Ddl::HideIndex("breed_1")).await.unwrap();
    // The same index again is no change, and no event.
    h.ddl(&ns, Ddl::CreateIndex("breed_1", doc! {"breed": 1}))
        .await
        .unwrap();
    h.ddl(&ns, Ddl::DropIndex("breed_1")).await.unwrap();
    store.put(&ns, doc! {"_id": "kiki"}).await.unwrap();

    let events = read_from(h, &ns, start, expanded(), "kiki").await;
    assert_eq!(
        kinds(&events),
        [
            "create",
            "createIndexes",
            "insert",
            "modify",
            "dropIndexes",
            "insert"
        ],
        "{events:?}"
    );
    let uuid = events[0]
        .details
        .collection_uuid
        .unwrap_or_else(|| panic!("a create names its collection: {:?}", events[0]));
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.ns, ns, "event {i}");
        assert_eq!(
            event.details.collection_uuid,
            Some(uuid),
            "event {i}: with expanded events every change names its collection"
        );
        let (Some(wall), Some(time)) = (event.details.wall_time, event.cluster_time) else {
            panic!("event {i}: a wall time and a cluster time: {event:?}");
        };
        assert!(
            (wall.timestamp() - i64::from(time.secs)).abs() <= 1,
            "event {i}: {wall} against {time}"
        );
        assert_eq!(event.token.time(), event.cluster_time, "event {i}");
        assert_eq!(event.details.transaction, None, "event {i}");
        if let OperationType::Other(_) = event.operation {
            assert_eq!(
                event.document_key,
                Document::new(),
                "event {i}: no document"
            );
            assert_eq!(event.full_document, None, "event {i}");
            assert_eq!(event.details.update_description, None, "event {i}");
        }
    }
    let times: Vec<_> = events.iter().map(|e| e.cluster_time).collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");

    let plain = read_from(h, &ns, start, options(), "kiki").await;
    assert_eq!(kinds(&plain), ["insert", "insert"], "{plain:?}");
    for event in &plain {
        assert_eq!(event.details.collection_uuid, None, "{event:?}");
    }
}

pub async fn expanded_events_show_a_collection_created_by_its_first_write<
    H: DataDefinition<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let (dens, litters, indexed) = (h.ns("dens"), h.ns("litters"), h.ns("indexed"));
    let start = store.cluster_time().await.unwrap();
    store.put(&dens, doc! {"_id": "mother"}).await.unwrap();
    let pups: Vec<Document> = (1..=2).map(|n| doc! {"_id": format!("pup{n}")}).collect();
    store.put_together(&litters, pups).await.unwrap();
    h.ddl(&indexed, Ddl::CreateIndex("size_1", doc! {"size": 1}))
        .await
        .unwrap();
    store.put(&indexed, doc! {"_id": "marker"}).await.unwrap();

    let den = read_from(h, &dens, start, expanded(), "mother").await;
    assert_eq!(kinds(&den), ["create", "insert"], "{den:?}");
    assert!(den[0].cluster_time < den[1].cluster_time, "{den:?}");
    // Created inside the transaction, the collection's create is its first change:
    // the inserts come second and third in it, with or without expanded events.
    let litter = read_from(h, &litters, start, expanded(), "pup2").await;
    assert_eq!(kinds(&litter), ["create", "insert", "insert"], "{litter:?}");
    let transaction = litter[0].details.transaction.clone();
    assert!(transaction.is_some(), "{litter:?}");
    for (place, event) in litter.iter().enumerate() {
        assert_eq!(event.details.transaction, transaction, "{event:?}");
        assert_eq!(event.token.txn_op_index(), Some(place as u64), "{event:?}");
    }
    let plain = read_from(h, &litters, start, options(), "pup2").await;
    assert_eq!(kinds(&plain), ["insert", "insert"], "{plain:?}");
    let places: Vec<_> = plain.iter().map(|e| e.token.txn_op_index()).collect();
    assert_eq!(places, [Some(1), Some(2)]);
    // An index on a missing collection creates it first.
    let index = read_from(h, &indexed, start, expanded(), "marker").await;
    assert_eq!(
        kinds(&index),
        ["create", "createIndexes", "insert"],
        "{index:?}"
    );
    let uuids: Vec<_> = [&den[0], &litter[0], &index[0]]
        .iter()
        .map(|e| {
            e.details
                .collection_uuid
                .expect("a create names its collection")
        })
        .collect();
    assert!(
        uuids[0] != uuids[1] && uuids[1] != uuids[2] && uuids[0] != uuids[2],
        "one UUID per collection: {uuids:?}"
    );
}

pub async fn expanded_events_still_end_at_a_drop_or_rename_of_the_collection<
    H: DataDefinition<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let (kept, moved, gone) = (h.ns("kept"), h.ns("moved"), h.ns("gone"));
    let start = store.cluster_time().await.unwrap();
    store.put(&kept, doc! {"_id": "a"}).await.unwrap();
    store.put(&gone, doc! {"_id": "b"}).await.unwrap();
    store.rename_collection(&kept, &moved, false).await.unwrap();
    store.drop_collection(&gone).await.unwrap();
    let ends = [
        (
            &kept,
            vec!["create", "insert"],
            InvalidationCause::Renamed {
                from: kept.clone(),
                to: moved.clone(),
            },
        ),
        (
            &moved,
            vec![],
            InvalidationCause::Replaced {
                from: kept.clone(),
                to: moved.clone(),
            },
        ),
        (
            &gone,
            vec!["create", "insert"],
            InvalidationCause::Dropped(gone.clone()),
        ),
    ];
    for (ns, before, cause) in ends {
        let mut stream = store
            .open(ns, StartPoint::At(start), expanded())
            .await
            .unwrap();
        let (events, end) = read_to_end(&mut stream).await;
        assert_eq!(kinds(&events), before, "{ns}: {events:?}");
        assert!(
            matches!(&end, StoreError::Invalidated { cause: c, .. } if *c == cause),
            "{ns}: ended with {end:?}, not {cause:?}"
        );
    }
}

pub async fn data_definition_fails_with_the_servers_codes_and_logs_nothing<
    H: DataDefinition<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let (ns, missing) = (h.ns("codes"), h.ns("missing"));
    let start = store.cluster_time().await.unwrap();
    h.ddl(&ns, Ddl::Create).await.unwrap();
    h.ddl(&ns, Ddl::CreateIndex("a_1", doc! {"a": 1}))
        .await
        .unwrap();
    let refused = [
        (&ns, Ddl::Create, 48),
        (&ns, Ddl::CreateIndex("a_1", doc! {"b": 1}), 86),
        (&ns, Ddl::CreateIndex("other", doc! {"a": 1}), 85),
        (&ns, Ddl::CreateIndex("empty", doc! {}), 67),
        (&ns, Ddl::DropIndex("nope"), 27),
        (&ns, Ddl::DropIndex("_id_"), 72),
        (&ns, Ddl::HideIndex("nope"), 27),
        (&ns, Ddl::HideIndex("_id_"), 2),
        (&missing, Ddl::DropIndex("a_1"), 26),
        (&missing, Ddl::HideIndex("a_1"), 26),
    ];
    for (on, command, code) in refused {
        assert_eq!(
            h.ddl(on, command.clone()).await,
            Err(code),
            "{command:?} on {on}"
        );
    }
    store.put(&ns, doc! {"_id": "marker"}).await.unwrap();
    let events = read_from(h, &ns, start, expanded(), "marker").await;
    assert_eq!(
        kinds(&events),
        ["create", "createIndexes", "insert"],
        "{events:?}"
    );
}
