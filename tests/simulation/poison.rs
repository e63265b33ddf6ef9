//! Poison changes: changes the application's handler cannot process, decided by the
//! seed per change (its namespace and cluster time), so every listener fails on the
//! same one. Some are fixed after a few attempts (by any listener) or once some
//! virtual time has passed since they first failed, as a deploy of a fix would; some
//! are never fixed, and only a skip (an operator's, or a listener's `skip_after`
//! policy) gets past them.
//!
//! [`Poisoned`] wraps a handler: given a batch, it hands the changes before the first
//! poison change that still fails to the handler (their effects land, as a handler
//! that fails midway leaves them), then returns [`HandlerError::Failed`]. The engine
//! then hands the batch again one change at a time to find the failing one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;
use streamward::engine::{Handler, HandlerError};
use streamward::model::{ClusterTime, Fence};
use streamward::store::ChangeEvent;
use tokio::time::Instant;

use crate::trace::T;

/// How many changes are poison, and how they get fixed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoisonProfile {
    /// The share of changes that are poison.
    pub rate: f64,
    /// Whether some poison is never fixed.
    pub permanent: bool,
    /// The longest a change fixed by time fails after its first failure.
    pub max_fix: Duration,
    /// Mixed into each change's draw.
    pub salt: u64,
}

impl PoisonProfile {
    pub fn none() -> Self {
        Self {
            rate: 0.0,
            permanent: false,
            max_fix: Duration::ZERO,
            salt: 0,
        }
    }

    /// One seed in four has no poison; the others a rate of 0.5–5 % of changes.
    pub fn draw(rng: &mut SmallRng, permanent: bool, max_fix: Duration) -> Self {
        if rng.gen_bool(0.25) {
            return Self::none();
        }
        Self {
            rate: rng.gen_range(0.005..0.05),
            permanent,
            max_fix,
            salt: rng.gen(),
        }
    }
}

/// What fixes a poison change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cure {
    /// It fails this many attempts, then goes through.
    Attempts(u32),
    /// It fails until this long after its first failure.
    After(Duration),
    /// It always fails.
    Never,
}

/// Attempts on one poison change, by every listener.
struct Tally {
    attempts: u32,
    first: Instant,
}

/// The poison of one run, shared by every handler.
pub struct Poison {
    profile: PoisonProfile,
    /// Changes at or after this time are clean (the fleet's quiet: nothing new fails).
    clean_from: Mutex<Option<ClusterTime>>,
    tallies: Mutex<BTreeMap<(String, ClusterTime), Tally>>,
}

/// SplitMix64's finalizer: a well-mixed 64-bit value of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn text_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Poison {
    pub fn new(profile: PoisonProfile) -> Arc<Self> {
        Arc::new(Self {
            profile,
            clean_from: Mutex::new(None),
            tallies: Mutex::new(BTreeMap::new()),
        })
    }

    /// From now on, changes at or after `at` are clean.
    pub fn clean_from(&self, at: ClusterTime) {
        *self.clean_from.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    /// Whether the change of `ns` at `at` is poison, and what fixes it (the seed's
    /// draw for that change alone).
    pub fn cure(&self, ns: &str, at: ClusterTime) -> Option<Cure> {
        if self.profile.rate <= 0.0 {
            return None;
        }
        let clean_from = *self.clean_from.lock().unwrap_or_else(|p| p.into_inner());
        if clean_from.is_some_and(|c| at >= c) {
            return None;
        }
        let h = mix(self.profile.salt ^ text_hash(ns) ^ mix(at.as_u64()));
        if (h % 1_000_000) as f64 >= self.profile.rate * 1_000_000.0 {
            return None;
        }
        let kind = mix(h);
        let fix_secs = self.profile.max_fix.as_secs().max(5);
        Some(match kind % 100 {
            0..=39 => Cure::Attempts(1 + ((kind >> 8) % 4) as u32),
            40..=74 => Cure::After(Duration::from_secs(5 + (kind >> 16) % (fix_secs - 4))),
            _ if !self.profile.permanent => Cure::After(Duration::from_secs(fix_secs)),
            _ => Cure::Never,
        })
    }

    fn tallies(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, ClusterTime), Tally>> {
        self.tallies.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the change fails if handed now.
    fn fails_now(&self, ns: &str, at: ClusterTime) -> Option<Cure> {
        let cure = self.cure(ns, at)?;
        let tallies = self.tallies();
        let tally = tallies.get(&(ns.to_string(), at));
        let fails = match cure {
            Cure::Attempts(n) => tally.is_none_or(|t| t.attempts < n),
            Cure::After(d) => tally.is_none_or(|t| Instant::now() < t.first + d),
            Cure::Never => true,
        };
        fails.then_some(cure)
    }

    /// Counts a failed attempt; returns how many there were.
    fn attempt(&self, ns: &str, at: ClusterTime) -> u32 {
        let mut tallies = self.tallies();
        let tally = tallies.entry((ns.to_string(), at)).or_insert(Tally {
            attempts: 0,
            first: Instant::now(),
        });
        tally.attempts += 1;
        tally.attempts
    }
}

/// A handler that fails on poison changes (see the module's comment).
pub struct Poisoned<H> {
    inner: H,
    poison: Arc<Poison>,
}

impl<H> Poisoned<H> {
    pub fn new(inner: H, poison: &Arc<Poison>) -> Self {
        Self {
            inner,
            poison: poison.clone(),
        }
    }
}

impl<H: Handler> Handler for Poisoned<H> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        let failing = events.iter().enumerate().find_map(|(i, e)| {
            let at = e.cluster_time?;
            let ns = e.ns.to_string();
            self.poison.fails_now(&ns, at).map(|cure| (i, ns, at, cure))
        });
        let Some((i, ns, at, cure)) = failing else {
            return self.inner.handle(events, fence).await;
        };
        if i > 0 {
            self.inner.handle(&events[..i], fence).await?;
        }
        let attempt = self.poison.attempt(&ns, at);
        Err(HandlerError::Failed(format!(
            "poison change {ns} at {} (attempt {attempt}, fixed {cure:?})",
            T(at)
        )))
    }
}
