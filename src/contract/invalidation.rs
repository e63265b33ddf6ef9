//! A watched collection that goes away. Changes before the drop or rename arrive as
//! usual, in their own batch; then every read is `Invalidated` with the cause and the
//! drop's cluster time, at once; no batch ever hands out a token at or past the drop;
//! reopening after a token from before the drop closes again; opening after the
//! drop's time is a new stream on the name. (What a real server sends underneath is
//! pinned by `tests/mongo_live_invalidate.rs`.)

use std::time::Duration;

use bson::{doc, Bson, Document};

use crate::model::{ClusterTime, ResumeToken};
use crate::store::{
    ChangeEvent, ChangeFeed, ChangeStream, DocumentStore, FeedOptions, InvalidationCause,
    Namespace, PostImage, PreImage, StartPoint, StoreError,
};

use super::support::PATIENCE;
use super::Harness;

const OPTIONS: FeedOptions = FeedOptions {
    batch_size: 10,
    max_await: Duration::from_millis(200),
    post_image: PostImage::UpdateLookup,
    pre_image: PreImage::Off,
    expanded_events: false,
    // As a listener reads (its default): the drop and its invalidate come through the
    // reading task on MongoDB.
    read_ahead: true,
};

/// Everything the stream hands out until it ends: the events, the resume token of
/// every batch, and the error it ended with.
struct Read {
    events: Vec<ChangeEvent>,
    tokens: Vec<ResumeToken>,
    end: StoreError,
}

async fn read_to_the_end<S: ChangeStream>(stream: &mut S) -> Read {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut events = Vec::new();
    let mut tokens = Vec::new();
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream did not end within {PATIENCE:?}; saw {events:?}"
        );
        match stream.next_batch().await {
            Ok(batch) => {
                tokens.extend(batch.resume_token);
                events.extend(batch.events);
            }
            Err(end) => {
                return Read {
                    events,
                    tokens,
                    end,
                }
            }
        }
    }
}

fn ids(events: &[ChangeEvent]) -> Vec<Bson> {
    events
        .iter()
        .map(|e| e.document_key.get("_id").cloned().unwrap_or(Bson::Null))
        .collect()
}

fn invalidated(end: &StoreError) -> (InvalidationCause, ClusterTime) {
    match end {
        StoreError::Invalidated {
            cause,
            at: Some(at),
        } => (cause.clone(), *at),
        other => panic!("expected Invalidated with a time, got {other:?}"),
    }
}

async fn put(store: &impl DocumentStore, ns: &Namespace, id: i32) {
    store.put(ns, doc! {"_id": id}).await.unwrap();
}

/// The stream ends again at once, with the same error, on every later read.
async fn stays_closed<S: ChangeStream>(stream: &mut S, end: &StoreError) {
    let started = std::time::Instant::now();
    let again = stream.next_batch().await.unwrap_err();
    assert_eq!(again.to_string(), end.to_string());
    assert!(
        started.elapsed() < OPTIONS.max_await,
        "a closed stream answers at once ({:?})",
        started.elapsed()
    );
}

pub async fn drop_ends_the_stream_after_the_changes_before_it<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let orders = h.ns("orders");
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(&orders, StartPoint::At(start), OPTIONS)
        .await
        .unwrap();
    for id in 1..=3 {
        put(store, &orders, id).await;
    }
    store.drop_collection(&orders).await.unwrap();
    let read = read_to_the_end(&mut stream).await;
    assert_eq!(ids(&read.events), [1, 2, 3].map(Bson::Int32));
    let (cause, at) = invalidated(&read.end);
    assert_eq!(cause, InvalidationCause::Dropped(orders.clone()));
    let last = read.events.last().unwrap();
    assert!(
        at > last.cluster_time.unwrap(),
        "the drop comes after the changes"
    );
    assert!(
        read.tokens
            .iter()
            .all(|t| t.time().is_some_and(|time| time < at)),
        "no batch hands out a token at or past the drop: {:?}",
        read.tokens
    );
    assert_eq!(read.tokens.last(), Some(&last.token));
    stays_closed(&mut stream, &read.end).await;

    // From the last token before the drop, the stream closes again at once.
    let mut again = store
        .open(&orders, StartPoint::After(last.token.clone()), OPTIONS)
        .await
        .unwrap();
    let reread = read_to_the_end(&mut again).await;
    assert!(reread.events.is_empty(), "{:?}", reread.events);
    assert_eq!(invalidated(&reread.end), (cause, at));

    // After the drop's time it is a new stream on the name.
    let mut fresh = store
        .open(&orders, StartPoint::At(next(at)), OPTIONS)
        .await
        .unwrap();
    put(store, &orders, 4).await;
    assert_eq!(ids(&first_events(&mut fresh, 1).await), [Bson::Int32(4)]);
}

pub async fn renames_away_and_onto_end_the_stream<H: Harness<Store: ChangeFeed + DocumentStore>>(
    h: &H,
) {
    let store = h.store();
    let orders = h.ns("orders");
    let old = h.ns("orders_old");
    put(store, &orders, 1).await;
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(&orders, StartPoint::At(next(start)), OPTIONS)
        .await
        .unwrap();
    put(store, &orders, 2).await;
    store.rename_collection(&orders, &old, false).await.unwrap();
    let read = read_to_the_end(&mut stream).await;
    assert_eq!(ids(&read.events), [Bson::Int32(2)]);
    assert_eq!(
        invalidated(&read.end).0,
        InvalidationCause::Renamed {
            from: orders.clone(),
            to: old.clone()
        }
    );

    // Another collection renamed onto the watched one replaces it.
    put(store, &orders, 7).await;
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(&orders, StartPoint::At(next(start)), OPTIONS)
        .await
        .unwrap();
    let refused = store.rename_collection(&old, &orders, false).await;
    assert!(
        matches!(refused, Err(StoreError::Command { code: 48, .. })),
        "an existing target needs dropTarget: {refused:?}"
    );
    store.rename_collection(&old, &orders, true).await.unwrap();
    let read = read_to_the_end(&mut stream).await;
    assert!(read.events.is_empty(), "{:?}", read.events);
    assert_eq!(
        invalidated(&read.end).0,
        InvalidationCause::Replaced {
            from: old.clone(),
            to: orders.clone()
        }
    );
    let moved: Vec<Document> = store.find_all(&orders).await.unwrap();
    assert_eq!(
        moved,
        [doc! {"_id": 1}, doc! {"_id": 2}],
        "the renamed documents"
    );
    assert!(
        matches!(
            store
                .rename_collection(&orders, &Namespace::new("elsewhere", "orders"), false)
                .await,
            Err(StoreError::InvalidArgument(_))
        ),
        "renames stay within one database"
    );
}

pub async fn drop_database_ends_a_collection_stream_with_its_drop<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let orders = h.ns("orders");
    let pets = h.ns("pets");
    let db = orders.db.clone();
    put(store, &orders, 1).await;
    put(store, &pets, 1).await;
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(&orders, StartPoint::At(next(start)), OPTIONS)
        .await
        .unwrap();
    store.drop_database(&db).await.unwrap();
    let read = read_to_the_end(&mut stream).await;
    assert!(read.events.is_empty(), "{:?}", read.events);
    assert_eq!(
        invalidated(&read.end).0,
        InvalidationCause::Dropped(orders.clone()),
        "a collection stream sees its collection's drop, as on a real server"
    );
    assert!(store.find_all(&pets).await.unwrap().is_empty());
}

fn next(time: ClusterTime) -> ClusterTime {
    ClusterTime::from_u64(time.as_u64() + 1)
}

async fn first_events<S: ChangeStream>(stream: &mut S, n: usize) -> Vec<ChangeEvent> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut events = Vec::new();
    while events.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "saw only {events:?}"
        );
        events.extend(stream.next_batch().await.unwrap().events);
    }
    events
}
