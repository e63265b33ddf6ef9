//! The store contract (`tests/contract/mod.rs`) on a real replica set, one test per
//! check, each in its own database. Runs when `STREAMWARD_TEST_URI` (and, for history
//! loss, `STREAMWARD_TEST_URI_SMALL_OPLOG`) is set by `scripts/test.sh`; otherwise
//! each test says it is skipped (or fails where skipping is not allowed).

mod contract;
mod support;

use bson::{doc, Document};
use contract::Harness;
use streamward::model::ClusterTime;
use streamward::store::mongo::MongoStore;
use streamward::store::{ChangeFeed, DocumentStore, Namespace};
use support::live::{live, live_small_oplog, LiveDb};

struct Mongo {
    live: LiveDb,
}

impl Harness for Mongo {
    type Store = MongoStore;

    fn store(&self) -> &MongoStore {
        &self.live.store
    }

    fn ns(&self, coll: &str) -> Namespace {
        self.live.ns(coll)
    }

    /// Writes about 100 KB documents until the oplog's first entry has passed `time`
    /// (on the 1 MB oplog a few seconds, bounded by 200 MB of writes).
    async fn roll_history_past(&self, time: ClusterTime) {
        let store = &self.live.store;
        let filler = self.ns("filler");
        let pad = "x".repeat(100_000);
        for i in 0..2_000 {
            if store.oplog_window().await.expect("window").first > time {
                return;
            }
            store
                .put(&filler, doc! {"_id": format!("filler-{i}"), "pad": &pad})
                .await
                .expect("filler");
        }
        panic!("the oplog did not roll over past {time} after 200 MB of writes");
    }

    /// The oplog still begins with the replica set's initiation (`replSetInitiate`
    /// writes a no-op "initiating set" first), so nothing has fallen off.
    async fn history_never_rolled(&self) -> bool {
        let oplog = self
            .live
            .store
            .client()
            .database("local")
            .collection::<Document>("oplog.rs");
        let first = oplog
            .find_one(doc! {})
            .sort(doc! {"$natural": 1})
            .await
            .expect("read the oplog's first entry")
            .expect("an oplog entry");
        let msg = first
            .get_document("o")
            .ok()
            .and_then(|o| o.get_str("msg").ok());
        eprintln!("the oplog's first entry: {first}");
        msg == Some("initiating set")
    }
}

/// The small-oplog checks roll the shared 1 MB oplog over; one at a time, so one
/// check's rolling does not overwrite another's fresh positions mid-check.
static SMALL_OPLOG: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One `#[tokio::test]` per check, each on its own database of `$live`.
macro_rules! contract {
    ($live:ident => $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                $live(stringify!($check), |live| async move {
                    contract::$check(&Mongo { live }).await;
                })
                .await;
            }
        )*
    };
}

contract!(live =>
    acquire_inserts_a_new_lease_at_version_zero,
    a_refresh_keeps_version_and_acquired_at,
    a_lease_held_by_another_is_not_taken,
    racing_listeners_exactly_one_acquires,
    an_expired_lease_is_taken_over_with_the_next_version,
    a_bulk_lease_is_never_taken_by_an_update_listener,
    the_version_bumps_only_on_a_change_of_holder,
    expiry_is_measured_on_the_server_clock,
    tenure_writes_are_filtered_on_holder_and_version,
    the_token_survives_a_hand_over,
    a_lease_watch_sees_hand_overs,
    a_lease_fenced_upsert_refuses_older_versions,
    a_source_versioned_upsert_refuses_replays,
    a_fenced_upsert_refuses_an_id_in_its_fields,
    a_member_upsert_fences_each_member_and_recounts,
    change_events_carry_operation_key_and_document,
    streams_open_after_a_token_at_a_time_and_at_the_oldest_entry,
    an_idle_stream_returns_an_advancing_post_batch_token,
    the_oplog_window_and_cluster_time_follow_writes,
    count_changes_is_bounded_by_namespace_range_and_limit,
    a_start_before_a_history_that_never_rolled_is_not_lost,
    an_operator_update_applies_with_the_next_version_and_an_audit_record,
    an_operator_change_planned_on_an_old_version_writes_nothing,
    an_operator_swap_applies_without_an_audit_record,
);

/// The small-oplog set, one check at a time.
async fn small_oplog<F, Fut>(test: &str, body: F)
where
    F: FnOnce(LiveDb) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let _one_at_a_time = SMALL_OPLOG.lock().await;
    live_small_oplog(test, body).await;
}

contract!(small_oplog =>
    history_that_fell_off_is_lost_on_open,
    history_lost_under_a_paused_stream_is_reported_on_the_next_read,
);
