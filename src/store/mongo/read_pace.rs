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
//!
//! Polls take turns too: only a few are in the driver's hands at once (poll slots),
//! the rest wait here. The driver's pool serves its waiters first come, first served,
//! so with a thousand idle streams polling twice a second, every lease write, acquire,
//! lease-stream read and stream opening queued behind hundreds of polls whenever the
//! server answered a little slower than the polls came, and a takeover (a release,
//! the lease stream's read of it, an acquire, an open: four commands in a row) took
//! seconds (issue 32: 4.2 s at p99 with 1,000 resources; the driver's events showed
//! every command waiting 0.3-0.7 s for a connection the server then used for 2-15 ms).
//! With the polls held back here, what else is asked of the pool finds at most the
//! poll slots ahead of it. Under that load the polls slow down instead: an idle stream
//! reads less often than once per read wait, and its next change waits that much longer.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, Instant};

/// How long a polling stream's getMore waits on the server.
pub(super) const POLL_AWAIT: Duration = Duration::from_millis(1);

/// The driver's default `maxPoolSize`.
const DRIVER_POOL: u32 = 10;

/// A store's slots for its streams' reads.
#[derive(Debug, Clone)]
pub(super) struct ReadSlots {
    /// The streams that may wait on the server at once: under half the pool, so the
    /// lease stream, the lease writes and the polls always find a connection.
    awaiting: Arc<Semaphore>,
    /// The polls that may be in the driver's hands at once: half of what the awaiting
    /// streams and the lease stream leave of the pool (at least one), so the other
    /// half is there for everything else.
    polling: Arc<Semaphore>,
}

impl ReadSlots {
    pub(super) fn new(max_pool_size: Option<u32>) -> Self {
        let pool = max_pool_size.unwrap_or(DRIVER_POOL);
        let awaiting = (pool / 2).saturating_sub(1).max(1);
        // The awaiting streams, and the lease stream (lease_hub.rs).
        let left = pool.saturating_sub(awaiting + 1);
        let polling = left.div_ceil(2).max(1);
        Self {
            awaiting: Arc::new(Semaphore::new(awaiting as usize)),
            polling: Arc::new(Semaphore::new(polling as usize)),
        }
    }
}

/// One stream's way of reading, chosen when it opens.
#[derive(Debug)]
pub(super) enum ReadPace {
    /// Holds an await slot: every getMore waits on the server up to the read wait.
    /// (The slot is given back when the stream is dropped.)
    Await(#[allow(dead_code)] OwnedSemaphorePermit),
    /// Short getMores, at most one per `every` while they come back empty, each read
    /// holding one of the store's poll slots.
    Poll {
        every: Duration,
        /// When the last empty read started, while the stream is idle.
        idle_since: Option<Instant>,
        slots: Arc<Semaphore>,
    },
}

/// A read's turn: for a polling stream, the poll slot it holds until it is dropped.
#[derive(Debug)]
pub(super) struct Turn(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl ReadPace {
    /// An await slot if one is free, else polling; and the server-side wait of each
    /// getMore that goes with it.
    pub(super) fn choose(slots: &ReadSlots, read_wait: Duration) -> (Self, Duration) {
        match Arc::clone(&slots.awaiting).try_acquire_owned() {
            Ok(permit) => (Self::Await(permit), read_wait),
            Err(_) => (
                Self::Poll {
                    every: read_wait,
                    idle_since: None,
                    slots: Arc::clone(&slots.polling),
                },
                POLL_AWAIT.min(read_wait),
            ),
        }
    }

    /// Waits until the next read is due: at once, unless the stream polls and its last
    /// read came back empty less than its read wait ago; then, for a polling stream,
    /// until a poll slot is free. Keep the turn until the read is done.
    pub(super) async fn turn(&self) -> Turn {
        let Self::Poll {
            every,
            idle_since,
            slots,
        } = self
        else {
            return Turn(None);
        };
        if let Some(since) = idle_since {
            sleep_until(*since + *every).await;
        }
        // The semaphore is never closed; were it, the read would go ahead unslotted.
        Turn(Arc::clone(slots).acquire_owned().await.ok())
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
    use futures_util::FutureExt;

    fn sizes(pool: Option<u32>) -> (usize, usize) {
        let slots = ReadSlots::new(pool);
        (
            slots.awaiting.available_permits(),
            slots.polling.available_permits(),
        )
    }

    #[test]
    fn under_half_the_pool_may_wait_and_polls_leave_room_for_the_rest() {
        // (awaiting, polling): the default pool of 10 keeps 4 + the lease stream + 3
        // polls, so 2 connections are never taken by a stream's read.
        assert_eq!(sizes(None), (4, 3));
        assert_eq!(sizes(Some(20)), (9, 5));
        assert_eq!(sizes(Some(4)), (1, 1));
        assert_eq!(sizes(Some(2)), (1, 1));
        assert_eq!(sizes(Some(1)), (1, 1));
        for pool in 4..=100 {
            let (awaiting, polling) = sizes(Some(pool));
            assert!(
                awaiting + 1 + polling < pool as usize,
                "a pool of {pool}: {awaiting} awaiting, the lease stream and {polling} polls \
                 leave nothing for lease writes"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn streams_past_the_slots_poll_once_per_read_wait_while_idle() {
        let slots = ReadSlots::new(Some(4));
        let wait = Duration::from_millis(500);
        let (first, first_wait) = ReadPace::choose(&slots, wait);
        assert!(
            matches!(first, ReadPace::Await(_)) && first_wait == wait,
            "the one slot"
        );
        let (mut second, second_wait) = ReadPace::choose(&slots, wait);
        assert!(matches!(second, ReadPace::Poll { .. }) && second_wait == POLL_AWAIT);

        let started = Instant::now();
        drop(second.turn().await);
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the first read is due at once"
        );
        second.record(started, true);
        drop(second.turn().await);
        assert_eq!(
            started.elapsed(),
            wait,
            "after an empty read, one read wait"
        );
        second.record(Instant::now(), false);
        let busy = Instant::now();
        drop(second.turn().await);
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

    /// Issue 32: a thousand polls in the driver's queue put every lease write behind
    /// them. Only the poll slots' worth of polls are let through at once.
    #[tokio::test(start_paused = true)]
    async fn polls_past_the_poll_slots_wait_for_one_to_be_given_back() {
        let slots = ReadSlots::new(None);
        let wait = Duration::from_millis(500);
        let streams: Vec<ReadPace> = (0..10).map(|_| ReadPace::choose(&slots, wait).0).collect();
        let polling: Vec<&ReadPace> = streams
            .iter()
            .filter(|pace| matches!(pace, ReadPace::Poll { .. }))
            .collect();
        assert_eq!(polling.len(), 6, "4 of the 10 wait on the server");
        // Every polling stream's read is due; three get a turn, the others wait for one.
        let mut turns = Vec::new();
        let mut waiting = Vec::new();
        for pace in &polling {
            let mut turn = Box::pin(pace.turn());
            match (&mut turn).now_or_never() {
                Some(turn) => turns.push(turn),
                None => waiting.push(turn),
            }
        }
        assert_eq!((turns.len(), waiting.len()), (3, 3));
        let awaiting_turn = Box::pin(streams[0].turn());
        assert!(
            awaiting_turn.now_or_never().is_some(),
            "a stream with an await slot reads without a poll slot"
        );
        drop(turns.pop());
        let mut next = waiting.remove(0);
        let next = (&mut next).now_or_never();
        assert!(
            next.is_some(),
            "a poll slot given back is the next waiting poll's"
        );
        assert!(waiting
            .iter_mut()
            .all(|w| w.as_mut().now_or_never().is_none()));
    }
}
