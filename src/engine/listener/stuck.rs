//! Where a tenure starts and how one ends: the start point, an error classified, the
//! lease given back, and waiting for an operator where the listener cannot go on.

use super::*;

impl<S: Store, H: Handler> Listener<S, H> {
    /// Bootstrap order: committed token, operator's `resumeAt`, oldest oplog entry.
    /// A partition lease with neither first takes the oldest point of the resource's
    /// earlier split, where there was one (docs/protocol.md, "Partitions").
    pub(super) async fn start_point(&mut self, lease: &Lease) -> Result<StartPoint, TenureEnd> {
        let point = lease.resume_point();
        if point == ResumePoint::Oldest && self.config.partition.is_some() {
            match crate::engine::partitioned::inherited(&self.store, &self.config).await {
                Ok(Some(at)) => return Ok(StartPoint::At(at)),
                Ok(None) => {}
                Err(e) => return Err(TenureEnd::Failed(e.to_string())),
            }
        }
        match point {
            ResumePoint::Token(token) => Ok(StartPoint::After(token)),
            ResumePoint::At(time) => Ok(StartPoint::At(time)),
            ResumePoint::Oldest => match self.config.bootstrap {
                Bootstrap::Now => Ok(StartPoint::Now),
                Bootstrap::Oldest if self.config.source == SourceKind::Capped => {
                    Ok(crate::engine::source::CAPPED_OLDEST)
                }
                Bootstrap::Oldest => match self.store.oplog_window().await {
                    // Through mongos, the latest of the shards' oldest entries.
                    Ok(window) => Ok(StartPoint::At(window.first)),
                    // A shard out of reach: it may come back.
                    Err(e @ StoreError::OplogUnknown(_)) => Err(TenureEnd::Failed(e.to_string())),
                    // A missing privilege (here or on a shard): waiting does not
                    // change that; say what would.
                    Err(e) if e.oplog_unreadable() => Err(TenureEnd::Refused(format!(
                        "{} has no resume point and the oplog cannot be read to start from its oldest entry: {e}. \
                         Grant the role (on the replica set, or on every shard of a sharded cluster), or configure bootstrap = now \
                         (ListenerConfig::bootstrap = Bootstrap::Now) to skip changes made before the first commit",
                        self.config.resource
                    ))),
                    Err(e) => Err(TenureEnd::Failed(e.to_string())),
                },
            },
        }
    }

    /// Ends a tenure on a store error, from resume point `at`. A closed stream is
    /// recorded on the lease first (fenced on the tenure, like a commit), so every
    /// view of the lease says INVALIDATED; if that write fails the tenure fails, and
    /// the next one meets the closed stream again and records it then.
    pub(super) async fn end_on(
        &mut self,
        tenure: &Tenure,
        error: StoreError,
        at: ResumePoint,
    ) -> TenureEnd {
        if let Some(invalidation) = error.invalidation() {
            match self.store.record_invalidation(tenure, &invalidation).await {
                Ok(TenureWrite::Done) => {}
                Ok(TenureWrite::LostLock) => {
                    return TenureEnd::LostLock(format!(
                        "recording the closed stream under version {} matched nothing",
                        tenure.version
                    ))
                }
                Err(e) => {
                    let end = TenureEnd::Failed(format!(
                        "{error}; recording it on the lease failed: {e}"
                    ));
                    return self.give_back(tenure, end).await;
                }
            }
        }
        let end = classify(error, &self.config.resource, self.config.source, at);
        self.give_back(tenure, end).await
    }

    /// Waits, stuck, until an operator moves the resume point; `Err` when shut down
    /// meanwhile. A failing lease watch is opened again after a pause.
    pub(super) async fn wait_for_operator(&mut self, stuck: Stuck) -> Result<(), ()> {
        tracing::error!(resource = %self.config.resource, state = %stuck.state, message = %stuck.message, "listener stopped; waiting for an operator");
        if let (Some(observer), ListenerState::HistoryLost) = (&self.observer, stuck.state) {
            observer.history_lost();
        }
        self.status.send_modify(|s| {
            s.state = stuck.state;
            s.version = None;
            s.events_per_sec = 0.0;
            s.last_error = Some(stuck.message.clone());
        });
        let invalidated = stuck.state == ListenerState::Invalidated;
        loop {
            let moved = |lease: Option<&_>| operator_moved(lease, &stuck.at, invalidated);
            match wait_on_lease(
                &self.store,
                &self.config.resource,
                None,
                &self.shutdown,
                moved,
            )
            .await
            {
                Ok(Recovery::Moved) => break,
                Ok(Recovery::Shutdown) => return Err(()),
                Err(e) => {
                    tracing::warn!(resource = %self.config.resource, error = %e, "watching the lease for an operator's decision failed");
                    // Still waiting for the operator, and why it cannot watch just now.
                    self.status.send_modify(|s| {
                        s.last_error = Some(format!(
                            "{} (last attempt to watch the lease: {e})",
                            stuck.message
                        ));
                    });
                    let pause = self.backoff.next(self.config.retry_backoff);
                    self.pause(pause).await?;
                }
            }
        }
        tracing::info!(resource = %self.config.resource, "an operator moved the resume point; starting again");
        self.backoff.reset();
        self.status.send_modify(|s| {
            s.state = ListenerState::Acquiring;
            // It said what an operator had to do, and one did.
            s.last_error = None;
        });
        Ok(())
    }

    /// Ends a tenure that did not lose its lease: release it so a standby need not wait for expiry.
    pub(super) async fn give_back(&mut self, tenure: &Tenure, end: TenureEnd) -> TenureEnd {
        if let Err(e) = self.store.release(tenure).await {
            tracing::warn!(resource = %tenure.resource, error = %e, "could not release the lease");
        }
        end
    }

    /// Sleeps, or returns `Err` when shut down meanwhile.
    pub(super) async fn pause(&mut self, pause: Duration) -> Result<(), ()> {
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => Err(()),
            () = sleep_until(Instant::now() + pause) => Ok(()),
        }
    }
}

fn classify(error: StoreError, resource: &str, source: SourceKind, at: ResumePoint) -> TenureEnd {
    let history = match source {
        SourceKind::ChangeStream => "the oplog window",
        SourceKind::Capped => "the capped collection",
    };
    match error {
        StoreError::HistoryLost { .. } => TenureEnd::Stuck(Stuck {
            state: ListenerState::HistoryLost,
            message: format!(
                "{error}. Resuming {} is impossible: the history after it is gone, and nothing \
                 was processed past it. Waiting for an operator: rewind {resource} --to TIME \
                 (inside {history}), reset {resource} --to oldest (or --to now \
                 --accept-skip), or rebuild",
                at.describe()
            ),
            at,
        }),
        StoreError::Invalidated { .. } => {
            let recovery = error
                .invalidation()
                .map(|i| i.recovery(resource))
                .unwrap_or_default();
            TenureEnd::Stuck(Stuck {
                state: ListenerState::Invalidated,
                message: format!(
                    "{error}. Nothing after it was processed and the resume point stays {} \
                     (resuming from there closes the stream again). Waiting for an operator: \
                     {recovery}",
                    at.describe()
                ),
                at,
            })
        }
        StoreError::InvalidArgument(_) => TenureEnd::Refused(error.to_string()),
        other => TenureEnd::Failed(other.to_string()),
    }
}
