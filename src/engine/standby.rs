//! Standby: wait on the lease document (a change feed on it plus a timer at its
//! expiry) instead of polling, so a waiting listener costs a bounded number of
//! store calls however long it waits. A listener that cannot go on by itself (LOST,
//! INVALIDATED) waits the same way, for an operator to move its resume point.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::ListenerConfig;
use crate::model::{ChangeFailure, Lease, LockKind, ResumePoint};
use crate::store::{LeaseScope, LeaseStore, LeaseWatch, StoreResult};

pub enum Vacancy {
    /// The lease was released or expired (as far as we can tell): try to acquire.
    Maybe,
    /// The lease is back at `found`, below a version seen before: it was deleted and
    /// created anew, and its fencing version went back.
    WentBack {
        found: i64,
    },
    Shutdown,
}

/// Maps server times onto the local monotonic clock, from one reading of the server's clock.
struct ServerClock {
    server: DateTime<Utc>,
    local: Instant,
}

impl ServerClock {
    fn local_instant(&self, server_time: DateTime<Utc>) -> Instant {
        match (server_time - self.server).to_std() {
            Ok(ahead) => self.local + ahead,
            Err(_) => self.local, // already in the past
        }
    }
}

/// When to try again for `lease`, or `None` to wait for a change only.
fn retry_at(
    lease: Option<&Lease>,
    config: &ListenerConfig,
    clock: &ServerClock,
) -> Option<Instant> {
    let floor = Instant::now() + min_retry_gap(config);
    let Some(lease) = lease else {
        return Some(floor);
    };
    // An incremental listener can never take a bulk lease, expired or not: only the
    // rebuild or an operator gives it back, and that arrives as a change.
    if lease.kind == LockKind::Bulk && config.kind == LockKind::Update {
        return None;
    }
    // An operator handed it to us by name (`takeover --to`): claim it now.
    if lease.holder.as_deref() == Some(config.listener_id.as_str()) {
        return Some(floor);
    }
    let expiry = match (&lease.holder, lease.expires_at) {
        (Some(_), Some(expires_at)) => clock.local_instant(expires_at),
        _ => Instant::now(),
    };
    Some(expiry.max(floor))
}

/// A small gap between attempts, so clock skew between us and the server cannot cause a spin.
fn min_retry_gap(config: &ListenerConfig) -> Duration {
    (config.lease / 20).max(Duration::from_millis(10))
}

/// Notes `version` of the lease as seen (the highest one is kept); `Err(version)`
/// when it is below one seen before: the lease was deleted and created anew.
pub fn note_version(seen: &mut Option<i64>, version: i64) -> Result<(), i64> {
    match *seen {
        Some(highest) if version < highest => Err(version),
        _ => {
            *seen = Some(seen.map_or(version, |h| h.max(version)));
            Ok(())
        }
    }
}

/// Waits until the lease may be free, noting every version of it read in `seen`.
/// Store calls: one watch, one read, one clock read.
pub async fn wait_for_vacancy<S: LeaseStore>(
    store: &S,
    config: &ListenerConfig,
    seen: &mut Option<i64>,
    shutdown: &CancellationToken,
) -> StoreResult<Vacancy> {
    let mut watch = store
        .watch(LeaseScope::One(config.resource.clone()))
        .await?;
    let lease = store.get(&config.resource).await?;
    let clock = ServerClock {
        server: store.server_now().await?,
        local: Instant::now(),
    };
    if let Some(Err(found)) = lease.as_ref().map(|l| note_version(seen, l.version)) {
        return Ok(Vacancy::WentBack { found });
    }
    let mut deadline = retry_at(lease.as_ref(), config, &clock);
    loop {
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(Vacancy::Shutdown),
            change = watch.changed() => {
                let lease = change?.readable_lease()?;
                if let Some(Err(found)) = lease.as_ref().map(|l| note_version(seen, l.version)) {
                    return Ok(Vacancy::WentBack { found });
                }
                deadline = retry_at(lease.as_ref(), config, &clock);
                if deadline.is_some_and(|d| d <= Instant::now() + min_retry_gap(config)) {
                    return Ok(Vacancy::Maybe);
                }
            }
            () = sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => return Ok(Vacancy::Maybe),
        }
    }
}

pub enum Recovery {
    /// An operator moved the resume point: try to acquire and start from it.
    Moved,
    Shutdown,
}

/// Whether an operator has decided where a stuck listener goes on: the lease's resume
/// point is no longer `stuck_at`, or, for a closed stream (`invalidated`), the lease's
/// `invalidated` record is gone (every action that moves a resume point clears it, also
/// one that sets the same point again). A lease that is gone ends the wait too: the
/// acquire that follows finds it vanished and the listener stops (it never creates a
/// lease it has seen).
pub fn operator_moved(lease: Option<&Lease>, stuck_at: &ResumePoint, invalidated: bool) -> bool {
    match lease {
        None => true,
        Some(lease) => {
            lease.resume_point() != *stuck_at || (invalidated && lease.invalidated.is_none())
        }
    }
}

/// Whether `lease` still records `failure`'s change as failing: until another listener
/// gets past it or an operator skips or moves it.
pub fn still_failing(lease: Option<&Lease>, failure: &ChangeFailure) -> bool {
    lease
        .and_then(|lease| lease.failure.as_ref())
        .is_some_and(|recorded| recorded.same_change(failure))
}

/// Waits until `done` says so of the lease of `resource` (or of its absence), or until
/// `deadline`, which also counts as done. Store calls: one watch, one read, then nothing
/// until the lease changes. Waiting for an operator to move a stuck resume point passes
/// [`operator_moved`] and no deadline; waiting out a failed change's back-off passes
/// "no longer [`still_failing`]" and the back-off's end, so a listener never waits on a
/// change the lease has moved past (it would say FAILING of a lease that is not).
pub async fn wait_on_lease<S: LeaseStore>(
    store: &S,
    resource: &str,
    deadline: Option<Instant>,
    shutdown: &CancellationToken,
    done: impl Fn(Option<&Lease>) -> bool,
) -> StoreResult<Recovery> {
    // Watch first, then read: a change between the two is seen either way.
    let mut watch = store.watch(LeaseScope::One(resource.to_string())).await?;
    if done(store.get(resource).await?.as_ref()) {
        return Ok(Recovery::Moved);
    }
    let far = Instant::now() + Duration::from_secs(3600);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(Recovery::Shutdown),
            change = watch.changed() => {
                if done(change?.readable_lease()?.as_ref()) {
                    return Ok(Recovery::Moved);
                }
            }
            () = sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => return Ok(Recovery::Moved),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterTime, Invalidation, ResumeToken, TokenKind};

    #[test]
    fn a_malformed_lease_is_an_error_not_a_vacancy_or_a_go_ahead() {
        let malformed = crate::store::LeaseChange {
            resource: "r".into(),
            lease: None,
            malformed: Some(crate::store::MalformedDocument {
                id: Some("r".into()),
                problem: "field version: expected an integer, found string".into(),
            }),
        };
        let error = malformed.readable_lease().unwrap_err();
        assert!(error.to_string().contains("field version"), "{error}");
        let deleted = crate::store::LeaseChange {
            resource: "r".into(),
            lease: None,
            malformed: None,
        };
        assert_eq!(deleted.readable_lease().unwrap(), None);
    }

    #[test]
    fn only_a_moved_resume_point_or_a_cleared_record_wakes_a_stuck_listener() {
        let token = ResumeToken::encode(ClusterTime::new(100, 1), TokenKind::Event, 1);
        let stuck_at = ResumePoint::Token(token.clone());
        let mut lease = Lease::vacant("r");
        lease.resume_token = Some(token);
        lease.invalidated = Some(Invalidation {
            at: Some(ClusterTime::new(100, 2)),
            reason: "db.c was dropped".into(),
        });
        // Holders coming and going, takeovers: the point stays, so it keeps waiting.
        lease.holder = Some("b".into());
        lease.version = 9;
        assert!(!operator_moved(Some(&lease), &stuck_at, true));
        assert!(!operator_moved(Some(&lease), &stuck_at, false));
        // A reset that sets the very same point still clears the record.
        let mut cleared = lease.clone();
        cleared.invalidated = None;
        assert!(operator_moved(Some(&cleared), &stuck_at, true));
        assert!(
            !operator_moved(Some(&cleared), &stuck_at, false),
            "history lost waits for the point itself to move"
        );
        let mut rewound = lease.clone();
        rewound.resume_token = None;
        rewound.resume_at = Some(ClusterTime::new(50, 1));
        assert!(operator_moved(Some(&rewound), &stuck_at, false));
        assert!(operator_moved(None, &stuck_at, false));
    }

    #[test]
    fn a_failure_waits_until_the_lease_no_longer_records_that_change() {
        let token =
            |n: u32| ResumeToken::encode(ClusterTime::new(100, n), TokenKind::Event, u64::from(n));
        let failure = |n| {
            crate::model::ChangeFailure::first(
                Some(token(n)),
                Some(ClusterTime::new(100, n)),
                "shop.orders",
                "insert",
                "{\"_id\":1}",
                "boom",
                crate::model::FailureCause::Handler,
                chrono::Utc::now(),
            )
        };
        let mut lease = Lease::vacant("r");
        lease.failure = Some(failure(1));
        assert!(still_failing(Some(&lease), &failure(1)));
        let mut again = lease.clone();
        again.failure = Some(failure(1).after(Some(&failure(1))));
        assert!(still_failing(Some(&again), &failure(1)), "one more attempt");
        let mut other = lease.clone();
        other.failure = Some(failure(2));
        assert!(
            !still_failing(Some(&other), &failure(1)),
            "a later change fails"
        );
        let mut passed = lease.clone();
        passed.failure = None;
        assert!(!still_failing(Some(&passed), &failure(1)), "got past it");
        assert!(!still_failing(None, &failure(1)));
    }
}
