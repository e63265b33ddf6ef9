//! The store contract (`streamward::contract`) on `MongoStore` against a real replica
//! set: `STREAMWARD_TEST_URI` for every check, and `STREAMWARD_TEST_URI_SMALL_OPLOG` (a
//! 1 MB oplog that really rolls over) for the history-lost ones. Each check runs in a
//! fresh database (leases and audit in it too) that is dropped afterwards. Without the
//! variables each test says it is skipped (and fails under `scripts/test.sh` or CI).

mod support;

use bson::doc;
use streamward::contract::{self, DataDefinition, Ddl, Harness, RollingHistory};
use streamward::model::ClusterTime;
use streamward::store::mongo::MongoStore;
use streamward::store::{DocumentStore, Namespace};
use support::live::{live, live_small_oplog, LiveDb};

struct MongoHarness {
    live: LiveDb,
    /// Whether this replica set's oplog is small enough to roll over in a test.
    small_oplog: bool,
}

impl Harness for MongoHarness {
    type Store = MongoStore;

    fn store(&self) -> &MongoStore {
        &self.live.store
    }

    fn ns(&self, coll: &str) -> Namespace {
        self.live.ns(coll)
    }

    async fn set_version_by_hand(&self, resource: &str, version: i64) {
        self.store()
            .client()
            .database(&self.live.db)
            .collection::<bson::Document>("leases")
            .update_one(
                doc! {"_id": resource},
                doc! {"$set": {"version": version}, "$setOnInsert": {"listenerId": null, "expiresAt": bson::DateTime::from_millis(0)}},
            )
            .upsert(true)
            .await
            .unwrap();
    }
}

impl DataDefinition for MongoHarness {
    async fn ddl(&self, ns: &Namespace, command: Ddl) -> Result<(), i32> {
        use mongodb::options::IndexOptions;
        let database = self.store().client().database(&ns.db);
        let collection = database.collection::<bson::Document>(&ns.coll);
        let done = match command.clone() {
            Ddl::Create => database.create_collection(&ns.coll).await,
            Ddl::CreateIndex(name, keys) => {
                let options = IndexOptions::builder().name(name.to_string()).build();
                let index = mongodb::IndexModel::builder()
                    .keys(keys)
                    .options(options)
                    .build();
                collection.create_index(index).await.map(drop)
            }
            Ddl::DropIndex(name) => collection.drop_index(name).await,
            Ddl::HideIndex(name) => database
                .run_command(doc! {"collMod": &ns.coll, "index": {"name": name, "hidden": true}})
                .await
                .map(drop),
        };
        done.map_err(|e| match *e.kind {
            mongodb::error::ErrorKind::Command(ref failure) => failure.code,
            _ => panic!("{command:?} on {ns}: {e}"),
        })
    }
}

impl RollingHistory for MongoHarness {
    /// Writes about 100 KB documents until the oplog's first entry, no-ops included
    /// (what the server checks a resume point against), has passed `time`.
    async fn roll_history_past(&self, time: ClusterTime) {
        assert!(
            self.small_oplog,
            "only the small-oplog replica set rolls over within a test"
        );
        let store = self.store();
        let oplog = store
            .client()
            .database("local")
            .collection::<bson::Document>("oplog.rs");
        let filler = self.ns("filler");
        let pad = "x".repeat(100_000);
        for i in 0..2_000 {
            let first = oplog
                .find_one(doc! {})
                .sort(doc! {"$natural": 1})
                .await
                .unwrap()
                .and_then(|entry| entry.get_timestamp("ts").ok())
                .map(ClusterTime::from);
            if first.is_some_and(|first| first > time) {
                return;
            }
            store
                .put(&filler, doc! {"_id": format!("filler-{i}"), "pad": &pad})
                .await
                .unwrap();
        }
        panic!("the oplog did not roll over past {time:?} after 200 MB of writes");
    }
}

/// Held by each small-oplog check for its whole run: one that rolls the oplog over
/// would otherwise roll another's fresh position off before it is read.
static SMALL_OPLOG: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Each check a test of its own, `group::check`, in a fresh database: the history
/// group's on the small-oplog replica set, one at a time, the others' on the shared one.
macro_rules! on_mongo {
    (history; $($check:ident),* $(,)?) => {
        on_mongo!(@group history, live_small_oplog, true; $($check),*);
    };
    ($group:ident; $($check:ident),* $(,)?) => {
        on_mongo!(@group $group, live, false; $($check),*);
    };
    (@group $group:ident, $with:ident, $small:expr; $($check:ident),*) => {
        mod $group {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    let _alone = if $small { Some(SMALL_OPLOG.lock().await) } else { None };
                    $with(stringify!($check), |live| async move {
                        let harness = MongoHarness { live, small_oplog: $small };
                        crate::checks::$group::$check(&harness).await;
                    })
                    .await;
                }
            )*
        }
    };
}

contract::checks!(on_mongo;
    leases, membership, operator, documents, feed, expanded, history,
    invalidation, partitions, capped, checkpoints, increments,
);

/// The contract's groups, and beside them the demo's member writes: not a store port,
/// held to the same checks on both stores.
mod checks {
    pub use streamward::contract::*;
    pub use streamward::demo::member_writes_checks as member_writes;
}

streamward::demo::member_writes_checks::checks!(on_mongo);

/// Not part of the contract (the sandbox's clock is virtual on purpose): on a real
/// server, `server_now` is the server's wall clock, which on one machine is ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_now_is_the_servers_wall_clock() {
    live("server_now_wall_clock", |live| async move {
        use streamward::store::LeaseStore;
        let skew = live.store.server_now().await.unwrap() - chrono::Utc::now();
        assert!(
            skew.num_seconds().abs() < 60,
            "server clock {skew} away from ours"
        );
    })
    .await;
}
