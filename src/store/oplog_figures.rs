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

/// One oplog a resume point's history is kept in: a replica set's, or (through a
/// mongos) one shard's, with its window and figures as read together.
#[derive(Debug, Clone, PartialEq)]
pub struct OplogPart {
    /// The shard's name; `None` for a replica set's own oplog.
    pub shard: Option<String>,
    pub window: OplogWindow,
    pub stats: OplogStats,
}

pub trait OplogFigures: Send + Sync {
    /// Every oplog the leases' history is kept in, each with its window and figures
    /// (see [`OplogStats`]): the replica set's, or every shard's. An error when any of
    /// them cannot be read: a point may be lost on the one not read.
    fn oplog_parts(&self) -> impl Future<Output = StoreResult<Vec<OplogPart>>> + Send;

    /// The bytes of retained history before the resume point `at` in one oplog (`shard`
    /// `None`: the replica set's), counting at most `limit` entries.
    fn oplog_history_before(
        &self,
        shard: Option<&str>,
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
/// time to loss: every oplog's window and figures first, then, once the tracker has
/// rates (its second read), the history before each resume point in each oplog, read
/// after the figures so history dropped in between errs early, not late. Through a
/// mongos a point is lost once it is lost on any shard ([`TimeToLoss::soonest`]).
pub async fn read_time_to_loss<S: OplogFigures>(
    store: &S,
    tracker: &mut LossTracker,
    now: DateTime<Utc>,
    leases: &[Lease],
) -> LossReading {
    tracker.record_progress(now, leases);
    let parts = match store.oplog_parts().await {
        Ok(parts) => parts,
        Err(error) => {
            return LossReading {
                unknown: Some(error.to_string()),
                ..LossReading::default()
            };
        }
    };
    tracker.keep_oplogs(parts.iter().map(|p| p.shard.as_deref()));
    for part in &parts {
        tracker.record_oplog(
            part.shard.as_deref(),
            now,
            Some(&part.window),
            Some(&part.stats),
        );
    }
    let mut predicted = HashMap::new();
    'leases: for lease in leases {
        let Some(at) = lease.resume_point().time() else {
            continue;
        };
        let mut each = Vec::with_capacity(parts.len());
        for part in &parts {
            let shard = part.shard.as_deref();
            let predict = |history| {
                tracker.predict_on(
                    shard,
                    now,
                    lease,
                    Some(part.window),
                    Some(&part.stats),
                    history,
                )
            };
            // Not counted before the tracker can predict (its first read).
            if predict(None).is_none() {
                continue 'leases;
            }
            let before = store
                .oplog_history_before(shard, at, HISTORY_COUNT_LIMIT)
                .await
                .ok();
            each.extend(predict(before));
        }
        if let Some(loss) = TimeToLoss::soonest(each) {
            predicted.insert(lease.resource.clone(), loss);
        }
    }
    // The cluster's figures where there is one oplog; a sharded cluster's are per shard.
    let (oplog, fill_rate) = match parts.as_slice() {
        [part] if part.shard.is_none() => (Some(part.stats), tracker.fill_rate()),
        _ => (None, None),
    };
    LossReading {
        predicted,
        unknown: None,
        oplog,
        fill_rate,
    }
}
