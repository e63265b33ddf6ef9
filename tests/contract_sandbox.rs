//! The store contract (`tests/contract/`) on the sandbox store, on a virtual clock
//! whose epoch is years away from the machine's, so that any time a store took from
//! the client's clock instead of its own server clock would show.

mod contract;

use bson::doc;
use chrono::{TimeZone, Utc};
use contract::Harness;
use streamward::model::ClusterTime;
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{ChangeFeed, DocumentStore, Namespace};

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

macro_rules! on_the_sandbox {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test(start_paused = true)]
            async fn $check() {
                contract::$check(&SandboxHarness::new()).await;
            }
        )*
    };
}

on_the_sandbox!(
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
    // history lost
    a_resume_point_that_fell_off_is_lost_on_open,
    a_stream_whose_position_fell_off_is_lost_on_its_next_read,
    the_first_entry_of_a_rolled_history_can_be_opened,
);
