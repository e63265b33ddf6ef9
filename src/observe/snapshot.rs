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

impl ObserveError {
    /// The store's error behind it.
    pub fn store_error(&self) -> &StoreError {
        match self {
            ObserveError::Leases(e) | ObserveError::Cluster(e) | ObserveError::Clock(e) => e,
        }
    }
}

/// Where a read takes the oplog window from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowSource {
    /// Read it now.
    Read,
    /// The topology was just read and brought it.
    Known(OplogWindow),
    /// The topology says the oplog cannot be read: reading would only fail again.
    Unreadable,
}

/// The histories leases are measured against and the clock they are judged by, as one
/// read found them: the part of a [`ClusterSnapshot`] that the console reads on its
/// own timer (its leases come from a change stream instead of a listing).
#[derive(Debug)]
pub struct HistoryReading {
    /// The oplog window (`None` when it cannot be read) and the server's clock, read
    /// after it; or which of the two reads failed.
    pub clock: Result<(Option<OplogWindow>, DateTime<Utc>), ObserveError>,
    /// The windows of the capped collections the leases tail: read whatever became of
    /// the window and the clock, so a failed oplog read never leaves them stale.
    pub capped: CappedReading,
}

impl HistoryReading {
    /// Reads the window (from `window`), then the server's clock, then the windows of
    /// the capped collections `leases` tail (one that cannot be read is named in
    /// [`CappedReading::unread`]).
    pub async fn read<S: ClusterProbe>(
        store: &S,
        leases: &[Lease],
        window: WindowSource,
    ) -> HistoryReading {
        let clock = async {
            let window = match window {
                WindowSource::Read => {
                    Some(store.oplog_window().await.map_err(ObserveError::Cluster)?)
                }
                WindowSource::Known(window) => Some(window),
                WindowSource::Unreadable => None,
            };
            let now = store.server_now().await.map_err(ObserveError::Clock)?;
            Ok((window, now))
        }
        .await;
        let capped = read_capped_windows(store, leases).await;
        HistoryReading { clock, capped }
    }
}

impl ClusterSnapshot {
    /// Reads the leases, what the cluster is, then its histories and clock
    /// ([`HistoryReading::read`]).
    pub async fn read<S: ClusterProbe>(store: &S) -> Result<ClusterSnapshot, ObserveError> {
        let mut listing = store.list().await.map_err(ObserveError::Leases)?;
        listing
            .items
            .sort_by(|a, b| lease_order(&a.resource, &b.resource));
        let (topology, window) = match store.topology().await.map_err(ObserveError::Cluster)? {
            Some((topology, Some(window))) => (Some(topology), WindowSource::Known(window)),
            Some((topology, None)) => (Some(topology), WindowSource::Unreadable),
            None => (None, WindowSource::Read),
        };
        let history = HistoryReading::read(store, &listing.items, window).await;
        let (window, now) = history.clock?;
        Ok(ClusterSnapshot {
            leases: listing.items,
            malformed: listing.malformed,
            topology,
            window,
            capped: history.capped,
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
#[path = "snapshot_tests.rs"]
mod tests;
