//! A workload of application writes: animals move and change tags, orders are placed,
//! paid and shipped, and the oldest orders are retired; once its event store is open
//! ([`Workload::open_event_store`]), each order write also appends an event to it.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::doc;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
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
        }
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
        let name = NAMES[self.rng.gen_range(0..NAMES.len())];
        self.store
            .put(&self.namespaces.animals, animal.to_document(name))
            .await?;
        self.animals.insert(animal.id.clone(), animal);
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

    /// Writes at the configured rate until cancelled or the store fails; the poison
    /// animal once, when it is due.
    pub async fn run(mut self, shutdown: CancellationToken) -> StoreResult<u64> {
        let period = Duration::from_secs_f64(1.0 / self.config.rate_per_sec.max(0.001));
        let mut ticker = tokio::time::interval(period);
        let mut poison_at = self
            .config
            .poison_after
            .map(|after| tokio::time::Instant::now() + after);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(self.writes),
                _ = ticker.tick() => {
                    if poison_at.is_some_and(|at| tokio::time::Instant::now() >= at) {
                        poison_at = None;
                        self.write_poison().await?;
                    }
                    self.step().await?
                }
            }
        }
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
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};

    #[tokio::test(start_paused = true)]
    async fn the_shop_keeps_only_its_newest_orders() {
        let epoch = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("valid date");
        let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
        let kept = 30;
        let mut workload = Workload::new(
            store.clone(),
            WorkloadConfig {
                orders_kept: kept,
                order_share: 0.5,
                ..WorkloadConfig::default()
            },
        );
        let orders = DemoNamespaces::default().orders;
        for _ in 0..2_000 {
            workload.step().await.expect("write");
            assert!(store.document_count(&orders) <= kept);
        }
        assert!(
            workload.placed > 10 * kept as u64,
            "placed {} orders: enough to retire many",
            workload.placed
        );
        let stored: Vec<(String, usize)> = store
            .find_all(&orders)
            .await
            .expect("read")
            .iter()
            .map(|d| {
                let id = d.get_str("_id").expect("id").to_string();
                let status = d.get_str("status").expect("status");
                let state = ORDER_STATES.iter().position(|s| *s == status);
                (id, state.expect("a known status"))
            })
            .collect();
        let remembered: Vec<(String, usize)> = workload.orders().collect();
        assert_eq!(stored, remembered, "the workload remembers what it holds");
        let newest: Vec<String> = (workload.placed + 1 - kept as u64..=workload.placed)
            .map(order_id)
            .collect();
        let held: Vec<String> = stored.into_iter().map(|(id, _)| id).collect();
        assert_eq!(held, newest, "the oldest were retired");
    }
}
