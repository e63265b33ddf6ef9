//! Capped collections read as event stores (`CappedFeed`, docs/capped.md): created
//! once and kept, appended to with an ObjectId `_id`, their window, and a tail that
//! hands the entries over in insertion order, resumes after an entry, waits on an empty
//! collection and says when its entry was overwritten.

use bson::oid::ObjectId;
use bson::{doc, Document};
use chrono::{DateTime, TimeDelta, Utc};

use crate::model::{
    entry_token, first_id_of, object_id_at, token_entry, ClusterTime, EntrySpan, EntryStart,
};
use crate::store::{
    CappedFeed, ChangeEvent, ChangeStream, DocumentStore, Namespace, OperationType, StartPoint,
    StoreError,
};

use super::support::*;
use super::Harness;

/// A tail from the oldest entry, as a capped listener with no position starts.
const OLDEST: StartPoint = StartPoint::At(ClusterTime::new(0, 0));

/// Reads until `count` entries have come, or panics after [`PATIENCE`].
async fn read_entries(tail: &mut impl ChangeStream, count: usize) -> Vec<ChangeEvent> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    while seen.len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} entries did not come within {PATIENCE:?}; read {:?}",
            numbers(&seen)
        );
        seen.extend(tail.next_batch().await.expect("next_batch").events);
    }
    seen
}

/// The `n` of each entry.
fn numbers(events: &[ChangeEvent]) -> Vec<i64> {
    events
        .iter()
        .map(|e| {
            e.full_document
                .as_ref()
                .and_then(|d| d.get_i64("n").ok())
                .unwrap_or_else(|| panic!("an entry with its n: {e:?}"))
        })
        .collect()
}

/// Appends `{n}` for each `n` of `range`; returns the last `_id`.
async fn append_range(
    store: &impl CappedFeed,
    ns: &Namespace,
    range: std::ops::Range<i64>,
    entry: impl Fn(i64) -> Document,
) -> ObjectId {
    let mut last = None;
    for n in range {
        last = Some(store.append_entry(ns, entry(n)).await.expect("append"));
    }
    last.expect("at least one")
}

fn numbered(n: i64) -> Document {
    doc! { "n": n }
}

/// `append_entry`, the port an application appends through: an `_id` is made when the
/// entry has none, one it has is kept, and one that is not an ObjectId is refused; a
/// tail hands the entries over in the order they were appended, each an insert whose
/// token is the position after it.
pub async fn entries_appended_through_the_port_are_tailed<H: Harness<Store: CappedFeed>>(h: &H) {
    let store = h.store();
    let ns = h.ns("events");
    store
        .ensure_capped(&ns, 1 << 20)
        .await
        .expect("create capped");
    let made = store
        .append_entry(&ns, doc! { "n": 0_i64 })
        .await
        .expect("append");
    let given = object_id_at(Utc::now(), [3; 5], 1);
    let kept = store
        .append_entry(&ns, doc! { "_id": given, "n": 1_i64 })
        .await
        .expect("append");
    assert_eq!(kept, given, "an _id given is kept");
    let refused = store
        .append_entry(&ns, doc! { "_id": "text", "n": 2_i64 })
        .await;
    assert!(
        matches!(refused, Err(StoreError::InvalidArgument(_))),
        "{refused:?}"
    );
    let window = store
        .capped_window(&ns)
        .await
        .expect("window")
        .expect("entries");
    assert_eq!((window.oldest, window.newest), (made, given));
    let mut tail = store.tail(&ns, OLDEST, options()).await.expect("tail");
    let events = read_entries(&mut tail, 2).await;
    assert_eq!(numbers(&events), [0, 1], "in the order appended");
    for (event, id) in events.iter().zip([made, given]) {
        assert_eq!(event.operation, OperationType::Insert, "{event:?}");
        assert_eq!(event.ns, ns, "{event:?}");
        assert_eq!(event.document_key, doc! { "_id": id }, "{event:?}");
        assert_eq!(
            token_entry(&event.token),
            Some(id),
            "the token is the position after the entry"
        );
    }
}

/// `ensure_capped` on a capped collection keeps it as it is, its size and entries.
pub async fn ensure_capped_keeps_an_existing_capped_collection<H: Harness<Store: CappedFeed>>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("events");
    store
        .ensure_capped(&ns, 1 << 20)
        .await
        .expect("create capped");
    let first = store.append_entry(&ns, numbered(0)).await.expect("append");
    let last = append_range(store, &ns, 1..3, numbered).await;
    store
        .ensure_capped(&ns, 1 << 20)
        .await
        .expect("kept as it is the second time");
    store
        .ensure_capped(&ns, 4096)
        .await
        .expect("kept as it is, whatever size is asked");
    let window = store
        .capped_window(&ns)
        .await
        .expect("window")
        .expect("entries");
    assert_eq!((window.oldest, window.newest), (first, last));
    let stats = store.capped_stats(&ns).await.expect("capped_stats");
    assert_eq!(
        (stats.max_bytes, stats.count),
        (1 << 20, 3),
        "the size it was made with, and its entries: {stats:?}"
    );
}

/// A collection that is not capped cannot be tailed: it is not made capped, a tail
/// and its statistics are refused, and its documents stay.
pub async fn a_plain_collection_is_neither_made_capped_nor_tailed<
    H: Harness<Store: CappedFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("events");
    store.put(&ns, doc! { "_id": 1 }).await.expect("write");
    match store.ensure_capped(&ns, 4096).await {
        Err(StoreError::InvalidArgument(e)) => assert!(e.contains("not capped"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let tail = store.tail(&ns, OLDEST, options()).await;
    assert!(
        matches!(tail, Err(StoreError::InvalidArgument(_))),
        "a tail of a plain collection: {:?}",
        tail.map(|_| "opened")
    );
    let stats = store.capped_stats(&ns).await;
    assert!(
        matches!(stats, Err(StoreError::InvalidArgument(_))),
        "{stats:?}"
    );
    assert_eq!(
        store.find_all(&ns).await.expect("find_all"),
        [doc! { "_id": 1 }],
        "left as it was"
    );
}

/// Resuming after an entry goes on in insertion order: an entry appended after it with
/// an older `_id` (another appender's slower clock, within `APPEND_SKEW`) is still
/// handed over, which an `_id > position` query alone would skip.
pub async fn a_tail_resumes_after_its_entry_in_insertion_order<H: Harness<Store: CappedFeed>>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("events");
    store
        .ensure_capped(&ns, 1 << 20)
        .await
        .expect("create capped");
    let now = Utc::now();
    let at =
        |secs: i64, counter: u32| object_id_at(now + TimeDelta::seconds(secs), [7; 5], counter);
    for (id, n) in [
        (at(0, 1), 0_i64),
        (at(0, 2), 1),
        (at(-5, 3), 2),
        (at(1, 4), 3),
    ] {
        store
            .append_entry(&ns, doc! { "_id": id, "n": n })
            .await
            .expect("append");
    }
    let position = entry_token(at(0, 2));
    let mut tail = store
        .tail(&ns, StartPoint::After(position), options())
        .await
        .expect("tail");
    let events = read_entries(&mut tail, 2).await;
    assert_eq!(
        numbers(&events),
        [2, 3],
        "after entry 1: entry 2 (an _id 5 s older) and entry 3"
    );
}

/// A tail after an entry that was overwritten, the oldest entry left being newer, is
/// `HistoryLost`: what came after it may be gone too.
pub async fn a_tail_after_an_overwritten_entry_is_history_lost<H: Harness<Store: CappedFeed>>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("events");
    store.ensure_capped(&ns, 4096).await.expect("create capped");
    let position = append_range(store, &ns, 0..3, numbered).await;
    append_range(
        store,
        &ns,
        3..200,
        |n| doc! { "n": n, "pad": "x".repeat(60) },
    )
    .await;
    let window = store
        .capped_window(&ns)
        .await
        .expect("window")
        .expect("entries");
    assert!(
        window.oldest > position,
        "rolled over: {window:?} vs {position}"
    );
    let read = match store
        .tail(&ns, StartPoint::After(entry_token(position)), options())
        .await
    {
        Ok(mut tail) => tail.next_batch().await.map(|batch| batch.events),
        Err(e) => Err(e),
    };
    assert!(
        is_history_lost(&read),
        "a tail after an overwritten entry: {read:?}"
    );
}

/// A tailable cursor on an empty collection is closed at once by the server: the tail
/// hands over empty batches until entries come, and misses none of them.
pub async fn an_empty_collection_is_tailed_until_entries_come<H: Harness<Store: CappedFeed>>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("events");
    store
        .ensure_capped(&ns, 1 << 20)
        .await
        .expect("create capped");
    let mut tail = store
        .tail(&ns, StartPoint::Now, options())
        .await
        .expect("tail");
    for _ in 0..3 {
        let batch = tail.next_batch().await.expect("an empty collection");
        assert!(batch.events.is_empty(), "{batch:?}");
    }
    append_range(store, &ns, 0..5, numbered).await;
    let events = read_entries(&mut tail, 5).await;
    assert_eq!(numbers(&events), [0, 1, 2, 3, 4]);
}

/// Entry `n`'s `_id`: one a second from `base`, so a time names exactly one entry.
fn id_of(base: DateTime<Utc>, n: i64) -> ObjectId {
    object_id_at(base + TimeDelta::seconds(n), [7; 5], n as u32)
}

/// `count_entries` counts by `_id` span, up to a limit; a missing collection has none.
pub async fn count_entries_counts_by_span_up_to_a_limit<H: Harness<Store: CappedFeed>>(h: &H) {
    let store = h.store();
    let ns = h.ns("events");
    let base = Utc::now() - TimeDelta::seconds(100);
    store
        .ensure_capped(&ns, 1 << 20)
        .await
        .expect("create capped");
    for n in 0..10 {
        store
            .append_entry(&ns, doc! { "_id": id_of(base, n), "n": n })
            .await
            .expect("append");
    }
    let count = |from, until, limit| {
        let ns = ns.clone();
        async move {
            store
                .count_entries(&ns, EntrySpan { from, until }, limit)
                .await
                .expect("count")
        }
    };
    let after = |n| EntryStart::After(id_of(base, n));
    assert_eq!(count(after(2), after(6), 100).await, 4, "3, 4, 5 and 6");
    assert_eq!(count(EntryStart::Oldest, after(6), 100).await, 7);
    let second_5 = u32::try_from((base + TimeDelta::seconds(5)).timestamp()).expect("a time");
    let from_second_5 = EntryStart::From(first_id_of(second_5));
    assert_eq!(count(from_second_5, after(9), 100).await, 5, "5 to 9");
    assert_eq!(count(EntryStart::Oldest, after(9), 3).await, 3, "the limit");
    assert_eq!(count(after(4), after(4), 100).await, 0, "an empty span");
    let missing = h.ns("missing");
    let span = EntrySpan {
        from: EntryStart::Oldest,
        until: after(9),
    };
    assert_eq!(
        store
            .count_entries(&missing, span, 100)
            .await
            .expect("count"),
        0
    );
}
