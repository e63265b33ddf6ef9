//! Where a listener may commit: never inside a transaction (docs/protocol.md,
//! "Transactions"). A stream's batch can end part-way through a transaction's
//! changes; a commit there, then a crash, would hand the next holder half of it. So
//! what is read is cut at the end of the last transaction known to be complete: the
//! changes of one transaction are handed together, and committed together, up to a
//! bound; a larger one is handed in parts, and committed only after its last part.
//!
//! A transaction is known to be complete when a change that is not its own follows
//! it, or when the stream had nothing more to hand (its changes enter the history
//! together, at its commit, so a stream at its end has read all of them).

use crate::model::{ClusterTime, ResumeToken};
use crate::store::{ChangeBatch, ChangeEvent, TransactionId};

/// What a listener does with what it read: hand `batch.events` to the handler, then
/// commit `batch.resume_token` (none: nothing to commit yet).
#[derive(Debug)]
pub struct Handout {
    pub batch: ChangeBatch,
    /// How many of `batch.events` the commit covers, from the first: those after are
    /// the first part of a transaction that goes on.
    pub committed_prefix: usize,
    /// The last change handed before this handout that no commit covers yet (the end
    /// of a transaction's earlier parts), and how many such changes there are. A
    /// commit of this handout covers them too.
    pub uncommitted_before: Option<(ResumeToken, usize)>,
}

impl Handout {
    /// Changes handed before this handout, as parts of a transaction, that no commit
    /// covers yet.
    pub fn earlier_parts(&self) -> usize {
        self.uncommitted_before.as_ref().map_or(0, |(_, n)| *n)
    }

    /// How many changes the commit covers.
    pub fn covers(&self) -> usize {
        if self.batch.resume_token.is_some() {
            self.earlier_parts() + self.committed_prefix
        } else {
            0
        }
    }
}

/// A transaction handed in part and not committed yet.
#[derive(Debug)]
struct OpenPart {
    transaction: TransactionId,
    handed: usize,
    /// The token of its last change handed.
    last: ResumeToken,
}

/// The cut of one tenure's stream.
#[derive(Debug)]
pub struct TransactionCut {
    /// The most changes of one transaction held back or handed at once.
    bound: usize,
    /// Read, not handed: the start of a transaction that may go on.
    held: Vec<ChangeEvent>,
    open: Option<OpenPart>,
    /// The newest cluster time read: a change older than it is a re-delivery.
    newest: Option<ClusterTime>,
}

impl TransactionCut {
    pub fn new(bound: usize) -> Self {
        Self {
            bound: bound.max(1),
            held: Vec::new(),
            open: None,
            newest: None,
        }
    }

    /// Whether a transaction has been handed in part and not committed: the listener
    /// neither rotates nor hands its lease over until it is.
    pub fn in_transaction(&self) -> bool {
        self.open.is_some()
    }

    /// The next part of a transaction being handed in parts, when more of it than one
    /// part was read: at most `bound` changes, not committed (the transaction goes on
    /// past what was read). `None` once what was read is handed, or held whole.
    pub fn next_part(&mut self) -> Option<Handout> {
        let open = self.open.as_mut()?;
        let last = self
            .held
            .get(self.bound.min(self.held.len()).checked_sub(1)?)?;
        let uncommitted_before = Some((open.last.clone(), open.handed));
        open.last = last.token.clone();
        let rest = self.held.split_off(self.bound.min(self.held.len()));
        let part = std::mem::replace(&mut self.held, rest);
        open.handed += part.len();
        Some(Handout {
            batch: ChangeBatch {
                events: part,
                ..Default::default()
            },
            committed_prefix: 0,
            uncommitted_before,
        })
    }

    /// What to hand and commit after reading `read`.
    pub fn take(&mut self, read: ChangeBatch) -> Handout {
        let ChangeBatch {
            events: new,
            resume_token,
            cluster_time,
            at_end,
        } = read;
        let read_nothing = new.is_empty();
        // The read as it came, unless changes were held before it.
        let mut events = if self.held.is_empty() {
            new
        } else {
            let mut held = std::mem::take(&mut self.held);
            held.extend(new);
            held
        };
        let open = self.open.take();
        let uncommitted_before = open.as_ref().map(|o| (o.last.clone(), o.handed));

        let in_transactions =
            open.is_some() || events.iter().any(|e| e.details.transaction.is_some());
        let trailing = if in_transactions && !(read_nothing || at_end) {
            trailing_run(&events, self.newest, open.as_ref())
        } else {
            None
        };
        self.newest = events
            .iter()
            .filter_map(|e| e.cluster_time)
            .fold(self.newest, |newest, t| newest.max(Some(t)));
        let (complete, run_transaction) = match trailing {
            Some((start, transaction)) => (start, Some(transaction)),
            None => (events.len(), None),
        };
        let run = events.len() - complete;
        // The run goes on a transaction already handed in part: hand it as another part.
        let continues_open = complete == 0
            && open
                .as_ref()
                .is_some_and(|o| Some(&o.transaction) == run_transaction.as_ref());
        let hand_run = run > 0 && (continues_open || run >= self.bound);

        let commit = if complete > 0 {
            // At the end of a read that brought changes, the read's own token (its
            // last event's: a Cosmos DB page's); else the last complete change's (held
            // changes handed after an empty read commit their own end, and the
            // post-batch token is left to the heartbeat).
            match resume_token.filter(|_| complete == events.len() && !read_nothing) {
                Some(token) => Some(token),
                None => Some(events[complete - 1].token.clone()),
            }
        } else if let Some(open) = open.as_ref().filter(|_| !continues_open) {
            // The transaction handed in parts ended where its last part did.
            Some(open.last.clone())
        } else if read_nothing {
            resume_token
        } else {
            None
        };

        if hand_run {
            let handed_before = if continues_open {
                open.as_ref().map_or(0, |o| o.handed)
            } else {
                0
            };
            // A part of at most `bound`; the rest of the run waits for `next_part`.
            let hand = complete + run.min(self.bound);
            self.held = events.split_off(hand);
            if let (Some(transaction), Some(last)) = (run_transaction, events.last()) {
                self.open = Some(OpenPart {
                    transaction,
                    handed: handed_before + (hand - complete),
                    last: last.token.clone(),
                });
            }
        } else {
            self.held = events.split_off(complete);
        }
        Handout {
            batch: ChangeBatch {
                events,
                resume_token: commit,
                cluster_time,
                at_end,
            },
            committed_prefix: complete,
            uncommitted_before,
        }
    }
}

/// Where the trailing run of one transaction's changes starts in `events`, and which
/// transaction it is, when more of it may follow: `None` when the last change belongs
/// to none. Only changes read for the first time say where a transaction ends; one
/// older than a change read before it (`newest`, or earlier in `events`) is a
/// re-delivery (a stream resumed from an older point) and says nothing. When every
/// change is a re-delivery, a transaction handed in part (`open`) goes on.
fn trailing_run(
    events: &[ChangeEvent],
    newest: Option<ClusterTime>,
    open: Option<&OpenPart>,
) -> Option<(usize, TransactionId)> {
    let mut seen = newest;
    let fresh: Vec<bool> = events
        .iter()
        .map(|e| match e.cluster_time {
            Some(t) if seen.is_some_and(|s| t < s) => false,
            t => {
                seen = seen.max(t);
                true
            }
        })
        .collect();
    let Some(last) = fresh.iter().rposition(|f| *f) else {
        return open.map(|o| (0, o.transaction.clone()));
    };
    let transaction = events[last].details.transaction.as_ref()?;
    let start = (0..events.len())
        .rev()
        .find(|&i| fresh[i] && events[i].details.transaction.as_ref() != Some(transaction))
        .map_or(0, |i| i + 1);
    Some((start, transaction.clone()))
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;
    use crate::model::{ClusterTime, TokenKind};
    use crate::store::{EventDetails, Namespace, OperationType};

    /// Change `n`, in transaction `txn` if any.
    fn change(n: u32, txn: Option<i64>) -> ChangeEvent {
        let time = ClusterTime::new(100, n);
        ChangeEvent {
            token: ResumeToken::encode(time, TokenKind::Event, u64::from(n)),
            cluster_time: Some(time),
            operation: OperationType::Insert,
            ns: Namespace::new("db", "c"),
            document_key: doc! { "_id": n },
            full_document: None,
            details: EventDetails {
                transaction: txn.map(|txn_number| TransactionId {
                    session: vec![1; 16],
                    txn_number,
                }),
                ..Default::default()
            },
        }
    }

    fn read(events: Vec<ChangeEvent>, at_end: bool) -> ChangeBatch {
        let resume_token = events.last().map(|e| e.token.clone());
        ChangeBatch {
            events,
            resume_token,
            cluster_time: None,
            at_end,
        }
    }

    fn empty_read(after: u32) -> ChangeBatch {
        ChangeBatch {
            resume_token: Some(hwm(after)),
            ..Default::default()
        }
    }

    fn hwm(after: u32) -> ResumeToken {
        ResumeToken::encode(ClusterTime::new(100, after), TokenKind::HighWaterMark, 0)
    }

    fn keys(handout: &Handout) -> Vec<u32> {
        handout
            .batch
            .events
            .iter()
            .map(|e| e.cluster_time.map_or(0, |t| t.inc))
            .collect()
    }

    fn token(n: u32) -> Option<ResumeToken> {
        Some(change(n, None).token)
    }

    #[test]
    fn changes_outside_transactions_pass_through() {
        let mut cut = TransactionCut::new(100);
        let out = cut.take(read(vec![change(1, None), change(2, None)], false));
        assert_eq!(keys(&out), [1, 2]);
        assert_eq!(out.batch.resume_token, token(2));
        assert_eq!(out.covers(), 2);
        let idle = cut.take(empty_read(2));
        assert!(idle.batch.events.is_empty());
        assert_eq!(
            idle.batch.resume_token,
            Some(hwm(2)),
            "a heartbeat candidate"
        );
        assert_eq!(idle.covers(), 0);
    }

    #[test]
    fn a_batch_ending_inside_a_transaction_commits_before_it_and_hands_it_whole_later() {
        let mut cut = TransactionCut::new(100);
        let out = cut.take(read(
            vec![change(1, None), change(2, Some(7)), change(3, Some(7))],
            false,
        ));
        assert_eq!(keys(&out), [1]);
        assert_eq!(out.batch.resume_token, token(1));
        let out = cut.take(read(vec![change(4, Some(7)), change(5, Some(7))], false));
        assert!(out.batch.events.is_empty(), "still inside transaction 7");
        assert_eq!(out.batch.resume_token, None);
        let out = cut.take(read(vec![change(6, Some(7)), change(7, None)], false));
        assert_eq!(keys(&out), [2, 3, 4, 5, 6, 7]);
        assert_eq!(out.batch.resume_token, token(7));
        assert_eq!(out.covers(), 6);
    }

    #[test]
    fn a_stream_at_its_end_has_read_the_whole_transaction() {
        let mut cut = TransactionCut::new(100);
        let out = cut.take(read(vec![change(1, Some(7)), change(2, Some(7))], true));
        assert_eq!(keys(&out), [1, 2]);
        assert_eq!(out.batch.resume_token, token(2));

        let mut cut = TransactionCut::new(100);
        let out = cut.take(read(vec![change(1, Some(7)), change(2, Some(7))], false));
        assert!(out.batch.events.is_empty());
        let out = cut.take(empty_read(2));
        assert_eq!(keys(&out), [1, 2]);
        assert_eq!(
            out.batch.resume_token,
            token(2),
            "its own end, not the post-batch token"
        );
        assert_eq!(out.covers(), 2);
    }

    #[test]
    fn back_to_back_transactions_commit_between_them() {
        let mut cut = TransactionCut::new(100);
        let out = cut.take(read(
            vec![
                change(1, Some(7)),
                change(2, Some(7)),
                change(3, Some(8)),
                change(4, Some(8)),
            ],
            false,
        ));
        assert_eq!(keys(&out), [1, 2]);
        assert_eq!(out.batch.resume_token, token(2));
        // Handed one at a time after a handler failure, they are committed only there:
        // after 2, the end of 7, never after 1, inside it.
        assert_eq!(out.committed_prefix, 2);
    }

    #[test]
    fn a_transaction_over_the_bound_is_handed_in_parts_and_committed_after_the_last() {
        let mut cut = TransactionCut::new(3);
        let out = cut.take(read(
            vec![change(1, None), change(2, Some(7)), change(3, Some(7))],
            false,
        ));
        assert_eq!(keys(&out), [1]);
        let out = cut.take(read(vec![change(4, Some(7))], false));
        assert_eq!(keys(&out), [2, 3, 4], "the bound reached: a first part");
        assert_eq!(out.batch.resume_token, None, "not committed inside it");
        assert!(cut.in_transaction());
        let out = cut.take(read(vec![change(5, Some(7)), change(6, Some(7))], false));
        assert_eq!(keys(&out), [5, 6], "a further part, handed at once");
        assert_eq!(out.batch.resume_token, None);
        assert!(cut.next_part().is_none());
        let out = cut.take(read(
            vec![change(7, Some(7)), change(8, None), change(9, Some(9))],
            false,
        ));
        assert_eq!(
            keys(&out),
            [7, 8],
            "the last part; the next transaction is held"
        );
        assert_eq!(out.batch.resume_token, token(8));
        assert_eq!(out.covers(), 5 + 2);
        assert!(!cut.in_transaction());
    }

    #[test]
    fn no_part_is_larger_than_the_bound_whatever_one_read_holds() {
        let mut cut = TransactionCut::new(2);
        let txn: Vec<ChangeEvent> = (1..=7).map(|n| change(n, Some(7))).collect();
        let out = cut.take(read(txn, false));
        assert_eq!(keys(&out), [1, 2]);
        assert_eq!(out.batch.resume_token, None);
        let parts: Vec<Vec<u32>> = std::iter::from_fn(|| cut.next_part())
            .map(|part| {
                assert_eq!(part.batch.resume_token, None, "the transaction may go on");
                keys(&part)
            })
            .collect();
        assert_eq!(parts, [vec![3, 4], vec![5, 6], vec![7]]);
        let out = cut.take(read(
            vec![change(8, Some(7)), change(9, Some(7)), change(10, Some(7))],
            false,
        ));
        assert_eq!(keys(&out), [8, 9], "a later read, in parts too");
        assert_eq!(keys(&cut.next_part().expect("the rest")), [10]);
        let out = cut.take(read(vec![change(11, None)], false));
        assert_eq!(keys(&out), [11]);
        assert_eq!(out.batch.resume_token, token(11));
        assert_eq!(out.covers(), 10 + 1);
    }

    #[test]
    fn each_part_knows_the_uncommitted_change_handed_before_it() {
        let mut cut = TransactionCut::new(1);
        let out = cut.take(read(vec![change(1, Some(7)), change(2, Some(7))], false));
        assert_eq!(keys(&out), [1]);
        assert_eq!(out.uncommitted_before, None);
        let part = cut.next_part().expect("the second part");
        assert_eq!(part.uncommitted_before, Some((change(1, None).token, 1)));
        let out = cut.take(read(vec![change(3, Some(7)), change(4, Some(7))], false));
        assert_eq!(keys(&out), [3]);
        assert_eq!(out.uncommitted_before, Some((change(2, None).token, 2)));
    }

    #[test]
    fn a_change_delivered_again_says_nothing_of_where_a_transaction_ends() {
        let mut cut = TransactionCut::new(1);
        let out = cut.take(read(vec![change(5, Some(7))], false));
        assert_eq!(keys(&out), [5], "a first part");
        // The stream hands 3 and 4 (outside any transaction) again: not an end of 7.
        let out = cut.take(read(vec![change(3, None), change(4, None)], false));
        assert_eq!(keys(&out), [3], "handed, in parts of the bound");
        assert_eq!(out.batch.resume_token, None, "7 may go on: no commit");
        assert_eq!(keys(&cut.next_part().expect("the rest")), [4]);
        let out = cut.take(read(vec![change(6, Some(7)), change(8, None)], false));
        assert_eq!(keys(&out), [6, 8]);
        assert_eq!(out.batch.resume_token, token(8), "7 ended at 6");
        assert_eq!(out.covers(), 3 + 2);
    }

    #[test]
    fn a_transaction_handed_in_parts_that_ended_with_its_last_part_is_committed_there() {
        let mut cut = TransactionCut::new(2);
        let out = cut.take(read(vec![change(1, Some(7)), change(2, Some(7))], false));
        assert_eq!(keys(&out), [1, 2]);
        assert_eq!(out.batch.resume_token, None);
        // The next transaction starts the next read, and stays held.
        let out = cut.take(read(vec![change(3, Some(8))], false));
        assert!(out.batch.events.is_empty());
        assert_eq!(out.batch.resume_token, token(2), "transaction 7 ended at 2");
        assert_eq!(out.covers(), 2);
        // Or the stream goes quiet: it is committed where it ended.
        let mut cut = TransactionCut::new(2);
        cut.take(read(vec![change(1, Some(7)), change(2, Some(7))], false));
        let out = cut.take(empty_read(2));
        assert_eq!(out.batch.resume_token, token(2));
        assert_eq!(out.covers(), 2);
    }
}
