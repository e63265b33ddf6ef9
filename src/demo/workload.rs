//! A workload of application writes: animals move and change tags, orders are placed and shipped.

use std::collections::BTreeMap;
use std::time::Duration;

use bson::doc;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use super::pets::{Animal, LOCATIONS, TAGS};
use super::DemoNamespaces;
use crate::store::{DocumentStore, StoreResult};

const NAMES: [&str; 8] = [
    "Rex", "Tom", "Kiki", "Bella", "Milo", "Luna", "Coco", "Nala",
];
const ORDER_STATES: [&str; 3] = ["placed", "paid", "shipped"];

#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Writes per second when run on a timer.
    pub rate_per_sec: f64,
    /// At most this many animals; once reached, writes update existing ones.
    pub max_animals: usize,
    /// Share of writes that go to orders instead of animals.
    pub order_share: f64,
    pub seed: u64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            rate_per_sec: 20.0,
            max_animals: 60,
            order_share: 0.25,
            seed: 1,
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
    orders: BTreeMap<String, usize>,
    writes: u64,
}

impl<S: DocumentStore> Workload<S> {
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
            writes: 0,
        }
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
        let open: Vec<String> = self
            .orders
            .iter()
            .filter(|(_, state)| **state + 1 < ORDER_STATES.len())
            .map(|(id, _)| id.clone())
            .collect();
        let (id, state) = if open.is_empty() || self.rng.gen_bool(0.4) {
            (format!("o{:05}", self.orders.len() + 1), 0)
        } else {
            let id = open[self.rng.gen_range(0..open.len())].clone();
            let state = self.orders.get(&id).copied().unwrap_or(0) + 1;
            (id, state)
        };
        let amount = self.rng.gen_range(5..500);
        self.store
            .put(
                &self.namespaces.orders,
                doc! {"_id": &id, "status": ORDER_STATES[state], "amount": amount},
            )
            .await?;
        self.orders.insert(id, state);
        Ok(())
    }

    /// Writes at the configured rate until cancelled or the store fails.
    pub async fn run(mut self, shutdown: CancellationToken) -> StoreResult<u64> {
        let period = Duration::from_secs_f64(1.0 / self.config.rate_per_sec.max(0.001));
        let mut ticker = tokio::time::interval(period);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(self.writes),
                _ = ticker.tick() => self.step().await?,
            }
        }
    }
}
