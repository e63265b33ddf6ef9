//! The store contract (`tests/contract/mod.rs`) on the sandbox, on the system clock
//! like a real server's, one test per check.

mod contract;

use bson::doc;
use contract::Harness;
use streamward::model::ClusterTime;
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{ChangeFeed, DocumentStore, Namespace};

struct Sandbox {
    store: SandboxStore,
}

impl Sandbox {
    fn with_capacity(log_capacity: usize) -> Self {
        let config = SandboxConfig {
            log_capacity,
            ..SandboxConfig::default()
        };
        Self {
            store: SandboxStore::new(config, Clock::System),
        }
    }
}

impl Harness for Sandbox {
    type Store = SandboxStore;

    fn store(&self) -> &SandboxStore {
        &self.store
    }

    fn ns(&self, coll: &str) -> Namespace {
        Namespace::new("contract", coll)
    }

    /// Fills the capacity-bounded change log until its first entry is past `time`.
    async fn roll_history_past(&self, time: ClusterTime) {
        let filler = self.ns("filler");
        for i in 0..100_000 {
            if self.store.oplog_window().await.expect("window").first > time {
                return;
            }
            self.store
                .put(&filler, doc! {"_id": i})
                .await
                .expect("filler");
        }
        panic!("the change log did not roll past {time}");
    }

    async fn history_never_rolled(&self) -> bool {
        !self.store.has_dropped_history()
    }
}

/// One `#[tokio::test]` per check, on a fresh sandbox holding `capacity` changes.
macro_rules! contract {
    ($capacity:expr => $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                contract::$check(&Sandbox::with_capacity($capacity)).await;
            }
        )*
    };
}

contract!(100_000 =>
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

// A change log of 20 entries: history falls off after a few writes.
contract!(20 =>
    history_that_fell_off_is_lost_on_open,
    history_lost_under_a_paused_stream_is_reported_on_the_next_read,
);
