//! Waiting for a condition in a test: one rule for how long and how often.

use std::future::Future;
use std::time::Duration;

/// Polls `check` on the (virtual or real) clock until it holds, or panics after
/// `limit` naming `what`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    poll(limit, what, Duration::from_millis(20), || {
        std::future::ready(check())
    })
    .await;
}

/// [`eventually`] for a condition that needs a store to check; polled less often,
/// as each check is a round trip.
pub async fn eventually_async<F, Fut>(limit: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    poll(limit, what, Duration::from_millis(50), check).await;
}

async fn poll<F, Fut>(limit: Duration, what: &str, every: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(every).await;
    }
}
