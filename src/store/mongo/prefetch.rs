//! A change stream read ahead on its own task, so a batch can be "what the stream
//! already has". The driver (3.9) says nothing of how much of a server batch it still
//! buffers, and a read dropped while its getMore is out loses that getMore's events;
//! so one task owns the cursor and its session and reads on, each event sent here as
//! it comes, and a batch takes the first read (waiting for it) and then only what has
//! already arrived.
//!
//! Memory is bounded in bytes: the task takes a permit of an event's size from a
//! budget of [`READ_AHEAD_BYTES`] before it sends it, and the permit is given back
//! when the batch takes the event. So at most that much waits here, beside the
//! driver's own buffer (one server batch, which the server keeps under 16 MB) and the
//! batches being handled (each bounded by the same budget, at least one event).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::RawDocumentBuf;
use mongodb::change_stream::event::ResumeToken as DriverToken;
use mongodb::change_stream::session::SessionChangeStream;
use mongodb::ClientSession;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::errors::{next_within_session, CallError};
use crate::model::ClusterTime;

/// The most bytes of events read ahead and not yet taken by a batch.
pub const READ_AHEAD_BYTES: usize = 16 * 1024 * 1024;
/// The most reads waiting to be taken, whatever their size: empty getMores of a quiet
/// stream whose handler is busy for long must not pile up either.
const READ_AHEAD_READS: usize = 4096;

/// What the task read.
enum Read {
    Event(RawDocumentBuf, OwnedSemaphorePermit),
    /// A getMore came back with nothing: whether the cursor lives on, and the
    /// driver's post-batch resume token then.
    Empty {
        alive: bool,
        token: Option<DriverToken>,
    },
    /// The read failed; the task has stopped.
    Failed(CallError),
}

/// The reading side of a stream read ahead.
pub struct Prefetch {
    reads: mpsc::Receiver<Read>,
    /// The `$clusterTime` of the stream's latest reply (`ClusterTime::as_u64`; 0: none).
    cluster_time: Arc<AtomicU64>,
    /// As of the last empty read taken.
    alive: bool,
    token: Option<DriverToken>,
    /// Why the task stopped, answered to every read after.
    failed: Option<CallError>,
    task: JoinHandle<()>,
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        // The cursor goes with the task: the driver kills it on the server.
        self.task.abort();
    }
}

impl Prefetch {
    /// Starts reading `stream` (its reads bounded by `bound`, named `action` in errors).
    pub fn start(
        mut stream: SessionChangeStream<RawDocumentBuf>,
        mut session: ClientSession,
        bound: Duration,
        action: String,
    ) -> Self {
        // Bounded in count, and in bytes by the budget's permits.
        let (send, reads) = mpsc::channel(READ_AHEAD_READS);
        let budget = Arc::new(Semaphore::new(READ_AHEAD_BYTES));
        let cluster_time = Arc::new(AtomicU64::new(0));
        let published = Arc::clone(&cluster_time);
        let task = tokio::spawn(async move {
            let mut last_reply = None;
            loop {
                let read = next_within_session(&mut stream, &mut session, bound, &action).await;
                if session.cluster_time() != last_reply.as_ref() {
                    last_reply = session.cluster_time().cloned();
                    if let Some(time) = reply_time(&session) {
                        published.store(time.as_u64(), Ordering::Release);
                    }
                }
                let (read, last) = match read {
                    Ok(Some(event)) => {
                        // An event larger than the whole budget takes all of it.
                        let size = u32::try_from(event.as_bytes().len().min(READ_AHEAD_BYTES))
                            .unwrap_or(u32::MAX);
                        let Ok(permit) = Arc::clone(&budget).acquire_many_owned(size).await else {
                            return;
                        };
                        (Read::Event(event, permit), false)
                    }
                    Ok(None) => {
                        let alive = stream.is_alive();
                        let token = stream.resume_token();
                        (Read::Empty { alive, token }, !alive)
                    }
                    Err(e) => (Read::Failed(e), true),
                };
                if send.send(read).await.is_err() || last {
                    return;
                }
            }
        });
        Self {
            reads,
            cluster_time,
            alive: true,
            token: None,
            failed: None,
            task,
        }
    }

    /// The next read, waiting for it: an event, or `None` for a getMore that came back
    /// empty.
    pub async fn next(&mut self) -> Result<Option<RawDocumentBuf>, CallError> {
        if let Some(failed) = &self.failed {
            return Err(failed.clone());
        }
        let read = self.reads.recv().await;
        self.take(read)
    }

    /// The next read if it has already arrived.
    pub fn ready(&mut self) -> Option<Result<Option<RawDocumentBuf>, CallError>> {
        if self.failed.is_some() {
            return None;
        }
        match self.reads.try_recv() {
            Ok(read) => Some(self.take(Some(read))),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => Some(self.take(None)),
        }
    }

    fn take(&mut self, read: Option<Read>) -> Result<Option<RawDocumentBuf>, CallError> {
        match read {
            // Taken by a batch: its bytes are the batch's now, not the read-ahead's.
            Some(Read::Event(event, _permit)) => Ok(Some(event)),
            Some(Read::Empty { alive, token }) => {
                self.alive = alive;
                self.token = token;
                Ok(None)
            }
            Some(Read::Failed(e)) => {
                self.failed = Some(e.clone());
                Err(e)
            }
            // The task ended after the cursor did: every read after says so.
            None => {
                self.alive = false;
                Ok(None)
            }
        }
    }

    /// Whether the cursor lives on, as of the last empty read.
    pub fn is_alive(&self) -> bool {
        self.alive
    }

    /// The driver's post-batch resume token, as of the last empty read.
    pub fn resume_token(&self) -> Option<DriverToken> {
        self.token.clone()
    }

    /// The `$clusterTime` of the stream's latest reply.
    pub fn reply_cluster_time(&self) -> Option<ClusterTime> {
        match self.cluster_time.load(Ordering::Acquire) {
            0 => None,
            time => Some(ClusterTime::from_u64(time)),
        }
    }
}

/// The `$clusterTime` a session keeps of its latest reply.
pub fn reply_time(session: &ClientSession) -> Option<ClusterTime> {
    let gossiped = bson::to_document(session.cluster_time()?).ok()?;
    gossiped
        .get_timestamp("clusterTime")
        .ok()
        .map(ClusterTime::from)
}
