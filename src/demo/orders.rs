//! The second resource: `shop.orders` changes published in order, at least once,
//! to an outbox. Each message is fenced by the lease version and keyed by the
//! change, so a re-delivery never makes a second message and a fenced-out
//! holder's late message is refused.
//!
//! The shop retires old orders (deletes them, see [`super::workload::ORDERS_KEPT`]),
//! and an order's messages go with it: the `delete` change of an order removes every
//! message naming it. So the outbox and the mails hold the messages of the orders the
//! shop still has (at most one per [`super::workload::ORDER_STATES`] each), plus
//! those of orders whose retirement their listener has not handled yet. The mailer
//! never mails an order that is gone (it lags, so it often reads about one).
//!
//! What this leaves behind, until an operator cleans up: the messages of an order
//! whose `delete` change a listener never handles (skipped by `reset --to now`, or
//! lost with the history), and a message that a fenced-out holder writes after its
//! successor handled the order's retirement (the deleted messages no longer carry the
//! fence that would have refused it).

use std::time::Duration;

use bson::{doc, Bson};

use super::DemoNamespaces;
use crate::engine::fenced::write_with_lease_fence;
use crate::engine::{Handler, HandlerError};
use crate::model::Fence;
use crate::store::{ChangeEvent, DocumentStore, Namespace, OperationType};

pub const ORDERS_RESOURCE: &str = "shop.orders";
/// A second consumer of the orders: a mailer whose downstream is slow, so it lags.
pub const MAILER_RESOURCE: &str = "shop.mailer";

/// `shop.orders`, where the default layout keeps the orders.
pub fn orders_ns() -> Namespace {
    DemoNamespaces::default().orders
}

/// `shop.outbox`, where the default layout keeps the messages.
pub fn outbox_ns() -> Namespace {
    DemoNamespaces::default().outbox
}

/// `shop.mails`, where the default layout keeps the mailer's messages.
pub fn mails_ns() -> Namespace {
    DemoNamespaces::default().mails
}

/// The message id of a change: the order and the change's resume token, which is
/// unique per change even when a transaction gives several changes one cluster time.
pub fn message_id(event: &ChangeEvent) -> String {
    let order = event
        .document_key
        .get("_id")
        .map(|id| match id {
            Bson::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default();
    format!("{order}@{}", event.token)
}

#[derive(Clone)]
pub struct OrderOutbox<S> {
    store: S,
    outbox: Namespace,
    /// Time each message takes downstream (a slow mail service), before it is written.
    delay: Duration,
    /// The mailer's orders: a change of an order no longer there is not mailed.
    live_orders: Option<Namespace>,
}

impl<S: DocumentStore + Clone + 'static> OrderOutbox<S> {
    /// Messages into `shop.outbox`.
    pub fn new(store: S) -> Self {
        Self::writing_to(store, outbox_ns())
    }

    /// Messages into `outbox`.
    pub fn writing_to(store: S, outbox: Namespace) -> Self {
        Self {
            store,
            outbox,
            delay: Duration::ZERO,
            live_orders: None,
        }
    }

    /// The mailer: the same messages into `shop.mails`, each taking `delay`, for the
    /// orders of `shop.orders` that are still there.
    pub fn mailer(store: S, delay: Duration) -> Self {
        Self::mailer_writing_to(store, orders_ns(), mails_ns(), delay)
    }

    /// The mailer of the orders in `orders`, writing into `mails`.
    pub fn mailer_writing_to(
        store: S,
        orders: Namespace,
        mails: Namespace,
        delay: Duration,
    ) -> Self {
        Self {
            store,
            outbox: mails,
            delay,
            live_orders: Some(orders),
        }
    }
}

impl<S: DocumentStore + Clone + 'static> Handler for OrderOutbox<S> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            let order = event.document_key.get("_id").cloned().unwrap_or(Bson::Null);
            let operation = match &event.operation {
                OperationType::Insert => "created",
                OperationType::Update | OperationType::Replace => "changed",
                // Azure Cosmos DB does not say which of the two.
                OperationType::Upsert => "created or changed",
                OperationType::Delete => {
                    // The order was retired: its messages go with it. Not fenced: removing
                    // the messages of an order that is gone is right whoever does it.
                    self.store
                        .delete_where(&self.outbox, "order", &order)
                        .await?;
                    continue;
                }
                OperationType::Other(_) => continue,
            };
            if let Some(orders) = &self.live_orders {
                // Retired since (this change's own `delete` comes later in the stream,
                // and removes what was mailed before it): no mail about it.
                if self.store.find_one(orders, &order).await?.is_none() {
                    continue;
                }
            }
            let fields = doc! {
                "order": order,
                "event": operation,
                "status": event.full_document.as_ref().and_then(|d| d.get_str("status").ok()),
                // None on Azure Cosmos DB, whose events carry no cluster time.
                "clusterTime": event.cluster_time.map(bson::Timestamp::from),
            };
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            write_with_lease_fence(
                &self.store,
                &self.outbox,
                &Bson::String(message_id(event)),
                fence,
                fields,
            )
            .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bson::Document;
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use crate::store::{ChangeFeed, ChangeStream, FeedOptions, StartPoint};

    fn sandbox() -> SandboxStore {
        let epoch = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch))
    }

    fn fence() -> Fence {
        Fence {
            resource: ORDERS_RESOURCE.into(),
            version: 1,
        }
    }

    /// The orders' changes that `write` makes, as a listener's stream hands them over.
    async fn changes_of(
        store: &SandboxStore,
        write: impl std::future::Future<Output = ()>,
    ) -> Vec<ChangeEvent> {
        let options = FeedOptions {
            batch_size: 100,
            max_await: Duration::from_millis(1),
            ..Default::default()
        };
        let mut stream = store
            .open(&orders_ns(), StartPoint::Now, options)
            .await
            .expect("open");
        write.await;
        stream.next_batch().await.expect("read").events
    }

    async fn put_order(store: &SandboxStore, id: &str, status: &str) {
        store
            .put(&orders_ns(), doc! {"_id": id, "status": status})
            .await
            .expect("put");
    }

    /// Per order, the statuses of its messages in `ns`, in the order of their changes.
    async fn messages(store: &SandboxStore, ns: &Namespace) -> BTreeMap<String, Vec<String>> {
        let mut documents: Vec<Document> = store.find_all(ns).await.expect("read");
        documents.sort_by_key(|d| {
            d.get_timestamp("clusterTime")
                .ok()
                .map(|t| (t.time, t.increment))
        });
        let mut by_order: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for message in documents {
            by_order
                .entry(message.get_str("order").expect("order").to_string())
                .or_default()
                .push(message.get_str("status").unwrap_or("-").to_string());
        }
        by_order
    }

    #[tokio::test(start_paused = true)]
    async fn a_retired_order_takes_its_messages_with_it() {
        let store = sandbox();
        let mut outbox = OrderOutbox::new(store.clone());
        let placed = changes_of(&store, async {
            put_order(&store, "o00001", "placed").await;
            put_order(&store, "o00002", "placed").await;
            put_order(&store, "o00001", "paid").await;
        })
        .await;
        outbox.handle(&placed, &fence()).await.expect("handled");
        let expected = BTreeMap::from([
            (
                "o00001".to_string(),
                vec!["placed".to_string(), "paid".to_string()],
            ),
            ("o00002".to_string(), vec!["placed".to_string()]),
        ]);
        assert_eq!(messages(&store, &outbox_ns()).await, expected);

        let retired = changes_of(&store, async {
            let deleted = store
                .delete_one(&orders_ns(), &"o00001".into())
                .await
                .expect("delete");
            assert!(deleted);
        })
        .await;
        assert_eq!(retired.len(), 1);
        assert_eq!(retired[0].operation, OperationType::Delete);
        outbox.handle(&retired, &fence()).await.expect("handled");
        assert_eq!(
            messages(&store, &outbox_ns()).await,
            BTreeMap::from([("o00002".to_string(), vec!["placed".to_string()])]),
            "o00001's messages went with it, and its retirement wrote none"
        );
        // A replay of the retirement finds nothing more to remove.
        outbox.handle(&retired, &fence()).await.expect("replayed");
        assert_eq!(store.document_count(&outbox_ns()), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_mailer_mails_no_order_that_is_gone() {
        let store = sandbox();
        let delay = Duration::from_secs(1);
        let mut mailer = OrderOutbox::mailer(store.clone(), delay);
        let changes = changes_of(&store, async {
            put_order(&store, "o00001", "placed").await;
            put_order(&store, "o00002", "placed").await;
            put_order(&store, "o00002", "paid").await;
            store
                .delete_one(&orders_ns(), &"o00002".into())
                .await
                .expect("delete");
        })
        .await;
        assert_eq!(changes.len(), 4);
        // The mailer reads about o00002 after it was retired, as a lagging mailer does.
        let started = tokio::time::Instant::now();
        mailer
            .handle(&changes[..3], &fence())
            .await
            .expect("handled");
        assert_eq!(
            messages(&store, &mails_ns()).await,
            BTreeMap::from([("o00001".to_string(), vec!["placed".to_string()])]),
            "no mail about o00002, which is gone"
        );
        assert_eq!(
            started.elapsed(),
            delay,
            "only o00001's mail went downstream"
        );
        mailer
            .handle(&changes[3..], &fence())
            .await
            .expect("handled");
        assert_eq!(store.document_count(&mails_ns()), 1);
    }
}
