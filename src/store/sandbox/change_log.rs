//! A capacity-bounded change log with strictly increasing cluster times: the
//! sandbox's oplog. When it is full the oldest entries fall off, the window moves,
//! and a reader whose position has fallen off loses its history for real.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::model::{ClusterTime, HistoryBefore, OplogStats, OplogWindow};
use crate::store::{ChangeEvent, InvalidationCause, Namespace, OperationType};

/// An entry and its position in the log.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub seq: u64,
    /// The entry's cluster time (its event's `cluster_time`, which is always set here).
    pub time: ClusterTime,
    pub event: Arc<ChangeEvent>,
    /// Its share of the byte budget.
    bytes: usize,
    /// Bytes written to the log before this entry (its position in the byte stream).
    written_before: u64,
    /// For a `rename`: the new name (the server's `to`).
    pub to: Option<Namespace>,
}

impl LogEntry {
    /// A command on the collection or its database (`create`, `createIndexes`,
    /// `dropIndexes`, `modify`, `drop`, `rename`, `dropDatabase`), not a document change.
    pub fn is_command(&self) -> bool {
        matches!(&self.event.operation, OperationType::Other(_))
    }

    /// Whether this entry closes a stream on `watched` (the server's `invalidate`), and why.
    pub fn closes(&self, watched: &Namespace) -> Option<InvalidationCause> {
        match &self.event.operation {
            OperationType::Other(op) if self.is_command() => {
                InvalidationCause::of_change(watched, op, &self.event.ns, self.to.as_ref())
            }
            _ => None,
        }
    }
}

/// What a reader does with one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Not for this reader: pass over it.
    Skip,
    Keep,
    /// Stop before this entry: it ends the reader's stream.
    Stop,
}

/// What an entry costs beyond its document: the event, its token, names and key.
const ENTRY_OVERHEAD: usize = 256;

/// What one entry holds, for the byte budget: a fixed overhead and its document's
/// BSON size.
fn entry_bytes(event: &ChangeEvent) -> usize {
    ENTRY_OVERHEAD
        + event
            .full_document
            .as_ref()
            .and_then(|d| bson::to_vec(d).ok())
            .map_or(0, |bytes| bytes.len())
}

#[derive(Debug)]
pub struct ChangeLog {
    entries: VecDeque<LogEntry>,
    capacity: usize,
    /// Like an oplog sized in bytes: the oldest entries fall off once the entries hold
    /// more than this, whatever their number.
    byte_budget: usize,
    bytes: usize,
    /// Bytes ever written (under a byte budget), like the oplog's WiredTiger counter.
    written: u64,
    /// The largest entry ever written (under a byte budget).
    largest: usize,
    next_seq: u64,
    /// The time of the newest entry that fell off, if any did.
    dropped_through: Option<ClusterTime>,
    last_time: ClusterTime,
}

/// Why a position cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLost;

impl ChangeLog {
    #[cfg(test)]
    pub fn new(capacity: usize) -> Self {
        Self::with_byte_budget(capacity, usize::MAX)
    }

    /// A log that keeps at most `capacity` entries and `byte_budget` bytes of them.
    pub fn with_byte_budget(capacity: usize, byte_budget: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            byte_budget,
            bytes: 0,
            written: 0,
            largest: 0,
            next_seq: 1,
            dropped_through: None,
            last_time: ClusterTime::default(),
        }
    }

    /// The next cluster time: the wall-clock second if it moved on, else the next increment.
    pub fn next_time(&self, wall_secs: u32) -> ClusterTime {
        if wall_secs > self.last_time.secs {
            ClusterTime::new(wall_secs, 1)
        } else {
            ClusterTime::new(self.last_time.secs, self.last_time.inc + 1)
        }
    }

    pub fn last_time(&self) -> ClusterTime {
        self.last_time
    }

    /// Whether any entry has fallen off the log yet.
    pub fn has_dropped(&self) -> bool {
        self.dropped_through.is_some()
    }

    /// Appends an event at `time`, which came from `next_time` (it becomes the event's
    /// `cluster_time`).
    pub fn append(&mut self, time: ClusterTime, event: ChangeEvent) -> u64 {
        self.append_entry(time, event, None)
    }

    /// Appends an event at `time`, with the new name when it is a rename.
    pub fn append_entry(
        &mut self,
        time: ClusterTime,
        mut event: ChangeEvent,
        to: Option<Namespace>,
    ) -> u64 {
        debug_assert!(time > self.last_time);
        event.cluster_time = Some(time);
        self.last_time = time;
        let seq = self.next_seq;
        self.next_seq += 1;
        // Measured only under a budget: serializing every document costs.
        let bytes = if self.byte_budget == usize::MAX {
            0
        } else {
            entry_bytes(&event)
        };
        self.bytes += bytes;
        let written_before = self.written;
        self.written += bytes as u64;
        self.largest = self.largest.max(bytes);
        self.entries.push_back(LogEntry {
            seq,
            time,
            event: Arc::new(event),
            to,
            bytes,
            written_before,
        });
        // The newest entry always stays, however large.
        while self.entries.len() > self.capacity
            || (self.bytes > self.byte_budget && self.entries.len() > 1)
        {
            if let Some(dropped) = self.entries.pop_front() {
                self.bytes -= dropped.bytes;
                self.dropped_through = Some(dropped.time);
            }
        }
        seq
    }

    /// First and last entry; an empty log spans only its last time.
    pub fn window(&self) -> OplogWindow {
        match (self.entries.front(), self.entries.back()) {
            (Some(first), Some(last)) => OplogWindow::new(first.time, last.time),
            _ => OplogWindow::new(self.last_time, self.last_time),
        }
    }

    /// Whether a reader whose resume point is at `time` may go on. Like MongoDB: once
    /// the log has rolled over, its first entry must be at or before the point (a
    /// token whose own entry fell off is lost, even if nothing after it did); a log
    /// that never rolled over loses nothing, however early the point.
    pub fn check_resumable(&self, time: ClusterTime) -> Result<(), HistoryLost> {
        let first = self.entries.front().map(|e| e.time);
        match (self.dropped_through, first) {
            (Some(_), Some(first)) if first > time => Err(HistoryLost),
            (Some(dropped), None) if dropped >= time => Err(HistoryLost),
            _ => Ok(()),
        }
    }

    /// Takes the next cluster time for a write the log holds no entry for (a lease
    /// write): every later change comes after it, as every later oplog entry does.
    pub fn tick(&mut self, wall_secs: u32) -> ClusterTime {
        let time = self.next_time(wall_secs);
        self.last_time = time;
        time
    }

    /// The sequence number a reader resuming after `time` reads next.
    pub fn position_after(&self, time: ClusterTime) -> Result<u64, HistoryLost> {
        self.check_resumable(time)?;
        Ok(self.first_seq() + self.entries.partition_point(|e| e.time <= time) as u64)
    }

    /// The sequence number a reader starting at `time` (inclusive) reads next.
    pub fn position_at(&self, time: ClusterTime) -> Result<u64, HistoryLost> {
        self.check_resumable(time)?;
        Ok(self.first_seq() + self.entries.partition_point(|e| e.time < time) as u64)
    }

    /// The position after everything written so far.
    pub fn end(&self) -> u64 {
        self.next_seq
    }

    /// Entries from `seq` on, at most `limit` of them that `scan` keeps, and the
    /// position after the last entry scanned (at the entry `scan` stopped at, if any).
    pub fn read_from(
        &self,
        seq: u64,
        limit: usize,
        mut scan: impl FnMut(&LogEntry) -> Scan,
        out: &mut Vec<Arc<ChangeEvent>>,
    ) -> Result<u64, HistoryLost> {
        let first = self.first_seq();
        if seq < first {
            return Err(HistoryLost);
        }
        let mut next = seq;
        let start = (seq - first) as usize;
        for entry in self.entries.range(start.min(self.entries.len())..) {
            if out.len() >= limit {
                break;
            }
            match scan(entry) {
                Scan::Stop => return Ok(entry.seq),
                Scan::Keep => out.push(Arc::clone(&entry.event)),
                Scan::Skip => {}
            }
            next = entry.seq + 1;
        }
        Ok(next)
    }

    /// Document changes on `ns` with a time in `from..=to` still in the log, counting at
    /// most `limit`. Commands (a create, an index, a drop, a rename) are not counted: in
    /// an oplog they are entries on `db.$cmd`, not on the collection.
    pub fn count_between(
        &self,
        ns: &crate::store::Namespace,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> u64 {
        let start = self.entries.partition_point(|e| e.time < from);
        let mut counted = 0;
        for entry in self.entries.range(start..) {
            if counted >= limit || entry.time > to {
                break;
            }
            if entry.event.ns == *ns && !entry.is_command() {
                counted += 1;
            }
        }
        counted
    }

    /// The entry at `time`, while the log still holds it.
    pub fn entry_at(&self, time: ClusterTime) -> Option<&LogEntry> {
        let at = self.entries.partition_point(|e| e.time < time);
        self.entries.get(at).filter(|e| e.time == time)
    }

    /// The sequence number of the oldest entry still held.
    pub fn first_seq(&self) -> u64 {
        self.entries.front().map_or(self.next_seq, |e| e.seq)
    }

    /// The log's figures as the oplog's statistics give them, when it is sized in bytes
    /// alone (a count bound would drop history the byte figures cannot foresee).
    /// Entries fall off at once when the budget is passed: no checkpoint to wait for,
    /// no minimum retention.
    pub fn stats(&self) -> Option<OplogStats> {
        if self.capacity != usize::MAX || self.byte_budget == usize::MAX {
            return None;
        }
        Some(OplogStats {
            size_bytes: self.bytes as u64,
            max_bytes: self.byte_budget as u64,
            entries: self.entries.len() as u64,
            written_bytes: Some(self.written),
            checkpoint_interval: Some(Duration::ZERO),
            min_retention: Some(Duration::ZERO),
            largest_entry_bytes: Some(self.largest as u64),
            truncation_bytes: None,
        })
    }

    /// The bytes of the entries older than the resume point `at`'s entry (the last
    /// entry at or before it), as `MongoStore::oplog_history_before` counts them.
    pub fn history_before(&self, at: ClusterTime) -> HistoryBefore {
        let held = self.entries.partition_point(|e| e.time <= at);
        let (Some(first), Some(entry)) = (
            self.entries.front(),
            held.checked_sub(1).and_then(|i| self.entries.get(i)),
        ) else {
            return HistoryBefore {
                older_bytes: 0,
                entry: None,
                complete: true,
            };
        };
        HistoryBefore {
            older_bytes: entry.written_before - first.written_before,
            entry: Some(entry.time),
            complete: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ResumeToken, TokenKind};
    use crate::store::{Namespace, OperationType};
    use bson::doc;

    fn event(time: ClusterTime) -> ChangeEvent {
        ChangeEvent {
            token: ResumeToken::encode(time, TokenKind::Event, 0),
            cluster_time: Some(time),
            operation: OperationType::Insert,
            ns: Namespace::new("db", "c"),
            document_key: doc! {"_id": 1},
            full_document: None,
            details: Default::default(),
        }
    }

    fn filled(capacity: usize, count: u32) -> ChangeLog {
        let mut log = ChangeLog::new(capacity);
        for _ in 0..count {
            let time = log.next_time(100);
            log.append(time, event(time));
        }
        log
    }

    #[test]
    fn times_strictly_increase_even_when_the_wall_clock_does_not() {
        let mut log = ChangeLog::new(10);
        let a = log.next_time(100);
        log.append(a, event(a));
        let b = log.next_time(99);
        assert!(b > a);
        log.append(b, event(b));
        assert_eq!(log.next_time(101), ClusterTime::new(101, 1));
    }

    #[test]
    fn capacity_moves_the_window_and_loses_history() {
        let log = filled(3, 5);
        let window = log.window();
        assert_eq!(window.first, ClusterTime::new(100, 3));
        assert_eq!(window.last, ClusterTime::new(100, 5));
        assert_eq!(
            log.position_after(ClusterTime::new(100, 1)),
            Err(HistoryLost)
        );
        assert_eq!(
            log.position_after(ClusterTime::new(100, 2)),
            Err(HistoryLost),
            "MongoDB refuses a token whose own entry fell off, though nothing after it did"
        );
        assert_eq!(log.position_after(window.first), Ok(4));
        assert_eq!(log.position_at(ClusterTime::new(100, 2)), Err(HistoryLost));
        assert_eq!(log.position_at(window.first), Ok(3));
        let mut out = Vec::new();
        assert_eq!(
            log.read_from(2, 10, |_| Scan::Keep, &mut out),
            Err(HistoryLost)
        );
        assert_eq!(log.read_from(3, 10, |_| Scan::Keep, &mut out), Ok(6));
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn a_log_that_never_rolled_over_loses_nothing() {
        let log = filled(10, 3);
        assert_eq!(log.position_at(ClusterTime::new(1, 0)), Ok(1));
        assert_eq!(log.position_after(ClusterTime::new(1, 0)), Ok(1));
    }

    #[test]
    fn a_tick_orders_later_entries_after_it() {
        let mut log = filled(10, 1);
        let tick = log.tick(100);
        assert_eq!(log.last_time(), tick);
        assert!(log.next_time(100) > tick);
        assert_eq!(
            log.window().last,
            ClusterTime::new(100, 1),
            "a tick is no entry"
        );
    }

    #[test]
    fn counts_are_bounded_by_range_namespace_and_limit() {
        let mut log = filled(100, 10);
        let at = log.next_time(100);
        let other = ChangeEvent {
            ns: Namespace::new("db", "other"),
            ..event(at)
        };
        log.append(at, other);
        let ns = Namespace::new("db", "c");
        let all = log.count_between(
            &ns,
            ClusterTime::new(0, 0),
            ClusterTime::new(u32::MAX, 0),
            100,
        );
        assert_eq!(all, 10, "the other namespace is not counted");
        assert_eq!(
            log.count_between(&ns, ClusterTime::new(100, 3), ClusterTime::new(100, 5), 100),
            3,
            "both ends inclusive"
        );
        assert_eq!(
            log.count_between(
                &ns,
                ClusterTime::new(0, 0),
                ClusterTime::new(u32::MAX, 0),
                4
            ),
            4
        );
    }

    #[test]
    fn reads_respect_limit_and_filter() {
        let log = filled(100, 10);
        let mut out = Vec::new();
        let next = log
            .read_from(
                1,
                2,
                |e| match e.time.inc % 2 {
                    0 => Scan::Keep,
                    _ => Scan::Skip,
                },
                &mut out,
            )
            .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(next, 5, "scanned through entry 4, the second even one");
        assert_eq!(log.position_after(ClusterTime::new(100, 4)), Ok(5));
        out.clear();
        let stopped = log
            .read_from(
                1,
                10,
                |e| match e.seq {
                    3 => Scan::Stop,
                    _ => Scan::Keep,
                },
                &mut out,
            )
            .unwrap();
        assert_eq!(
            (stopped, out.len()),
            (3, 2),
            "stops before entry 3, which stays unread"
        );
    }

    #[test]
    fn a_byte_budget_drops_the_oldest_entries_like_an_oplog_sized_in_megabytes() {
        let big = doc! {"blob": "x".repeat(10_000)};
        let mut log = ChangeLog::with_byte_budget(1_000, 35_000);
        for secs in 1..=5 {
            let mut event = event(ClusterTime::new(secs, 1));
            event.full_document = Some(big.clone());
            log.append(ClusterTime::new(secs, 1), event);
        }
        // Three 10 kB documents fit in 35 kB with their overhead, four do not.
        assert_eq!(log.window().first, ClusterTime::new(3, 1));
        assert!(log.has_dropped());
        assert_eq!(
            log.check_resumable(ClusterTime::new(2, 1)),
            Err(HistoryLost)
        );
        // One entry larger than the whole budget still stays, as the newest.
        let mut huge = event(ClusterTime::new(6, 1));
        huge.full_document = Some(doc! {"blob": "x".repeat(50_000)});
        log.append(ClusterTime::new(6, 1), huge);
        assert_eq!(log.window().first, ClusterTime::new(6, 1));
    }
}
