// Long: one estimate; the model of how the oplog is truncated (below) and the bounds
// drawn from it read best together.
//! Time to loss: when a lease's resume point may leave the oplog, and when it surely has.
//!
//! # What makes history leave
//!
//! MongoDB (WiredTiger) does not drop oplog entries one by one. It cuts the oplog into
//! chunks ("truncate markers", once "stones") of at least `max / n` bytes, where
//! `n = clamp(max / 16 MiB, 10, 100)`: a new chunk starts on the insert that brings the
//! current one to that size. When the *complete* chunks together hold more than the
//! configured maximum, the oldest chunk is removed whole — by a thread that the insert
//! completing a chunk wakes, and only behind the last checkpoint (the `syncdelay`
//! interval, 60 s by default), and never while the chunk's newest entry is younger than a
//! configured minimum retention period. So a steadily written oplog holds between about
//! `max − chunk` and `max + chunk` bytes (seen on a real 6.0.5 with a 1 MiB oplog:
//! 957–976 kB, the first entry moving in steps of ~45 entries); after a burst it can
//! hold far more until writes resume (seen: 2.4 MB for minutes with no writes, back under
//! 1 MB once the next ~100 kB chunk was written). And:
//!
//! * **an oplog that is not yet full drops nothing**: no chunk goes before the complete
//!   chunks exceed `max`, so at least `max − size` bytes must be written first;
//! * a resume point is lost (`LOST`, as [`super::LeaseHealth`] says it: its time is before
//!   the first non-no-op entry) when the chunk holding its own entry — the last non-no-op
//!   entry at or before it, here called *its entry* — is removed. Every entry of that
//!   chunk before its entry sums to less than one chunk, so that needs more than
//!   `max − chunk` bytes at or after its entry; and it surely happens once more than
//!   `max + chunk` bytes are at or after it (the chunk being filled holds less than one
//!   chunk), a checkpoint has passed, and one more chunk has been written to wake the
//!   truncation.
//!
//! # Why bytes and not the first entry's speed
//!
//! The obvious model watches the window's first entry: it advances at `v` history-seconds
//! per second (observed, or `window length ÷ (max ÷ fill rate)`), so a stalled token is
//! lost after `(token − first) ÷ v`. That assumes history is evenly spread over the
//! window, and bursts make it uneven: after a busy hour following a quiet night, the
//! night's history holds few bytes and the first entry runs through it in moments,
//! whatever speed it was seen to have in the busy part
//! (`tests::the_first_entrys_speed_misleads_after_a_burst` builds such an oplog and the
//! speed-based figure comes out later than the real loss). So the prediction counts
//! bytes: how many bytes of retained history are older than the resume point's entry
//! ([`HistoryBefore`], bounded `$bsonSize` sums on the oplog,
//! `MongoStore::oplog_history_before`). The first entry's observed movement is used
//! only where no byte figures exist (a fallback for the latest estimate).
//!
//! # Rates are ranges
//!
//! The fill rate (bytes per second written to the oplog), the listener's progress
//! (history-seconds its resume point advances per second) and the first entry's
//! advance are measured by the caller from successive samples ([`TrailingRate`],
//! [`OplogRates`]) and given as [`Rate`]s: the lowest and highest seen over a trailing
//! span. Both estimates hold **as long as the rates stay within those ranges**; a burst
//! faster than anything seen can beat the earliest estimate, and nothing can predict it.
//!
//! * **earliest** — the first moment at which the loss *condition* could be met with the
//!   oplog written at the highest rate, the listener at its lowest progress (zero when
//!   unknown: stalled), and the fewest bytes before the resume point (zero when they
//!   were not counted: the history before it may hold almost nothing):
//!   * while the token stays among the entries the oplog holds now, loss needs
//!     `fill_high · τ ≥ (max − size) + max(0, older − chunk)`: the "not yet full" wait
//!     and then the bytes older than its entry, less one chunk;
//!   * a listener moving at `p` history-seconds per second passes the oplog's present
//!     newest entry at `τ₁ = (last − token) ÷ p`; from there only bytes written *after*
//!     its position count, and writes at rate `f` put at most `f · g(τ)` bytes after it,
//!     `g(τ) = τ − max(0, token + p·τ − now)` (capped at the head): loss then needs
//!     `largest entry + fill_high · g(τ) ≥ max − chunk`. With `p ≥ 1` the listener keeps
//!     up with the present, `g` stops growing, and if the oplog cannot drop its token
//!     before it passes the head, the earliest is **never**: a listener catching up is
//!     not lost. The largest entry (16 MiB unless the caller knows better) is the slack
//!     of one entry straddling the listener's position.
//!   * a minimum retention period keeps every entry at least that long after it was
//!     written.
//! * **latest** — the moment by which the sufficient condition is met with the oplog
//!   written at the lowest rate, the listener at its highest progress, and the most
//!   bytes before the resume point (the whole oplog when not counted): for a stalled
//!   listener `(max + chunk − size + older) ÷ fill_low`; for a moving one the bytes
//!   after its position must exceed `max + chunk` on their own; then one checkpoint
//!   interval and one more chunk written at the lowest rate for the truncation to run. A fill rate that may drop to zero, or a listener
//!   that may outpace the oplog, makes the latest **never**: it may never be lost.
//!   Unknown when the inputs cannot bound it (an unknown listener may be moving).
//!
//! Missing inputs widen the range and are listed with what they did ([`Missing`]).
//! Absurd inputs (NaN, negative or infinite rates, a zero maximum) count as missing;
//! nothing here panics.
//!
//! Clocks: `now` is the server's clock. The history times are seconds (`ClusterTime`
//! increments are not time); where a second's rounding matters the bound is taken on the
//! safe side (the present is at least one second past the newest entry seen).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{ClusterTime, OplogWindow};

/// The largest oplog entry the server writes (`BSONObjMaxInternalSize`: 16 MiB + 16 KiB);
/// the default for [`LossInputs::largest_entry`].
pub const MAX_ENTRY_BYTES: u64 = 16 * 1024 * 1024 + 16 * 1024;

/// A resume point that may be lost sooner than this is shown as a warning (the console)
/// and pages (`StreamwardHistoryLossPredicted` in docs/alerts/streamward.rules.yml).
pub const LOSS_WARNING_WITHIN: Duration = Duration::from_secs(30 * 60);

/// mongod's default checkpoint interval (`syncdelay`): the oplog is truncated only
/// behind a checkpoint, so a removal can wait this long.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// The size of one truncation chunk of an oplog whose maximum is `max_bytes`: the server
/// keeps between 10 and 100 of them, one per 16 MiB of maximum.
pub fn truncation_chunk(max_bytes: u64) -> u64 {
    let chunks = (max_bytes / MAX_ENTRY_BYTES).clamp(10, 100);
    (max_bytes / chunks).max(1)
}

/// A rate known within a range: the lowest and the highest the caller measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub low: f64,
    pub high: f64,
}

impl Rate {
    /// The range between `a` and `b` (either order); `None` when either is NaN or
    /// infinite. A negative value counts as zero.
    pub fn between(a: f64, b: f64) -> Option<Rate> {
        if !a.is_finite() || !b.is_finite() {
            return None;
        }
        let (a, b) = (a.max(0.0), b.max(0.0));
        Some(Rate {
            low: a.min(b),
            high: a.max(b),
        })
    }

    /// A single measurement, no spread.
    pub fn exactly(value: f64) -> Option<Rate> {
        Rate::between(value, value)
    }

    /// The same range, checked again (fields are public, so a caller may have set
    /// anything).
    fn sane(self) -> Option<Rate> {
        Rate::between(self.low, self.high)
    }
}

/// The oplog's figures from the server (`$collStats` on `local.oplog.rs` and friends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OplogStats {
    /// Bytes of the entries it holds (BSON sizes, as the server counts them against the maximum).
    pub size_bytes: u64,
    /// The configured maximum.
    pub max_bytes: u64,
    pub entries: u64,
    /// Bytes written to the oplog since the server started: a counter whose growth is
    /// the fill rate, also once the oplog is full and its size stands still. `None` when
    /// the storage engine does not report it.
    pub written_bytes: Option<u64>,
    /// How often the server takes a checkpoint (`syncdelay`); `None` when not known.
    pub checkpoint_interval: Option<Duration>,
    /// The configured minimum retention period (zero when none); `None` when not known.
    pub min_retention: Option<Duration>,
    /// The largest entry the oplog can hold, when known better than the server's limit
    /// ([`MAX_ENTRY_BYTES`]); MongoDB does not say it.
    pub largest_entry_bytes: Option<u64>,
    /// How many bytes one truncation removes at once, when not the oplog's chunks
    /// ([`truncation_chunk`]): a capped collection drops its oldest entries one by one
    /// as each insert needs the room, so there it is one entry.
    pub truncation_bytes: Option<u64>,
}

impl OplogStats {
    /// Whether the oplog is full: it holds within one truncation chunk of its maximum,
    /// so it drops history as it is written. Not full, it drops nothing.
    pub fn is_full(&self) -> bool {
        let chunk = self
            .truncation_bytes
            .unwrap_or_else(|| truncation_chunk(self.max_bytes));
        is_full(self.size_bytes as f64, chunk as f64, self.max_bytes as f64)
    }
}

/// The one rule for a full oplog ([`OplogStats::is_full`]), in the model's units.
fn is_full(size: f64, chunk: f64, max: f64) -> bool {
    size + chunk >= max
}

/// Bytes of retained history before a resume point (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryBefore {
    /// Bytes of the entries older than the resume point's entry (the last non-no-op
    /// entry at or before it).
    pub older_bytes: u64,
    /// That entry's time, when one was found.
    pub entry: Option<ClusterTime>,
    /// Every entry before the resume point was counted; otherwise `older_bytes` is a
    /// lower bound (the count stopped at its limit).
    pub complete: bool,
}

/// Everything the prediction is made from; all but `now` and `resume_at` optional.
#[derive(Debug, Clone, PartialEq)]
pub struct LossInputs {
    /// The server's clock.
    pub now: DateTime<Utc>,
    /// The lease's resume point (its token's time).
    pub resume_at: ClusterTime,
    pub window: Option<OplogWindow>,
    pub oplog_bytes: Option<u64>,
    pub oplog_max_bytes: Option<u64>,
    /// Bytes per second written to the oplog.
    pub fill_rate: Option<Rate>,
    /// History-seconds per second the window's first entry advances.
    pub first_advance: Option<Rate>,
    /// History-seconds per second the lease's resume point advances (zero for a lease
    /// nobody holds).
    pub progress: Option<Rate>,
    pub history_before: Option<HistoryBefore>,
    /// An upper bound on any oplog entry's size; [`MAX_ENTRY_BYTES`] when `None`.
    pub largest_entry: Option<u64>,
    pub checkpoint_interval: Option<Duration>,
    pub min_retention: Option<Duration>,
    /// Bytes one truncation removes at once; the oplog's chunk when `None`.
    pub truncation: Option<u64>,
}

impl LossInputs {
    /// No measurements yet: the widest prediction.
    pub fn new(now: DateTime<Utc>, resume_at: ClusterTime) -> Self {
        Self {
            now,
            resume_at,
            window: None,
            oplog_bytes: None,
            oplog_max_bytes: None,
            fill_rate: None,
            first_advance: None,
            progress: None,
            history_before: None,
            largest_entry: None,
            truncation: None,
            checkpoint_interval: None,
            min_retention: None,
        }
    }

    /// The oplog-wide inputs: window, the server's figures and the rates measured from
    /// successive samples of both.
    pub fn with_oplog(
        mut self,
        window: Option<OplogWindow>,
        stats: Option<&OplogStats>,
        rates: &OplogRates,
    ) -> Self {
        self.window = window;
        if let Some(stats) = stats {
            self.oplog_bytes = Some(stats.size_bytes);
            self.oplog_max_bytes = Some(stats.max_bytes);
            self.checkpoint_interval = stats.checkpoint_interval;
            self.min_retention = stats.min_retention;
            self.largest_entry = stats.largest_entry_bytes;
            self.truncation = stats.truncation_bytes;
        }
        self.fill_rate = rates.fill_rate();
        self.first_advance = rates.first_advance();
        self
    }

    pub fn with_progress(mut self, progress: Option<Rate>) -> Self {
        self.progress = progress;
        self
    }

    pub fn with_history_before(mut self, history: Option<HistoryBefore>) -> Self {
        self.history_before = history;
        self
    }

    /// [`predict`] on these inputs.
    pub fn predict(&self) -> TimeToLoss {
        predict(self)
    }
}

/// When, from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LossTime {
    /// The resume point is before the window's first entry already.
    AlreadyLost,
    /// After this long (zero: at any moment).
    In(Duration),
    /// Not at the rates seen.
    Never,
}

impl LossTime {
    /// The same time seen `elapsed` later: that much nearer, at most down to "now".
    pub fn after(self, elapsed: Duration) -> LossTime {
        match self {
            LossTime::In(d) => LossTime::In(d.saturating_sub(elapsed)),
            other => other,
        }
    }

    /// In its largest unit, rounded down: `45s`, `12m`, `3h`, `2d` (at most `99d`).
    fn coarse(self) -> String {
        match self {
            LossTime::AlreadyLost => "lost".to_string(),
            LossTime::Never => "never".to_string(),
            LossTime::In(d) => match d.as_secs() {
                // Under a second is "now", as the detail view's figure rounds to it.
                0 => "now".to_string(),
                secs @ 1..=59 => format!("{secs}s"),
                secs @ 60..=3_599 => format!("{}m", secs / 60),
                secs @ 3_600..=86_399 => format!("{}h", secs / 3_600),
                secs => format!("{}d", (secs / 86_400).min(99)),
            },
        }
    }

    /// A range as a narrow table cell shows it: `12m–31m`, `45s–never`, `1h–?`,
    /// `lost`; at most 9 characters.
    pub fn compact_range(earliest: LossTime, latest: Option<LossTime>) -> String {
        match (earliest, latest) {
            (LossTime::AlreadyLost | LossTime::Never, _) => earliest.coarse(),
            (earliest, Some(latest)) => {
                let (from, to) = (earliest.coarse(), latest.coarse());
                if from == to {
                    from
                } else {
                    format!("{from}–{to}")
                }
            }
            (earliest, None) => format!("{}–?", earliest.coarse()),
        }
    }
}

impl fmt::Display for LossTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossTime::AlreadyLost => f.write_str("lost"),
            LossTime::In(d) if d.as_secs() == 0 => f.write_str("now"),
            LossTime::In(d) => f.write_str(&super::text::short_duration(*d)),
            LossTime::Never => f.write_str("never"),
        }
    }
}

/// An input of the prediction, for saying which were missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossInput {
    Window,
    OplogSize,
    OplogMax,
    FillRate,
    FirstAdvance,
    Progress,
    HistoryBefore,
    LargestEntry,
    CheckpointInterval,
    MinRetention,
    /// The oplog holds well over its maximum: truncation may be held back.
    Truncation,
}

impl LossInput {
    pub fn label(self) -> &'static str {
        match self {
            LossInput::Window => "oplog window",
            LossInput::OplogSize => "oplog size",
            LossInput::OplogMax => "oplog maximum size",
            LossInput::FillRate => "oplog fill rate",
            LossInput::FirstAdvance => "first entry's movement",
            LossInput::Progress => "listener's progress",
            LossInput::HistoryBefore => "bytes before the resume point",
            LossInput::LargestEntry => "largest entry size",
            LossInput::CheckpointInterval => "checkpoint interval",
            LossInput::MinRetention => "minimum retention period",
            LossInput::Truncation => "oplog truncation",
        }
    }
}

/// An input that was missing (or only partly known), and what that did to the estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub input: LossInput,
    pub effect: String,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} unknown: {}", self.input.label(), self.effect)
    }
}

/// The prediction for one resume point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeToLoss {
    /// The earliest the resume point can leave the oplog at the rates seen.
    pub earliest: LossTime,
    /// By when it surely has; `None` when the inputs cannot say.
    pub latest: Option<LossTime>,
    /// The oplog is not full yet and nothing goes before it fills: the earliest is
    /// that wait (at the highest fill rate seen), and it is shown as a lower bound
    /// ("≥ 40d") without the latest, which rests on the lowest rate a quiet oplog
    /// measures as near zero.
    pub filling: bool,
    /// Inputs that were missing and widened the estimate, each saying how.
    pub missing: Vec<Missing>,
}

impl TimeToLoss {
    /// The same prediction seen `elapsed` after it was made: each time in it that much
    /// nearer (at most down to "now").
    pub fn after(&self, elapsed: Duration) -> TimeToLoss {
        TimeToLoss {
            earliest: self.earliest.after(elapsed),
            latest: self.latest.map(|l| l.after(elapsed)),
            filling: self.filling,
            missing: self.missing.clone(),
        }
    }

    /// As a narrow table cell shows it ([`LossTime::compact_range`]; `≥40d` while the
    /// oplog fills).
    pub fn compact(&self) -> String {
        match self.filling_bound() {
            Some(bound) => format!("≥{}", LossTime::In(bound).coarse()),
            None => LossTime::compact_range(self.earliest, self.latest),
        }
    }

    /// While the oplog fills: the earliest, rounded down to a step of a coarse scale
    /// (about doubling: 1m, 2m, 5m, 10m, …, 90d, a year) so that reads seconds apart,
    /// whose rates differ by noise, say the same.
    pub fn filling_bound(&self) -> Option<Duration> {
        const STEPS: [u64; 20] = [
            0,
            60,
            2 * 60,
            5 * 60,
            10 * 60,
            15 * 60,
            30 * 60,
            3_600,
            2 * 3_600,
            3 * 3_600,
            6 * 3_600,
            12 * 3_600,
            86_400,
            2 * 86_400,
            7 * 86_400,
            14 * 86_400,
            30 * 86_400,
            60 * 86_400,
            90 * 86_400,
            365 * 86_400,
        ];
        match (self.filling, self.earliest) {
            (true, LossTime::In(d)) => {
                let secs = d.as_secs();
                let step = STEPS
                    .iter()
                    .rev()
                    .find(|s| **s <= secs)
                    .copied()
                    .unwrap_or(0);
                Some(Duration::from_secs(step))
            }
            _ => None,
        }
    }

    /// A resume point needed on several oplogs (each shard's) is lost once it is lost on
    /// any: the soonest earliest, and the soonest latest known (each bounds the loss from
    /// above); the missing inputs of all, each once. `None` for no predictions.
    pub fn soonest(predictions: impl IntoIterator<Item = TimeToLoss>) -> Option<TimeToLoss> {
        predictions.into_iter().reduce(|a, b| {
            let latest = match (a.latest, b.latest) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (known, None) | (None, known) => known,
            };
            let mut missing = a.missing;
            for m in b.missing {
                if !missing.iter().any(|seen| seen.input == m.input) {
                    missing.push(m);
                }
            }
            TimeToLoss {
                earliest: a.earliest.min(b.earliest),
                latest,
                filling: a.filling && b.filling,
                missing,
            }
        })
    }

    /// Whether `input` was missing.
    pub fn is_missing(&self, input: LossInput) -> bool {
        self.missing.iter().any(|m| m.input == input)
    }
}

impl fmt::Display for TimeToLoss {
    /// `lost`, `never`, `3m–12m`, `now–?`, `4m` (when both are the same), and while
    /// the oplog fills `not before the oplog fills, ≥ 30d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(bound) = self.filling_bound() {
            return write!(
                f,
                "not before the oplog fills, ≥ {}",
                LossTime::In(bound).coarse()
            );
        }
        match (self.earliest, self.latest) {
            (LossTime::AlreadyLost, _) => f.write_str("lost"),
            (LossTime::Never, _) => f.write_str("never"),
            (earliest, Some(latest)) if latest == earliest => write!(f, "{earliest}"),
            (earliest, Some(latest)) => write!(f, "{earliest}–{latest}"),
            (earliest, None) => write!(f, "{earliest}–?"),
        }
    }
}

/// The time-to-loss prediction (see the module doc for the reasoning).
pub fn predict(inputs: &LossInputs) -> TimeToLoss {
    let mut notes = Notes::default();
    let token = inputs.resume_at;
    match inputs.window {
        Some(window) if token < window.first => {
            return TimeToLoss {
                earliest: LossTime::AlreadyLost,
                latest: Some(LossTime::AlreadyLost),
                filling: false,
                missing: Vec::new(),
            };
        }
        Some(_) => {}
        None => notes.add(
            LossInput::Window,
            "whether it is lost already cannot be told: the earliest is now",
        ),
    }

    let clock = Clock::new(inputs);
    let max = inputs.oplog_max_bytes.filter(|m| *m > 0);
    let size = inputs.oplog_bytes;
    let fill = inputs.fill_rate.and_then(Rate::sane);
    let progress = inputs.progress.and_then(Rate::sane);
    let first_advance = inputs.first_advance.and_then(Rate::sane);
    let history_before = inputs.history_before;
    let delay = inputs
        .checkpoint_interval
        .unwrap_or(DEFAULT_CHECKPOINT_INTERVAL)
        .as_secs_f64();

    // The bytes model needs the oplog's room and its fill rate.
    let bytes = match (size, max, fill) {
        (Some(size), Some(max), Some(fill)) => Some(BytesModel {
            size: size as f64,
            max: max as f64,
            chunk: inputs.truncation.unwrap_or_else(|| truncation_chunk(max)) as f64,
            fill,
        }),
        _ => None,
    };
    if bytes.is_none() {
        let latest = match (inputs.window, first_advance) {
            (Some(_), Some(_)) => "the latest extrapolates the first entry's movement instead",
            _ => "there is no latest",
        };
        for (known, input) in [
            (size.is_some(), LossInput::OplogSize),
            (max.is_some(), LossInput::OplogMax),
            (fill.is_some(), LossInput::FillRate),
        ] {
            if !known {
                notes.add(
                    input,
                    format!("how fast the oplog can drop history is unknown: the earliest is now; {latest}"),
                );
            }
        }
        if first_advance.is_none() {
            notes.add(
                LossInput::FirstAdvance,
                "with no byte figures either, there is no latest",
            );
        }
    }
    if progress.is_none() {
        notes.add(
            LossInput::Progress,
            "the earliest takes the listener as stalled; it may be moving, so there is no latest",
        );
    }
    if bytes.is_some() {
        match history_before {
            None => notes.add(
                LossInput::HistoryBefore,
                "the history before the resume point may hold almost nothing, so the earliest is \
                 when the oplog can next drop a chunk; the latest takes the whole oplog as before it",
            ),
            Some(h) if !h.complete => notes.add(
                LossInput::HistoryBefore,
                format!(
                    "counted only up to {} bytes before the resume point: the earliest uses that \
                     much, the latest takes the whole oplog as before it",
                    h.older_bytes
                ),
            ),
            Some(_) => {}
        }
    }

    // Earliest, in seconds from now; `None`: never.
    let mut earliest = match (&bytes, inputs.window) {
        (Some(model), Some(_)) => {
            let p = progress.map_or(0.0, |p| p.low);
            let older = history_before.map_or(0.0, |h| h.older_bytes as f64);
            let entry = inputs.largest_entry.unwrap_or(MAX_ENTRY_BYTES) as f64;
            let earliest = model.earliest(older, p, entry, &clock);
            if inputs.largest_entry.is_none() && p > 0.0 {
                notes.add(
                    LossInput::LargestEntry,
                    "a moving listener's lead is counted less one 16 MiB entry",
                );
            }
            earliest
        }
        _ => Some(0.0),
    };
    // A minimum retention period keeps its entry at least that long after it was written.
    if let Some(retention) = inputs.min_retention.filter(|r| !r.is_zero()) {
        let entry = history_before
            .and_then(|h| h.entry)
            .or(inputs.window.map(|w| w.first));
        if let Some(entry) = entry {
            let kept = f64::from(entry.secs) + retention.as_secs_f64() - clock.present;
            earliest = earliest.map(|e| e.max(kept));
        }
    }

    // An oplog well over its maximum may be kept from truncating (since 4.4 nothing past
    // the majority commit point goes, e.g. with a secondary down; a backup cursor pins it
    // too): then nothing says by when the point surely goes.
    let truncation_held = bytes
        .as_ref()
        .is_some_and(|m| m.size > m.max + 2.0 * m.chunk);
    if truncation_held {
        notes.add(
            LossInput::Truncation,
            "the oplog holds more than its maximum and two chunks: the server may be keeping \
             history (a majority commit point behind, a backup cursor), so there is no latest",
        );
    }
    // Latest: `None` unknown, `Some(None)` never.
    let latest: Option<Option<f64>> = match (&bytes, progress) {
        (_, None) => None,
        (Some(_), Some(_)) if truncation_held => None,
        (Some(model), Some(p)) => {
            let older = match history_before {
                Some(h) if h.complete => h.older_bytes as f64,
                _ => model.size,
            };
            // The token's true time may be up to a second past its whole second.
            let ahead = Clock {
                token: clock.token + 1.0,
                last: clock.last,
                present: clock.present.max(clock.token + 1.0),
            };
            // Then a checkpoint, and a chunk completed to wake the truncation.
            let chunk_written = model.chunk / model.fill.low.max(f64::MIN_POSITIVE);
            let surely = model
                .latest(older, p.high, &ahead)
                .map(|t| t + delay + chunk_written);
            match inputs.min_retention {
                None => {
                    notes.add(
                        LossInput::MinRetention,
                        "the latest assumes no minimum retention period is configured",
                    );
                    Some(surely)
                }
                Some(r) if r.is_zero() => Some(surely),
                // Its chunk is kept `r` after the chunk's newest entry, which is written
                // within one chunk of bytes; then one more chunk wakes the truncation. A
                // moving listener's chunk is not known.
                Some(r) if p.high <= 0.0 => {
                    Some(surely.map(|t| t.max(r.as_secs_f64() + 2.0 * chunk_written + delay)))
                }
                Some(_) => None,
            }
        }
        (None, Some(p)) => match (inputs.window, first_advance) {
            // Without byte figures: the first entry's own movement, when it was seen.
            (Some(window), Some(v)) if v.low > p.high => {
                let behind = f64::from(token.secs.saturating_sub(window.first.secs)) + 1.0;
                Some(Some(behind / (v.low - p.high) + delay))
            }
            (Some(_), Some(_)) => Some(None),
            _ => None,
        },
    };
    if inputs.checkpoint_interval.is_none() && matches!(latest, Some(Some(_))) {
        notes.add(
            LossInput::CheckpointInterval,
            "the latest allows mongod's default 60 s between checkpoints",
        );
    }

    let earliest = to_loss_time(earliest);
    // Never before the earliest (samples taken at slightly different moments could say so).
    let latest = latest.map(|l| to_loss_time(l).max(earliest));
    // Not full: no chunk goes before the complete chunks exceed the maximum.
    let filling = matches!(earliest, LossTime::In(_))
        && inputs.window.is_some()
        && bytes
            .as_ref()
            .is_some_and(|m| !is_full(m.size, m.chunk, m.max));
    TimeToLoss {
        earliest,
        latest,
        filling,
        missing: notes.0,
    }
}

#[derive(Default)]
struct Notes(Vec<Missing>);

impl Notes {
    fn add(&mut self, input: LossInput, effect: impl Into<String>) {
        self.0.push(Missing {
            input,
            effect: effect.into(),
        });
    }
}

/// Seconds from now, `None` for never.
fn to_loss_time(secs: Option<f64>) -> LossTime {
    match secs {
        None => LossTime::Never,
        Some(s) if s.is_nan() || s <= 0.0 => LossTime::In(Duration::ZERO),
        Some(s) => LossTime::In(Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)),
    }
}

/// Where the resume point and the present are in history, in seconds.
struct Clock {
    /// The resume point's second (its true time is within the second after).
    token: f64,
    /// The oplog's newest entry's second, when the window is known.
    last: Option<f64>,
    /// The present in history: the server's clock, and at least one second past the
    /// newest entry seen (entries written from now on are newer than both).
    present: f64,
}

impl Clock {
    fn new(inputs: &LossInputs) -> Self {
        let now = inputs.now.timestamp_millis() as f64 / 1000.0;
        let last = inputs.window.map(|w| f64::from(w.last.secs));
        let token = f64::from(inputs.resume_at.secs);
        let present = now.max(last.map_or(f64::MIN, |l| l + 1.0)).max(token);
        Self {
            token,
            last,
            present,
        }
    }

    /// Wall-seconds of future writes that are newer than a listener moving at `p` from
    /// the token, `τ` seconds from now: `τ − max(0, token + p·τ − present)`, the token
    /// capped at the present.
    fn after_listener(&self, p: f64, tau: f64) -> f64 {
        let position = (self.token + p * tau).min(self.present + tau);
        tau - (position - self.present).max(0.0)
    }

    /// When a listener moving at `p` (> 0) from the token reaches `at`.
    fn reaches(&self, p: f64, at: f64) -> f64 {
        ((at - self.token) / p).max(0.0)
    }
}

/// The oplog's room and fill rate.
struct BytesModel {
    size: f64,
    max: f64,
    chunk: f64,
    fill: Rate,
}

impl BytesModel {
    /// The first `τ` (seconds from now) at which the loss condition can be met; `None`
    /// for never. `older`: bytes before the resume point's entry (at least); `p`: the
    /// listener's lowest progress; `entry`: the largest entry.
    fn earliest(&self, older: f64, p: f64, entry: f64, clock: &Clock) -> Option<f64> {
        let f = self.fill.high;
        // While the token is among today's entries: the wait until the oplog is full,
        // then the bytes before its entry less the chunk they may share.
        let needed = (self.max - self.size) + (older - self.chunk).max(0.0);
        let tau_a = if needed <= 0.0 {
            0.0
        } else if f > 0.0 {
            needed / f
        } else {
            return None;
        };
        // When the listener has passed the oplog's newest entry (one second of rounding).
        let passes_head = match clock.last {
            Some(last) if p > 0.0 => clock.reaches(p, last + 1.0),
            _ => f64::INFINITY,
        };
        if tau_a < passes_head {
            return Some(tau_a);
        }
        // From there only what is written after its position counts, plus one entry.
        let start = tau_a.max(passes_head);
        let needed_after = self.max - self.chunk - entry;
        if needed_after <= 0.0 {
            return Some(start);
        }
        if f <= 0.0 {
            return None;
        }
        let gap = needed_after / f;
        let reaches_present = clock.reaches(p, clock.present);
        if start <= reaches_present && gap <= reaches_present {
            return Some(start.max(gap));
        }
        let from = start.max(reaches_present);
        if clock.after_listener(p, from) >= gap {
            return Some(from);
        }
        if p < 1.0 {
            // After reaching the present it falls behind again at 1 − p.
            let tau = reaches_present + (gap - reaches_present) / (1.0 - p);
            return Some(tau.max(from));
        }
        None
    }

    /// The `τ` by which the loss condition is surely met (before the truncation delay);
    /// `None` for never. `older`: bytes before the resume point's entry (at most); `p`:
    /// the listener's highest progress.
    fn latest(&self, older: f64, p: f64, clock: &Clock) -> Option<f64> {
        let f = self.fill.low;
        if f <= 0.0 {
            return None;
        }
        if p <= 0.0 {
            let needed = (self.max + self.chunk - self.size + older).max(0.0);
            return Some(needed / f);
        }
        // It may have taken everything the oplog holds at once: only what is written
        // after its position counts.
        let gap = (self.max + self.chunk) / f;
        let reaches_present = clock.reaches(p, clock.present);
        if gap <= reaches_present {
            return Some(gap);
        }
        if p < 1.0 {
            return Some(reaches_present + (gap - reaches_present) / (1.0 - p));
        }
        None
    }
}

/// Rates from successive samples of a counter (bytes written, a history time) over a
/// trailing span: the lowest and highest over the intervals between samples.
#[derive(Debug, Clone)]
pub struct TrailingRate {
    span: Duration,
    resolution: f64,
    samples: VecDeque<(DateTime<Utc>, f64)>,
}

impl TrailingRate {
    /// For an exact counter (bytes written); keeps the intervals that end within `span`
    /// of the newest sample.
    pub fn new(span: Duration) -> Self {
        Self::quantized(span, 0.0)
    }

    /// For a value known only to `resolution` (a history time in whole seconds: 1.0):
    /// each interval's rate is widened by one step either way, so the range holds the
    /// true rate of every interval.
    pub fn quantized(span: Duration, resolution: f64) -> Self {
        Self {
            span,
            resolution: if resolution.is_finite() {
                resolution.abs()
            } else {
                0.0
            },
            samples: VecDeque::new(),
        }
    }

    /// Records `value` at `at`. A sample not after the previous one is ignored; a value
    /// that went down (a restarted server, a rewound token) starts over from it.
    pub fn record(&mut self, at: DateTime<Utc>, value: f64) {
        if !value.is_finite() {
            return;
        }
        if let Some(&(last_at, last_value)) = self.samples.back() {
            if at <= last_at {
                return;
            }
            if value < last_value {
                self.samples.clear();
            }
        }
        self.samples.push_back((at, value));
        let span = chrono::TimeDelta::from_std(self.span).unwrap_or(chrono::TimeDelta::MAX);
        let horizon = at.checked_sub_signed(span);
        // Keep the sample that starts the oldest interval still inside the span.
        while self.samples.len() > 2
            && horizon.is_some_and(|h| self.samples.get(1).is_some_and(|(t, _)| *t <= h))
        {
            self.samples.pop_front();
        }
    }

    pub fn clear(&mut self) {
        self.samples.clear();
    }

    /// The lowest and highest rate over the intervals between samples (within the
    /// resolution); `None` before two samples.
    pub fn rate(&self) -> Option<Rate> {
        let mut low = f64::INFINITY;
        let mut high = f64::NEG_INFINITY;
        for ((t0, v0), (t1, v1)) in self.samples.iter().zip(self.samples.iter().skip(1)) {
            let secs = (*t1 - *t0).as_seconds_f64();
            if secs <= 0.0 {
                continue;
            }
            low = low.min((v1 - v0 - self.resolution) / secs);
            high = high.max((v1 - v0 + self.resolution) / secs);
        }
        Rate::between(low, high)
    }
}

/// The oplog-wide rates a caller keeps per replica set: the fill rate and the first
/// entry's advance, from successive samples of the window and [`OplogStats`].
#[derive(Debug, Clone)]
pub struct OplogRates {
    written: TrailingRate,
    /// The last read's average over its window: the bytes it holds over the time they
    /// span (see [`window_average_fill`]).
    average: Option<f64>,
    first: TrailingRate,
    /// Samples recorded.
    reads: u64,
}

impl OplogRates {
    pub fn new(span: Duration) -> Self {
        Self {
            written: TrailingRate::new(span),
            average: None,
            first: TrailingRate::quantized(span, 1.0),
            reads: 0,
        }
    }

    /// One sample. The fill rate comes from the server's bytes-written counter; without
    /// it, from the size while the oplog holds at most half its maximum (it has then
    /// never dropped anything, so its growth is what was written), else it is unknown.
    pub fn record(
        &mut self,
        at: DateTime<Utc>,
        window: Option<&OplogWindow>,
        stats: Option<&OplogStats>,
    ) {
        self.reads += 1;
        self.average = window
            .zip(stats)
            .and_then(|(w, s)| window_average_fill(w, s));
        match stats {
            Some(OplogStats {
                written_bytes: Some(written),
                ..
            }) => self.written.record(at, *written as f64),
            Some(s) if s.size_bytes.saturating_mul(2) <= s.max_bytes => {
                self.written.record(at, s.size_bytes as f64)
            }
            _ => self.written.clear(),
        }
        match window {
            Some(w) => self.first.record(at, f64::from(w.first.secs)),
            None => self.first.clear(),
        }
    }

    /// The measured range widened to take in the window's average; the average alone
    /// until two reads measured one. So one read gives a rate, and a read whose
    /// interval caught no write (a quiet oplog) adds no lower bound beyond zero that
    /// the earliest would use.
    pub fn fill_rate(&self) -> Option<Rate> {
        match (self.written.rate(), self.average) {
            (Some(measured), Some(average)) => {
                Rate::between(measured.low.min(average), measured.high.max(average))
            }
            (measured, None) => measured,
            (None, Some(average)) => Rate::exactly(average),
        }
    }

    /// How many samples were recorded.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    pub fn first_advance(&self) -> Option<Rate> {
        self.first.rate()
    }
}

/// The average rate at which the history an oplog holds was written: its bytes over
/// the seconds from its first entry to its last. Stable from read to read, known from
/// one; `None` for a window shorter than a second.
pub fn window_average_fill(window: &OplogWindow, stats: &OplogStats) -> Option<f64> {
    let secs = window.length().as_secs_f64();
    (secs >= 1.0).then(|| stats.size_bytes as f64 / secs)
}

mod tracker;
pub use tracker::{CappedSample, LossTracker, NotReady, LOSS_RATE_SPAN};

#[cfg(test)]
mod sim;

#[cfg(test)]
mod tests;
