//! The snapshot every one-shot and refreshing view of the cluster reads.

use chrono::{DateTime, Utc};

use super::ClusterProbe;
use crate::model::{lease_order, Lease, LossTracker, OplogWindow, SourceWindows, Topology};
use crate::store::{
    read_capped_windows, read_time_to_loss, CappedReading, LossReading, MalformedDocument,
    StoreError,
};

/// The cluster as one read found it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSnapshot {
    /// Every lease, a partitioned resource's together under its own
    /// ([`crate::model::lease_order`]; docs/explanation/partitions.md).
    pub leases: Vec<Lease>,
    /// Lease documents that could not be read, each naming its `_id` and field.
    pub malformed: Vec<MalformedDocument>,
    /// What the cluster is, which says why the window is unknown when it is; `None` on
    /// the sandbox, which its title names.
    pub topology: Option<Topology>,
    /// `None` when the oplog cannot be read: headroom and history status unknown, lag
    /// by the clock.
    pub window: Option<OplogWindow>,
    /// The entries' windows of the capped collections capped leases tail, which those
    /// leases are measured against instead of the oplog.
    pub capped: CappedReading,
    /// The server's clock at the read.
    pub now: DateTime<Utc>,
}

/// Which part of the read failed, with the store's error as its source (so the exit
/// code is the store error's).
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("listing the lease documents")]
    Leases(#[source] StoreError),
    #[error("reading what the cluster is and its oplog window")]
    Cluster(#[source] StoreError),
    #[error("reading the server's clock")]
    Clock(#[source] StoreError),
}

impl ClusterSnapshot {
    /// Reads the leases, what the cluster is and its window, the server's clock and the
    /// capped collections' windows (a capped collection that cannot be read is named in
    /// [`CappedReading::unread`], not an error).
    pub async fn read<S: ClusterProbe>(store: &S) -> Result<ClusterSnapshot, ObserveError> {
        let mut listing = store.list().await.map_err(ObserveError::Leases)?;
        listing
            .items
            .sort_by(|a, b| lease_order(&a.resource, &b.resource));
        let (topology, window) = match store.topology().await.map_err(ObserveError::Cluster)? {
            Some((topology, window)) => (Some(topology), window),
            None => {
                let window = store.oplog_window().await.map_err(ObserveError::Cluster)?;
                (None, Some(window))
            }
        };
        let now = store.server_now().await.map_err(ObserveError::Clock)?;
        let capped = read_capped_windows(store, &listing.items).await;
        Ok(ClusterSnapshot {
            leases: listing.items,
            malformed: listing.malformed,
            topology,
            window,
            capped,
            now,
        })
    }

    /// The history each lease is measured against: the oplog, or its capped collection.
    pub fn windows(&self) -> SourceWindows {
        self.capped.source_windows(self.window)
    }

    /// Adds this read to `tracker` and predicts each lease's time to loss from it
    /// ([`read_time_to_loss`]); nothing is predicted on the tracker's first read.
    pub async fn time_to_loss<S: ClusterProbe>(
        &self,
        store: &S,
        tracker: &mut LossTracker,
    ) -> LossReading {
        read_time_to_loss(store, tracker, self.now, &self.leases).await
    }
}

#[cfg(all(test, feature = "sandbox"))]
mod tests {
    use bson::doc;
    use chrono::TimeZone;

    use super::*;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use crate::store::{DocumentStore, Namespace};

    #[tokio::test(start_paused = true)]
    async fn a_snapshot_lists_partitions_under_their_resource_and_reads_the_servers_clock() {
        let epoch = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
        store
            .put(&Namespace::new("shop", "orders"), doc! {"_id": 1})
            .await
            .expect("a write, so the change log has a window");
        for id in ["r#0/3", "r#1/2", "q", "r", "r#0/2"] {
            store.put_lease_by_hand(Lease::vacant(id));
        }
        tokio::time::advance(std::time::Duration::from_secs(5)).await;

        let snapshot = ClusterSnapshot::read(&store).await.expect("reads");

        let ids: Vec<&str> = snapshot
            .leases
            .iter()
            .map(|l| l.resource.as_str())
            .collect();
        // By resource, its own lease first, then its partitions by count and index (not
        // by text: `r#0/3` after `r#1/2`).
        assert_eq!(ids, ["q", "r", "r#0/2", "r#1/2", "r#0/3"]);
        assert!(snapshot.malformed.is_empty());
        assert_eq!(snapshot.topology, None, "the sandbox names itself");
        let window = snapshot
            .window
            .expect("the sandbox's change log has a window");
        assert!(window.first <= window.last);
        assert_eq!(snapshot.now, epoch + chrono::TimeDelta::seconds(5));
        assert!(
            snapshot.capped.entries.is_empty(),
            "no capped lease, nothing read"
        );
    }
}
