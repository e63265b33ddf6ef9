//! A workload of application writes: animals move and change tags, orders are placed,
//! paid and shipped, and the oldest orders are retired; once its event store is open
//! ([`Workload::open_event_store`]), each order write also appends an event to it.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::doc;
use chrono::{DateTime, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::events::order_event;
use super::pets::{Animal, LOCATIONS, TAGS};
use super::DemoNamespaces;
use crate::store::{CappedFeed, DocumentStore, Namespace, StoreResult};

const NAMES: [&str; 8] = [
    "Rex", "Tom", "Kiki", "Bella", "Milo", "Luna", "Coco", "Nala",
];
/// An order's states, in the order it goes through them: one write each.
pub const ORDER_STATES: [&str; 3] = ["placed", "paid", "shipped"];
/// The event of an order the shop retired.
pub const RETIRED: &str = "retired";
/// How many orders the shop keeps (the default of [`WorkloadConfig::orders_kept`]):
/// placing one more retires the oldest, which is deleted, shipped or not, as a shop
/// archives old orders. This bounds `shop.orders`, and with it the messages derived
/// from orders (`shop.outbox`, `shop.mails`: each order's go with it, see
/// [`super::orders`]) and the workload's own memory. At the default rate (20 writes/s,
/// a quarter of them to orders, two in five of those placing one) an order lives about
/// 250 s: longer than the mailer needs to fall BEHIND, shorter than the default log's
/// window, so the mailer settles there instead of losing its history.
pub const ORDERS_KEPT: usize = 500;

#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Writes per second when run on a timer.
    pub rate_per_sec: f64,
    /// At most this many animals; once reached, writes update existing ones.
    pub max_animals: usize,
    /// Share of writes that go to orders instead of animals.
    pub order_share: f64,
    /// At most this many orders; placing one more deletes the oldest ([`ORDERS_KEPT`]).
    pub orders_kept: usize,
    pub seed: u64,
    /// Once, this long after it starts, write an animal the pets handler can never
    /// process ([`POISON_ANIMAL`]): its lease goes FAILING, to practise `skip`.
    pub poison_after: Option<Duration>,
    /// Share of new animals that arrive in a litter: two to four inserted together in
    /// one multi-document transaction, so listeners see transactions.
    pub litter_share: f64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            rate_per_sec: 20.0,
            max_animals: 60,
            order_share: 0.25,
            orders_kept: ORDERS_KEPT,
            seed: 1,
            poison_after: None,
            litter_share: 0.1,
        }
    }
}

/// The first wait before the workload tries a failed write again; it doubles per
/// failure up to [`WORKLOAD_RETRY_MAX`].
pub const WORKLOAD_RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest wait between the workload's tries: it resumes within this of the
/// cluster taking writes again.
pub const WORKLOAD_RETRY_MAX: Duration = Duration::from_secs(5);
/// How long the screen says the workload resumed, once it has.
const RESUMED_SHOWN: Duration = Duration::from_secs(60);

/// How long the workload waits after its `failures`-th failure in a row (1 for the
/// first): [`WORKLOAD_RETRY_FIRST`], doubling, at most [`WORKLOAD_RETRY_MAX`].
pub fn retry_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    WORKLOAD_RETRY_FIRST
        .saturating_mul(1 << doublings)
        .min(WORKLOAD_RETRY_MAX)
}

/// What the workload is doing, as the demo's screen and its log say it.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadStatus {
    /// Writing; `resumed` once it has stopped and written again.
    Writing { resumed: Option<Resumed> },
    /// Its writes fail: since when, the latest error, how many failed in a row. It
    /// tries again after [`retry_delay`] of them.
    Stopped {
        since: DateTime<Utc>,
        error: String,
        failures: u32,
    },
}

/// When the workload wrote again after a stop, and how long it had stopped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resumed {
    pub at: DateTime<Utc>,
    pub after: Duration,
}

impl Default for WorkloadStatus {
    fn default() -> Self {
        WorkloadStatus::Writing { resumed: None }
    }
}

impl WorkloadStatus {
    /// After a write failed at `now` with `error`.
    pub fn failed(&self, error: String, now: DateTime<Utc>) -> WorkloadStatus {
        match self {
            WorkloadStatus::Stopped {
                since, failures, ..
            } => WorkloadStatus::Stopped {
                since: *since,
                error,
                failures: failures.saturating_add(1),
            },
            WorkloadStatus::Writing { .. } => WorkloadStatus::Stopped {
                since: now,
                error,
                failures: 1,
            },
        }
    }

    /// After a write succeeded at `now`.
    pub fn wrote(&self, now: DateTime<Utc>) -> WorkloadStatus {
        match self {
            WorkloadStatus::Stopped { since, .. } => WorkloadStatus::Writing {
                resumed: Some(Resumed {
                    at: now,
                    after: (now - *since).to_std().unwrap_or_default(),
                }),
            },
            writing => writing.clone(),
        }
    }

    /// What the demo's screen says of the workload at `now`: that it stopped (since
    /// when, why, that it retries), or for a minute that it resumed; nothing while it
    /// simply writes.
    pub fn headline(&self, now: DateTime<Utc>) -> Option<String> {
        let ago = |at: DateTime<Utc>| {
            crate::model::text::short_duration((now - at).to_std().unwrap_or_default())
        };
        match self {
            WorkloadStatus::Stopped {
                since,
                error,
                failures,
            } => Some(format!(
                "workload stopped writing {} ago ({failures} failed, retrying every {} at \
                 most): {}",
                ago(*since),
                crate::model::text::short_duration(WORKLOAD_RETRY_MAX),
                crate::model::text::escape_control(error)
            )),
            WorkloadStatus::Writing {
                resumed: Some(resumed),
            } if (now - resumed.at).to_std().unwrap_or_default() < RESUMED_SHOWN => Some(format!(
                "workload resumed writing {} ago, after {} stopped",
                ago(resumed.at),
                crate::model::text::short_duration(resumed.after)
            )),
            WorkloadStatus::Writing { .. } => None,
        }
    }
}

/// The only writer of animals and orders; it remembers what it wrote.
pub struct Workload<S> {
    store: S,
    config: WorkloadConfig,
    namespaces: DemoNamespaces,
    rng: SmallRng,
    animals: BTreeMap<String, Animal>,
    /// The orders the shop holds, by number (the oldest first): index in [`ORDER_STATES`].
    orders: BTreeMap<u64, usize>,
    /// How many orders were ever placed: the number of the newest.
    placed: u64,
    writes: u64,
    /// The capped collection order events are appended to, once it is known to exist.
    events: Option<Namespace>,
    /// What it is doing, for the screen ([`Workload::status`]).
    status: watch::Sender<WorkloadStatus>,
}

impl<S: DocumentStore + CappedFeed> Workload<S> {
    /// Writes into the default layout (`demo.animals`, `shop.orders`).
    pub fn new(store: S, config: WorkloadConfig) -> Self {
        Self::writing_to(store, config, DemoNamespaces::default())
    }

    /// Writes animals and orders into the collections of `namespaces`.
    pub fn writing_to(store: S, config: WorkloadConfig, namespaces: DemoNamespaces) -> Self {
        let rng = SmallRng::seed_from_u64(config.seed);
        Self {
            store,
            config,
            namespaces,
            rng,
            animals: BTreeMap::new(),
            orders: BTreeMap::new(),
            placed: 0,
            writes: 0,
            events: None,
            status: watch::Sender::new(WorkloadStatus::default()),
        }
    }

    /// What the workload is doing, as it changes: stopped writing (and why), resumed.
    pub fn status(&self) -> watch::Receiver<WorkloadStatus> {
        self.status.subscribe()
    }

    /// Makes the event store a capped collection of `max_bytes` (kept as it is when it
    /// exists capped), then appends an event for every order write from now on. When
    /// it cannot be made (a plain collection has its name, or the privilege is
    /// missing) the workload goes on without events and says why in the log; the
    /// event store's listeners then show their own error or wait for entries.
    pub async fn open_event_store(&mut self, max_bytes: u64) -> StoreResult<()> {
        let ns = self.namespaces.events.clone();
        match self.store.ensure_capped(&ns, max_bytes).await {
            Ok(()) => {
                self.events = Some(ns);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(%ns, error = %e, "no event store: the workload appends no order events");
                Err(e)
            }
        }
    }

    /// Appends the event of an order write, when the event store is open.
    async fn append_event(&self, kind: &str, number: u64, amount: Option<i64>) -> StoreResult<()> {
        if let Some(events) = &self.events {
            self.store
                .append_entry(events, order_event(kind, &order_id(number), amount))
                .await?;
        }
        Ok(())
    }

    /// One application write.
    pub async fn step(&mut self) -> StoreResult<()> {
        self.writes += 1;
        if self.rng.gen_bool(self.config.order_share.clamp(0.0, 1.0)) {
            self.write_order().await
        } else {
            self.write_animal().await
        }
    }

    async fn write_animal(&mut self) -> StoreResult<()> {
        let location = LOCATIONS[self.rng.gen_range(0..LOCATIONS.len())].to_string();
        let tags: Vec<String> = TAGS
            .iter()
            .filter(|_| self.rng.gen_bool(0.35))
            .map(|t| t.to_string())
            .collect();
        let animal = if self.animals.len() < self.config.max_animals && self.rng.gen_bool(0.3)
            || self.animals.is_empty()
        {
            Animal {
                id: format!("a{:04}", self.animals.len() + 1),
                location,
                tags,
                version: 1,
            }
        } else {
            let index = self.rng.gen_range(0..self.animals.len());
            let Some(current) = self.animals.values().nth(index) else {
                return Ok(());
            };
            let moves = self.rng.gen_bool(0.6);
            Animal {
                id: current.id.clone(),
                location: if moves {
                    location
                } else {
                    current.location.clone()
                },
                tags: if moves { current.tags.clone() } else { tags },
                version: current.version + 1,
            }
        };
        let room = self.config.max_animals.saturating_sub(self.animals.len());
        if animal.version == 1
            && room >= 2
            && self.config.litter_share > 0.0
            && self.rng.gen_bool(self.config.litter_share.min(1.0))
        {
            let size = self.rng.gen_range(2..=room.min(4));
            return self.write_litter(animal, size).await;
        }
        let name = NAMES[self.rng.gen_range(0..NAMES.len())];
        self.store
            .put(&self.namespaces.animals, animal.to_document(name))
            .await?;
        self.animals.insert(animal.id.clone(), animal);
        Ok(())
    }

    /// `first` and `size - 1` siblings born where it is, inserted in one transaction.
    async fn write_litter(&mut self, first: Animal, size: usize) -> StoreResult<()> {
        let mut litter = vec![first];
        for n in 1..size {
            let tags = TAGS
                .iter()
                .filter(|_| self.rng.gen_bool(0.35))
                .map(|t| t.to_string())
                .collect();
            litter.push(Animal {
                id: format!("a{:04}", self.animals.len() + 1 + n),
                location: litter[0].location.clone(),
                tags,
                version: 1,
            });
        }
        let documents = litter
            .iter()
            .map(|animal| animal.to_document(NAMES[self.rng.gen_range(0..NAMES.len())]))
            .collect();
        self.store
            .put_together(&self.namespaces.animals, documents)
            .await?;
        for animal in litter {
            self.animals.insert(animal.id.clone(), animal);
        }
        Ok(())
    }

    async fn write_order(&mut self) -> StoreResult<()> {
        let open: Vec<u64> = self
            .orders
            .iter()
            .filter(|(_, state)| **state + 1 < ORDER_STATES.len())
            .map(|(number, _)| *number)
            .collect();
        let (number, state) = if open.is_empty() || self.rng.gen_bool(0.4) {
            (self.placed + 1, 0)
        } else {
            let number = open[self.rng.gen_range(0..open.len())];
            let state = self.orders.get(&number).copied().unwrap_or(0) + 1;
            (number, state)
        };
        let amount: i32 = self.rng.gen_range(5..500);
        self.store
            .put(
                &self.namespaces.orders,
                doc! {"_id": order_id(number), "status": ORDER_STATES[state], "amount": amount},
            )
            .await?;
        self.placed = self.placed.max(number);
        self.orders.insert(number, state);
        self.append_event(ORDER_STATES[state], number, Some(i64::from(amount)))
            .await?;
        self.retire_orders().await
    }

    /// Deletes the oldest orders while the shop holds more than it keeps.
    async fn retire_orders(&mut self) -> StoreResult<()> {
        while self.orders.len() > self.config.orders_kept.max(1) {
            let Some((&oldest, _)) = self.orders.first_key_value() else {
                break;
            };
            self.store
                .delete_one(&self.namespaces.orders, &order_id(oldest).into())
                .await?;
            self.orders.remove(&oldest);
            self.append_event(RETIRED, oldest, None).await?;
        }
        Ok(())
    }

    /// The orders the shop holds now, by id: the index of each one's status in
    /// [`ORDER_STATES`].
    pub fn orders(&self) -> impl Iterator<Item = (String, usize)> + '_ {
        self.orders
            .iter()
            .map(|(number, state)| (order_id(*number), *state))
    }

    /// Writes at the configured rate until cancelled; the poison animal once, when it
    /// is due. A failed write (no primary, a network error) does not end it: it says
    /// so on its status and in the log, tries again after [`retry_delay`], and says
    /// when it resumed. Returns how many writes it made.
    pub async fn run(mut self, shutdown: CancellationToken) -> u64 {
        let period = Duration::from_secs_f64(1.0 / self.config.rate_per_sec.max(0.001));
        let mut ticker = tokio::time::interval(period);
        // After a stop, on at the rate: not a burst of the writes it missed.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut poison_at = self
            .config
            .poison_after
            .map(|after| tokio::time::Instant::now() + after);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return self.writes,
                _ = ticker.tick() => {}
            }
            let written = async {
                if poison_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
                    self.write_poison().await?;
                    // Only once written: a failed try is made again.
                    poison_at = None;
                }
                self.step().await
            }
            .await;
            let Err(error) = written else {
                self.wrote();
                continue;
            };
            let failures = self.failed(&error);
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return self.writes,
                () = tokio::time::sleep(retry_delay(failures)) => {}
            }
        }
    }

    /// A write succeeded: a stopped workload says it resumed.
    fn wrote(&mut self) {
        let now = Utc::now();
        let before = self.status.borrow().clone();
        let after = before.wrote(now);
        if let (
            WorkloadStatus::Stopped { failures, .. },
            WorkloadStatus::Writing { resumed: Some(r) },
        ) = (&before, &after)
        {
            tracing::info!(
                stopped_for = %crate::model::text::short_duration(r.after),
                failed_writes = failures,
                "the demo workload resumed writing"
            );
        }
        if before != after {
            self.status.send_replace(after);
        }
    }

    /// A write failed: the status and the log say so (the log once per stop, and again
    /// when the error changes). Returns how many failed in a row.
    fn failed(&mut self, error: &crate::store::StoreError) -> u32 {
        let before = self.status.borrow().clone();
        let after = before.failed(error.to_string(), Utc::now());
        let failures = match &after {
            WorkloadStatus::Stopped { failures, .. } => *failures,
            WorkloadStatus::Writing { .. } => 0,
        };
        let news = match &before {
            WorkloadStatus::Stopped { error: last, .. } => *last != error.to_string(),
            WorkloadStatus::Writing { .. } => true,
        };
        if news {
            tracing::warn!(
                %error,
                retry_every_at_most = %crate::model::text::short_duration(WORKLOAD_RETRY_MAX),
                "the demo workload stopped writing; it tries again until the cluster takes writes"
            );
        }
        self.status.send_replace(after);
        failures
    }

    /// The animal no pets listener can process: its `tags` is a string.
    async fn write_poison(&mut self) -> StoreResult<()> {
        self.writes += 1;
        tracing::info!(
            id = POISON_ANIMAL,
            "writing an animal the pets handler cannot process"
        );
        self.store
            .put(
                &self.namespaces.animals,
                doc! {
                    "_id": POISON_ANIMAL,
                    "name": "Rex",
                    "location": LOCATIONS[0],
                    "tags": "loud",
                    "v": 1_i64,
                },
            )
            .await
    }
}

/// The `_id` of the animal `--poison-after` writes: its `tags` is a string, which the
/// pets handler refuses (`animal poison-1 has no valid "tags"`).
pub const POISON_ANIMAL: &str = "poison-1";

/// The `_id` of order number `number`.
pub fn order_id(number: u64) -> String {
    format!("o{number:05}")
}

#[cfg(test)]
mod tests;
