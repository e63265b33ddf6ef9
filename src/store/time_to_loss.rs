//! The one read behind every time to loss (`leases`, the exporter, the console): the
//! oplog's figures, and each capped collection's for the leases that tail one.

use chrono::{DateTime, Utc};

use super::capped_loss::read_capped_time_to_loss;
use super::oplog_figures::read_oplog_time_to_loss;
use super::{Capabilities, LossReading, OplogFigures};
use crate::model::{Lease, LossTracker};

/// Adds this read (at `now`, the server's clock) to `tracker` and predicts each lease's
/// time to loss: every oplog's window and figures first, then, once the tracker has
/// rates (its second read), the history before each resume point in each oplog, read
/// after the figures (counted from the newest end, the bytes written meanwhile make it
/// err early, not late). Through a
/// mongos a point is lost once it is lost on any shard ([`crate::model::TimeToLoss::soonest`]).
///
/// A lease that tails a capped collection is predicted from its collection instead
/// (`capped_loss`), with the same model.
pub async fn read_time_to_loss<S: OplogFigures + Capabilities>(
    store: &S,
    tracker: &mut LossTracker,
    now: DateTime<Utc>,
    leases: &[Lease],
) -> LossReading {
    let mut reading = read_oplog_time_to_loss(store, tracker, now, leases).await;
    read_capped_time_to_loss(store.capped_feed(), tracker, now, leases, &mut reading).await;
    reading
}
