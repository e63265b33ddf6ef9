//! The oplog's own figures a time-to-loss prediction needs, and the one read that turns
//! them into a prediction per lease, shared by `leases`, the exporter and the console.

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};

use super::StoreResult;
use crate::model::{
    ClusterTime, HistoryBefore, Lease, LossTracker, OplogStats, OplogWindow, Rate, TimeToLoss,
};

/// Entries summed per lease when counting the history before its resume point; past
/// it the count is a lower bound, which only makes the earliest estimate earlier.
pub const HISTORY_COUNT_LIMIT: u32 = 100_000;

pub trait OplogFigures: Send + Sync {
    /// Size, maximum, entries and bytes written of the oplog (see [`OplogStats`]).
    fn oplog_stats(&self) -> impl Future<Output = StoreResult<OplogStats>> + Send;

    /// The bytes of retained history before the resume point `at`, counting at most
    /// `limit` entries.
    fn oplog_history_before(
        &self,
        at: ClusterTime,
        limit: u32,
    ) -> impl Future<Output = StoreResult<HistoryBefore>> + Send;
}

/// One read's predictions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LossReading {
    /// Per resource, for the leases that could be predicted.
    pub predicted: HashMap<String, TimeToLoss>,
    /// Why nothing could be predicted: the oplog's figures could not be read.
    pub unknown: Option<String>,
    /// The oplog's figures the prediction was made from.
    pub oplog: Option<OplogStats>,
    /// Bytes per second written to the oplog, lowest and highest over the tracker's span.
    pub fill_rate: Option<Rate>,
}

/// Adds this read (at `now`, the server's clock) to `tracker` and predicts each lease's
/// time to loss: the oplog's figures first, then, once the tracker has rates (its second
/// read), the history before each resume point, read after the figures so history
/// dropped in between errs early, not late.
pub async fn read_time_to_loss<S: OplogFigures>(
    store: &S,
    tracker: &mut LossTracker,
    now: DateTime<Utc>,
    window: Option<OplogWindow>,
    leases: &[Lease],
) -> LossReading {
    let stats = match store.oplog_stats().await {
        Ok(stats) => stats,
        Err(error) => {
            tracker.record(now, window.as_ref(), None, leases);
            return LossReading {
                unknown: Some(error.to_string()),
                ..LossReading::default()
            };
        }
    };
    tracker.record(now, window.as_ref(), Some(&stats), leases);
    let mut predicted = HashMap::new();
    for lease in leases {
        let Some(at) = lease.resume_point().time() else {
            continue;
        };
        // Not counted before the tracker can predict (its first read).
        if tracker
            .predict(now, lease, window, Some(&stats), None)
            .is_none()
        {
            continue;
        }
        let before = store
            .oplog_history_before(at, HISTORY_COUNT_LIMIT)
            .await
            .ok();
        if let Some(loss) = tracker.predict(now, lease, window, Some(&stats), before) {
            predicted.insert(lease.resource.clone(), loss);
        }
    }
    LossReading {
        predicted,
        unknown: None,
        oplog: Some(stats),
        fill_rate: tracker.fill_rate(),
    }
}
