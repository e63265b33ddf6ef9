//! The one read of the capped collections a set of leases tail: each collection's
//! window, what the console, `leases`, the exporter and the plans measure capped leases
//! by.

use std::collections::{BTreeMap, HashMap};

use super::{Capabilities, CappedFeed, CappedWindow, Namespace};
use crate::model::{Lease, OplogWindow, SourceKind, SourceWindows};

/// The capped collections a set of leases tail, each with its entries' window as read
/// once ([`read_capped_windows`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CappedReading {
    /// Per collection (`db.coll`) that holds entries: its oldest and newest.
    pub entries: HashMap<String, CappedWindow>,
    /// Per collection that could not be read: why (its leases' headroom and history
    /// status are unknown, as a lease's are where the oplog cannot be read).
    pub unread: BTreeMap<String, String>,
}

impl CappedReading {
    /// The history each lease is measured against: `oplog` for change streams, these
    /// collections' entries for capped leases.
    pub fn source_windows(&self, oplog: Option<OplogWindow>) -> SourceWindows {
        SourceWindows {
            oplog,
            capped: self
                .entries
                .iter()
                .map(|(name, window)| (name.clone(), window.times()))
                .collect(),
        }
    }
}

/// The capped collections `leases` tail (`watch.source: "capped"`), each once.
pub fn capped_namespaces(leases: &[Lease]) -> Vec<Namespace> {
    let mut seen: Vec<Namespace> = leases
        .iter()
        .filter_map(|lease| lease.watch.as_ref())
        .filter(|watch| watch.source == SourceKind::Capped)
        .map(|watch| Namespace::new(watch.db.clone(), watch.coll.clone()))
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// Reads the window of every capped collection `leases` tail, once each: the one read
/// the console, `leases`, the exporter and the plans measure capped leases by. A
/// failed read leaves that collection out, with why.
pub async fn read_capped_windows<S: Capabilities>(store: &S, leases: &[Lease]) -> CappedReading {
    let mut reading = CappedReading::default();
    for ns in capped_namespaces(leases) {
        let Some(feed) = store.capped_feed() else {
            let why = super::capabilities::no_capped_feed(&ns);
            reading.unread.insert(ns.to_string(), why);
            continue;
        };
        match feed.capped_window(&ns).await {
            Ok(Some(window)) => {
                reading.entries.insert(ns.to_string(), window);
            }
            Ok(None) => {}
            Err(error) => {
                reading.unread.insert(
                    ns.to_string(),
                    format!("capped collection {ns} could not be read: {error}"),
                );
            }
        }
    }
    reading
}
