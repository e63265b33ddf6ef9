//! How long a change stream's reads wait on the server. A getMore that waits for new
//! changes holds a pooled connection the whole time, so a process with more streams
//! than connections would queue its commits and renewals behind reads that are only
//! waiting (benches/fleet.rs: 100 resources on the default pool of 10 lost leases that
//! way). A store has a few await slots: a stream that gets one waits on the server as
//! before (a change reaches it at once); every other stream polls, with a getMore that
//! waits only [`POLL_AWAIT`] and, after an empty one, a pause on this side until the
//! stream's read wait has passed. Polling costs each idle stream one short getMore per
//! read wait, and a change up to one read wait of delay. (Capped tails always wait:
//! see `MongoTail::next_batch`.)

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, Instant};

/// How long a polling stream's getMore waits on the server.
pub(super) const POLL_AWAIT: Duration = Duration::from_millis(1);

/// The driver's default `maxPoolSize`.
const DRIVER_POOL: u32 = 10;

/// The streams of one store that may wait on the server at once: under half its pool,
/// so the lease stream, the lease writes and the polls always find a connection.
pub(super) fn await_slots(max_pool_size: Option<u32>) -> Arc<Semaphore> {
    let pool = max_pool_size.unwrap_or(DRIVER_POOL);
    let slots = (pool / 2).saturating_sub(1).max(1);
    Arc::new(Semaphore::new(slots as usize))
}

/// One stream's way of reading, chosen when it opens.
#[derive(Debug)]
pub(super) enum ReadPace {
    /// Holds an await slot: every getMore waits on the server up to the read wait.
    /// (The slot is given back when the stream is dropped.)
    Await(#[allow(dead_code)] OwnedSemaphorePermit),
    /// Short getMores, at most one per `every` while they come back empty.
    Poll {
        every: Duration,
        /// When the last empty read started, while the stream is idle.
        idle_since: Option<Instant>,
    },
}

impl ReadPace {
    /// An await slot if one is free, else polling; and the server-side wait of each
    /// getMore that goes with it.
    pub(super) fn choose(slots: &Arc<Semaphore>, read_wait: Duration) -> (Self, Duration) {
        match Arc::clone(slots).try_acquire_owned() {
            Ok(permit) => (Self::Await(permit), read_wait),
            Err(_) => (
                Self::Poll {
                    every: read_wait,
                    idle_since: None,
                },
                POLL_AWAIT.min(read_wait),
            ),
        }
    }

    /// Waits until the next read is due: at once, unless the stream polls and its last
    /// read came back empty less than its read wait ago.
    pub(super) async fn turn(&self) {
        if let Self::Poll {
            every,
            idle_since: Some(since),
        } = self
        {
            sleep_until(*since + *every).await;
        }
    }

    /// Notes a read that started at `started` and whether it brought anything.
    pub(super) fn record(&mut self, started: Instant, empty: bool) {
        if let Self::Poll { idle_since, .. } = self {
            *idle_since = empty.then_some(started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_half_the_pool_may_wait_on_the_server() {
        assert_eq!(await_slots(None).available_permits(), 4);
        assert_eq!(await_slots(Some(20)).available_permits(), 9);
        assert_eq!(await_slots(Some(2)).available_permits(), 1);
        assert_eq!(await_slots(Some(1)).available_permits(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn streams_past_the_slots_poll_once_per_read_wait_while_idle() {
        let slots = await_slots(Some(4));
        let wait = Duration::from_millis(500);
        let (first, first_wait) = ReadPace::choose(&slots, wait);
        assert!(
            matches!(first, ReadPace::Await(_)) && first_wait == wait,
            "the one slot"
        );
        let (mut second, second_wait) = ReadPace::choose(&slots, wait);
        assert!(matches!(second, ReadPace::Poll { .. }) && second_wait == POLL_AWAIT);

        let started = Instant::now();
        second.turn().await;
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the first read is due at once"
        );
        second.record(started, true);
        second.turn().await;
        assert_eq!(
            started.elapsed(),
            wait,
            "after an empty read, one read wait"
        );
        second.record(Instant::now(), false);
        let busy = Instant::now();
        second.turn().await;
        assert_eq!(
            busy.elapsed(),
            Duration::ZERO,
            "while changes come, no pause"
        );

        drop(first);
        let (third, _) = ReadPace::choose(&slots, wait);
        assert!(
            matches!(third, ReadPace::Await(_)),
            "a closed stream gives its slot back"
        );
    }
}
