//! A fresh database on the replica set named by `STREAMWARD_TEST_URI`, for the live suites.
// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use std::future::Future;

use streamward::model::ClusterTime;
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{ChangeEvent, Namespace};

/// Where the live suites find their servers (set by `scripts/test.sh`).
pub const URI_VAR: &str = "STREAMWARD_TEST_URI";
/// A replica set with a 1 MB oplog, for history that really falls off.
pub const SMALL_OPLOG_URI_VAR: &str = "STREAMWARD_TEST_URI_SMALL_OPLOG";

/// Whether a test that lacks what it needs must fail rather than skip: under CI
/// (`CI=true`) or `scripts/test.sh` (`STREAMWARD_REQUIRE_LIVE=1`).
pub fn skipping_is_forbidden() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("STREAMWARD_REQUIRE_LIVE").is_ok_and(|v| v == "1")
}

/// The URI in `var`, or `None` after saying the test is skipped. Where a skip would
/// prove nothing (`CI=true`, or `STREAMWARD_REQUIRE_LIVE=1` from `scripts/test.sh`) a
/// missing URI fails the test instead.
pub fn live_uri(test: &str, var: &str) -> Option<String> {
    if let Ok(uri) = std::env::var(var) {
        return Some(uri);
    }
    assert!(
        !skipping_is_forbidden(),
        "{test}: {var} is not set, and a live test may not skip here (CI or STREAMWARD_REQUIRE_LIVE): run scripts/test.sh"
    );
    eprintln!("{test} skipped: {var} is not set (run scripts/test.sh for the live suites)");
    None
}

/// A connected store whose leases live in the test's own database.
#[derive(Clone)]
pub struct LiveDb {
    pub store: MongoStore,
    pub db: String,
    /// The replica set's URI, for running the binary against it.
    pub uri: String,
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
    live_on(URI_VAR, test, body).await
}

/// Like [`live`], on the replica set whose oplog holds about 1 MB.
pub async fn live_small_oplog<F, Fut>(test: &str, body: F)
where
    F: FnOnce(LiveDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    live_on(SMALL_OPLOG_URI_VAR, test, body).await
}

async fn live_on<F, Fut>(var: &str, test: &str, body: F)
where
    F: FnOnce(LiveDb) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(uri) = live_uri(test, var) else {
        return;
    };
    // Database names are at most 63 bytes.
    let name: String = test.chars().take(40).collect();
    let db = format!("sw_{name}_{:08x}", rand::random::<u32>());
    let mut settings = MongoSettings::new(uri.clone());
    settings.leases = Namespace::new(db.clone(), "leases");
    let store = MongoStore::connect(settings)
        .await
        .expect("connect to the live replica set");
    let outcome = tokio::spawn(body(LiveDb {
        store: store.clone(),
        db: db.clone(),
        uri,
    }))
    .await;
    let dropped = store.client().database(&db).drop().await;
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
    dropped.expect("drop the test database");
}

/// The binary against `live`'s replica set, its leases in `live`'s database, acting as
/// `oncall@test`; no colour, no `STREAMWARD_URI` from the environment, a minute at most.
pub fn streamward(live: &LiveDb) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("streamward").expect("binary built");
    cmd.env("NO_COLOR", "1")
        .env_remove("STREAMWARD_URI")
        .current_dir(std::env::temp_dir())
        .args([
            "--uri",
            &live.uri,
            "--leases",
            &format!("{}.leases", live.db),
            "--operator",
            "oncall@test",
        ])
        .timeout(std::time::Duration::from_secs(60));
    cmd
}

/// Runs the binary off the async runtime; returns (exit code, stdout, stderr).
pub async fn run(mut cmd: assert_cmd::Command) -> (i32, String, String) {
    let output = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("command ran")
        .expect("binary started");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Inserts lease `resource` into `leases`, free and resuming at `at` (`resumeAt`, as a
/// rewind leaves it): a listener that acquires it reads from there.
pub async fn insert_lease_resuming_at(
    store: &MongoStore,
    leases: &Namespace,
    resource: &str,
    at: ClusterTime,
) {
    store
        .client()
        .database(&leases.db)
        .collection::<bson::Document>(&leases.coll)
        .insert_one(bson::doc! {
            "_id": resource,
            "listenerId": null,
            "expiresAt": null,
            "version": 0_i64,
            "kind": "update",
            "resumeToken": null,
            "resumeAt": bson::Timestamp::from(at),
        })
        .await
        .expect("insert the lease");
}

/// The `_data` of a MongoDB change's resume token.
pub fn token_data(event: &ChangeEvent) -> String {
    event
        .token
        .as_document()
        .get_str("_data")
        .expect("a MongoDB token")
        .to_string()
}
