//! The sample application and a workload that exercises it.

pub mod events;
mod fenced_members;
#[cfg(feature = "contract")]
pub mod member_writes_checks;
pub mod orders;
pub mod pets;
pub mod rebuild;
pub mod runtime;
pub mod workload;

pub use fenced_members::FencedMemberWrites;

use crate::store::{CappedFeed, CheckpointStore, DocumentStore, MembershipStore, Namespace, Store};

/// What the demo needs from a store: the engine's ports for its listeners, documents
/// (with the tag aggregate's member upsert) for its handlers and workload, and a capped
/// event store with checkpoints, which the demo always has: asked for by type, since
/// its stores are the two adapters, whose capabilities are themselves.
pub trait DemoStore:
    Store + DocumentStore + FencedMemberWrites + MembershipStore + CappedFeed + CheckpointStore
{
}
impl<T> DemoStore for T where
    T: Store + DocumentStore + FencedMemberWrites + MembershipStore + CappedFeed + CheckpointStore
{
}

/// Where the demo's collections live. The default is the layout the console and
/// documentation show (`demo.animals`, `demo.tag_locations`, `shop.orders`,
/// `shop.outbox`, `shop.mails`, the capped event store `shop.events` and its counts
/// `shop.event_counts`); [`DemoNamespaces::in_database`] puts all of them in
/// one database, so runs on a shared cluster (tests, `console --run --demo-db`) do
/// not write into each other's collections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoNamespaces {
    pub animals: Namespace,
    pub aggregates: Namespace,
    pub orders: Namespace,
    pub outbox: Namespace,
    pub mails: Namespace,
    /// The event store: a capped collection the workload appends order events to.
    pub events: Namespace,
    pub event_counts: Namespace,
    /// The same tag counts as `aggregates`, kept by the partitioned resource
    /// [`pets::CENSUS_RESOURCE`].
    pub census: Namespace,
}

impl Default for DemoNamespaces {
    fn default() -> Self {
        Self {
            animals: Namespace::new("demo", "animals"),
            aggregates: Namespace::new("demo", "tag_locations"),
            orders: Namespace::new("shop", "orders"),
            outbox: Namespace::new("shop", "outbox"),
            mails: Namespace::new("shop", "mails"),
            events: Namespace::new("shop", "events"),
            event_counts: Namespace::new("shop", "event_counts"),
            census: Namespace::new("demo", "tag_census"),
        }
    }
}

impl DemoNamespaces {
    /// Every collection in database `db`, under the default collection names.
    pub fn in_database(db: &str) -> Self {
        let defaults = Self::default();
        let at = |ns: Namespace| Namespace::new(db, ns.coll);
        Self {
            animals: at(defaults.animals),
            aggregates: at(defaults.aggregates),
            orders: at(defaults.orders),
            outbox: at(defaults.outbox),
            mails: at(defaults.mails),
            events: at(defaults.events),
            event_counts: at(defaults.event_counts),
            census: at(defaults.census),
        }
    }

    /// The databases the demo writes to, each once, for saying so.
    pub fn databases(&self) -> Vec<&str> {
        let mut dbs: Vec<&str> = [
            &self.animals,
            &self.aggregates,
            &self.orders,
            &self.outbox,
            &self.mails,
            &self.events,
            &self.event_counts,
            &self.census,
        ]
        .iter()
        .map(|ns| ns.db.as_str())
        .collect();
        dbs.sort_unstable();
        dbs.dedup();
        dbs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_database_keeps_the_collection_names() {
        let ns = DemoNamespaces::in_database("t1");
        assert_eq!(ns.animals.to_string(), "t1.animals");
        assert_eq!(ns.aggregates.to_string(), "t1.tag_locations");
        assert_eq!(ns.orders.to_string(), "t1.orders");
        assert_eq!(ns.outbox.to_string(), "t1.outbox");
        assert_eq!(ns.mails.to_string(), "t1.mails");
        assert_eq!(ns.events.to_string(), "t1.events");
        assert_eq!(ns.event_counts.to_string(), "t1.event_counts");
        assert_eq!(ns.census.to_string(), "t1.tag_census");
        assert_eq!(ns.databases(), ["t1"]);
        assert_eq!(DemoNamespaces::default().databases(), ["demo", "shop"]);
    }
}
