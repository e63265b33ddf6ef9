//! The oplog's own figures a time-to-loss prediction needs, and the one read that turns
//! them into a prediction per lease, shared by `leases`, the exporter and the console.

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};

use super::StoreResult;
use crate::model::{
    ClusterTime, HistoryBefore, Lease, LossTracker, NotReady, OplogStats, OplogWindow, Pending,
    Rate, TimeToLoss, WatchedCollection,
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
    /// `None`: the replica set's), with `size_before` that oplog's size as read before
    /// this; counting at most `limit` entries (`complete: false` past it).
    fn oplog_history_before(
        &self,
        shard: Option<&str>,
        at: ClusterTime,
        size_before: u64,
        limit: u32,
    ) -> impl Future<Output = StoreResult<HistoryBefore>> + Send;

    /// How many changes on `target` the oplog holds after `after` (not at it), counting
    /// at most `limit`: what a listener at `after` has left to process. Changes inside
    /// a transaction count by the operations of its `applyOps` entry.
    fn changes_after(
        &self,
        target: &WatchedCollection,
        after: ClusterTime,
        limit: u32,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// One read's predictions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LossReading {
    /// Per resource, for the leases that could be predicted.
    pub predicted: HashMap<String, TimeToLoss>,
    /// Why nothing could be predicted: the oplog's figures could not be read, or give
    /// no fill rate. `None` with nothing predicted: measuring (the first read).
    pub unknown: Option<String>,
    /// Per resource, why a lease with a resume point was not predicted: its history
    /// could not be counted (a missing figure is never read as "lost now").
    pub unpredicted: HashMap<String, String>,
    /// The oplog's figures the prediction was made from.
    pub oplog: Option<OplogStats>,
    /// Bytes per second written to the oplog, lowest and highest over the tracker's span.
    pub fill_rate: Option<Rate>,
    /// Per resource, what is left to process, where it could be counted.
    pub pending: HashMap<String, Pending>,
    /// Per resource, why what is left could not be counted (a failed count).
    pub pending_unknown: HashMap<String, String>,
}

impl LossReading {
    /// `resource`'s prediction, or that the model gave none.
    pub(super) fn record(&mut self, resource: &str, predicted: Option<TimeToLoss>) {
        match predicted {
            Some(loss) => {
                self.predicted.insert(resource.to_string(), loss);
            }
            None => {
                self.unpredicted
                    .insert(resource.to_string(), "no prediction".into());
            }
        }
    }

    /// Whether the oplog is full (it drops history as it is written), where its figures
    /// were read: it holds within one truncation chunk of its maximum.
    pub fn oplog_full(&self) -> Option<bool> {
        self.oplog.as_ref().map(OplogStats::is_full)
    }

    /// What `resource`'s status is assessed from beyond its lease and window.
    pub fn evidence(&self, resource: &str) -> crate::model::HealthEvidence<'_> {
        crate::model::HealthEvidence {
            loss: self.predicted.get(resource),
            oplog_full: self.oplog_full(),
            pending: self.pending.get(resource).copied(),
        }
    }
}

/// Changes counted per lease for what is left to process; past it, "at least".
pub const PENDING_COUNT_LIMIT: u32 = 1_000;

/// The oplog's half of [`super::read_time_to_loss`].
pub(super) async fn read_oplog_time_to_loss<S: OplogFigures>(
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
    let mut pending = HashMap::new();
    let mut pending_unknown = HashMap::new();
    for lease in leases {
        let (Some(target), Some(at)) = (WatchedCollection::of(lease), lease.resume_point().time())
        else {
            continue;
        };
        match store.changes_after(&target, at, PENDING_COUNT_LIMIT).await {
            Ok(count) => {
                pending.insert(
                    lease.resource.clone(),
                    target.pending(count, u64::from(PENDING_COUNT_LIMIT)),
                );
            }
            Err(error) => {
                pending_unknown.insert(lease.resource.clone(), error.to_string());
            }
        }
    }
    for part in &parts {
        tracker.record_oplog(
            part.shard.as_deref(),
            now,
            Some(&part.window),
            Some(&part.stats),
        );
    }
    // The cluster's figures where there is one oplog; a sharded cluster's are per shard.
    let mut reading = match parts.as_slice() {
        [part] if part.shard.is_none() => LossReading {
            oplog: Some(part.stats),
            fill_rate: tracker.fill_rate(),
            ..LossReading::default()
        },
        _ => LossReading::default(),
    };
    tracker.record_pending(&pending);
    reading.pending = pending;
    reading.pending_unknown = pending_unknown;
    for part in &parts {
        match tracker.ready_on(part.shard.as_deref()) {
            Ok(()) => {}
            Err(NotReady::Measuring) => return reading,
            Err(not_ready) => {
                reading.unknown = Some(match &part.shard {
                    Some(shard) => format!("shard {shard}: {not_ready}"),
                    None => not_ready.to_string(),
                });
                return reading;
            }
        }
    }
    // Every history first, then the figures again: what the oplog dropped meanwhile
    // is taken off every count, so none errs late.
    let mut counted = Vec::new();
    for lease in leases {
        let Some(at) = lease.resume_point().time() else {
            continue;
        };
        // A capped lease's history is its collection's (see `capped_loss`).
        if crate::model::capped_collection(lease).is_some() {
            continue;
        }
        match count_history(store, at, &parts).await {
            Ok(histories) => counted.push((lease, histories)),
            Err(why) => {
                reading.unpredicted.insert(lease.resource.clone(), why);
            }
        }
    }
    if counted.is_empty() {
        return reading;
    }
    let dropped = match store.oplog_parts().await {
        Ok(after) => dropped_since(&parts, &after),
        Err(error) => {
            reading.unknown = Some(error.to_string());
            return reading;
        }
    };
    for (lease, histories) in counted {
        let each =
            parts
                .iter()
                .zip(histories)
                .zip(&dropped)
                .filter_map(|((part, history), dropped)| {
                    let history = HistoryBefore {
                        older_bytes: history.older_bytes.saturating_sub(*dropped),
                        ..history
                    };
                    tracker.predict_on(
                        part.shard.as_deref(),
                        now,
                        lease,
                        Some(part.window),
                        Some(&part.stats),
                        Some(history),
                    )
                });
        reading.record(&lease.resource, TimeToLoss::soonest(each));
    }
    reading
}

/// The bytes before `at` in each oplog of `parts`, in their order. A history that
/// cannot be counted (a failed read, or more than [`HISTORY_COUNT_LIMIT`] entries on
/// either side of the point) leaves the lease unpredicted, with why.
async fn count_history<S: OplogFigures>(
    store: &S,
    at: ClusterTime,
    parts: &[OplogPart],
) -> Result<Vec<HistoryBefore>, String> {
    let mut histories = Vec::with_capacity(parts.len());
    for part in parts {
        let history = store
            .oplog_history_before(
                part.shard.as_deref(),
                at,
                part.stats.size_bytes,
                HISTORY_COUNT_LIMIT,
            )
            .await
            .map_err(|e| {
                format!("the history before its resume point could not be counted: {e}")
            })?;
        if !history.complete {
            return Err(format!(
                "more than {HISTORY_COUNT_LIMIT} oplog entries lie on either side of its resume \
                 point, too many to count at every read"
            ));
        }
        histories.push(history);
    }
    Ok(histories)
}

/// Per oplog of `before`, the bytes it dropped by the time of `after`: its size then,
/// plus what was written since, less its size now (zero where the bytes written are
/// not reported: the fill rate is then measured only while the oplog is under half
/// full, when it drops nothing). An oplog missing from `after` dropped everything.
fn dropped_since(before: &[OplogPart], after: &[OplogPart]) -> Vec<u64> {
    before
        .iter()
        .map(|b| {
            let Some(a) = after.iter().find(|a| a.shard == b.shard) else {
                return b.stats.size_bytes;
            };
            match (b.stats.written_bytes, a.stats.written_bytes) {
                (Some(w1), Some(w2)) => {
                    (b.stats.size_bytes + w2.saturating_sub(w1)).saturating_sub(a.stats.size_bytes)
                }
                _ => 0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use chrono::TimeZone;

    use super::*;
    use crate::store::StoreError;

    /// One oplog whose size and bytes written grow by `step` per read, which drops
    /// `dropped` bytes from its front after the second read (while the histories of that
    /// read are counted), and a history count as scripted.
    struct Scripted {
        reads: Mutex<u64>,
        step: u64,
        dropped: u64,
        history: fn(ClusterTime) -> StoreResult<HistoryBefore>,
    }

    fn at(secs: u32) -> ClusterTime {
        ClusterTime::new(1_800_000_000 + secs, 1)
    }

    impl OplogFigures for Scripted {
        async fn oplog_parts(&self) -> StoreResult<Vec<OplogPart>> {
            let mut reads = self.reads.lock().unwrap();
            *reads += 1;
            let n = *reads;
            Ok(vec![OplogPart {
                shard: None,
                window: OplogWindow::new(at(0), at(100 * n as u32)),
                stats: OplogStats {
                    size_bytes: 1_000_000 + self.step * n - if n >= 4 { self.dropped } else { 0 },
                    max_bytes: 1_000_000,
                    entries: 1_000,
                    written_bytes: Some(10_000_000 + self.step * n),
                    checkpoint_interval: Some(Duration::ZERO),
                    min_retention: Some(Duration::ZERO),
                    largest_entry_bytes: Some(1_000),
                    truncation_bytes: None,
                },
            }])
        }

        async fn oplog_history_before(
            &self,
            _shard: Option<&str>,
            at: ClusterTime,
            _size_before: u64,
            _limit: u32,
        ) -> StoreResult<HistoryBefore> {
            (self.history)(at)
        }

        /// As many changes left as the point is seconds before 40 (a lease at 30 has
        /// ten); a point at 33 cannot be counted.
        async fn changes_after(
            &self,
            _target: &WatchedCollection,
            after: ClusterTime,
            limit: u32,
        ) -> StoreResult<u64> {
            match after.secs - 1_800_000_000 {
                33 => Err(StoreError::OplogUnknown("count refused".into())),
                secs => Ok(u64::from(40u32.saturating_sub(secs)).min(u64::from(limit))),
            }
        }
    }

    fn lease(resource: &str, secs: u32) -> Lease {
        let mut lease = Lease::vacant(resource);
        lease.resume_at = Some(at(secs));
        lease
    }

    fn watching(resource: &str, secs: u32, pipeline: &str) -> Lease {
        let mut lease = lease(resource, secs);
        lease.watch = Some(crate::model::WatchTarget {
            db: "shop".into(),
            coll: "orders".into(),
            pipeline: pipeline.into(),
            ..Default::default()
        });
        lease
    }

    /// What is left to process is counted for each lease whose collection is known:
    /// exact, at most (a pipeline filters), or why it could not be counted; a lease
    /// whose collection is unknown is not counted at all.
    #[tokio::test]
    async fn each_lease_has_what_is_left_to_process_or_why_not() {
        let store = Scripted {
            reads: Mutex::new(0),
            step: 50_000,
            dropped: 0,
            history: |at| {
                Ok(HistoryBefore {
                    older_bytes: 600_000,
                    entry: Some(at),
                    complete: true,
                })
            },
        };
        let leases = [
            watching("caught-up", 40, ""),
            watching("ten-left", 30, ""),
            watching("filtered", 30, "[{$match: …}]"),
            watching("refused", 33, ""),
            lease("no-watch", 30),
        ];
        let mut tracker = LossTracker::default();
        let now = Utc.timestamp_opt(1_800_000_100, 0).unwrap();
        let reading = read_oplog_time_to_loss(&store, &mut tracker, now, &leases).await;
        assert_eq!(reading.pending.get("caught-up"), Some(&Pending::Counted(0)));
        assert_eq!(reading.pending.get("ten-left"), Some(&Pending::Counted(10)));
        assert_eq!(reading.pending.get("filtered"), Some(&Pending::AtMost(10)));
        assert!(reading.pending_unknown["refused"].contains("count refused"));
        assert!(!reading.pending.contains_key("no-watch"));
        assert!(!reading.pending_unknown.contains_key("no-watch"));
    }

    async fn two_reads(store: &Scripted, leases: &[Lease]) -> LossReading {
        let mut tracker = LossTracker::default();
        let first = Utc.timestamp_opt(1_800_000_100, 0).unwrap();
        let one_read = read_oplog_time_to_loss(store, &mut tracker, first, leases).await;
        assert_eq!(one_read.unknown, None);
        // One read predicts already: its fill rate is the window's average.
        assert_eq!(one_read.fill_rate, Rate::exactly(1_050_000.0 / 100.0));
        read_oplog_time_to_loss(
            store,
            &mut tracker,
            first + chrono::TimeDelta::seconds(10),
            leases,
        )
        .await
    }

    /// A history that could not be counted whole, or not at all, leaves the lease
    /// unpredicted with why: never a prediction made as if nothing were before it
    /// ("lost now", which would page).
    #[tokio::test]
    async fn an_uncounted_history_is_no_prediction_not_lost_now() {
        let store = Scripted {
            reads: Mutex::new(0),
            step: 50_000,
            dropped: 0,
            history: |at| match at.secs % 3 {
                0 => Ok(HistoryBefore {
                    older_bytes: 600_000,
                    entry: Some(at),
                    complete: true,
                }),
                1 => Ok(HistoryBefore {
                    older_bytes: 1_000,
                    entry: None,
                    complete: false,
                }),
                _ => Err(StoreError::OplogUnknown("timed out".into())),
            },
        };
        let reading = two_reads(
            &store,
            &[
                lease("counted", 30),
                lease("too-far", 31),
                lease("failed", 32),
            ],
        )
        .await;
        assert!(reading.predicted.contains_key("counted"), "{reading:?}");
        assert!(!reading.predicted.contains_key("too-far"));
        assert!(!reading.predicted.contains_key("failed"));
        assert!(reading.unpredicted["too-far"].contains("more than 100000"));
        assert!(reading.unpredicted["failed"].contains("timed out"));
    }

    /// What the oplog dropped while the histories were counted is taken off them: the
    /// same lease, with 40 kB dropped per read, is predicted no later than without.
    #[tokio::test]
    async fn bytes_dropped_during_the_read_make_the_estimate_earlier() {
        let history = |at| {
            Ok(HistoryBefore {
                older_bytes: 600_000,
                entry: Some(at),
                complete: true,
            })
        };
        let steady = Scripted {
            reads: Mutex::new(0),
            step: 50_000,
            dropped: 0,
            history,
        };
        let dropping = Scripted {
            reads: Mutex::new(0),
            step: 50_000,
            dropped: 40_000,
            history,
        };
        let leases = [lease("r", 30)];
        let steady = two_reads(&steady, &leases).await.predicted["r"].earliest;
        let dropping = two_reads(&dropping, &leases).await.predicted["r"].earliest;
        assert!(dropping < steady, "{dropping:?} vs {steady:?}");
    }
}
