//! A simulated oplog for the time-to-loss property test: capped by bytes and truncated the
//! way mongod 6.0 (WiredTiger) does it — in whole chunks of at least [`truncation_chunk`]
//! bytes, the oldest one removed while the complete chunks hold more than the maximum,
//! only when an insert completes a chunk (that wakes the truncation) and only for chunks
//! the last checkpoint covers — with a periodic no-op every 10 s of silence, as the
//! primary writes them.
//!
//! History times are seconds from the start of the simulation; an entry written at `t`
//! has the cluster time `(BASE + ⌊t⌋, n)`.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};

use super::{truncation_chunk, HistoryBefore, OplogStats, OplogWindow};
use crate::model::ClusterTime;

pub const BASE: u32 = 1_700_000_000;
/// mongod writes a no-op after this long without a write (`periodicNoopIntervalSecs`).
const NOOP_EVERY: f64 = 10.0;
const NOOP_BYTES: u64 = 110;

#[derive(Debug, Clone, Copy)]
struct Entry {
    ts: ClusterTime,
    bytes: u64,
    noop: bool,
    /// Bytes written before this entry, ever (to sum a range in O(1)).
    offset: u64,
}

/// The oplog.
#[derive(Debug, Clone)]
pub struct SimOplog {
    max: u64,
    chunk: u64,
    checkpoint_every: f64,
    next_checkpoint: f64,
    /// Bytes written when the last checkpoint was taken: chunks ending here or before
    /// may go.
    checkpointed: u64,
    entries: VecDeque<Entry>,
    /// Complete chunks, oldest first: (bytes, offset just past their last entry).
    chunks: VecDeque<(u64, u64)>,
    partial: u64,
    size: u64,
    written: u64,
    last_ts: ClusterTime,
    last_write_at: f64,
}

impl SimOplog {
    pub fn new(max: u64, checkpoint_every: f64) -> Self {
        Self {
            max,
            chunk: truncation_chunk(max),
            checkpoint_every,
            next_checkpoint: checkpoint_every,
            checkpointed: 0,
            entries: VecDeque::new(),
            chunks: VecDeque::new(),
            partial: 0,
            size: 0,
            written: 0,
            last_ts: ClusterTime::new(BASE, 0),
            last_write_at: 0.0,
        }
    }

    pub fn time_of(t: f64) -> ClusterTime {
        ClusterTime::new(BASE + t.max(0.0) as u32, 0)
    }

    pub fn now(t: f64) -> DateTime<Utc> {
        let millis = (f64::from(BASE) * 1000.0 + t * 1000.0).round() as i64;
        DateTime::from_timestamp_millis(millis).unwrap_or_default()
    }

    /// Writes one entry at `t` (not before the previous one).
    pub fn write(&mut self, t: f64, bytes: u64, noop: bool) {
        let secs = BASE + t.max(0.0) as u32;
        let ts = if secs == self.last_ts.secs {
            ClusterTime::new(secs, self.last_ts.inc + 1)
        } else {
            ClusterTime::new(secs, 1)
        };
        self.last_ts = ts;
        self.last_write_at = t;
        self.entries.push_back(Entry {
            ts,
            bytes,
            noop,
            offset: self.written,
        });
        self.written += bytes;
        self.size += bytes;
        // A chunk is complete on the insert that brings it to the minimum; that wakes
        // the truncation.
        self.partial += bytes;
        if self.partial >= self.chunk {
            self.chunks.push_back((self.partial, self.written));
            self.partial = 0;
            self.truncate();
        }
    }

    /// Removes the oldest chunks while the complete ones exceed the maximum, as far as
    /// the last checkpoint reaches.
    fn truncate(&mut self) {
        while self.chunks.iter().map(|(b, _)| b).sum::<u64>() > self.max {
            match self.chunks.front() {
                Some((_, end)) if *end <= self.checkpointed => {}
                _ => break,
            }
            let Some((_, end)) = self.chunks.pop_front() else {
                break;
            };
            while self.entries.front().is_some_and(|e| e.offset < end) {
                if let Some(e) = self.entries.pop_front() {
                    self.size -= e.bytes;
                }
            }
        }
    }

    /// Advances the server's own activity to `t`: the periodic no-op and the checkpoints.
    pub fn tick(&mut self, t: f64) {
        if t - self.last_write_at >= NOOP_EVERY {
            self.write(t, NOOP_BYTES, true);
        }
        if t >= self.next_checkpoint {
            while t >= self.next_checkpoint {
                self.next_checkpoint += self.checkpoint_every;
            }
            self.checkpointed = self.written;
        }
    }

    fn first_startable(&self) -> Option<ClusterTime> {
        self.entries.iter().find(|e| !e.noop).map(|e| e.ts)
    }

    pub fn window(&self) -> Option<OplogWindow> {
        let first = self.first_startable()?;
        let last = self.entries.back()?.ts;
        Some(OplogWindow::new(first, last))
    }

    /// Lost as the health rules say it: before the first startable entry.
    pub fn lost(&self, token: ClusterTime) -> bool {
        self.first_startable().is_none_or(|first| token < first)
    }

    pub fn stats(&self) -> OplogStats {
        OplogStats {
            size_bytes: self.size,
            max_bytes: self.max,
            entries: self.entries.len() as u64,
            written_bytes: Some(self.written),
            checkpoint_interval: Some(std::time::Duration::from_secs_f64(self.checkpoint_every)),
            min_retention: Some(std::time::Duration::ZERO),
            largest_entry_bytes: None,
            truncation_bytes: None,
        }
    }

    /// What `MongoStore::oplog_history_before` answers, counting at most `limit` entries.
    pub fn history_before(&self, token: ClusterTime, limit: usize) -> HistoryBefore {
        let Some(front) = self.entries.front() else {
            return HistoryBefore {
                older_bytes: 0,
                entry: None,
                complete: true,
            };
        };
        // Entries at or before the token: a prefix.
        let through = self.entries.partition_point(|e| e.ts <= token);
        let counted = through.min(limit);
        let complete = counted == through;
        let entry = (0..counted)
            .rev()
            .find(|i| self.entries.get(*i).is_some_and(|e| !e.noop));
        match entry {
            Some(i) => HistoryBefore {
                older_bytes: self.entries[i].offset - front.offset,
                entry: Some(self.entries[i].ts),
                complete,
            },
            None => HistoryBefore {
                older_bytes: 0,
                entry: None,
                complete,
            },
        }
    }
}

/// A quantity that alternates between two levels, each held for a given time.
#[derive(Debug, Clone)]
pub struct Alternating {
    levels: [f64; 2],
    /// End of each segment, increasing; the level alternates from `levels[0]`. After the
    /// last, the segments repeat.
    ends: Vec<f64>,
}

impl Alternating {
    pub fn new(levels: [f64; 2], dwells: &[f64]) -> Self {
        let mut t = 0.0;
        let ends = dwells
            .iter()
            .map(|d| {
                t += d;
                t
            })
            .collect();
        Self { levels, ends }
    }

    /// The level at `t`.
    pub fn at(&self, t: f64) -> f64 {
        let period = self.ends.last().copied().unwrap_or(1.0);
        let within = t.rem_euclid(period);
        let cycles = (t / period).floor() as usize;
        let index = self.ends.partition_point(|end| *end <= within);
        // Keep alternating across repeats even with an odd segment count.
        self.levels[(index + cycles * self.ends.len()) % 2]
    }

    /// When both levels have been held for whole segments (the first two are over).
    pub fn both_seen_by(&self) -> f64 {
        self.ends.get(1).copied().unwrap_or(0.0)
    }
}
