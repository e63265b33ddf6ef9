//! A change the handler fails on: found one change at a time, recorded on the lease,
//! its back-off waited out, and stepped over where the policy says.

use super::*;

impl<S: Store, H: Handler> Listener<S, H> {
    /// The handler failed on a batch with `error` (`HandlerError::Failed`: it cannot
    /// process something in it; a store error is no fault of a change and starts the
    /// tenure over instead): hands its changes one at a time to find the one it fails
    /// on, commits what went through before it, records that one on the lease and
    /// ends the tenure. `Ok` when every change went through on its own (the batch is
    /// then committed where the cut lets it be).
    pub(super) async fn one_at_a_time(
        &mut self,
        p: &mut Progress,
        handed: Handed<'_>,
        error: String,
    ) -> Result<(), TenureEnd> {
        // What went through before this batch is committed first, as it would have
        // been one commit at a time: the search below then commits only its own.
        self.flush(p).await?;
        let Handed {
            events,
            committed_prefix,
            uncommitted_before,
        } = handed;
        let mut failed = None;
        // Handled since the last commit: committed only where the cut ends the handout...
        let mut uncommitted = uncommitted_before.as_ref().map_or(0, |(_, n)| *n);
        // The last of them: what a failure commits up to.
        let mut went_through: Option<(ResumeToken, Option<&ChangeEvent>)> =
            uncommitted_before.map(|(token, _)| (token, None));
        if let [only] = events {
            failed = Some((only, error));
        } else {
            for (i, event) in events.iter().enumerate() {
                let one = std::slice::from_ref(event);
                match self.handler.handle(one, &p.fence).await {
                    Ok(()) => {
                        uncommitted += 1;
                        went_through = Some((event.token.clone(), Some(event)));
                        // Where the handout's own commit lands, between transactions.
                        if i + 1 != committed_prefix || behind(&event.token, p.newest()) {
                            continue;
                        }
                        let past = crate::engine::failing::passes(p.failure.as_ref(), one);
                        let last = vec![event.clone()];
                        let token = event.token.clone();
                        let time = token_time(&token);
                        let staged = Staged::handled(token, time, uncommitted, past, last);
                        self.commit_now(p, staged).await?;
                        uncommitted = 0;
                        went_through = None;
                    }
                    Err(HandlerError::Fenced(reason)) => {
                        return Err(TenureEnd::FencedOut(format!(
                            "stale fenced write: {reason}"
                        )))
                    }
                    Err(HandlerError::Failed(e)) => {
                        failed = Some((event, e));
                        break;
                    }
                    Err(e @ HandlerError::Store(_)) => {
                        let end = TenureEnd::Failed(e.to_string());
                        return Err(self.give_back(&p.tenure, end).await);
                    }
                }
            }
        }
        let Some((event, error)) = failed else {
            return Ok(());
        };
        // ...except where a change fails: what went through before it (in this
        // handout, or in earlier parts of its transaction) is committed, inside its
        // transaction if it is in one, so the lease stops right before the failing
        // change and a skip steps over that change alone (the transaction reached the
        // handler apart anyway).
        if let Some((token, before)) = went_through.filter(|(token, _)| !behind(token, p.newest()))
        {
            let past = before.is_some_and(|e| {
                crate::engine::failing::passes(p.failure.as_ref(), std::slice::from_ref(e))
            });
            let last = before.cloned().into_iter().collect();
            let time = token_time(&token);
            let staged = Staged::handled(token, time, uncommitted, past, last);
            self.commit_now(p, staged).await?;
        }
        let previous = p.failure.clone();
        Err(self
            .record_failure(&p.tenure, |now| {
                crate::engine::failing::handler_failure(event, &error, now, previous.as_ref())
            })
            .await)
    }

    /// Records the failure `failure_at` makes of the server's current time on the lease
    /// `tenure` holds, gives the lease back and ends the tenure: the change's back-off
    /// is then waited out by whoever takes it.
    async fn record_failure(
        &mut self,
        tenure: &Tenure,
        failure_at: impl FnOnce(DateTime<Utc>) -> ChangeFailure,
    ) -> TenureEnd {
        let failure = match self.store.server_now().await {
            Ok(now) => failure_at(now),
            Err(e) => {
                let end = TenureEnd::Failed(format!(
                    "a change failed; reading the server's clock to record it failed: {e}"
                ));
                return self.give_back(tenure, end).await;
            }
        };
        tracing::warn!(resource = %tenure.resource, attempts = failure.attempts, error = %failure.error, "a change failed");
        match self.store.record_failure(tenure, &failure).await {
            Ok(TenureWrite::Done) => {
                if let Some(observer) = &self.observer {
                    observer.change_failed(failure.attempts);
                }
                let end = match self.config.skip_after {
                    Some(after) if failure.attempts >= after => {
                        self.step_over(tenure, failure, after).await
                    }
                    _ => TenureEnd::ChangeFailed(failure),
                };
                match end {
                    TenureEnd::LostLock(_) => end,
                    end => self.give_back(tenure, end).await,
                }
            }
            Ok(TenureWrite::LostLock) => TenureEnd::LostLock(format!(
                "recording the failed change under version {} matched nothing",
                tenure.version
            )),
            Err(e) => {
                let end = TenureEnd::Failed(format!(
                    "{}; recording it on the lease failed: {e}",
                    crate::engine::failing::describe(&failure)
                ));
                self.give_back(tenure, end).await
            }
        }
    }

    /// Steps over `failure`'s change by this listener's policy; the tenure ends either
    /// way (the stream is past it, or it keeps failing).
    async fn step_over(
        &mut self,
        tenure: &Tenure,
        failure: ChangeFailure,
        after: u32,
    ) -> TenureEnd {
        let lease = self.config.lease;
        match crate::engine::step_over::step_over(&self.store, tenure, &failure, lease, after).await
        {
            Ok(audit_id) => {
                tracing::warn!(resource = %tenure.resource, audit_id, "stepped over a change by the skip_after policy");
                self.record_error(format!(
                    "stepped over by the skip_after policy after {} attempts (audit record \
                     {audit_id}; undo brings it back): {}",
                    failure.attempts,
                    crate::engine::failing::describe(&failure)
                ));
                TenureEnd::SteppedOver
            }
            Err(crate::engine::step_over::NotSteppedOver::LostLock(why)) => {
                TenureEnd::LostLock(format!(
                    "{}; stepping over it by the skip_after policy: {why}",
                    crate::engine::failing::describe(&failure)
                ))
            }
            Err(crate::engine::step_over::NotSteppedOver::Failed(why)) => {
                self.record_error(format!(
                    "{}; stepping over it by the skip_after policy failed: {why}",
                    crate::engine::failing::describe(&failure)
                ));
                TenureEnd::ChangeFailed(failure)
            }
        }
    }

    /// The stream met a change the server cannot return as asked: recorded like a
    /// handler's failure (counted after `previous`), so it is retried no faster than
    /// the back-off, never in a reopen loop.
    pub(super) async fn unreadable(
        &mut self,
        tenure: &Tenure,
        change: &crate::model::UnreadableChange,
        previous: Option<&ChangeFailure>,
    ) -> TenureEnd {
        let namespace = self.config.watch.to_string();
        self.record_failure(tenure, |now| {
            crate::engine::failing::unreadable_failure(change, &namespace, now, previous)
        })
        .await
    }

    /// A lease acquired with a failing change: waits, holding it, until that change's
    /// back-off is over (counted from its latest attempt, by whichever listener), so
    /// the listeners of a lease hand it no more often than that between them.
    pub(super) async fn wait_out(
        &mut self,
        tenure: &Tenure,
        failure: &ChangeFailure,
    ) -> Result<(), TenureEnd> {
        let retry_at = failure.retry_at(self.config.retry_backoff);
        let now = match self.store.server_now().await {
            Ok(now) => now,
            Err(e) => {
                return Err(self
                    .give_back(tenure, TenureEnd::Failed(e.to_string()))
                    .await)
            }
        };
        let Ok(wait) = (retry_at - now).to_std() else {
            return Ok(());
        };
        self.set_state(ListenerState::Failing);
        self.record_error(crate::engine::failing::describe(failure));
        let until = Instant::now() + wait;
        loop {
            let next = (Instant::now() + self.config.refresh_interval()).min(until);
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => {
                    let _ = self.store.release(tenure).await;
                    return Err(TenureEnd::Shutdown);
                }
                () = sleep_until(next) => {}
            }
            if Instant::now() >= until {
                return Ok(());
            }
            if self
                .fleet
                .as_ref()
                .is_some_and(FleetSeat::handover_requested)
            {
                return Err(self.give_back(tenure, TenureEnd::Rotated).await);
            }
            self.refresh(tenure).await?;
        }
    }

    /// Waits out the back-off `pause` after failing on `failure`'s change, ending early
    /// once the lease no longer records that change as failing; where the lease cannot
    /// be watched, the whole back-off. `Err` on shutdown.
    pub(super) async fn wait_out_failure(
        &mut self,
        failure: &ChangeFailure,
        pause: Duration,
    ) -> Result<(), ()> {
        let started = Instant::now();
        let moved_past = |lease: Option<&_>| !still_failing(lease, failure);
        let (resource, deadline) = (&self.config.resource, Some(started + pause));
        match wait_on_lease(&self.store, resource, deadline, &self.shutdown, moved_past).await {
            Ok(Recovery::Moved) => Ok(()),
            Ok(Recovery::Shutdown) => Err(()),
            Err(e) => {
                // Not recorded as the last error: that says what the change failed on.
                tracing::warn!(resource = %self.config.resource, error = %e, "cannot watch the lease while waiting out a failed change's back-off");
                self.pause(pause.saturating_sub(started.elapsed())).await
            }
        }
    }
}
