//! The store contract (`tests/contract/`) on `MongoStore` against a real replica set:
//! `STREAMWARD_TEST_URI` for every check, and `STREAMWARD_TEST_URI_SMALL_OPLOG` (a 1 MB
//! oplog that really rolls over) for the history-lost ones. Each check runs in a fresh
//! database (leases and audit in it too) that is dropped afterwards. Without the
//! variables each test says it is skipped (and fails under `scripts/test.sh` or CI).

mod contract;
mod support;

use bson::doc;
use contract::Harness;
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

macro_rules! on_mongo {
    ($with:ident, $small:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let _alone = if $small { Some(SMALL_OPLOG.lock().await) } else { None };
                $with(stringify!($check), |live| async move {
                    let harness = MongoHarness { live, small_oplog: $small };
                    contract::$check(&harness).await;
                })
                .await;
            }
        )*
    };
}

on_mongo!(live, false;
    // leases
    acquire_inserts_a_new_lease_at_version_zero,
    a_refresh_keeps_the_version_and_acquired_at,
    a_live_lease_is_held_by_other,
    racing_inserts_leave_exactly_one_holder,
    an_expired_lease_is_taken_over_with_the_next_version,
    a_released_lease_starts_a_new_tenure_even_for_the_same_listener,
    a_bulk_lease_is_never_taken_by_an_update_listener,
    a_bulk_request_refreshes_or_takes_by_the_same_rules,
    the_version_moves_only_with_the_holder,
    tenure_writes_match_only_resource_listener_and_version,
    commit_renew_and_release_change_only_their_fields,
    the_token_survives_a_hand_over,
    expiry_is_computed_on_the_server_clock,
    get_and_list_read_what_is_stored,
    the_lease_watch_sees_each_change_of_its_lease,
    // operator actions
    operator_update_applies_with_the_next_version_and_audits,
    operator_swap_applies_without_an_audit_record,
    a_changed_lease_makes_operator_writes_write_nothing,
    the_audit_log_is_newest_first_and_limited,
    // documents
    lease_fenced_writes_admit_the_same_or_a_newer_version,
    source_versioned_writes_admit_only_a_newer_version,
    fences_stored_by_other_clients_compare_like_mongodb,
    member_upserts_fence_each_member_and_recount,
    fenced_upsert_refuses_an_id_among_the_fields,
    plain_writes_replace_whole_documents_and_read_in_id_order,
    // change feed
    events_carry_operation_namespace_key_and_document,
    update_events_carry_the_document_as_it_is_when_read,
    a_write_that_changes_nothing_is_not_a_change,
    opening_after_a_token_resumes_after_its_event,
    opening_at_a_time_includes_it,
    opening_at_the_oldest_entry_replays_everything_since,
    an_idle_stream_still_advances_its_resume_token,
    a_start_before_a_history_that_never_rolled_over_is_not_lost,
    the_oplog_window_and_cluster_time_follow_writes,
    count_changes_counts_the_namespace_in_an_inclusive_range_up_to_a_limit,
);

on_mongo!(live_small_oplog, true;
    a_resume_point_that_fell_off_is_lost_on_open,
    a_stream_whose_position_fell_off_is_lost_on_its_next_read,
    the_first_entry_of_a_rolled_history_can_be_opened,
);

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
