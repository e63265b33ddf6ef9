//! The store contract: what the engine, the operator actions and the console rely on
//! from the store ports, written once as plain `async fn` checks generic over a
//! [`Harness`], so that every store is held to the same checks. The sandbox and
//! `MongoStore` run them (`tests/contract_sandbox.rs`, `tests/contract_mongo.rs`); a
//! new store is correct when it passes them too. Behind the `contract` feature.
//!
//! Every check observes through the ports only (what `get`, `find_one`, a change
//! stream or the audit log say), never through what the store recorded about itself.
//! Times are the store's own server clock (`server_now`, `cluster_time`), so a store
//! that used the client's clock where the server's is due would fail. Where the
//! sandbox and MongoDB disagreed, MongoDB's behaviour is what these checks hold.
//!
//! The checks come in groups, one module per port or capability; each check is a
//! `pub async fn(&impl Harness)` whose bounds name the ports it needs, so a store that
//! does not offer a capability (capped collections, checkpoints, the two-step
//! increment, the demo's member writes) simply does not run that group:
//!
//! | group | ports | what it holds |
//! |---|---|---|
//! | [`leases`] | `LeaseStore` (and `OperatorStore` + `AuditLog` for one) | acquire, refresh and take-over rules and their versions, commit/renew/release filters, failures, server-clock expiry, the lease watch |
//! | [`membership`] | `MembershipStore` | announce, expiry and leave of a fleet's processes |
//! | [`operator`] | `OperatorStore`, `AuditLog`, `DocumentStore` | the compare-and-swap, the audit log, skipped changes |
//! | [`documents`] | `DocumentStore`, `ChangeFeed` | both fenced-write patterns, plain writes and deletes |
//! | [`feed`] | `ChangeFeed`, `DocumentStore` (`OperatorStore` for change counts) | events, post-images, transactions, opening by token, time and oldest entry, post-batch tokens, the oplog window, change counts |
//! | [`expanded`] | `ChangeFeed` + [`DataDefinition`] | expanded events and the server's codes for data definition |
//! | [`history`] | `ChangeFeed` + [`RollingHistory`] | history lost on open and mid-stream |
//! | [`invalidation`] | `ChangeFeed`, `DocumentStore` | drop, rename, rename onto and dropDatabase end a stream |
//! | [`partitions`] | `ChangeFeed`, `DocumentStore` | a partition's stream holds the changes its hash names |
//! | [`capped`] | `CappedFeed` (`DocumentStore` for a plain collection) | capped collections: create, append, window, tail, counts |
//! | [`checkpoints`] | `CheckpointStore` | the checkpoint history of a resource |
//! | [`increments`] | `IncrementStore`, `DocumentStore` | the two steps of the idempotent increment and the fold |
//!
//! [`checks!`] lists every check of the groups it is given, so that each becomes a
//! test of its own, named `group::check`: a failure names the check, and its message
//! says what differed.
//!
//! # Running the contract on another store
//!
//! With `streamward = { …, features = ["contract"] }` among the dev-dependencies,
//! implement [`Harness`] (a fresh one per check: a store, or a database of its own on a
//! shared server) and turn the groups the store offers into tests. Here the sandbox
//! stands in for the store under test:
//!
//! ```
//! use streamward::contract::{self, Harness};
//! use streamward::model::Lease;
//! use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore as MyStore};
//! use streamward::store::{LeaseStore, Namespace};
//!
//! struct MyHarness {
//!     store: MyStore,
//! }
//!
//! impl MyHarness {
//!     fn new() -> Self {
//!         let store = MyStore::new(SandboxConfig::default(), Clock::System);
//!         MyHarness { store }
//!     }
//! }
//!
//! impl Harness for MyHarness {
//!     type Store = MyStore;
//!
//!     fn store(&self) -> &MyStore {
//!         &self.store
//!     }
//!
//!     fn ns(&self, coll: &str) -> Namespace {
//!         Namespace::new("contract", coll)
//!     }
//!
//!     async fn set_version_by_hand(&self, resource: &str, version: i64) {
//!         // However the store lets a lease be written outside the ports.
//!         let found = self.store.get(resource).await.expect("read the lease");
//!         let mut lease = found.unwrap_or_else(|| Lease::vacant(resource));
//!         lease.version = version;
//!         self.store.put_lease_by_hand(lease);
//!     }
//! }
//!
//! // One `#[tokio::test]` per check, named `leases::acquire_inserts_…` and so on.
//! macro_rules! on_my_store {
//!     ($group:ident; $($check:ident),* $(,)?) => {
//!         mod $group {
//!             $(
//!                 #[tokio::test]
//!                 async fn $check() {
//!                     streamward::contract::$group::$check(&super::MyHarness::new()).await;
//!                 }
//!             )*
//!         }
//!     };
//! }
//!
//! // The groups this store offers: here no checkpoints, and no demo member writes.
//! contract::checks!(on_my_store;
//!     leases, membership, operator, documents, feed, invalidation, partitions, capped,
//!     increments,
//! );
//!
//! // A check is a plain async fn, and can be called on its own too.
//! # fn main() {
//! let runtime = tokio::runtime::Runtime::new().expect("a runtime");
//! runtime.block_on(contract::leases::a_live_lease_is_held_by_other(&MyHarness::new()));
//! # }
//! ```
//!
//! Groups that need more of the harness ask for it by a trait of their own:
//! [`expanded`] runs data definition commands ([`DataDefinition`]), [`history`] needs
//! a history that rolls over within a test ([`RollingHistory`]).

// A test suite shipped for tests: a check that fails panics, as a test does. The
// library's rule against unwrapping stops at this module.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod audited;
mod harness;
mod support;

pub mod capped;
pub mod checkpoints;
pub mod documents;
pub mod expanded;
pub mod feed;
pub mod history;
pub mod increments;
pub mod invalidation;
pub mod leases;
pub mod membership;
pub mod operator;
pub mod partitions;

pub use harness::{DataDefinition, Ddl, Harness, RollingHistory};
// For the demo's own checks of its member writes (`demo::member_writes_checks`).
#[cfg(feature = "console")]
pub(crate) use feed::assert_made_at_its_cluster_time;
#[cfg(feature = "console")]
pub(crate) use support::{options, read_through};

/// Calls `$run!(group; check, …)` once for each group named, with every check of that
/// group: `checks!(on_my_store; leases, feed)`. `$run` is a `macro_rules!` of the
/// caller's that turns the names into tests (see the [module](self) example); the
/// groups are the modules of [`contract`](self). A check is listed here once, so a
/// store that runs a group runs all of it.
#[doc(hidden)]
#[macro_export]
macro_rules! __contract_checks {
    (@group $run:ident leases) => {
        $run!(leases;
            acquire_inserts_a_new_lease_at_version_zero,
            a_refresh_keeps_the_version_and_acquired_at,
            a_live_lease_is_held_by_other,
            an_acquire_that_saw_the_lease_never_creates_it,
            an_acquire_never_bumps_the_version_past_the_largest,
            racing_inserts_leave_exactly_one_holder,
            an_expired_lease_is_taken_over_with_the_next_version,
            a_released_lease_starts_a_new_tenure_even_for_the_same_listener,
            a_bulk_lease_is_never_taken_by_an_update_listener,
            a_bulk_request_refreshes_or_takes_by_the_same_rules,
            the_version_moves_only_with_the_holder,
            tenure_writes_match_only_resource_listener_and_version,
            commit_renew_and_release_change_only_their_fields,
            the_token_survives_a_hand_over,
            a_failure_is_recorded_by_the_holder_and_removed_past_its_change,
            expiry_is_computed_on_the_server_clock,
            get_and_list_read_what_is_stored,
            the_lease_watch_sees_each_change_of_its_lease,
        );
    };
    (@group $run:ident membership) => {
        $run!(membership;
            announce_joins_then_renews_on_the_server_clock,
            an_expired_member_is_not_live_and_rejoins_with_a_new_start,
            leaving_removes_only_the_own_document_and_twice_is_harmless,
        );
    };
    (@group $run:ident operator) => {
        $run!(operator;
            an_operator_change_applies_with_the_next_version_then_its_audit,
            operator_swap_applies_without_an_audit_record,
            a_changed_lease_makes_operator_writes_write_nothing,
            the_audit_log_is_newest_first_and_limited,
            an_audit_record_is_pending_then_gains_steps_then_is_finalized_once,
            skipped_changes_are_kept_one_per_audit_id_and_token,
        );
    };
    (@group $run:ident documents) => {
        $run!(documents;
            lease_fenced_writes_admit_the_same_or_a_newer_version,
            source_versioned_writes_admit_only_a_newer_version,
            fences_stored_by_other_clients_compare_like_mongodb,
            fenced_upsert_refuses_an_id_among_the_fields,
            plain_writes_replace_whole_documents_and_read_in_id_order,
            deletes_remove_by_id_or_by_field_each_a_delete_change,
        );
    };
    (@group $run:ident feed) => {
        $run!(feed;
            events_carry_operation_namespace_key_and_document,
            update_events_carry_the_document_as_it_is_when_read,
            a_stream_without_post_images_gets_none_for_an_update,
            a_write_that_changes_nothing_is_not_a_change,
            a_transactions_changes_come_together_with_its_identity,
            opening_after_a_token_resumes_after_its_event,
            opening_at_a_time_includes_it,
            opening_at_the_oldest_entry_replays_everything_since,
            an_idle_stream_still_advances_its_resume_token,
            a_start_before_a_history_that_never_rolled_over_is_not_lost,
            the_oplog_window_and_cluster_time_follow_writes,
            count_changes_counts_the_namespace_in_an_inclusive_range_up_to_a_limit,
        );
    };
    (@group $run:ident expanded) => {
        $run!(expanded;
            expanded_events_carry_the_data_definition_of_the_collection,
            expanded_events_show_a_collection_created_by_its_first_write,
            expanded_events_still_end_at_a_drop_or_rename_of_the_collection,
            data_definition_fails_with_the_servers_codes_and_logs_nothing,
        );
    };
    (@group $run:ident history) => {
        $run!(history;
            a_resume_point_that_fell_off_is_lost_on_open,
            a_stream_whose_position_fell_off_is_lost_on_its_next_read,
            the_first_entry_of_a_rolled_history_can_be_opened,
        );
    };
    (@group $run:ident invalidation) => {
        $run!(invalidation;
            drop_ends_the_stream_after_the_changes_before_it,
            renames_away_and_onto_end_the_stream,
            drop_database_ends_a_collection_stream_with_its_drop,
        );
    };
    (@group $run:ident partitions) => {
        $run!(partitions;
            each_change_reaches_the_partition_its_hash_names_and_a_drop_reaches_all,
        );
    };
    (@group $run:ident capped) => {
        $run!(capped;
            entries_appended_through_the_port_are_tailed,
            ensure_capped_keeps_an_existing_capped_collection,
            a_plain_collection_is_neither_made_capped_nor_tailed,
            a_tail_resumes_after_its_entry_in_insertion_order,
            a_tail_after_an_overwritten_entry_is_history_lost,
            an_empty_collection_is_tailed_until_entries_come,
            count_entries_counts_by_span_up_to_a_limit,
        );
    };
    (@group $run:ident checkpoints) => {
        $run!(checkpoints;
            the_newest_kept_are_listed_newest_first,
            a_late_checkpoint_of_an_ex_holder_sorts_below,
        );
    };
    (@group $run:ident increments) => {
        $run!(increments;
            each_step_sent_again_changes_nothing,
            only_the_last_remembered_tokens_are_kept,
            a_counter_of_another_type_is_refused_and_left_alone,
            a_token_out_of_bounds_is_refused_before_anything_is_written,
            pending_increments_are_read_by_id_and_a_malformed_field_is_named,
            a_fold_of_a_document_changed_since_it_was_read_counts_nothing_twice,
        );
    };
    (@group $run:ident $unknown:ident) => {
        compile_error!(concat!("streamward::contract has no group `", stringify!($unknown), "`"));
    };
    ($run:ident; $($group:ident),+ $(,)?) => {
        $( $crate::__contract_checks!(@group $run $group); )+
    };
}

#[doc(inline)]
pub use crate::__contract_checks as checks;
