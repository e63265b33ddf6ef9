//! The third resource: `shop.events`, the shop's event store. The workload appends an
//! entry to this capped collection for every order it places, pays, ships or retires
//! (`{type, order, amount}`), and the resource's listeners tail it as a capped source
//! (docs/capped.md) to keep a count per type in one document of `shop.event_counts`.
//!
//! The counts document is written with the lease fence (the pattern `shop.orders`'s
//! outbox uses), so a fenced-out holder's late write is refused, and it carries the
//! `_id`s of the entries counted last: an entry handed over again (the batch a holder
//! handled but did not commit before it crashed or was fenced out) is found among
//! them and not counted twice. A new holder replays at most that one batch, so the
//! last [`RECENT_KEPT`] are enough at any batch size up to it (the runtime keeps more
//! for larger batches). Entries an operator replays on purpose (`rewind`) are older
//! than those and are counted again, as a replay means.

use std::collections::{BTreeMap, VecDeque};

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};

use super::DemoNamespaces;
use crate::engine::fenced::write_with_lease_fence;
use crate::engine::{Handler, HandlerError};
use crate::model::{ClusterTime, Fence};
use crate::store::{
    CappedFeed, ChangeEvent, ChangeStream, DocumentStore, FeedOptions, Namespace, StartPoint,
    StoreResult,
};

/// The lease resource of the event-store listeners.
pub const EVENTS_RESOURCE: &str = "shop.events";
/// The entry types the workload appends, one per order write.
pub const EVENT_TYPES: [&str; 4] = ["placed", "paid", "shipped", "retired"];
/// What an entry of another type (or none) is counted as.
pub const OTHER_TYPE: &str = "other";
/// The `_id` of the counts document.
pub const COUNTS_ID: &str = "order-events";
/// How many of the last counted entries' `_id`s the counts document keeps.
pub const RECENT_KEPT: usize = 256;

/// The capped collection `shop.events` holds this many bytes by default: at the
/// demo's default rate (about seven order events a second of some 90 bytes each) a
/// few minutes of events, so its window moves while the demo runs.
pub const DEMO_EVENTS_BYTES: u64 = DEMO_EVENTS_KIB * 1024;
pub const DEMO_EVENTS_KIB: u64 = 256;

/// `shop.events`, the default layout's event store.
pub fn events_ns() -> Namespace {
    DemoNamespaces::default().events
}

/// `shop.event_counts`, where the default layout keeps the counts.
pub fn event_counts_ns() -> Namespace {
    DemoNamespaces::default().event_counts
}

/// The entry the workload appends for one order write (a retirement has no amount).
pub fn order_event(kind: &str, order: &str, amount: Option<i64>) -> Document {
    let mut entry = doc! { "type": kind, "order": order };
    if let Some(amount) = amount {
        entry.insert("amount", amount);
    }
    entry
}

/// The counts as the counts document holds them, and the entries counted last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Per type ([`EVENT_TYPES`] or [`OTHER_TYPE`]), how many entries were counted.
    pub counts: BTreeMap<String, i64>,
    pub total: i64,
    /// The `_id`s of the last entries counted, oldest first.
    recent: VecDeque<ObjectId>,
}

impl Tally {
    /// The tally a counts document holds; empty for none. Fields that are not what
    /// this handler writes count as zero.
    pub fn from_document(document: Option<&Document>) -> Self {
        let Some(document) = document else {
            return Self::default();
        };
        let number = |value: &Bson| match value {
            Bson::Int64(n) => *n,
            Bson::Int32(n) => i64::from(*n),
            _ => 0,
        };
        let counts = document
            .get_document("counts")
            .map(|counts| {
                counts
                    .iter()
                    .map(|(kind, n)| (kind.clone(), number(n)))
                    .collect()
            })
            .unwrap_or_default();
        let recent = document
            .get_array("recent")
            .map(|ids| ids.iter().filter_map(Bson::as_object_id).collect())
            .unwrap_or_default();
        Self {
            counts,
            total: document.get("total").map_or(0, number),
            recent,
        }
    }

    /// Counts entry `id` of type `kind`, unless it is among the last `kept` counted
    /// (handed over again). Returns whether it was counted.
    pub fn count(&mut self, id: ObjectId, kind: Option<&str>, kept: usize) -> bool {
        if self.recent.contains(&id) {
            return false;
        }
        let kind = kind
            .filter(|k| EVENT_TYPES.contains(k))
            .unwrap_or(OTHER_TYPE);
        *self.counts.entry(kind.to_string()).or_default() += 1;
        self.total += 1;
        self.recent.push_back(id);
        while self.recent.len() > kept.max(1) {
            self.recent.pop_front();
        }
        true
    }

    /// The fields the counts document is written with.
    pub fn fields(&self) -> Document {
        let counts: Document = self
            .counts
            .iter()
            .map(|(kind, n)| (kind.clone(), Bson::Int64(*n)))
            .collect();
        doc! {
            "counts": counts,
            "total": self.total,
            "recent": self.recent.iter().copied().map(Bson::ObjectId).collect::<Vec<_>>(),
        }
    }
}

/// The handler of `shop.events`: per-type counts of the order events, fenced by the
/// lease version.
#[derive(Clone)]
pub struct EventCounts<S> {
    store: S,
    counts: Namespace,
    /// How many of the last counted `_id`s are kept (at least one batch).
    kept: usize,
}

impl<S: DocumentStore + Clone + 'static> EventCounts<S> {
    /// Counts into `counts`, recognizing replays of batches up to `batch_size`.
    pub fn writing_to(store: S, counts: Namespace, batch_size: u32) -> Self {
        let batch = usize::try_from(batch_size).unwrap_or(usize::MAX);
        Self {
            store,
            counts,
            kept: RECENT_KEPT.max(batch.saturating_mul(2)),
        }
    }
}

impl<S: DocumentStore + Clone + 'static> Handler for EventCounts<S> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        if events.is_empty() {
            return Ok(());
        }
        let id = Bson::String(COUNTS_ID.to_string());
        let stored = self.store.find_one(&self.counts, &id).await?;
        let mut tally = Tally::from_document(stored.as_ref());
        let mut counted = false;
        for event in events {
            let entry = event.document_key.get_object_id("_id").map_err(|_| {
                HandlerError::Failed(format!(
                    "an entry of the event store without an ObjectId _id: {}",
                    event.document_key
                ))
            })?;
            let kind = event
                .full_document
                .as_ref()
                .and_then(|d| d.get_str("type").ok());
            counted |= tally.count(entry, kind, self.kept);
        }
        if !counted {
            // Every entry was counted before: a replay, nothing to write.
            return Ok(());
        }
        // Refused once a newer holder has written the counts: this one has lost the lock.
        write_with_lease_fence(&self.store, &self.counts, &id, fence, tally.fields()).await
    }
}

/// The tally `counts` holds now.
pub async fn stored_tally(store: &impl DocumentStore, counts: &Namespace) -> Result<Tally, String> {
    store
        .find_one(counts, &Bson::String(COUNTS_ID.to_string()))
        .await
        .map(|document| Tally::from_document(document.as_ref()))
        .map_err(|e| format!("reading {counts}: {e}"))
}

/// What the counts should say: every entry the event store holds, counted by type
/// straight from it (a tail from its oldest entry, read until a read brings nothing).
/// Equal to the stored tally only while nothing has been overwritten.
pub async fn expected_tally<S: CappedFeed>(store: &S, events: &Namespace) -> StoreResult<Tally> {
    let options = FeedOptions {
        batch_size: 1_000,
        max_await: std::time::Duration::from_millis(200),
        ..Default::default()
    };
    let mut tail = store
        .tail(events, StartPoint::At(ClusterTime::new(0, 0)), options)
        .await?;
    let mut tally = Tally::default();
    loop {
        let batch = tail.next_batch().await?;
        if batch.events.is_empty() {
            return Ok(tally);
        }
        for event in &batch.events {
            let kind = event
                .full_document
                .as_ref()
                .and_then(|d| d.get_str("type").ok());
            if let Ok(id) = event.document_key.get_object_id("_id") {
                tally.count(id, kind, 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use crate::store::OperationType;

    fn sandbox() -> SandboxStore {
        let epoch = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch))
    }

    fn fence(version: i64) -> Fence {
        Fence {
            resource: EVENTS_RESOURCE.into(),
            version,
        }
    }

    /// The entries `kinds` appended to the event store, as a tail hands them over.
    async fn appended(store: &SandboxStore, kinds: &[&str]) -> Vec<ChangeEvent> {
        store
            .ensure_capped(&events_ns(), 1 << 20)
            .await
            .expect("capped");
        let mut tail = store
            .tail(
                &events_ns(),
                StartPoint::Now,
                FeedOptions {
                    batch_size: 100,
                    max_await: std::time::Duration::from_millis(1),
                    ..Default::default()
                },
            )
            .await
            .expect("tail");
        for (n, kind) in kinds.iter().enumerate() {
            store
                .append_entry(
                    &events_ns(),
                    order_event(kind, &format!("o{n:05}"), Some(10)),
                )
                .await
                .expect("append");
        }
        let events = tail.next_batch().await.expect("read").events;
        assert!(events.iter().all(|e| e.operation == OperationType::Insert));
        events
    }

    fn counts(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
        pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn each_entry_is_counted_once_even_when_handed_over_again() {
        let store = sandbox();
        let events = appended(&store, &["placed", "paid", "placed", "refunded"]).await;
        assert_eq!(events.len(), 4);
        let mut handler = EventCounts::writing_to(store.clone(), event_counts_ns(), 1);
        handler
            .handle(&events[..3], &fence(1))
            .await
            .expect("handled");
        // The next holder is handed the uncommitted batch again, and one more entry.
        let mut successor = EventCounts::writing_to(store.clone(), event_counts_ns(), 1);
        successor
            .handle(&events[1..], &fence(2))
            .await
            .expect("handled");
        let tally = stored_tally(&store, &event_counts_ns())
            .await
            .expect("read");
        assert_eq!(
            tally.counts,
            counts(&[("placed", 2), ("paid", 1), ("other", 1)])
        );
        assert_eq!(tally.total, 4);
        // A batch that is all replay writes nothing.
        successor.handle(&events, &fence(2)).await.expect("handled");
        assert_eq!(
            stored_tally(&store, &event_counts_ns())
                .await
                .expect("read"),
            tally
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fenced_out_holder_cannot_write_the_counts() {
        let store = sandbox();
        let events = appended(&store, &["placed", "paid"]).await;
        let mut successor = EventCounts::writing_to(store.clone(), event_counts_ns(), 1);
        successor
            .handle(&events[..1], &fence(5))
            .await
            .expect("handled");
        let mut late = EventCounts::writing_to(store.clone(), event_counts_ns(), 1);
        let refused = late.handle(&events[1..], &fence(4)).await;
        assert!(
            matches!(refused, Err(HandlerError::Fenced(_))),
            "{refused:?}"
        );
        let tally = stored_tally(&store, &event_counts_ns())
            .await
            .expect("read");
        assert_eq!(tally.counts, counts(&[("placed", 1)]));
    }

    #[test]
    fn a_tally_keeps_only_the_last_ids_and_reads_back_what_it_wrote() {
        let ids: Vec<ObjectId> = (0..5u8).map(|n| ObjectId::from_bytes([n; 12])).collect();
        let mut tally = Tally::default();
        for id in &ids {
            assert!(tally.count(*id, Some("paid"), 3));
        }
        assert!(!tally.count(ids[4], Some("paid"), 3), "among the last 3");
        assert!(
            tally.count(ids[0], Some("paid"), 3),
            "older than the last 3: counted again, as a rewind replays it"
        );
        let stored = doc! { "_id": COUNTS_ID, "_fence": 3_i64 };
        let mut document = stored.clone();
        document.extend(tally.fields());
        assert_eq!(Tally::from_document(Some(&document)), tally);
        assert_eq!(Tally::from_document(None), Tally::default());
        let odd = doc! { "counts": { "paid": 2_i32, "x": "y" }, "total": "many" };
        let read = Tally::from_document(Some(&odd));
        assert_eq!(read.counts, counts(&[("paid", 2), ("x", 0)]));
        assert_eq!(read.total, 0);
    }
}
