//! The store contract: what the engine, the operator actions and the console rely on
//! from `LeaseStore`, `ChangeFeed` and `DocumentStore`, written once as plain `async fn`s
//! generic over a [`Harness`], and run on every store by its own test crate
//! (`contract_sandbox.rs`, `contract_mongo.rs`), one `#[tokio::test]` per check, so a
//! failure names the store. A new store is correct when it passes the same checks.
//!
//! Every check observes through the ports only (what `get`, `find_one`, a change
//! stream or the audit log say), never through what the store recorded about itself.
//! Times are the store's own server clock (`server_now`, `cluster_time`), so a store
//! that used the client's clock where the server's is due would fail. Where the
//! sandbox and MongoDB disagreed, MongoDB's behaviour is what these checks hold.

mod documents;
mod expanded;
mod feed;
mod history;
mod leases;
mod membership;
mod operator;

pub use documents::*;
pub use expanded::*;
pub use feed::*;
pub use history::*;
pub use leases::*;
pub use membership::*;
pub use operator::*;

/// Every check, listed once: `$run!(steady; …)` with the checks any store runs and
/// `$run!(rolling; …)` with those that need a history that rolls over. Each store's
/// test file turns the lists into tests.
macro_rules! every_check {
    ($run:ident) => {
        $run!(steady;
            // leases
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
            // membership
            announce_joins_then_renews_on_the_server_clock,
            an_expired_member_is_not_live_and_rejoins_with_a_new_start,
            leaving_removes_only_the_own_document_and_twice_is_harmless,
            // operator actions
            an_operator_change_applies_with_the_next_version_then_its_audit,
            operator_swap_applies_without_an_audit_record,
            a_changed_lease_makes_operator_writes_write_nothing,
            the_audit_log_is_newest_first_and_limited,
            an_audit_record_is_pending_then_gains_steps_then_is_finalized_once,
            skipped_changes_are_kept_one_per_audit_id_and_token,
            // documents
            lease_fenced_writes_admit_the_same_or_a_newer_version,
            source_versioned_writes_admit_only_a_newer_version,
            fences_stored_by_other_clients_compare_like_mongodb,
            member_upserts_fence_each_member_and_recount,
            fenced_upsert_refuses_an_id_among_the_fields,
            plain_writes_replace_whole_documents_and_read_in_id_order,
            deletes_remove_by_id_or_by_field_each_a_delete_change,
            // change feed
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
            // expanded events
            expanded_events_carry_the_data_definition_of_the_collection,
            expanded_events_show_a_collection_created_by_its_first_write,
            expanded_events_still_end_at_a_drop_or_rename_of_the_collection,
            data_definition_fails_with_the_servers_codes_and_logs_nothing,
        );
        $run!(rolling;
            a_resume_point_that_fell_off_is_lost_on_open,
            a_stream_whose_position_fell_off_is_lost_on_its_next_read,
            the_first_entry_of_a_rolled_history_can_be_opened,
        );
    };
}
pub(crate) use every_check;

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use streamward::demo::FencedMemberWrites;
use streamward::model::{ClusterTime, Lease, LockKind};
use streamward::store::{
    AcquireOutcome, AcquireRequest, ChangeEvent, ChangeStream, FeedOptions, LeaseStore, Namespace,
    Store, StoreError,
};
use streamward::store::{CappedFeed, CheckpointStore, DocumentStore, MembershipStore, OpsStore};

/// What a check needs from the store under test besides its ports.
pub trait Harness: Send + Sync + 'static {
    type Store: Store
        + DocumentStore
        + FencedMemberWrites
        + OpsStore
        + MembershipStore
        + CappedFeed
        + CheckpointStore;

    fn store(&self) -> &Self::Store;

    /// A collection of this check's own (a fresh database on a real server).
    fn ns(&self, coll: &str) -> Namespace;

    /// Writes elsewhere until every history entry at or before `time` has fallen off
    /// (the oplog, or the sandbox's change log, rolled over past it). Only harnesses
    /// whose history can roll implement it; the history-lost checks run on those.
    fn roll_history_past(&self, time: ClusterTime) -> impl Future<Output = ()> + Send;

    /// Sets the stored lease `resource`'s version by hand (as an operator's
    /// `updateOne` outside streamward would), creating it expired and unheld if missing.
    fn set_version_by_hand(&self, resource: &str, version: i64) -> impl Future<Output = ()> + Send;

    /// Runs a data definition command on `ns`; `Err` is the server's error code.
    fn ddl(&self, ns: &Namespace, command: Ddl) -> impl Future<Output = Result<(), i32>> + Send;
}

/// Bounds every wait of a check: generous for a real server on a busy 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Options for streams the checks read: short waits, so polls stay cheap.
pub fn options() -> FeedOptions {
    FeedOptions {
        batch_size: 10,
        max_await: Duration::from_millis(200),
        ..Default::default()
    }
}

pub fn request(resource: &str, listener: &str, kind: LockKind, lease: Duration) -> AcquireRequest {
    AcquireRequest {
        resource: resource.into(),
        listener: listener.into(),
        kind,
        lease,
        watch: None,
        seen_version: None,
    }
}

pub fn update(resource: &str, listener: &str, lease: Duration) -> AcquireRequest {
    request(resource, listener, LockKind::Update, lease)
}

/// Acquires, or panics saying who was expected to.
pub async fn acquired(store: &impl LeaseStore, request: &AcquireRequest) -> Lease {
    match store.acquire(request).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => lease,
        other => panic!(
            "{} expected to acquire {} ({:?}): {other:?}",
            request.listener, request.resource, request.kind
        ),
    }
}

pub async fn lease_of(store: &impl LeaseStore, resource: &str) -> Lease {
    store
        .get(resource)
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("lease {resource} exists"))
}

pub async fn server_now(store: &impl LeaseStore) -> DateTime<Utc> {
    store.server_now().await.expect("server_now")
}

/// `at + d`, for expected expiry times.
pub fn plus(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    at + TimeDelta::from_std(d).expect("a short duration")
}

/// Asserts `before <= t <= after` on the server's clock.
pub fn assert_between(
    what: &str,
    t: Option<DateTime<Utc>>,
    before: DateTime<Utc>,
    after: DateTime<Utc>,
) {
    let t = t.unwrap_or_else(|| panic!("{what} is set"));
    assert!(
        before <= t && t <= after,
        "{what} = {t} is not between the server times {before} and {after} read around the write"
    );
}

/// Polls the server's clock until it is past `t`: how long a lease really lasts.
pub async fn wait_until_server_passes(store: &impl LeaseStore, t: DateTime<Utc>) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while server_now(store).await <= t {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server clock did not pass {t} within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Reads batches until `done` holds for an event, returning every event read, in order.
pub async fn read_until(
    stream: &mut impl ChangeStream,
    what: &str,
    mut done: impl FnMut(&ChangeEvent) -> bool,
) -> Vec<ChangeEvent> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    loop {
        let batch = stream.next_batch().await.expect("next_batch");
        assert!(
            batch.resume_token.is_some(),
            "every batch carries a resume token"
        );
        // The whole batch is kept, also what follows the event waited for.
        let mut found = false;
        for event in batch.events {
            found |= done(&event);
            seen.push(event);
        }
        if found {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no event {what} within {PATIENCE:?}; read {seen:?}"
        );
    }
}

/// Reads until the event on document `id` arrives.
pub async fn read_through(stream: &mut impl ChangeStream, id: &str) -> Vec<ChangeEvent> {
    read_until(stream, &format!("on {id}"), |e| {
        e.document_key.get_str("_id") == Ok(id)
    })
    .await
}

/// The `_id`s of `events`, in order (strings; other ids show as their debug form).
pub fn ids(events: &[ChangeEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e.document_key.get("_id") {
            Some(bson::Bson::String(s)) => s.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

pub fn is_history_lost(result: &Result<impl Sized, StoreError>) -> bool {
    matches!(result, Err(StoreError::HistoryLost { .. }))
}
