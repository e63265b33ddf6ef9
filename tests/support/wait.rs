//! Waiting for a condition in a test: one rule for how long and how often.

use std::future::Future;
use std::time::Duration;

/// How often a condition that needs a store (a round trip) is checked.
const STORE_CHECK_EVERY: Duration = Duration::from_millis(50);

/// Polls `check` on the (virtual or real) clock until it holds, or panics after
/// `limit` naming `what`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    poll(limit, what, Duration::from_millis(20), || {
        std::future::ready(check().then_some(()))
    })
    .await;
}

/// [`eventually`] for a condition that needs a store to check; polled less often,
/// as each check is a round trip.
pub async fn eventually_async<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    poll(limit, what, STORE_CHECK_EVERY, || {
        let holds = check();
        async { holds.await.then_some(()) }
    })
    .await;
}

/// [`eventually_async`] for a condition that finds a value: returns it.
pub async fn until<T, F, Fut>(limit: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll(limit, what, STORE_CHECK_EVERY, check).await
}

async fn poll<T, F, Fut>(limit: Duration, what: &str, every: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(every).await;
    }
}
