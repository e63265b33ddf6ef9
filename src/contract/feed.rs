//! Change streams, the oplog window, the cluster time and the bounded change count.

use crate::model::{ClusterTime, Fence};
use crate::store::OperatorStore;
use crate::store::{
    ChangeEvent, ChangeFeed, ChangeStream, DocumentStore, Namespace, OperationType, StartPoint,
    WriteFence,
};
use bson::{doc, Bson, Document};

use super::support::*;
use super::Harness;

/// Writes `{_id: id, n}` and returns its change event, read from a stream opened at
/// the cluster time before the write.
async fn put_and_read<H: Harness<Store: ChangeFeed + DocumentStore>>(
    h: &H,
    ns: &Namespace,
    id: &str,
    n: i32,
) -> ChangeEvent {
    let store = h.store();
    let start = store.cluster_time().await.unwrap();
    store.put(ns, doc! {"_id": id, "n": n}).await.unwrap();
    let mut stream = store
        .open(ns, StartPoint::At(start), options())
        .await
        .unwrap();
    read_through(&mut stream, id)
        .await
        .pop()
        .expect("the event")
}

async fn next_one(stream: &mut impl ChangeStream, what: &str) -> ChangeEvent {
    let mut events = read_until(stream, what, |_| true).await;
    assert_eq!(events.len(), 1, "{what}: one event per write: {events:?}");
    events.remove(0)
}

async fn delete(store: &impl DocumentStore, ns: &Namespace, keep: Vec<Document>) {
    store.replace_all(ns, keep).await.unwrap();
}

pub async fn events_carry_operation_namespace_key_and_document<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let other = h.ns("elsewhere");
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();
    store.put(&ns, doc! {"_id": "rex", "n": 1}).await.unwrap();
    let insert = next_one(&mut stream, "the insert").await;
    store
        .put(&other, doc! {"_id": "rex", "n": 1})
        .await
        .unwrap();
    store.put(&ns, doc! {"_id": "rex", "n": 2}).await.unwrap();
    let replace = next_one(&mut stream, "the replacement").await;
    let fence = WriteFence::Lease(Fence {
        resource: "res".into(),
        version: 1,
    });
    let rex = Bson::String("rex".into());
    store
        .fenced_upsert(&ns, &rex, &fence, doc! {"n": 3})
        .await
        .unwrap();
    let update = next_one(&mut stream, "the fenced update").await;
    delete(store, &ns, Vec::new()).await;
    let deleted = next_one(&mut stream, "the delete").await;

    let rex_key = doc! {"_id": "rex"};
    let fenced_rex = doc! {"_id": "rex", "n": 3, "_fence": 1_i64};
    let expected = [
        (
            &insert,
            OperationType::Insert,
            &rex_key,
            Some(doc! {"_id": "rex", "n": 1}),
        ),
        (
            &replace,
            OperationType::Replace,
            &rex_key,
            Some(doc! {"_id": "rex", "n": 2}),
        ),
        (&update, OperationType::Update, &rex_key, Some(fenced_rex)),
        (&deleted, OperationType::Delete, &rex_key, None),
    ];
    for (i, (event, operation, key, full)) in expected.into_iter().enumerate() {
        assert_eq!(event.ns, ns, "event {i}: only the stream's namespace");
        assert_eq!(event.operation, operation, "event {i}: {event:?}");
        assert_eq!(&event.document_key, key, "event {i}");
        assert_eq!(
            event.full_document, full,
            "event {i}: the document after the change"
        );
        assert_eq!(
            event.token.time(),
            event.cluster_time,
            "event {i}: the token decodes to the event's cluster time"
        );
    }
    // An update says what it changed (top-level fields here: the sandbox names no
    // path inside a sub-document); only an update does.
    let description = update
        .details
        .update_description
        .as_ref()
        .unwrap_or_else(|| panic!("the update is described: {update:?}"));
    assert_eq!(
        description.updated_fields().unwrap(),
        doc! {"n": 3, "_fence": 1_i64}
    );
    assert_eq!(description.removed_fields().unwrap(), Vec::<String>::new());
    for event in [&insert, &replace, &deleted] {
        assert_eq!(event.details.update_description, None, "{event:?}");
    }
    for event in [&insert, &replace, &update, &deleted] {
        assert_made_at_its_cluster_time(event);
    }
    let times: Vec<ClusterTime> = [&insert, &replace, &update, &deleted]
        .iter()
        .map(|e| e.cluster_time.unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] < w[1]),
        "cluster times strictly increase: {times:?}"
    );
}

/// Every change says when it was made by the server's wall clock, to the second of
/// its cluster time, and its token decodes to that cluster time.
pub(crate) fn assert_made_at_its_cluster_time(event: &ChangeEvent) {
    let (Some(wall), Some(time)) = (event.details.wall_time, event.cluster_time) else {
        panic!("a wall time and a cluster time: {event:?}");
    };
    assert!(
        (wall.timestamp() - i64::from(time.secs)).abs() <= 1,
        "{wall} against {time}"
    );
    assert_eq!(event.details.transaction, None, "not in a transaction");
    assert_eq!(
        event.token.time(),
        event.cluster_time,
        "the token decodes to the event's cluster time"
    );
}

/// Inserts rex (n 1), updates it (n 2), replaces it (n 3), then reads those three
/// changes from a stream opened before them with `options`.
async fn insert_update_replace<H: Harness<Store: ChangeFeed + DocumentStore>>(
    h: &H,
    ns: &Namespace,
    options: crate::store::FeedOptions,
) -> (ClusterTime, Vec<ChangeEvent>) {
    let store = h.store();
    let start = store.cluster_time().await.unwrap();
    let rex = Bson::String("rex".into());
    store.put(ns, doc! {"_id": "rex", "n": 1}).await.unwrap();
    store
        .fenced_upsert(ns, &rex, &WriteFence::SourceVersion(2), doc! {"n": 2})
        .await
        .unwrap();
    store.put(ns, doc! {"_id": "rex", "n": 3}).await.unwrap();
    let mut stream = store
        .open(ns, StartPoint::At(start), options)
        .await
        .unwrap();
    let events = read_until(&mut stream, "the replacement", |e| {
        e.operation == OperationType::Replace
    })
    .await;
    (start, events)
}

fn kinds_and_documents(events: &[ChangeEvent]) -> Vec<(OperationType, Option<Document>)> {
    events
        .iter()
        .map(|e| (e.operation.clone(), e.full_document.clone()))
        .collect()
}

pub async fn update_events_carry_the_document_as_it_is_when_read<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let (start, events) = insert_update_replace(h, &ns, options()).await;
    assert_eq!(
        kinds_and_documents(&events),
        [
            (OperationType::Insert, Some(doc! {"_id": "rex", "n": 1})),
            (OperationType::Update, Some(doc! {"_id": "rex", "n": 3})),
            (OperationType::Replace, Some(doc! {"_id": "rex", "n": 3})),
        ],
        "inserts and replacements carry their own document; an update the document looked up when read (updateLookup)"
    );

    delete(store, &ns, vec![]).await;
    let mut again = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();
    let events = read_until(&mut again, "the delete", |e| {
        e.operation == OperationType::Delete
    })
    .await;
    let update = events
        .iter()
        .find(|e| e.operation == OperationType::Update)
        .expect("the update again");
    assert_eq!(
        update.full_document, None,
        "the looked-up document of an update is gone once the document is deleted"
    );
}

/// A stream that asks for no post-image (`PostImage::Off`) gets none for an update,
/// where inserts and replacements still carry their own document.
pub async fn a_stream_without_post_images_gets_none_for_an_update<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let no_post_image = crate::store::FeedOptions {
        post_image: crate::store::PostImage::Off,
        ..options()
    };
    let (_, events) = insert_update_replace(h, &h.ns("animals"), no_post_image).await;
    assert_eq!(
        kinds_and_documents(&events),
        [
            (OperationType::Insert, Some(doc! {"_id": "rex", "n": 1})),
            (OperationType::Update, None),
            (OperationType::Replace, Some(doc! {"_id": "rex", "n": 3})),
        ]
    );
}

pub async fn a_write_that_changes_nothing_is_not_a_change<
    H: Harness<Store: OperatorStore + ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let start = store.cluster_time().await.unwrap();
    let rex = Bson::String("rex".into());
    let fence = WriteFence::Lease(Fence {
        resource: "res".into(),
        version: 1,
    });
    store.put(&ns, doc! {"_id": "rex", "n": 1}).await.unwrap();
    store.put(&ns, doc! {"_id": "rex", "n": 1}).await.unwrap();
    for _ in 0..2 {
        let written = store.fenced_upsert(&ns, &rex, &fence, doc! {"n": 1}).await;
        assert_eq!(written.unwrap(), crate::store::WriteOutcome::Applied);
    }
    let end = put_and_read(h, &ns, "marker", 0)
        .await
        .cluster_time
        .unwrap();
    let mut stream = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();
    let events = read_through(&mut stream, "marker").await;
    assert_eq!(
        events
            .iter()
            .map(|e| e.operation.clone())
            .collect::<Vec<_>>(),
        [
            OperationType::Insert,
            OperationType::Update,
            OperationType::Insert
        ],
        "the same document again, and the same fence and fields again, change nothing: {events:?}"
    );
    assert_eq!(
        store
            .count_changes(&ns.whole(), start, end, 100)
            .await
            .unwrap(),
        3
    );
}

pub async fn opening_after_a_token_resumes_after_its_event<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let start = store.cluster_time().await.unwrap();
    for (i, id) in ["e1", "e2", "e3"].into_iter().enumerate() {
        store
            .put(&ns, doc! {"_id": id, "i": i as i32})
            .await
            .unwrap();
    }
    let mut stream = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();
    let first = read_through(&mut stream, "e3").await;
    assert_eq!(ids(&first), ["e1", "e2", "e3"]);

    let mut resumed = store
        .open(&ns, StartPoint::After(first[0].token.clone()), options())
        .await
        .unwrap();
    let events = read_through(&mut resumed, "e3").await;
    assert_eq!(
        ids(&events),
        ["e2", "e3"],
        "everything after e1, nothing before"
    );
    assert_eq!(events, first[1..], "the same events, tokens included");

    let mut at_end = store
        .open(&ns, StartPoint::After(first[2].token.clone()), options())
        .await
        .unwrap();
    store.put(&ns, doc! {"_id": "e4"}).await.unwrap();
    assert_eq!(ids(&read_through(&mut at_end, "e4").await), ["e4"]);
}

pub async fn opening_at_a_time_includes_it<H: Harness<Store: ChangeFeed + DocumentStore>>(h: &H) {
    let store = h.store();
    let ns = h.ns("animals");
    let start = store.cluster_time().await.unwrap();
    for id in ["e1", "e2", "e3"] {
        store.put(&ns, doc! {"_id": id}).await.unwrap();
    }
    let mut stream = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();
    let all = read_through(&mut stream, "e3").await;
    let mut at = store
        .open(&ns, StartPoint::At(all[1].cluster_time.unwrap()), options())
        .await
        .unwrap();
    let events = read_through(&mut at, "e3").await;
    assert_eq!(
        ids(&events),
        ["e2", "e3"],
        "startAtOperationTime is inclusive"
    );
    let just_after = ClusterTime::from_u64(all[1].cluster_time.unwrap().as_u64() + 1);
    let mut after = store
        .open(&ns, StartPoint::At(just_after), options())
        .await
        .unwrap();
    assert_eq!(ids(&read_through(&mut after, "e3").await), ["e3"]);
}

pub async fn opening_at_the_oldest_entry_replays_everything_since<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    for id in ["e1", "e2"] {
        store.put(&ns, doc! {"_id": id}).await.unwrap();
    }
    let window = store.oplog_window().await.unwrap();
    let mut stream = store
        .open(&ns, StartPoint::At(window.first), options())
        .await
        .unwrap();
    assert_eq!(
        ids(&read_through(&mut stream, "e2").await),
        ["e1", "e2"],
        "from the oldest entry on, every change of the namespace"
    );
}

pub async fn an_idle_stream_still_advances_its_resume_token<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("quiet");
    let busy = h.ns("busy");
    let e1 = put_and_read(h, &ns, "e1", 1).await;
    let mut stream = store
        .open(&ns, StartPoint::After(e1.token.clone()), options())
        .await
        .unwrap();
    let idle = stream.next_batch().await.unwrap();
    assert!(idle.events.is_empty(), "{idle:?}");
    let first_token = idle
        .resume_token
        .expect("an empty batch still has a resume token");
    let first_time = first_token.time().expect("the post-batch token decodes");
    assert!(first_time >= e1.cluster_time.unwrap());

    // Elsewhere the cluster moves on; the quiet stream's token follows it.
    let elsewhere = put_and_read(h, &busy, "b1", 1).await.cluster_time.unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let advanced = loop {
        let batch = stream.next_batch().await.unwrap();
        assert!(
            batch.events.is_empty(),
            "nothing on the quiet namespace: {batch:?}"
        );
        let token = batch.resume_token.expect("a resume token in every batch");
        if token.time().is_some_and(|t| t >= elsewhere) {
            break token;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the post-batch token did not pass {elsewhere:?}"
        );
    };
    // Resuming there misses nothing and repeats nothing.
    store.put(&ns, doc! {"_id": "e2"}).await.unwrap();
    let mut resumed = store
        .open(&ns, StartPoint::After(advanced), options())
        .await
        .unwrap();
    assert_eq!(ids(&read_through(&mut resumed, "e2").await), ["e2"]);
}

pub async fn a_start_before_a_history_that_never_rolled_over_is_not_lost<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    store.put(&ns, doc! {"_id": "e1"}).await.unwrap();
    let window = store.oplog_window().await.unwrap();
    let long_before = ClusterTime::new(window.first.secs.saturating_sub(3600), 0);
    let mut stream = store
        .open(&ns, StartPoint::At(long_before), options())
        .await
        .expect("a start before the first entry of a history that never rolled over is not lost");
    assert_eq!(
        ids(&read_through(&mut stream, "e1").await),
        ["e1"],
        "the stream starts from the beginning"
    );
}

pub async fn the_oplog_window_and_cluster_time_follow_writes<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    // A real oplog is never empty (initiating the set writes to it).
    store.put(&ns, doc! {"_id": "e0"}).await.unwrap();
    let before = store.oplog_window().await.unwrap();
    assert!(before.first <= before.last, "{before:?}");
    let time_before = store.cluster_time().await.unwrap();
    let event = put_and_read(h, &ns, "e1", 1).await;
    let after = store.oplog_window().await.unwrap();
    let time_after = store.cluster_time().await.unwrap();
    assert!(after.first <= after.last, "{after:?}");
    assert_eq!(
        after.first, before.first,
        "a history that never rolled keeps its first entry"
    );
    assert!(
        after.last > before.last && after.last >= event.cluster_time.unwrap(),
        "the last entry advances with a write: {before:?} then {after:?}, write at {:?}",
        event.cluster_time.unwrap()
    );
    assert!(
        time_before < event.cluster_time.unwrap() && event.cluster_time.unwrap() <= time_after,
        "the cluster time passes the write: {time_before:?} < {:?} <= {time_after:?}",
        event.cluster_time.unwrap()
    );
}

pub async fn count_changes_counts_the_namespace_in_an_inclusive_range_up_to_a_limit<
    H: Harness<Store: OperatorStore + ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("counted");
    let other = h.ns("other");
    let start = store.cluster_time().await.unwrap();
    for i in 1..=5 {
        store.put(&ns, doc! {"_id": format!("e{i}")}).await.unwrap();
        store
            .put(&other, doc! {"_id": format!("o{i}")})
            .await
            .unwrap();
    }
    let mut stream = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();
    let events = read_through(&mut stream, "e5").await;
    assert_eq!(events.len(), 5);
    let t = |i: usize| events[i].cluster_time.unwrap();
    assert_eq!(
        store
            .count_changes(&ns.whole(), t(0), t(4), 100)
            .await
            .unwrap(),
        5
    );
    assert_eq!(
        store
            .count_changes(&ns.whole(), t(1), t(3), 100)
            .await
            .unwrap(),
        3,
        "both ends inclusive"
    );
    let between = ClusterTime::from_u64(t(1).as_u64() + 1);
    assert_eq!(
        store
            .count_changes(&ns.whole(), between, t(3), 100)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .count_changes(&ns.whole(), t(0), t(4), 2)
            .await
            .unwrap(),
        2,
        "at most the limit"
    );
    assert_eq!(
        store
            .count_changes(&other.whole(), t(0), t(4), 100)
            .await
            .unwrap(),
        4,
        "only the namespace asked for (o1 to o4 fall between e1 and e5)"
    );
    assert_eq!(
        store
            .count_changes(&ns.whole(), ClusterTime::new(1, 0), start, 100)
            .await
            .unwrap(),
        0,
        "nothing before the first write"
    );
    assert_eq!(
        store
            .count_changes(&h.ns("never").whole(), t(0), t(4), 100)
            .await
            .unwrap(),
        0
    );
}

/// `put_together` is one transaction: its changes come one after another in the
/// stream, nothing between them, each with the transaction's identity and its place
/// in it; a read that came back short of its batch size says it reached the end, and
/// never ends inside the transaction.
pub async fn a_transactions_changes_come_together_with_its_identity<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("litters");
    let start = store.cluster_time().await.unwrap();
    store.put(&ns, doc! {"_id": "mother"}).await.unwrap();
    let litter: Vec<Document> = (1..=5).map(|n| doc! {"_id": format!("pup{n}")}).collect();
    store.put_together(&ns, litter).await.unwrap();
    store.put(&ns, doc! {"_id": "father"}).await.unwrap();
    let options = crate::store::FeedOptions {
        batch_size: 3,
        ..options()
    };
    let mut stream = store
        .open(&ns, StartPoint::At(start), options)
        .await
        .unwrap();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !events
        .iter()
        .any(|e: &ChangeEvent| e.document_key == doc! {"_id": "father"})
    {
        assert!(tokio::time::Instant::now() < deadline, "only {events:?}");
        let batch = stream.next_batch().await.unwrap();
        if batch.events.len() < 3 && !batch.events.is_empty() {
            assert!(
                batch.at_end,
                "a short batch is at the stream's end: {batch:?}"
            );
        }
        if batch.at_end {
            let last = batch
                .events
                .last()
                .and_then(|e| e.details.transaction.as_ref());
            assert!(
                last.is_none()
                    || batch.events.last().map(|e| &e.document_key) == Some(&doc! {"_id": "pup5"}),
                "a batch at the end holds a transaction's last change, if any: {batch:?}"
            );
        }
        events.extend(batch.events);
    }
    assert_eq!(
        ids(&events),
        ["mother", "pup1", "pup2", "pup3", "pup4", "pup5", "father"]
    );
    assert_eq!(events[0].details.transaction, None);
    assert_eq!(events[6].details.transaction, None);
    let transaction = events[1]
        .details
        .transaction
        .clone()
        .expect("in a transaction");
    assert_eq!(
        transaction.session.len(),
        16,
        "lsid.id is a UUID's 16 bytes"
    );
    for (place, event) in events[1..6].iter().enumerate() {
        assert_eq!(event.details.transaction.as_ref(), Some(&transaction));
        assert_eq!(event.token.txn_op_index(), Some(place as u64));
        assert_eq!(event.operation, OperationType::Insert);
    }
    store
        .put_together(&ns, vec![doc! {"_id": "pup1", "weaned": true}])
        .await
        .unwrap();
    let next = read_through(&mut stream, "pup1").await;
    let again = next.last().expect("the replacement");
    assert_eq!(again.operation, OperationType::Replace);
    let second = again.details.transaction.clone().expect("in a transaction");
    assert_ne!(second, transaction, "another transaction");
    let missing = store
        .put_together(&ns, vec![doc! {"name": "no id"}])
        .await
        .expect_err("a document without _id is refused");
    assert!(
        matches!(missing, crate::store::StoreError::InvalidArgument(_)),
        "{missing:?}"
    );
}
