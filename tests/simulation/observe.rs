//! Observers outside the system under test: the application's writes as it made
//! them, and what each handler was given and returned.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{Bson, Document};
use streamward::engine::{Handler, HandlerError};
use streamward::model::Fence;
use streamward::store::sandbox::{SandboxStore, SandboxStream};
use streamward::store::{
    ChangeEvent, ChangeFeed, ChangeStream, DocumentStore, FeedOptions, Namespace, StartPoint,
    StoreResult,
};
use tokio::sync::Notify;

use crate::trace::{Obs, Trace};

/// The application's store: writes go straight to the sandbox (the application's
/// writes are the truth the listeners must follow), and each one is recorded with
/// the change it made, read through a change stream opened at the end of the log
/// just before the write.
#[derive(Clone)]
pub struct Recorder {
    inner: SandboxStore,
    trace: Trace,
    actor: Arc<str>,
    /// The number of the application's next transaction.
    transactions: Arc<AtomicU64>,
}

impl Recorder {
    pub fn new(inner: SandboxStore, trace: Trace) -> Self {
        Self {
            inner,
            trace,
            actor: Arc::from("workload"),
            transactions: Arc::default(),
        }
    }
}

/// The simulated workload never opens an event store: capped collections pass
/// through untouched, unrecorded.
impl streamward::store::CappedFeed for Recorder {
    type Tail = streamward::store::sandbox::SandboxTail;

    async fn tail(
        &self,
        ns: &Namespace,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<Self::Tail> {
        self.inner.tail(ns, start, options).await
    }

    async fn capped_window(
        &self,
        ns: &Namespace,
    ) -> StoreResult<Option<streamward::store::CappedWindow>> {
        self.inner.capped_window(ns).await
    }

    async fn ensure_capped(&self, ns: &Namespace, max_bytes: u64) -> StoreResult<()> {
        self.inner.ensure_capped(ns, max_bytes).await
    }

    async fn append_entry(
        &self,
        ns: &Namespace,
        entry: Document,
    ) -> StoreResult<bson::oid::ObjectId> {
        self.inner.append_entry(ns, entry).await
    }

    async fn capped_stats(&self, ns: &Namespace) -> StoreResult<streamward::store::CappedStats> {
        self.inner.capped_stats(ns).await
    }

    async fn count_entries(
        &self,
        ns: &Namespace,
        span: streamward::model::EntrySpan,
        limit: u64,
    ) -> StoreResult<u64> {
        self.inner.count_entries(ns, span, limit).await
    }

    async fn entry_bytes(
        &self,
        ns: &Namespace,
        span: streamward::model::EntrySpan,
        limit: u64,
    ) -> StoreResult<streamward::store::EntryBytes> {
        self.inner.entry_bytes(ns, span, limit).await
    }
}

impl DocumentStore for Recorder {
    async fn fenced_upsert(
        &self,
        ns: &Namespace,
        id: &Bson,
        fence: &streamward::store::WriteFence,
        fields: Document,
    ) -> StoreResult<streamward::store::WriteOutcome> {
        self.inner.fenced_upsert(ns, id, fence, fields).await
    }

    async fn find_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<Option<Document>> {
        self.inner.find_one(ns, id).await
    }

    async fn find_all(&self, ns: &Namespace) -> StoreResult<Vec<Document>> {
        self.inner.find_all(ns).await
    }

    async fn put(&self, ns: &Namespace, document: Document) -> StoreResult<()> {
        let mut tap = self.tap(ns).await?;
        self.inner.put(ns, document).await?;
        self.record(ns, &mut tap, None).await
    }

    async fn put_together(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        let mut tap = self.tap(ns).await?;
        self.inner.put_together(ns, documents).await?;
        let transaction = self.transactions.fetch_add(1, Ordering::Relaxed);
        self.record(ns, &mut tap, Some(transaction)).await
    }

    /// Recorded like a put, with an empty document: the change a delete made.
    async fn delete_one(&self, ns: &Namespace, id: &Bson) -> StoreResult<bool> {
        let mut tap = self.tap(ns).await?;
        let deleted = self.inner.delete_one(ns, id).await?;
        if deleted {
            self.record(ns, &mut tap, None).await?;
        }
        Ok(deleted)
    }

    /// Recorded like [`Recorder::delete_one`]: the changes the deletes made.
    async fn delete_where(&self, ns: &Namespace, field: &str, value: &Bson) -> StoreResult<u64> {
        let mut tap = self.tap(ns).await?;
        let deleted = self.inner.delete_where(ns, field, value).await?;
        if deleted > 0 {
            self.record(ns, &mut tap, None).await?;
        }
        Ok(deleted)
    }

    async fn replace_all(&self, ns: &Namespace, documents: Vec<Document>) -> StoreResult<()> {
        self.inner.replace_all(ns, documents).await
    }

    async fn drop_collection(&self, ns: &Namespace) -> StoreResult<()> {
        self.inner.drop_collection(ns).await
    }

    async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> StoreResult<()> {
        self.inner.rename_collection(from, to, drop_target).await
    }

    async fn drop_database(&self, db: &str) -> StoreResult<()> {
        self.inner.drop_database(db).await
    }
}

impl Recorder {
    /// A stream opened at the end of the log, just before a write.
    async fn tap(&self, ns: &Namespace) -> StoreResult<SandboxStream> {
        let options = FeedOptions {
            batch_size: 16,
            max_await: Duration::from_millis(1),
            ..Default::default()
        };
        self.inner.open(ns, StartPoint::Now, options).await
    }

    /// Records the changes the write after [`Recorder::tap`] made, as part of the
    /// application's `transaction` if any.
    async fn record(
        &self,
        ns: &Namespace,
        tap: &mut SandboxStream,
        transaction: Option<u64>,
    ) -> StoreResult<()> {
        // The write logged a change, so this returns at once, with no other task
        // run in between.
        let batch = tap.next_batch().await?;
        for event in batch.events {
            let id = match event.document_key.get("_id") {
                Some(Bson::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            self.trace.push(
                &self.actor,
                Obs::Wrote {
                    ns: ns.clone(),
                    id,
                    time: event.cluster_time.unwrap(),
                    document: event.full_document.unwrap_or_default(),
                    transaction,
                },
            );
        }
        Ok(())
    }
}

/// Pauses a listener inside its handler, like a long GC pause or a frozen VM.
#[derive(Default)]
pub struct PauseSwitch {
    /// (armed: the next batch pauses, paused: a batch waits now)
    state: Mutex<(bool, bool)>,
    resume: Notify,
}

impl PauseSwitch {
    fn state(&self) -> std::sync::MutexGuard<'_, (bool, bool)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn arm(&self) {
        self.state().0 = true;
    }

    /// Disarms it and wakes a paused batch (leaving no wake-up for a later pause).
    pub fn release(&self) {
        let mut state = self.state();
        state.0 = false;
        if std::mem::take(&mut state.1) {
            self.resume.notify_one();
        }
    }

    async fn pause_if_armed(&self) {
        {
            let mut state = self.state();
            if !std::mem::take(&mut state.0) {
                return;
            }
            state.1 = true;
        }
        self.resume.notified().await;
    }
}

/// Wraps an application handler: honours pauses, and records every batch it was
/// given, under which fence, and what it returned.
pub struct Observed<H> {
    inner: H,
    trace: Trace,
    actor: Arc<str>,
    pause: Arc<PauseSwitch>,
}

impl<H> Observed<H> {
    pub fn new(inner: H, trace: &Trace, actor: &Arc<str>, pause: &Arc<PauseSwitch>) -> Self {
        Self {
            inner,
            trace: trace.clone(),
            actor: actor.clone(),
            pause: pause.clone(),
        }
    }
}

impl<H: Handler> Handler for Observed<H> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        self.trace.push(
            &self.actor,
            Obs::Given {
                resource: fence.resource.clone(),
                version: fence.version,
                events: events.iter().map(|e| e.cluster_time.unwrap()).collect(),
            },
        );
        self.pause.pause_if_armed().await;
        let result = self.inner.handle(events, fence).await;
        self.trace.push(
            &self.actor,
            Obs::Handled {
                resource: fence.resource.clone(),
                version: fence.version,
                events: events.iter().map(|e| e.cluster_time.unwrap()).collect(),
                result: result.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            },
        );
        result
    }
}
