//! One tenure's stream: read ahead, cut into handouts at transaction boundaries, each
//! handed to the handler and committed as the policy says.

use super::*;

impl<S: Store, H: Handler> Listener<S, H> {
    /// Holds one version of the lease until it is lost, released or the listener stops.
    pub(super) async fn hold(&mut self, lease: Lease) -> TenureEnd {
        let Some(tenure) = Tenure::of(&lease) else {
            return TenureEnd::Failed("acquired a lease without a holder".into());
        };
        let fence = lease.fence();
        if let Some(observer) = &self.observer {
            observer.acquired(tenure.version);
            observer.failure_attempts(lease.failure.as_ref().map_or(0, |f| f.attempts));
        }
        self.status.send_modify(|s| {
            s.version = Some(tenure.version);
            s.last_committed = lease.resume_point().time();
        });
        if let Some(failure) = &lease.failure {
            if let Err(end) = self.wait_out(&tenure, failure).await {
                return end;
            }
        }
        let start = match self.start_point(&lease).await {
            Ok(start) => start,
            Err(end) => return self.give_back(&tenure, end).await,
        };
        let options = FeedOptions {
            batch_size: self.config.batch_size,
            max_await: self.config.read_wait(),
            post_image: self.config.full_document,
            pre_image: self.config.full_document_before_change,
            expanded_events: self.config.expanded_events,
            read_ahead: self.config.read_ahead,
        };
        let source = self.config.source;
        let watch = &self.config.watch;
        let partition = self.config.partition;
        let mut opened = crate::engine::source::open(
            &self.store,
            source,
            watch,
            partition,
            start.clone(),
            options,
        )
        .await;
        if matches!(opened, Err(StoreError::HistoryLost { .. }))
            && lease.resume_point() == ResumePoint::Oldest
        {
            // The oldest entry fell off between reading the window and opening: read it again, once.
            opened = match self.start_point(&lease).await {
                Ok(start) => {
                    let watch = &self.config.watch;
                    crate::engine::source::open(
                        &self.store,
                        source,
                        watch,
                        partition,
                        start,
                        options,
                    )
                    .await
                }
                Err(end) => return self.give_back(&tenure, end).await,
            };
        }
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(StoreError::UnreadableChange(change)) => {
                return self
                    .unreadable(&tenure, &change, lease.failure.as_ref())
                    .await
            }
            Err(e) => return self.end_on(&tenure, e, lease.resume_point()).await,
        };
        self.set_state(ListenerState::Streaming);

        let now = Instant::now();
        let mut progress = Progress {
            tenure,
            fence,
            started: now,
            next_refresh: now + self.config.refresh_interval(),
            last_commit: now,
            last_sent: now,
            committed: lease.resume_token.clone(),
            staged: None,
            in_flight: None,
            cut: TransactionCut::new(self.config.max_transaction_changes),
            failure: lease.failure.clone(),
        };
        let mut batch = tokio::select! {
            biased;
            () = self.shutdown.cancelled() => return self.shut_down(&mut progress).await,
            batch = stream.next_batch() => batch,
        };
        loop {
            let current = match batch {
                Ok(batch) => batch,
                Err(StoreError::UnreadableChange(change)) => {
                    if let Err(end) = self.flush(&mut progress).await {
                        return end;
                    }
                    let previous = progress.failure.clone();
                    return self
                        .unreadable(&progress.tenure, &change, previous.as_ref())
                        .await;
                }
                Err(e) => {
                    if let Err(end) = self.flush(&mut progress).await {
                        return end;
                    }
                    // Where this tenure got to: its last commit, else where it started.
                    let at = progress
                        .committed
                        .clone()
                        .map_or_else(|| lease.resume_point(), ResumePoint::Token);
                    return self.end_on(&progress.tenure, e, at).await;
                }
            };
            // The next batch is read while this one is handled and committed, so the
            // read's round trip overlaps theirs. Nothing of it reaches the handler
            // before this one is settled (under strict commits, its commit landed); a
            // tenure that ends here drops it.
            let mut read = std::pin::pin!(stream.next_batch());
            let mut ahead = None;
            // Settled one handout at a time, as the transaction cut gives them
            // (not in a function of their own: each call would move its future).
            let mut next = Some(progress.cut.take(current));
            while let Some(handout) = next.as_mut() {
                let settled = if self.config.read_ahead {
                    let mut settle = std::pin::pin!(self.settle_handout(&mut progress, handout));
                    loop {
                        // Biased: the two are polled in a fixed order. An unbiased
                        // select draws from tokio's per-thread RNG, which is seeded at
                        // random, so a run on a paused clock (the simulation) could not
                        // be replayed.
                        tokio::select! {
                            biased;
                            settled = &mut settle => break settled,
                            next = &mut read, if ahead.is_none() => ahead = Some(next),
                        }
                    }
                } else {
                    // Not polled until settled: the read starts after the commit.
                    self.settle_handout(&mut progress, handout).await
                };
                if let Err(end) = settled {
                    return end;
                }
                next = progress.cut.next_part();
            }
            if self.shutdown.is_cancelled() {
                return self.shut_down(&mut progress).await;
            }
            batch = match ahead {
                Some(next) => next,
                // The read first: a stop was looked for just above, and a read that is
                // ready at once (catching up) then never registers with the stop's
                // notification, two lock round trips a batch.
                None => tokio::select! {
                    biased;
                    next = &mut read => next,
                    () = self.shutdown.cancelled() => return self.shut_down(&mut progress).await,
                },
            };
        }
    }

    /// Stops on request: what was handled is committed, then the lease released.
    async fn shut_down(&mut self, p: &mut Progress) -> TenureEnd {
        if self.flush(p).await.is_ok() {
            let _ = self.store.release(&p.tenure).await;
        }
        TenureEnd::Shutdown
    }

    /// Hands one handout of what was read (the [`TransactionCut`] cuts a read so that
    /// no commit lands inside a transaction) to the handler and commits it (or, for an
    /// empty read, commits the post-batch token when a heartbeat is due), refreshes the
    /// lease when due and rotates when the tenure is over. `Err` ends the tenure, lease
    /// already given back where it was not lost.
    ///
    /// The handout is borrowed, and the commit staged in place, so that the future,
    /// made anew for every handout, stays small: moving it costs a copy of its size.
    async fn settle_handout(
        &mut self,
        p: &mut Progress,
        handout: &mut Handout,
    ) -> Result<(), TenureEnd> {
        let covers = handout.covers();
        let earlier_parts = handout.earlier_parts();
        let committed_prefix = handout.committed_prefix;
        let batch = &mut handout.batch;
        let count = batch.events.len();
        // The fleet asks for this lease: commit where this batch got to, then release
        // (once a transaction handed in parts is committed).
        let handing_over = !p.cut.in_transaction()
            && self
                .fleet
                .as_ref()
                .is_some_and(FleetSeat::handover_requested);
        let to_commit = if count > 0 {
            // Read, not handled yet: as far behind as the point handled before it (a
            // change that keeps failing keeps it there while the cluster moves on).
            self.measure_lag(batch, || p.newest().and_then(ResumeToken::time));
            // A commit in flight that lost the lease stops the listener before
            // anything more is handled.
            if self.landing_due(p) {
                Box::pin(self.land(p)).await?;
            }
            match self.handler.handle(&batch.events, &p.fence).await {
                Ok(()) => {}
                // A commit in flight is aborted (dropped with the tenure): it may
                // still land, like one whose reply is lost, and is conditional on it.
                Err(HandlerError::Fenced(reason)) => {
                    return Err(TenureEnd::FencedOut(format!(
                        "stale fenced write: {reason}"
                    )))
                }
                // The handler cannot process something in it: find which change.
                Err(HandlerError::Failed(e)) => {
                    let handed = Handed {
                        events: &batch.events,
                        committed_prefix,
                        uncommitted_before: handout.uncommitted_before.take(),
                    };
                    // Boxed: the cold path would more than double the size of the
                    // settle future every batch carries (8 KB against 3.7 KB).
                    return Box::pin(self.one_at_a_time(p, handed, e)).await;
                }
                // The store failed the handler, not the change: start over. A commit
                // in flight is taken in if it has landed (a lost lease is not given
                // back), else aborted, so it cannot land after the release.
                Err(e @ HandlerError::Store(_)) => {
                    if self.landing_due(p) {
                        Box::pin(self.land(p)).await?;
                    }
                    p.in_flight = None;
                    let end = TenureEnd::Failed(e.to_string());
                    return Err(Box::pin(self.give_back(&p.tenure, end)).await);
                }
            }
            if self.config.commit == CommitPolicy::Strict {
                self.set_state(ListenerState::Committing);
            }
            self.measure_lag(batch, || batch.reached());
            batch.resume_token.take()
        } else {
            self.measure_lag(batch, || batch.reached());
            // A transaction handed in parts that has ended is committed at once.
            let heartbeat_due = handing_over
                || earlier_parts > 0
                || p.newest().is_none()
                || p.last_commit.elapsed() >= self.config.heartbeat;
            // The same token is no progress, whatever time is recorded beside either.
            batch.resume_token.take().filter(|t| {
                heartbeat_due && p.newest().map(ResumeToken::as_document) != Some(t.as_document())
            })
        };
        // A stream that hands over again what it delivered before (resumed from an
        // older point) can end a batch behind the last commit: committing that token
        // would move the lease's point back, and the next holder would handle committed
        // changes again. Where both times are known, the point only moves on.
        let to_commit = to_commit.and_then(|token| {
            let time = token_time(&token);
            if before(time, p.newest_time()) {
                return None;
            }
            // One that tells its time needs none recorded beside it.
            Some(match time {
                Some(_) => (token, time),
                None => (self.timed(token, &batch.events, p.newest()), None),
            })
        });
        // One reading of the clock for what follows (each costs a system call's worth
        // on some machines, and the handout is all that happened since).
        let now = Instant::now();
        if let Some((token, time)) = to_commit {
            let committed = &batch.events[..committed_prefix.min(count)];
            let past_failure = crate::engine::failing::passes(p.failure.as_ref(), committed);
            // Handled and about to be dropped: moved, not copied, towards the snapshot.
            let mut last = std::mem::take(&mut batch.events);
            crate::engine::commits::keep_last(&mut last);
            let staged = Staged::handled(token, time, covers, past_failure, last);
            match self.config.commit {
                // The commit lands before anything more is handed.
                CommitPolicy::Strict => Box::pin(self.commit_now(p, staged)).await?,
                // Staged, with what was staged before and not sent yet, and sent when
                // due: it lands while what follows is handled.
                CommitPolicy::Group { every } => {
                    p.stage(staged);
                    if self.landing_due(p) {
                        Box::pin(self.land(p)).await?;
                    }
                    self.send_if_due(p, every, now);
                }
            }
        }
        if let (0, CommitPolicy::Group { every }) = (count, self.config.commit) {
            // Caught up: what is staged goes now, not once the interval is over.
            if let Some(staged) = &mut p.staged {
                staged.urgent = true;
            }
            if self.landing_due(p) {
                Box::pin(self.land(p)).await?;
            }
            self.send_if_due(p, every, now);
        }
        self.after_commit(p, handing_over, now).await
    }

    /// How far `position` is behind the cluster time `batch`'s reply carried. The
    /// position is read only where there is an observer: it decodes a token.
    fn measure_lag(&self, batch: &ChangeBatch, position: impl FnOnce() -> Option<ClusterTime>) {
        if let (Some(observer), Some(reply)) = (&self.observer, batch.cluster_time) {
            let Some(position) = position() else {
                return;
            };
            observer.lag(reply.saturating_since(position));
        }
    }
}
