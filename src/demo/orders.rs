//! The second resource: `shop.orders` changes published in order, at least once,
//! to an outbox. Each message is fenced by the lease version and keyed by the
//! change, so a re-delivery never makes a second message and a fenced-out
//! holder's late message is refused.

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
        }
    }

    /// The mailer: the same messages into `shop.mails`, each taking `delay`.
    pub fn mailer(store: S, delay: Duration) -> Self {
        Self::mailer_writing_to(store, mails_ns(), delay)
    }

    /// The mailer writing into `mails`.
    pub fn mailer_writing_to(store: S, mails: Namespace, delay: Duration) -> Self {
        Self {
            store,
            outbox: mails,
            delay,
        }
    }
}

impl<S: DocumentStore + Clone + 'static> Handler for OrderOutbox<S> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            let operation = match &event.operation {
                OperationType::Insert => "created",
                OperationType::Update | OperationType::Replace => "changed",
                OperationType::Delete => "deleted",
                OperationType::Other(_) => continue,
            };
            let fields = doc! {
                "order": event.document_key.get("_id").cloned().unwrap_or(Bson::Null),
                "event": operation,
                "status": event.full_document.as_ref().and_then(|d| d.get_str("status").ok()),
                "clusterTime": bson::Timestamp::from(event.cluster_time),
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
