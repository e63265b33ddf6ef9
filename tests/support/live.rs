//! A fresh database on the replica set named by `STREAMWARD_TEST_URI`, for the live suites.
// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use std::future::Future;

use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::Namespace;

const SKIPPED: &str =
    "skipped: STREAMWARD_TEST_URI is not set (see README: scripts/mongo-replset.sh)";

/// A connected store whose leases live in the test's own database.
#[derive(Clone)]
pub struct LiveDb {
    pub store: MongoStore,
    pub db: String,
}

impl LiveDb {
    pub fn ns(&self, coll: &str) -> Namespace {
        Namespace::new(self.db.clone(), coll)
    }
}

/// Runs `body` against a fresh database and drops it afterwards, even when the body
/// panics; without `STREAMWARD_TEST_URI` prints why it is skipped and returns.
pub async fn live<F, Fut>(test: &str, body: F)
where
    F: FnOnce(LiveDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Ok(uri) = std::env::var("STREAMWARD_TEST_URI") else {
        eprintln!("{test} {SKIPPED}");
        return;
    };
    // Database names are at most 63 bytes.
    let name: String = test.chars().take(40).collect();
    let db = format!("sw_{name}_{:08x}", rand::random::<u32>());
    let mut settings = MongoSettings::new(uri);
    settings.leases = Namespace::new(db.clone(), "leases");
    let store = MongoStore::connect(settings)
        .await
        .expect("connect to STREAMWARD_TEST_URI");
    let outcome = tokio::spawn(body(LiveDb {
        store: store.clone(),
        db: db.clone(),
    }))
    .await;
    let dropped = store.client().database(&db).drop().await;
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
    dropped.expect("drop the test database");
}
