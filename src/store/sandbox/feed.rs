//! Change streams over the sandbox's change log.

use std::sync::Arc;

use bson::Document;

use super::change_log::{HistoryLost, Scan};
use super::{count, SandboxStore};
use crate::model::{ClusterTime, OplogWindow, Partition, ResumeToken, TokenKind};
use crate::store::{
    ChangeBatch, ChangeEvent, ChangeFeed, ChangeStream, FeedOptions, Namespace, OperationType,
    StartPoint, StoreError, StoreResult,
};

fn history_lost(detail: &str) -> StoreError {
    StoreError::HistoryLost {
        code: 286,
        message: format!("resume point is no longer in the sandbox change log ({detail})"),
    }
}

impl From<HistoryLost> for StoreError {
    fn from(_: HistoryLost) -> Self {
        history_lost("the change log dropped entries this stream had not read")
    }
}

impl ChangeFeed for SandboxStore {
    type Stream = SandboxStream;

    /// A partition's stream keeps the changes whose `documentKey._id` hashes into it
    /// ([`Partition::holds_key`], MongoDB's hashed index key), and every drop or rename.
    async fn open_partition(
        &self,
        ns: &Namespace,
        partition: Option<Partition>,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<SandboxStream> {
        count(&self.inner.calls.open);
        refuse_unkept(&options)?;
        let state = self.lock();
        let position = match &start {
            StartPoint::After(token) => {
                let time = token.time().ok_or_else(|| {
                    StoreError::InvalidArgument(format!(
                        "resume token {token} cannot be decoded: reset or rewind the lease"
                    ))
                })?;
                state.log.position_after(time)?
            }
            StartPoint::At(time) => state.log.position_at(*time)?,
            StartPoint::Now => state.log.end(),
        };
        // A stream that has seen nothing yet resumes where it started.
        let resume_time = match &start {
            StartPoint::After(token) => token.time(),
            StartPoint::At(time) => Some(ClusterTime::from_u64(time.as_u64().saturating_sub(1))),
            StartPoint::Now => Some(state.log.last_time()),
        };
        // What MongoDB checks when the stream resumes: the start time, or the token's.
        let resumes_from = match &start {
            StartPoint::At(time) => *time,
            _ => resume_time.unwrap_or_default(),
        };
        drop(state);
        Ok(SandboxStream {
            store: self.clone(),
            ns: ns.clone(),
            partition,
            position,
            resume_time,
            resumes_from,
            options,
            scratch: Vec::new(),
            ended: None,
        })
    }

    async fn oplog_window(&self) -> StoreResult<OplogWindow> {
        count(&self.inner.calls.oplog_window);
        self.require_oplog()?;
        Ok(self.lock().log.window())
    }

    async fn cluster_time(&self) -> StoreResult<ClusterTime> {
        count(&self.inner.calls.cluster_time);
        let wall_secs = u32::try_from(self.inner.clock.now().timestamp()).unwrap_or(u32::MAX);
        Ok(self
            .lock()
            .log
            .last_time()
            .max(ClusterTime::new(wall_secs, 0)))
    }

    /// The log entry at `at`, shaped as MongoDB's oplog shapes one (`ts`, `op`, `ns`,
    /// `o`, `o2`).
    async fn oplog_entry(&self, at: ClusterTime) -> StoreResult<Option<bson::Document>> {
        self.require_oplog()?;
        let state = self.lock();
        Ok(state.log.entry_at(at).map(|entry| {
            let event = &entry.event;
            let op = match event.operation.name() {
                "insert" => "i",
                "update" | "replace" => "u",
                "delete" => "d",
                _ => "c",
            };
            let object = event
                .full_document
                .clone()
                .unwrap_or_else(|| event.document_key.clone());
            bson::doc! {
                "ts": bson::Timestamp::from(entry.time),
                "op": op,
                "ns": event.ns.to_string(),
                "o": object,
                "o2": event.document_key.clone(),
            }
        }))
    }
}

impl SandboxStore {
    /// Log entries on `ns` in `from..=to`, at most `limit`.
    pub(super) fn count_log_changes(
        &self,
        on: &crate::model::WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> StoreResult<u64> {
        count(&self.inner.calls.count_changes);
        self.count_on(on, from, to, limit)
    }

    fn count_on(
        &self,
        on: &crate::model::WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> StoreResult<u64> {
        self.require_oplog()?;
        match on {
            crate::model::WatchedCollection::Namespace { db, coll, .. } => Ok(self
                .lock()
                .log
                .count_between(&Namespace::new(db.as_str(), coll.as_str()), from, to, limit)),
            // The sandbox's tokens name no collection.
            crate::model::WatchedCollection::Collection(_) => Err(StoreError::InvalidArgument(
                "the sandbox's changes carry no collection UUID".into(),
            )),
        }
    }
}

/// The sandbox keeps no pre- or post-images: a stream that asks for them is refused
/// when opened, naming what to ask instead.
fn refuse_unkept(options: &FeedOptions) -> StoreResult<()> {
    use crate::store::{PostImage, PreImage};
    let unkept = [
        (
            !matches!(options.post_image, PostImage::Off | PostImage::UpdateLookup),
            "post-images (fullDocument whenAvailable or required; use updateLookup)",
        ),
        (
            options.pre_image != PreImage::Off,
            "pre-images (fullDocumentBeforeChange)",
        ),
    ];
    match unkept.iter().find(|(asked, _)| *asked) {
        Some((_, what)) => Err(StoreError::InvalidArgument(format!(
            "the sandbox keeps no {what}: run this listener against MongoDB 6.0 or newer"
        ))),
        None => Ok(()),
    }
}

/// One open change stream on a namespace.
pub struct SandboxStream {
    store: SandboxStore,
    ns: Namespace,
    /// Only this partition's document changes, when set.
    partition: Option<Partition>,
    /// Sequence number of the next log entry to scan.
    position: u64,
    /// Time of everything this stream has passed over, for the post-batch token.
    resume_time: Option<ClusterTime>,
    /// The time of the point this stream would resume from (its start, then its
    /// latest token): once the history's first entry is after it, the stream is lost,
    /// as a MongoDB change stream whose position rolled off the oplog is.
    resumes_from: ClusterTime,
    options: FeedOptions,
    scratch: Vec<Arc<ChangeEvent>>,
    /// Why the stream ended for good (a drop or rename of its collection): every later
    /// read answers this, like a closed change stream.
    ended: Option<StoreError>,
}

impl SandboxStream {
    fn read(&mut self) -> StoreResult<ChangeBatch> {
        if let Some(ended) = &self.ended {
            return Err(ended.clone());
        }
        let limit = self.options.batch_size.max(1) as usize;
        self.scratch.clear();
        let ns = &self.ns;
        // Like a collection change stream: document changes on `ns`, and with expanded
        // events its other commands (create, indexes, collMod); a drop or rename of it
        // ends the stream there (the server's `invalidate`), after the changes before it.
        let expanded = self.options.expanded_events;
        let mut closed = None;
        let mut unhashable = None;
        let partition = self.partition;
        let state = self.store.lock();
        state.log.check_resumable(self.resumes_from)?;
        self.position = state.log.read_from(
            self.position,
            limit,
            |entry| {
                if let Some(cause) = entry.closes(ns) {
                    closed = Some((cause, entry.time));
                    Scan::Stop
                } else if entry.event.ns == *ns && (expanded || !entry.is_command()) {
                    match partition.map(|p| p.holds_key(&entry.event.document_key)) {
                        None | Some(Ok(true)) => Scan::Keep,
                        Some(Ok(false)) => Scan::Skip,
                        Some(Err(e)) => {
                            unhashable = Some(e);
                            Scan::Stop
                        }
                    }
                } else {
                    Scan::Skip
                }
            },
            &mut self.scratch,
        )?;
        if let Some(e) = unhashable {
            return Err(StoreError::InvalidArgument(format!(
                "partition {} of {ns}: {e}",
                partition.map(|p| p.to_string()).unwrap_or_default()
            )));
        }
        let scanned_to = state.log.last_time();
        let at_end = self.position == state.log.end();
        // `fullDocument: updateLookup`: an update carries the document as it is when
        // read (none once deleted); inserts and replacements carry their own.
        let look_up = self.options.post_image == crate::store::PostImage::UpdateLookup;
        let looked_up: Vec<Option<Option<Document>>> = self
            .scratch
            .iter()
            .map(|e| {
                (e.operation == OperationType::Update && look_up).then(|| {
                    e.document_key
                        .get("_id")
                        .and_then(|id| state.document(&e.ns, id))
                        .cloned()
                })
            })
            .collect();
        drop(state);
        if let Some((cause, at)) = closed {
            self.ended = Some(StoreError::Invalidated {
                cause,
                at: Some(at),
            });
        }
        // Cheap Arc clones under the lock (and the looked-up documents), the deep copies
        // after it: writers never wait on a reader for long.
        let events: Vec<ChangeEvent> = self
            .scratch
            .iter()
            .zip(looked_up)
            .map(|(e, lookup)| ChangeEvent {
                token: e.token.clone(),
                cluster_time: e.cluster_time,
                operation: e.operation.clone(),
                ns: e.ns.clone(),
                document_key: e.document_key.clone(),
                full_document: lookup.unwrap_or_else(|| e.full_document.clone()),
                details: crate::store::EventDetails {
                    // MongoDB sends `collectionUUID` only with expanded events.
                    collection_uuid: e.details.collection_uuid.filter(|_| expanded),
                    ..e.details.clone()
                },
            })
            .collect();
        if events.is_empty() {
            if let Some(ended) = &self.ended {
                return Err(ended.clone());
            }
        }
        let resume_token = match events.last() {
            Some(last) => {
                // Every sandbox event has its cluster time (the log gave it one).
                self.resume_time = last.cluster_time.or(self.resume_time);
                Some(last.token.clone())
            }
            None => {
                // Everything up to the end of the log has been scanned: a high-water mark.
                if at_end {
                    self.resume_time = Some(scanned_to.max(self.resume_time.unwrap_or_default()));
                }
                self.resume_time
                    .map(|time| ResumeToken::encode(time, TokenKind::HighWaterMark, 0))
            }
        };
        if let Some(time) = self.resume_time {
            self.resumes_from = self.resumes_from.max(time);
        }
        Ok(ChangeBatch {
            events,
            resume_token,
            // The end of the log when it was read: what a reply's `$clusterTime` says.
            cluster_time: Some(scanned_to),
            at_end: at_end || self.ended.is_some(),
        })
    }
}

impl ChangeStream for SandboxStream {
    async fn next_batch(&mut self) -> StoreResult<ChangeBatch> {
        count(&self.store.inner.calls.next_batch);
        let batch = self.read()?;
        if !batch.events.is_empty() {
            return Ok(batch);
        }
        // Wait for the log to grow past what was scanned, up to max_await.
        let position = self.position;
        let deadline = tokio::time::sleep(self.options.max_await);
        tokio::pin!(deadline);
        let grew = tokio::select! {
            biased;
            () = self.store.inner.log_end.grown_past(position) => true,
            () = &mut deadline => false,
        };
        if grew {
            self.read()
        } else {
            Ok(batch)
        }
    }
}

impl crate::store::OplogFigures for SandboxStore {
    async fn oplog_parts(&self) -> StoreResult<Vec<crate::store::OplogPart>> {
        self.require_oplog()?;
        let state = self.lock();
        let stats = state.log.stats().ok_or_else(|| {
            StoreError::OplogUnknown(
                "the sandbox's log is bounded by its number of entries, not by bytes (the demo's \
                 --oplog-size sizes it in bytes)"
                    .into(),
            )
        })?;
        Ok(vec![crate::store::OplogPart {
            shard: None,
            window: state.log.window(),
            stats,
        }])
    }

    async fn oplog_history_before(
        &self,
        _shard: Option<&str>,
        at: ClusterTime,
        _size_before: u64,
        _limit: u32,
    ) -> StoreResult<crate::model::HistoryBefore> {
        self.require_oplog()?;
        Ok(self.lock().log.history_before(at))
    }

    async fn changes_after(
        &self,
        target: &crate::model::WatchedCollection,
        after: ClusterTime,
        limit: u32,
    ) -> StoreResult<u64> {
        self.count_on(
            target,
            ClusterTime::from_u64(after.as_u64().saturating_add(1)),
            ClusterTime::from_u64(u64::MAX),
            u64::from(limit),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use bson::doc;
    use chrono::{TimeZone, Utc};

    use super::super::{Clock, SandboxConfig};
    use super::*;
    use crate::store::DocumentStore;

    /// What the sandbox does not keep is refused when a stream asks for it, naming it;
    /// no post-image, or one looked up, is not refused (what each gives: the contract
    /// suite's `a_stream_without_post_images_gets_none_for_an_update`), nor are
    /// expanded events (what they give: the contract suite's `expanded_events_*`).
    #[test]
    fn a_stream_asking_for_images_is_refused() {
        use crate::store::{PostImage, PreImage};
        let asks = [
            FeedOptions {
                pre_image: PreImage::Required,
                ..Default::default()
            },
            FeedOptions {
                post_image: PostImage::WhenAvailable,
                ..Default::default()
            },
        ];
        for (options, named) in asks.iter().zip(["pre-images", "post-images"]) {
            let error = refuse_unkept(options).unwrap_err().to_string();
            assert!(
                error.contains(named) && error.contains("MongoDB 6.0"),
                "{error}"
            );
        }
        for allowed in [PostImage::Off, PostImage::UpdateLookup] {
            let options = FeedOptions {
                post_image: allowed,
                expanded_events: true,
                ..Default::default()
            };
            assert!(refuse_unkept(&options).is_ok());
        }
    }

    /// The order in which streams waiting on the log wake for one write, in a fresh
    /// runtime on a paused clock.
    fn wake_order() -> Vec<usize> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let epoch = Utc
                .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
                .single()
                .expect("valid date");
            let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
            let ns = Namespace::new("db", "c");
            let woken = Arc::new(Mutex::new(Vec::new()));
            let mut readers = Vec::new();
            for reader in 0..6 {
                let options = FeedOptions {
                    batch_size: 1,
                    max_await: Duration::from_secs(60),
                    ..Default::default()
                };
                let mut stream = store
                    .open(&ns, StartPoint::Now, options)
                    .await
                    .expect("open");
                let woken = woken.clone();
                readers.push(tokio::spawn(async move {
                    let batch = stream.next_batch().await.expect("read");
                    assert_eq!(batch.events.len(), 1, "woken by the write");
                    woken.lock().expect("not poisoned").push(reader);
                }));
            }
            // Every reader is waiting before the write.
            tokio::time::sleep(Duration::from_millis(1)).await;
            store.put(&ns, doc! {"_id": 1}).await.expect("write");
            for reader in readers {
                reader.await.expect("reader");
            }
            let order = woken.lock().expect("not poisoned").clone();
            order
        })
    }

    #[test]
    fn streams_waiting_for_a_change_wake_in_the_same_order_in_every_run() {
        let first = wake_order();
        for _ in 0..20 {
            assert_eq!(
                wake_order(),
                first,
                "the sandbox must be deterministic under a virtual clock"
            );
        }
    }
}
