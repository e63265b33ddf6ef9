//! Group commits ([`super::CommitPolicy::Group`]): what the handler went through waits,
//! staged, for the next commit; at most one commit is in flight, on its own task, so
//! its round trip overlaps the handling of the next batch.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::model::{ClusterTime, ResumeToken};
use crate::store::{ChangeEvent, StoreResult, TenureWrite};

/// Handled and not committed yet: what one commit covers.
#[derive(Debug)]
pub struct Staged {
    /// Where the commit puts the resume point: the newest handled, between transactions.
    pub token: ResumeToken,
    /// The cluster time `token` tells, decoded once: every handout after it is checked
    /// against it.
    pub time: Option<ClusterTime>,
    /// Changes handled since the commit before (none for a heartbeat).
    pub count: usize,
    /// Handler calls they were handed in, and how many the newest of them had.
    pub batches: usize,
    pub last_batch_size: usize,
    /// They got past the change the lease records as failing: the commit clears it.
    pub past_failure: bool,
    /// The newest of them, for the console's last change: the handout's own vector of
    /// changes cut to its last ([`keep_last`]), so a handout allocates nothing for it;
    /// made shared for the status once the commit lands. Empty for a heartbeat.
    pub last: Vec<ChangeEvent>,
    /// Send it without waiting out the interval: the stream is caught up, the lease
    /// needs its refresh, or it clears a failure.
    pub urgent: bool,
}

impl Staged {
    /// `count` changes handled in one handler call (none: a heartbeat), up to `token`,
    /// whose cluster time is `time` (decoded by the caller, who needed it first).
    pub fn handled(
        token: ResumeToken,
        time: Option<ClusterTime>,
        count: usize,
        past_failure: bool,
        last: Vec<ChangeEvent>,
    ) -> Self {
        Self {
            time,
            token,
            count,
            batches: usize::from(count > 0),
            last_batch_size: count,
            past_failure,
            last,
            // A heartbeat: the stream is caught up, so what is staged goes now.
            urgent: count == 0 || past_failure,
        }
    }

    /// Adds what was handled after `self`: one commit then covers both.
    pub fn absorb(&mut self, newer: Staged) {
        self.token = newer.token;
        self.time = newer.time;
        self.count += newer.count;
        if newer.batches > 0 {
            self.batches += newer.batches;
            self.last_batch_size = newer.last_batch_size;
        }
        self.past_failure |= newer.past_failure;
        if !newer.last.is_empty() {
            self.last = newer.last;
        }
        self.urgent |= newer.urgent;
    }

    /// Whether to send it now, the last commit having been sent at `last_sent`.
    pub fn due(&self, last_sent: Instant, now: Instant, every: Duration) -> bool {
        self.urgent || now.saturating_duration_since(last_sent) >= every
    }
}

/// Cuts `changes` to its last change, in place, and gives back the room the others
/// took (a batch of a thousand would otherwise stay allocated until the commit lands).
pub fn keep_last(changes: &mut Vec<ChangeEvent>) {
    if changes.len() > 1 {
        changes.drain(..changes.len() - 1);
    }
    changes.shrink_to_fit();
}

/// What a commit task answers: the store's reply and how long the write took.
pub type CommitReply = (StoreResult<TenureWrite>, Duration);

/// The one commit in flight.
pub struct InFlight {
    pub task: CommitTask,
    pub staged: Staged,
    pub sent: Instant,
}

/// A commit's task. Dropping it (a tenure that ends, a listener dropped) aborts the
/// task: like a reply lost, the write may or may not have applied, and either is safe
/// (it is conditional on the tenure, and covers handled changes only).
pub struct CommitTask(pub JoinHandle<CommitReply>);

impl CommitTask {
    pub fn finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for CommitTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterTime, TokenKind};

    fn staged(inc: u32, count: usize, urgent: bool) -> Staged {
        let token = ResumeToken::encode(ClusterTime::new(100, inc), TokenKind::Event, 1);
        Staged {
            urgent,
            ..Staged::handled(
                token,
                Some(ClusterTime::new(100, inc)),
                count,
                false,
                Vec::new(),
            )
        }
    }

    #[test]
    fn one_commit_covers_everything_handled_since_the_one_before() {
        let mut first = staged(1, 3, false);
        let mut second = staged(2, 2, false);
        second.past_failure = true;
        first.absorb(second);
        first.absorb(staged(3, 0, false));
        assert!(!first.urgent);
        let heartbeat = ResumeToken::encode(ClusterTime::new(100, 4), TokenKind::Event, 1);
        let at = Some(ClusterTime::new(100, 4));
        first.absorb(Staged::handled(heartbeat, at, 0, false, Vec::new()));
        assert_eq!(first.token.time(), Some(ClusterTime::new(100, 4)));
        assert_eq!(first.count, 5);
        assert_eq!(
            (first.batches, first.last_batch_size),
            (2, 2),
            "a heartbeat is no batch"
        );
        assert!(first.past_failure, "a failure passed stays passed");
        assert!(first.urgent, "a heartbeat means caught up: send now");
    }

    fn change(id: i32) -> ChangeEvent {
        ChangeEvent {
            token: ResumeToken::encode(ClusterTime::new(100, id as u32), TokenKind::Event, 1),
            cluster_time: Some(ClusterTime::new(100, id as u32)),
            operation: crate::store::OperationType::Insert,
            ns: crate::store::Namespace::new("shop", "orders"),
            document_key: bson::doc! { "_id": id },
            full_document: None,
            details: Default::default(),
        }
    }

    #[test]
    fn a_handout_keeps_only_its_last_change_and_gives_back_the_room() {
        let mut handed: Vec<ChangeEvent> = Vec::with_capacity(1000);
        handed.extend((1..=3).map(change));
        keep_last(&mut handed);
        let ids: Vec<_> = handed.iter().map(|e| e.document_key.clone()).collect();
        assert_eq!(ids, [bson::doc! { "_id": 3 }]);
        assert!(handed.capacity() < 1000, "capacity {}", handed.capacity());
        let mut none: Vec<ChangeEvent> = Vec::new();
        keep_last(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn a_newer_handout_replaces_the_last_change_and_a_heartbeat_keeps_it() {
        let token = |inc| ResumeToken::encode(ClusterTime::new(100, inc), TokenKind::Event, 1);
        let mut first = Staged::handled(token(1), None, 1, false, vec![change(1)]);
        first.absorb(Staged::handled(token(2), None, 1, false, vec![change(2)]));
        first.absorb(Staged::handled(token(3), None, 0, false, Vec::new()));
        let last: Vec<_> = first.last.iter().map(|e| e.document_key.clone()).collect();
        assert_eq!(last, [bson::doc! { "_id": 2 }]);
    }

    #[test]
    fn a_commit_waits_out_the_interval_unless_urgent() {
        let sent = Instant::now();
        let every = Duration::from_secs(1);
        let soon = sent + Duration::from_millis(400);
        assert!(!staged(1, 1, false).due(sent, soon, every));
        assert!(staged(1, 1, true).due(sent, soon, every));
        assert!(staged(1, 1, false).due(sent, sent + every, every));
    }
}
