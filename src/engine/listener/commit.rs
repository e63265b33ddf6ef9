//! Committing what was handled (group commits staged and sent on their own task, or
//! strict ones waited for), refreshing the lease, and recording checkpoints.

use super::*;
use crate::store::CheckpointStore;

impl<S: Store, H: Handler> Listener<S, H> {
    /// Writes `staged`'s commit and waits for it. `Err` ends the tenure.
    pub(super) async fn commit_now(
        &mut self,
        p: &mut Progress,
        staged: Staged,
    ) -> Result<(), TenureEnd> {
        let started = Instant::now();
        let past_failure = p.clears_failure(&staged);
        let written = write_commit(
            &self.store,
            &p.tenure,
            &staged.token,
            self.config.lease,
            past_failure,
        )
        .await;
        self.landed(p, staged, past_failure, (written, started.elapsed()))
            .await
    }

    /// Sends what is staged, on its own task, when it is due at `now` and no commit is
    /// in flight.
    pub(super) fn send_if_due(&mut self, p: &mut Progress, every: Duration, now: Instant) {
        if p.in_flight.is_some()
            || !p
                .staged
                .as_ref()
                .is_some_and(|s| s.due(p.last_sent, now, every))
        {
            return;
        }
        let Some(staged) = p.staged.take() else {
            return;
        };
        let past_failure = p.clears_failure(&staged);
        let (store, tenure, token) = (self.store.clone(), p.tenure.clone(), staged.token.clone());
        let lease = self.config.lease;
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let written = write_commit(&store, &tenure, &token, lease, past_failure).await;
            (written, started.elapsed())
        });
        p.last_sent = now;
        p.in_flight = Some(InFlight {
            task: CommitTask(task),
            staged: Staged {
                past_failure,
                ..staged
            },
            sent: now,
        });
    }

    /// Whether the commit in flight is to be taken in now ([`Self::land`]): it has
    /// landed, or has been out for longer than a lease (the lease may have expired
    /// meanwhile, and handing more under it would be wasted work, so it is waited for).
    /// `Err` from landing ends the tenure: nothing more is handled. Asked before every
    /// handout, so not async, and the landing boxed at each call: an async call moves
    /// its whole future, and the handout's would carry `land`'s every time (most of the
    /// engine's cost at batch 1).
    pub(super) fn landing_due(&self, p: &Progress) -> bool {
        p.in_flight
            .as_ref()
            .is_some_and(|f| f.task.finished() || f.sent.elapsed() >= self.config.lease)
    }

    /// Waits for the commit in flight, if any, and takes it in. `Err` ends the tenure.
    pub(super) async fn land(&mut self, p: &mut Progress) -> Result<(), TenureEnd> {
        let Some(mut in_flight) = p.in_flight.take() else {
            return Ok(());
        };
        let reply = match (&mut in_flight.task.0).await {
            Ok(reply) => reply,
            Err(e) => (
                Err(StoreError::Network(format!("the commit's task ended: {e}"))),
                in_flight.sent.elapsed(),
            ),
        };
        let past_failure = in_flight.staged.past_failure;
        self.landed(p, in_flight.staged, past_failure, reply).await
    }

    /// Lands the commit in flight and commits what is staged: nothing handled is left
    /// uncommitted. Before a tenure ends, and before a failed batch is handed again
    /// one change at a time. `Err` ends the tenure.
    pub(super) async fn flush(&mut self, p: &mut Progress) -> Result<(), TenureEnd> {
        self.land(p).await?;
        match p.staged.take() {
            Some(staged) => self.commit_now(p, staged).await,
            None => Ok(()),
        }
    }

    /// Takes in a commit's reply: the tenure goes on from it, or ends.
    pub(super) async fn landed(
        &mut self,
        p: &mut Progress,
        staged: Staged,
        past_failure: bool,
        (written, took): CommitReply,
    ) -> Result<(), TenureEnd> {
        match written {
            Ok(TenureWrite::Done) => {}
            Ok(TenureWrite::LostLock) => {
                return Err(TenureEnd::LostLock(format!(
                    "commit of version {} matched nothing",
                    p.tenure.version
                )))
            }
            Err(e) => {
                return Err(self
                    .give_back(&p.tenure, TenureEnd::Failed(e.to_string()))
                    .await)
            }
        }
        let Staged {
            token,
            count,
            batches,
            last_batch_size,
            mut last,
            ..
        } = staged;
        let last = last.pop().map(std::sync::Arc::new);
        let now = Instant::now();
        if let Some(observer) = &self.observer {
            observer.committed(took, batches, count);
            if past_failure {
                observer.failure_attempts(0);
            }
        }
        self.backoff.reset();
        p.last_commit = now;
        p.next_refresh = now + self.config.refresh_interval();
        if past_failure {
            p.failure = None;
        }
        let time = token.time();
        self.checkpoint(&p.tenure, &token, now);
        p.committed = Some(token);
        // Events count once their commit landed: a fenced-out batch is not progress.
        let rate = self.rate.record(count as u64);
        self.status.send_modify(|s| {
            if count > 0 {
                s.events += count as u64;
                s.batches += batches as u64;
                s.last_batch_size = last_batch_size;
            }
            s.events_per_sec = rate;
            s.commits += 1;
            s.last_committed = time;
            s.state = ListenerState::Streaming;
            if let Some(last) = last {
                s.last_change = Some(last);
            }
        });
        Ok(())
    }

    /// After a batch, at `now`: hands the lease over or rotates when asked or due,
    /// refreshes it when due. `Err` ends the tenure.
    pub(super) async fn after_commit(
        &mut self,
        p: &mut Progress,
        handing_over: bool,
        now: Instant,
    ) -> Result<(), TenureEnd> {
        // Handing over to balance the fleet and rotating end the same way: released at
        // this batch boundary, after the commit.
        let tenure_over = !p.cut.in_transaction()
            && self
                .config
                .max_tenure
                .is_some_and(|max| p.started.elapsed() >= max);
        if handing_over || tenure_over {
            if handing_over {
                tracing::info!(resource = %p.tenure.resource, version = p.tenure.version, "handing the lease over to balance the fleet");
            }
            Box::pin(self.flush(p)).await?;
            return Err(Box::pin(self.give_back(&p.tenure, TenureEnd::Rotated)).await);
        }
        if now < p.next_refresh {
            return Ok(());
        }
        // A commit refreshes the lease too: one staged goes now, one in flight will.
        if let CommitPolicy::Group { every } = self.config.commit {
            if let Some(staged) = &mut p.staged {
                staged.urgent = true;
                self.send_if_due(p, every, now);
            }
            if p.in_flight.is_some() {
                return Ok(());
            }
        }
        Box::pin(self.refresh(&p.tenure)).await?;
        p.next_refresh = Instant::now() + self.config.refresh_interval();
        Ok(())
    }

    /// Refreshes the lease `tenure` holds (an acquire that finds it held by this
    /// listener at that version). `Err` ends the tenure.
    pub(super) async fn refresh(&mut self, tenure: &Tenure) -> Result<(), TenureEnd> {
        match self.store.acquire(&self.acquire_request()).await {
            Ok(AcquireOutcome::Acquired(l)) if l.version == tenure.version => Ok(()),
            Ok(_) => Err(TenureEnd::LostLock(format!(
                "refresh of version {} failed",
                tenure.version
            ))),
            Err(e) => Err(self
                .give_back(tenure, TenureEnd::Failed(e.to_string()))
                .await),
        }
    }

    /// Records `token`, just committed by `tenure`, as a checkpoint when the last one
    /// is at least [`ListenerConfig::checkpoint_every`] old and none is being written: on
    /// its own task, never part of the commit. A failed one is reported (the listener's
    /// last error, and the log) when the next commit finds it finished. A store that
    /// keeps no checkpoints ([`crate::store::Capabilities`]) gets none.
    fn checkpoint(&mut self, tenure: &Tenure, token: &ResumeToken, now: Instant) {
        let Some(every) = self.config.checkpoint_every else {
            return;
        };
        if self.store.checkpoint_store().is_none() {
            return;
        }
        if let Some(running) = self.checkpoints.running.take() {
            if !running.is_finished() {
                self.checkpoints.running = Some(running);
                return;
            }
            match futures_util::FutureExt::now_or_never(running) {
                Some(Ok(Err(error))) => self.record_error(format!(
                    "could not record a checkpoint (the stream goes on): {error}"
                )),
                Some(Err(panicked)) => self.record_error(format!(
                    "recording a checkpoint failed (the stream goes on): {panicked}"
                )),
                _ => {}
            }
        }
        if self
            .checkpoints
            .last
            .is_some_and(|last| now.duration_since(last) < every)
        {
            return;
        }
        self.checkpoints.last = Some(now);
        let (store, tenure, token) = (self.store.clone(), tenure.clone(), token.clone());
        let kept = self.config.checkpoints_kept;
        self.checkpoints.running = Some(tokio::spawn(async move {
            match store.checkpoint_store() {
                Some(checkpoints) => checkpoints.record_checkpoint(&tenure, &token, kept).await,
                None => Ok(()),
            }
        }));
    }

    /// `token` with the time to record beside it, where it cannot tell its own (Azure
    /// Cosmos DB's): the newest [`ListenerConfig::document_time_field`] of `events` and
    /// of what was committed before (the newest change this listener has processed).
    /// A heartbeat (no events) keeps the committed time; events none of which has the
    /// field leave the time unknown, and each event without it is reported, never
    /// given a time it does not have.
    pub(super) fn timed(
        &self,
        token: ResumeToken,
        events: &[ChangeEvent],
        committed: Option<&ResumeToken>,
    ) -> ResumeToken {
        if token.tells_its_time() {
            return token;
        }
        let before = committed.and_then(ResumeToken::recorded_time);
        if events.is_empty() {
            return token.with_recorded_time(before);
        }
        let Some(field) = self.config.document_time_field.as_deref() else {
            return token.with_recorded_time(None);
        };
        let mut newest = None;
        let mut without = 0;
        let mut first_problem = None;
        for event in events {
            match document_time(event, field) {
                Ok(at) => newest = newest.max(Some(at)),
                Err(problem) => {
                    without += 1;
                    first_problem.get_or_insert(problem);
                }
            }
        }
        if let Some(problem) = first_problem {
            let message = format!(
                "document time field {field:?}: {without} of {} changes have no date there \
                 ({problem}); the time of what is committed is {}",
                events.len(),
                if newest.is_some() {
                    "taken from the others"
                } else {
                    "unknown, and so is its lag"
                }
            );
            self.record_error(message);
        }
        token.with_recorded_time(newest.map(|at| at.max(before.unwrap_or(at))))
    }
}

/// One commit of `token` by `tenure`; `past_failure` also clears the lease's record
/// of a failing change.
async fn write_commit<S: Store>(
    store: &S,
    tenure: &Tenure,
    token: &ResumeToken,
    lease: Duration,
    past_failure: bool,
) -> crate::store::StoreResult<TenureWrite> {
    if past_failure {
        store.commit_past_failure(tenure, token, lease).await
    } else {
        store.commit(tenure, token, lease).await
    }
}

/// The date at `field` (a dotted path through embedded documents) of the event's
/// document, or what is wrong with it, naming the document's key.
pub(super) fn document_time(event: &ChangeEvent, field: &str) -> Result<DateTime<Utc>, String> {
    let key = || bson::Bson::Document(event.document_key.clone()).into_relaxed_extjson();
    let Some(document) = &event.full_document else {
        return Err(format!(
            "the change to {} came with no document (gone before it was read)",
            key()
        ));
    };
    let mut value = None;
    let mut current = Some(document);
    for part in field.split('.') {
        value = current.and_then(|d| d.get(part));
        current = match value {
            Some(bson::Bson::Document(inner)) => Some(inner),
            _ => None,
        };
    }
    match value {
        Some(bson::Bson::DateTime(at)) => Ok(at.to_chrono()),
        Some(other) => Err(format!(
            "in the document {} it is {:?}, not a date",
            key(),
            other.element_type()
        )),
        None => Err(format!("the document {} has no such field", key())),
    }
}
