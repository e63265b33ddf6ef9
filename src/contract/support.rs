//! What the checks share: requests, reads that panic saying what was expected, and
//! bounded waits.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::model::{Lease, LockKind};
use crate::store::{
    AcquireOutcome, AcquireRequest, ChangeEvent, ChangeStream, FeedOptions, LeaseStore, StoreError,
};

/// Bounds every wait of a check: generous for a real server on a busy 2-core machine.
pub(super) const PATIENCE: Duration = Duration::from_secs(30);

/// Options for streams the checks read: short waits, so polls stay cheap.
pub(crate) fn options() -> FeedOptions {
    FeedOptions {
        batch_size: 10,
        max_await: Duration::from_millis(200),
        ..Default::default()
    }
}

pub(super) fn request(
    resource: &str,
    listener: &str,
    kind: LockKind,
    lease: Duration,
) -> AcquireRequest {
    AcquireRequest {
        resource: resource.into(),
        listener: listener.into(),
        kind,
        lease,
        watch: None,
        seen_version: None,
    }
}

pub(super) fn update(resource: &str, listener: &str, lease: Duration) -> AcquireRequest {
    request(resource, listener, LockKind::Update, lease)
}

/// Acquires, or panics saying who was expected to.
pub(super) async fn acquired(store: &impl LeaseStore, request: &AcquireRequest) -> Lease {
    match store.acquire(request).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => lease,
        other => panic!(
            "{} expected to acquire {} ({:?}): {other:?}",
            request.listener, request.resource, request.kind
        ),
    }
}

pub(super) async fn lease_of(store: &impl LeaseStore, resource: &str) -> Lease {
    store
        .get(resource)
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("lease {resource} exists"))
}

pub(super) async fn server_now(store: &impl LeaseStore) -> DateTime<Utc> {
    store.server_now().await.expect("server_now")
}

/// `at + d`, for expected expiry times.
pub(super) fn plus(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    at + TimeDelta::from_std(d).expect("a short duration")
}

/// Asserts `before <= t <= after` on the server's clock.
pub(super) fn assert_between(
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
pub(super) async fn wait_until_server_passes(store: &impl LeaseStore, t: DateTime<Utc>) {
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
pub(super) async fn read_until(
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
pub(crate) async fn read_through(stream: &mut impl ChangeStream, id: &str) -> Vec<ChangeEvent> {
    read_until(stream, &format!("on {id}"), |e| {
        e.document_key.get_str("_id") == Ok(id)
    })
    .await
}

/// The `_id`s of `events`, in order (strings; other ids show as their debug form).
pub(super) fn ids(events: &[ChangeEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e.document_key.get("_id") {
            Some(bson::Bson::String(s)) => s.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

pub(super) fn is_history_lost(result: &Result<impl Sized, StoreError>) -> bool {
    matches!(result, Err(StoreError::HistoryLost { .. }))
}
