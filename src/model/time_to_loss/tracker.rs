//! The samples a prediction needs, kept between reads: the oplog's rates
//! ([`OplogRates`]) and each held lease's progress, so a caller that reads the cluster
//! every few seconds (the console, the exporter, `leases --watch`) asks one thing.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{HistoryBefore, LossInputs, OplogRates, OplogStats, Rate, TimeToLoss, TrailingRate};
use crate::model::{Lease, OplogWindow, Pending};
use bson::oid::ObjectId;

/// Why an oplog's figures do not allow a prediction yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// Its first read, of a window under a second long: a fill rate needs two.
    Measuring,
    /// Two reads and still no fill rate: the server does not count the bytes written
    /// (WiredTiger's cursor statistics) and the oplog is over half full, so its growth
    /// is not what was written.
    NoFillRate,
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotReady::Measuring => {
                "measuring the oplog's fill rate (its window is under a second long: two reads \
                 are needed)"
            }
            NotReady::NoFillRate => {
                "the oplog's fill rate cannot be measured: the server does not report the \
                 bytes written to it, and it is over half full"
            }
        })
    }
}

/// A live holder whose resume point is within this many seconds of the newest entry
/// is taken as keeping up: reads a second apart cannot measure the progress of a token
/// that moves in whole seconds (a read that sees it stand still says nothing).
pub const KEEPING_UP_WITHIN_SECS: u32 = 5;

/// Rates are measured over this trailing span.
pub const LOSS_RATE_SPAN: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct LossTracker {
    span: Duration,
    /// Per oplog: the replica set's (`None`), or each shard's by name.
    oplogs: HashMap<Option<String>, OplogRates>,
    /// Per held lease: its resume point's time, in seconds, over time.
    progress: HashMap<String, TrailingRate>,
    /// Per capped collection a lease tails (`db.coll`): its rates and its running count
    /// of bytes appended, which MongoDB does not keep for it.
    capped: HashMap<String, CappedTrack>,
    /// Per lease: what it had left to process at the last count.
    pending: HashMap<String, Pending>,
}

/// What successive reads of one capped collection gave.
#[derive(Debug, Clone)]
struct CappedTrack {
    rates: OplogRates,
    /// Its newest entry at the last read: the appends of the next read come after it.
    newest: ObjectId,
    /// Bytes appended since the first read (the collection's "bytes written").
    written: u64,
    /// The largest entry seen appended.
    largest: u64,
}

/// One read of a capped collection, as [`LossTracker::record_capped`] takes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CappedSample {
    pub window: OplogWindow,
    pub newest: ObjectId,
    pub size_bytes: u64,
    pub max_bytes: u64,
    pub entries: u64,
    /// Bytes appended since the last read (after its newest entry); `None` on the first.
    pub appended: Option<u64>,
    /// The largest entry among those (or among all, on the first read).
    pub largest: u64,
}

impl Default for LossTracker {
    fn default() -> Self {
        Self::new(LOSS_RATE_SPAN)
    }
}

impl LossTracker {
    pub fn new(span: Duration) -> Self {
        Self {
            span,
            oplogs: HashMap::new(),
            progress: HashMap::new(),
            capped: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// The newest entry the last read of capped collection `name` saw: the bytes
    /// appended since are those of the entries after it.
    pub fn capped_newest(&self, name: &str) -> Option<ObjectId> {
        self.capped.get(name).map(|track| track.newest)
    }

    /// One read of capped collection `name` at `now`; returns its figures as the
    /// prediction takes them: bytes written = the running sum of what was appended,
    /// entries dropped one at a time (one truncation = the largest entry seen), no
    /// checkpoint or retention delay.
    pub fn record_capped(
        &mut self,
        name: &str,
        now: DateTime<Utc>,
        sample: &CappedSample,
    ) -> OplogStats {
        let track = self
            .capped
            .entry(name.to_string())
            .or_insert_with(|| CappedTrack {
                rates: OplogRates::new(self.span),
                newest: sample.newest,
                written: 0,
                largest: 0,
            });
        track.written += sample.appended.unwrap_or(0);
        track.largest = track.largest.max(sample.largest).max(1);
        track.newest = sample.newest;
        let stats = OplogStats {
            size_bytes: sample.size_bytes,
            max_bytes: sample.max_bytes,
            entries: sample.entries,
            written_bytes: Some(track.written),
            checkpoint_interval: Some(Duration::ZERO),
            min_retention: Some(Duration::ZERO),
            largest_entry_bytes: Some(track.largest),
            truncation_bytes: Some(track.largest),
        };
        track.rates.record(now, Some(&sample.window), Some(&stats));
        stats
    }

    /// Forgets what it saw of `name` (its appended bytes could not be counted): the
    /// next read starts measuring again.
    pub fn forget_capped(&mut self, name: &str) {
        self.capped.remove(name);
    }

    /// Forgets the capped collections not among `names` (no lease tails them now).
    pub fn keep_capped<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        let kept: Vec<&str> = names.into_iter().collect();
        self.capped.retain(|name, _| kept.contains(&name.as_str()));
    }

    /// Whether capped collection `name` has a fill rate yet (two reads).
    pub fn ready_capped(&self, name: &str) -> Result<(), NotReady> {
        match self
            .capped
            .get(name)
            .map(|t| (t.rates.fill_rate(), t.rates.reads()))
        {
            Some((Some(_), _)) => Ok(()),
            Some((None, reads)) if reads >= 2 => Err(NotReady::NoFillRate),
            _ => Err(NotReady::Measuring),
        }
    }

    /// When `lease`'s position may leave capped collection `name`, as
    /// [`Self::predict_on`] for an oplog.
    pub fn predict_capped(
        &self,
        name: &str,
        now: DateTime<Utc>,
        lease: &Lease,
        window: OplogWindow,
        stats: &OplogStats,
        history: HistoryBefore,
    ) -> Option<TimeToLoss> {
        let rates = &self.capped.get(name)?.rates;
        self.predict_with(rates, now, lease, Some(window), Some(stats), Some(history))
    }

    /// One read of a replica set: the window and the oplog's figures as read at `now`
    /// (the server's clock), and the leases.
    pub fn record(
        &mut self,
        now: DateTime<Utc>,
        window: Option<&OplogWindow>,
        stats: Option<&OplogStats>,
        leases: &[Lease],
    ) {
        self.record_oplog(None, now, window, stats);
        self.record_progress(now, leases);
    }

    /// One read of one oplog: the replica set's (`shard` `None`) or a shard's.
    pub fn record_oplog(
        &mut self,
        shard: Option<&str>,
        now: DateTime<Utc>,
        window: Option<&OplogWindow>,
        stats: Option<&OplogStats>,
    ) {
        self.oplogs
            .entry(shard.map(str::to_string))
            .or_insert_with(|| OplogRates::new(self.span))
            .record(now, window, stats);
    }

    /// Forgets the oplogs not among `shards` (a shard removed from the cluster).
    pub fn keep_oplogs<'a>(&mut self, shards: impl IntoIterator<Item = Option<&'a str>>) {
        let kept: Vec<Option<&str>> = shards.into_iter().collect();
        self.oplogs
            .retain(|shard, _| kept.contains(&shard.as_deref()));
    }

    /// The leases as read at `now`: each held one's resume point over time.
    pub fn record_progress(&mut self, now: DateTime<Utc>, leases: &[Lease]) {
        self.progress
            .retain(|resource, _| leases.iter().any(|l| &l.resource == resource));
        for lease in leases {
            let time = lease.resume_point().time();
            match (lease.live_holder(now), time) {
                (Some(_), Some(time)) => self
                    .progress
                    .entry(lease.resource.clone())
                    .or_insert_with(|| TrailingRate::quantized(self.span, 1.0))
                    .record(now, f64::from(time.secs)),
                // Nobody moves it: it stands still until someone holds it.
                _ => {
                    self.progress.remove(&lease.resource);
                }
            }
        }
    }

    /// Bytes per second written to the replica set's oplog over the span, once two
    /// reads gave it.
    pub fn fill_rate(&self) -> Option<Rate> {
        self.oplogs.get(&None).and_then(OplogRates::fill_rate)
    }

    /// Whether one oplog (`shard` `None`: the replica set's) has what a prediction
    /// needs from it: a fill rate, which one read gives (the window's average) unless
    /// the window is under a second long.
    pub fn ready_on(&self, shard: Option<&str>) -> Result<(), NotReady> {
        let oplog = self
            .oplogs
            .get(&shard.map(str::to_string))
            .ok_or(NotReady::Measuring)?;
        match (oplog.fill_rate(), oplog.reads()) {
            (Some(_), _) => Ok(()),
            (None, reads) if reads >= 2 => Err(NotReady::NoFillRate),
            (None, _) => Err(NotReady::Measuring),
        }
    }

    /// When `lease`'s resume point may leave the replica set's oplog
    /// ([`LossTracker::predict_on`]).
    pub fn predict(
        &self,
        now: DateTime<Utc>,
        lease: &Lease,
        window: Option<OplogWindow>,
        stats: Option<&OplogStats>,
        history: Option<HistoryBefore>,
    ) -> Option<TimeToLoss> {
        self.predict_on(None, now, lease, window, stats, history)
    }

    /// When `lease`'s resume point may leave one oplog (`shard` `None`: the replica
    /// set's), with `history` the bytes before it there (read after `stats`); `None` when
    /// it has no known time, or before the oplog's figures and its fill rate are known
    /// (one read of a window a second long or more): without them the earliest could only be "now", which says nothing
    /// about the lease and would page on it.
    pub fn predict_on(
        &self,
        shard: Option<&str>,
        now: DateTime<Utc>,
        lease: &Lease,
        window: Option<OplogWindow>,
        stats: Option<&OplogStats>,
        history: Option<HistoryBefore>,
    ) -> Option<TimeToLoss> {
        let oplog = self.oplogs.get(&shard.map(str::to_string))?;
        self.predict_with(oplog, now, lease, window, stats, history)
    }

    /// What each lease has left to process, as last counted ([`Pending`]): a live
    /// holder with nothing left keeps up with history.
    pub fn record_pending(&mut self, pending: &HashMap<String, Pending>) {
        self.pending.clone_from(pending);
    }

    fn predict_with(
        &self,
        oplog: &OplogRates,
        now: DateTime<Utc>,
        lease: &Lease,
        window: Option<OplogWindow>,
        stats: Option<&OplogStats>,
        history: Option<HistoryBefore>,
    ) -> Option<TimeToLoss> {
        let resume_at = lease.resume_point().time()?;
        let pending = self.pending.get(&lease.resource).copied();
        stats?;
        oplog.fill_rate()?;
        let measured = self
            .progress
            .get(&lease.resource)
            .and_then(TrailingRate::rate);
        // Within a moment of the newest entry, held or free for only a moment: handling
        // changes as they come, or handed over between two holders (the next one starts
        // there). One that falls behind, or that nobody takes, leaves that within
        // seconds and is measured or taken as stalled from then on; one never held is
        // stalled.
        let moment = Duration::from_secs(u64::from(KEEPING_UP_WITHIN_SECS));
        let held_or_handed_over = lease.live_holder(now).is_some()
            || lease.unclaimed_for(now).is_some_and(|free| free <= moment);
        let at_the_head = held_or_handed_over
            && window.is_some_and(|w| {
                w.last.secs.saturating_sub(resume_at.secs) <= KEEPING_UP_WITHIN_SECS
            });
        let keeping_up = Rate::between(1.0, measured.map_or(1.0, |m| m.high.max(1.0)));
        let progress = match lease.live_holder(now) {
            _ if at_the_head => keeping_up,
            None => Rate::exactly(0.0),
            // A live holder with nothing left keeps up with history (its cursor moves
            // on, whether or not its token does) for as long as it holds; that it
            // stops is what EXPIRED says.
            Some(_) if Pending::caught_up(pending, Some(resume_at), window.as_ref()) => keeping_up,
            Some(_) => measured,
        };
        Some(
            LossInputs::new(now, resume_at)
                .with_oplog(window, stats, oplog)
                .with_progress(progress)
                .with_history_before(history)
                .predict(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterTime, LossTime};
    use chrono::TimeZone;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + secs, 0).unwrap()
    }

    fn stats(size: u64, written: u64) -> OplogStats {
        OplogStats {
            size_bytes: size,
            max_bytes: 1_000_000,
            entries: size / 100,
            written_bytes: Some(written),
            checkpoint_interval: Some(Duration::from_secs(60)),
            min_retention: Some(Duration::ZERO),
            largest_entry_bytes: None,
            truncation_bytes: None,
        }
    }

    fn lease(holder: Option<&str>, token_secs: i64, now: DateTime<Utc>) -> Lease {
        let mut lease = Lease::vacant("r");
        lease.holder = holder.map(str::to_string);
        lease.expires_at = Some(now + chrono::TimeDelta::seconds(30));
        lease.resume_at = Some(ClusterTime::new(
            u32::try_from(1_800_000_000 + token_secs).unwrap(),
            1,
        ));
        lease
    }

    /// A stalled lease on a full oplog written at 10 kB/s with 400 kB before its point:
    /// lost in about (400 kB − one chunk) ÷ 10 kB/s at the earliest; a lease nobody holds
    /// is stalled by definition, without progress samples.
    #[test]
    fn successive_reads_give_the_rates_a_prediction_needs() {
        let mut tracker = LossTracker::default();
        let window = |t: i64| {
            OplogWindow::new(
                ClusterTime::new(u32::try_from(1_800_000_000 + t - 100).unwrap(), 1),
                ClusterTime::new(u32::try_from(1_800_000_000 + t).unwrap(), 1),
            )
        };
        let history = HistoryBefore {
            older_bytes: 400_000,
            entry: None,
            complete: true,
        };
        // One read gives no fill rate: no prediction, rather than "lost at any moment".
        let before = tracker.predict(
            at(0),
            &lease(None, 10, at(0)),
            Some(window(0)),
            Some(&stats(1_000_000, 5_000_000)),
            Some(history),
        );
        assert_eq!(before, None, "one read has no fill rate");
        for i in 0..=6 {
            let now = at(i * 10);
            let leases = [lease(None, 10, now)];
            tracker.record(
                now,
                Some(&window(i * 10)),
                Some(&stats(1_000_000, 5_000_000 + (i as u64) * 100_000)),
                &leases,
            );
        }
        let now = at(60);
        let predicted = tracker
            .predict(
                now,
                &lease(None, 10, now),
                Some(window(60)),
                Some(&stats(1_000_000, 5_600_000)),
                Some(history),
            )
            .expect("a prediction");
        assert!(
            !predicted.is_missing(crate::model::LossInput::FillRate),
            "{predicted:?}"
        );
        assert!(
            !predicted.is_missing(crate::model::LossInput::Progress),
            "{predicted:?}"
        );
        let LossTime::In(earliest) = predicted.earliest else {
            panic!("{predicted:?}");
        };
        // (400 kB − a 100 kB chunk) at 10 kB/s.
        assert!(
            (25..=35).contains(&earliest.as_secs()),
            "{earliest:?} from {predicted:?}"
        );
        // A lease with no time has no prediction.
        let mut unknown = lease(None, 0, now);
        unknown.resume_at = None;
        assert_eq!(
            tracker.predict(now, &unknown, Some(window(60)), None, None),
            None
        );
    }

    /// Progress a second's reads cannot measure is not taken as a stall: a lease whose
    /// point is at the newest entry (handling changes as they come, or between two
    /// holders), or whose live holder has nothing left, keeps up; one that is behind
    /// with nobody holding it, or with changes left and no progress seen, is stalled.
    #[test]
    fn a_lease_at_the_head_or_with_nothing_left_keeps_up() {
        let window = OplogWindow::new(
            ClusterTime::new(1_800_000_000 - 100, 1),
            ClusterTime::new(1_800_000_000, 1),
        );
        let history = HistoryBefore {
            older_bytes: 900_000,
            entry: None,
            complete: true,
        };
        let now = at(1);
        // Its entries are small: one straddling a moving listener's position is no
        // 16 MiB that a 1 MB oplog could lose it by.
        let figures = OplogStats {
            largest_entry_bytes: Some(1_000),
            ..stats(1_000_000, 5_000_000)
        };
        let mut tracker = LossTracker::default();
        let predict = |tracker: &LossTracker, lease: &Lease| {
            tracker
                .predict(now, lease, Some(window), Some(&figures), Some(history))
                .expect("a prediction")
                .earliest
        };
        let mut head = lease(Some("me"), -3, now);
        head.resource = "head".into();
        let mut handed_over = lease(None, -2, now);
        handed_over.resource = "handed-over".into();
        handed_over.expires_at = Some(now - chrono::TimeDelta::seconds(1));
        // At the head but never held: nobody moves it.
        let mut never_held = lease(None, -1, now);
        never_held.resource = "never-held".into();
        never_held.expires_at = None;
        let mut quiet = lease(Some("me"), -60, now);
        quiet.resource = "quiet".into();
        let mut behind = lease(Some("me"), -60, now);
        behind.resource = "behind".into();
        let mut abandoned = lease(None, -60, now);
        abandoned.resource = "abandoned".into();
        let leases = [head, handed_over, quiet, behind, abandoned, never_held];
        tracker.record(
            now,
            Some(&window),
            Some(&stats(1_000_000, 5_000_000)),
            &leases,
        );
        tracker.record_pending(&HashMap::from([
            ("quiet".to_string(), Pending::Counted(0)),
            ("behind".to_string(), Pending::Counted(7)),
            ("abandoned".to_string(), Pending::Counted(0)),
        ]));
        for lease in &leases[..3] {
            assert_eq!(
                predict(&tracker, lease),
                LossTime::Never,
                "{}",
                lease.resource
            );
        }
        for lease in &leases[3..] {
            assert!(
                matches!(predict(&tracker, lease), LossTime::In(_)),
                "{}",
                lease.resource
            );
        }
    }
}
