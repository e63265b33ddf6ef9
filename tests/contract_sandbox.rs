//! The store contract (`streamward::contract`) on the sandbox store, on a virtual clock
//! whose epoch is years away from the machine's, so that any time a store took from
//! the client's clock instead of its own server clock would show.

mod support;

use bson::doc;
use chrono::{TimeZone, Utc};
use streamward::contract::{self, DataDefinition, Ddl, Harness, RollingHistory};
use streamward::model::ClusterTime;
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::LeaseStore;
use streamward::store::{ChangeFeed, DocumentStore, Namespace, StoreError};

/// Small enough that rolling the history over costs little, large enough that no check
/// but the history-lost ones fills it.
const CAPACITY: usize = 256;

struct SandboxHarness {
    store: SandboxStore,
}

impl SandboxHarness {
    fn new() -> Self {
        let epoch = Utc
            .with_ymd_and_hms(2031, 6, 1, 12, 0, 0)
            .single()
            .expect("a valid date");
        let config = SandboxConfig {
            log_capacity: CAPACITY,
            ..SandboxConfig::default()
        };
        Self {
            store: SandboxStore::new(config, Clock::virtual_from(epoch)),
        }
    }
}

impl Harness for SandboxHarness {
    type Store = SandboxStore;

    fn store(&self) -> &SandboxStore {
        &self.store
    }

    fn ns(&self, coll: &str) -> Namespace {
        Namespace::new("contract", coll)
    }

    async fn set_version_by_hand(&self, resource: &str, version: i64) {
        let mut lease = self
            .store
            .get(resource)
            .await
            .unwrap()
            .unwrap_or_else(|| streamward::model::Lease::vacant(resource));
        lease.version = version;
        self.store.put_lease_by_hand(lease);
    }
}

impl DataDefinition for SandboxHarness {
    async fn ddl(&self, ns: &Namespace, command: Ddl) -> Result<(), i32> {
        let done = match command.clone() {
            Ddl::Create => self.store.create_collection(ns),
            Ddl::CreateIndex(name, keys) => self.store.create_index(ns, name, keys),
            Ddl::DropIndex(name) => self.store.drop_index(ns, name),
            Ddl::HideIndex(name) => self.store.hide_index(ns, name),
        };
        done.map_err(|e| match e {
            StoreError::Command { code, .. } => code,
            other => panic!("{command:?} on {ns}: {other}"),
        })
    }
}

impl RollingHistory for SandboxHarness {
    async fn roll_history_past(&self, time: ClusterTime) {
        let filler = self.ns("filler");
        for i in 0..4 * CAPACITY {
            if self.store.oplog_window().await.unwrap().first > time {
                return;
            }
            self.store
                .put(&filler, doc! {"_id": format!("filler-{i}")})
                .await
                .unwrap();
        }
        panic!("the change log did not roll over past {time:?}");
    }
}

/// Each check a test of its own, `group::check`, on a fresh sandbox.
macro_rules! on_the_sandbox {
    ($group:ident; $($check:ident),* $(,)?) => {
        mod $group {
            $(
                #[tokio::test(start_paused = true)]
                async fn $check() {
                    crate::checks::$group::$check(&super::SandboxHarness::new()).await;
                }
            )*
        }
    };
}

contract::checks!(on_the_sandbox;
    leases, membership, operator, documents, feed, expanded, history,
    invalidation, partitions, capped, checkpoints, increments,
);

/// The contract's groups, and beside them the demo's member writes: not a store port,
/// held to the same checks on both stores.
mod checks {
    pub use streamward::contract::*;
    pub use streamward::demo::member_writes_checks as member_writes;
}

streamward::demo::member_writes_checks::checks!(on_the_sandbox);

/// Every check of the contract is listed by `checks!`: one left out would never run.
#[test]
fn every_check_is_listed() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.join("src/contract");
    let contract = support::files::with_extension(&root, "rs");
    let listed_by_macro =
        listed_items(&std::fs::read_to_string(root.join("mod.rs")).expect("mod.rs"));
    let missing = unlisted(&contract, &listed_by_macro);
    assert!(
        missing.is_empty(),
        "checks that `checks!` does not list: {missing:?}"
    );
    // The demo's member-write checks are listed by the macro in their own file.
    let member_writes = [manifest.join("src/demo/member_writes_checks.rs")];
    let listed_there = listed_items(&std::fs::read_to_string(&member_writes[0]).expect("the file"));
    let missing = unlisted(&member_writes, &listed_there);
    assert!(
        missing.is_empty(),
        "member-write checks its `checks!` does not list: {missing:?}"
    );
}

/// The checks written in `files`: every `pub async fn`.
fn unlisted(files: &[std::path::PathBuf], listed: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).expect("a source file");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("pub async fn ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !listed.contains(&name) {
                    missing.push(name);
                }
            }
        }
    }
    missing
}

/// The names a check list holds: each line that is only `name,` (whole items, so a
/// check whose name is part of another's is not taken as listed).
fn listed_items(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_suffix(','))
        .filter(|item| !item.is_empty() && item.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect()
}
