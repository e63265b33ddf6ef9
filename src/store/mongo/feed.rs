// Long: the change stream on the driver, from opening (resume, partitions, images) to
// reading ahead and joining split events, and the oplog window it is judged against.
//! `ChangeFeed` on MongoDB: change streams, the oplog window and the cluster time (the
//! replica set's members are in `members.rs`).

use std::time::Duration;

use bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::change_stream::session::SessionChangeStream;
use mongodb::options::FullDocumentType;
use mongodb::{Client, ClientSession};

use super::codec::{required_timestamp, stream_event, StreamEvent};
use super::cosmos;
use super::errors::{bounded, next_within_session, with_one_retry};
use super::prefetch::{reply_time, Prefetch, READ_AHEAD_BYTES};
use super::read_pace::ReadPace;
use super::split_event::Fragments;
use super::MongoStore;
use crate::model::{
    ClusterTime, Deployment, OplogAccess, OplogWindow, Partition, ResumeToken, ShardOplog,
    ShardWindows, StreamProfile, Topology, WatchedCollection,
};
use crate::store::{
    ChangeBatch, ChangeEvent, ChangeFeed, ChangeStream, FeedOptions, Namespace, StartPoint,
    StoreError, StoreResult,
};

pub(super) const OPLOG_HINT: &str =
    "the clusterMonitor role, or read on the local database (readAnyDatabase does not cover local)";
const STREAM_HINT: &str =
    "find and changeStream on the watched collection (the built-in read role has both)";

fn driver_token(token: &ResumeToken) -> StoreResult<mongodb::change_stream::event::ResumeToken> {
    bson::from_document(token.as_document().clone()).map_err(|e| {
        StoreError::InvalidArgument(format!("resume token {token} cannot be used: {e}"))
    })
}

fn store_token(token: &mongodb::change_stream::event::ResumeToken) -> StoreResult<ResumeToken> {
    match bson::to_bson(token) {
        Ok(Bson::Document(document)) => Ok(ResumeToken::from_document(document)),
        Ok(other) => Err(StoreError::Malformed {
            what: "resume token".into(),
            detail: format!("expected a document, found {other}"),
        }),
        Err(e) => Err(StoreError::Malformed {
            what: "resume token".into(),
            detail: e.to_string(),
        }),
    }
}

impl MongoStore {
    /// What this connection reaches (`hello` and the host names) and whether its oplog
    /// can be read; the window too when it can. The oplog is read only on a replica set:
    /// through mongos, on Cosmos DB or on a standalone server there is none to read.
    pub async fn topology(&self) -> StoreResult<(Topology, Option<OplogWindow>)> {
        let action = "read what the server is (hello)";
        let admin = self.client.database("admin");
        let hello = with_one_retry(self.timeout(), action, || {
            std::future::IntoFuture::into_future(admin.run_command(doc! { "hello": 1 }))
        })
        .await
        .map_err(|e| e.into_store(action))?;
        let deployment = if self.no_oplog {
            Deployment::CosmosDb
        } else {
            Deployment::detect(
                hello.get_str("msg").ok(),
                hello.get_str("setName").ok(),
                &self.hosts,
            )
        };
        let mut shards = Vec::new();
        let (oplog, window) = match &deployment {
            Deployment::ReplicaSet { .. } => match self.oplog_window().await {
                Ok(window) => (OplogAccess::Readable, Some(window)),
                Err(e) => match e.why_oplog_unreadable() {
                    Some(why) => (OplogAccess::NotReadable(why), None),
                    None => return Err(e),
                },
            },
            Deployment::Sharded => {
                shards = match self.shard_oplogs().await {
                    Ok(shards) => shards,
                    Err(e) if e.oplog_unreadable() => {
                        let why = format!("the shards cannot be listed: {e}");
                        return Ok((
                            Topology::new(deployment, OplogAccess::NotReadable(why)),
                            None,
                        ));
                    }
                    Err(e) => return Err(e),
                };
                match ShardWindows(&shards).covered() {
                    Ok(window) => (OplogAccess::Readable, Some(window)),
                    Err(why) => (OplogAccess::NotReadable(why), None),
                }
            }
            Deployment::CosmosDb | Deployment::Standalone => {
                (OplogAccess::NotReadable("it keeps no oplog".into()), None)
            }
        };
        Ok((
            Topology {
                deployment,
                oplog,
                shards,
            },
            window,
        ))
    }

    /// The first startable and the last entry of the oplog `client` reaches.
    pub(super) async fn oplog_window_on(&self, client: &Client) -> StoreResult<OplogWindow> {
        let first = self
            .oplog_edge(
                client,
                doc! { "op": { "$ne": "n" } },
                1,
                "startable (op != \"n\")",
            )
            .await?;
        let last = self.oplog_edge(client, doc! {}, -1, "last").await?;
        Ok(OplogWindow::new(first, last))
    }

    async fn oplog_edge(
        &self,
        client: &Client,
        filter: Document,
        natural: i32,
        which: &str,
    ) -> StoreResult<ClusterTime> {
        let action = "read the oplog (local.oplog.rs)";
        let oplog = client.database("local").collection::<Document>("oplog.rs");
        let entry = with_one_retry(self.timeout(), action, || {
            std::future::IntoFuture::into_future(
                oplog
                    .find_one(filter.clone())
                    .sort(doc! { "$natural": natural })
                    .projection(doc! { "ts": 1, "_id": 0 }),
            )
        })
        .await
        .map_err(|e| window_read_error(e.into_store_hinted(action, OPLOG_HINT)))?;
        edge_time(entry.as_ref(), which).map_err(StoreError::OplogUnknown)
    }

    /// How many oplog entries (`op != "n"`) were written after `after`, counting at
    /// most `limit`. A `ts` range on the oplog starts at that position instead of
    /// scanning from the oldest entry, so a short interval costs little.
    pub async fn oplog_entries_after(&self, after: ClusterTime, limit: u32) -> StoreResult<u64> {
        let filter = doc! {
            "ts": { "$gt": bson::Timestamp::from(after) },
            "op": { "$ne": "n" },
        };
        self.count_oplog(
            OplogCount::entries(filter),
            u64::from(limit),
            "count recent oplog entries (local.oplog.rs)",
        )
        .await
    }

    /// One aggregation on `local.oplog.rs` through `client`, bounded on the server by
    /// `maxTimeMS` and retried once as every read is; the caller says what its failure
    /// means.
    pub(super) async fn aggregate_oplog(
        &self,
        client: &Client,
        pipeline: Vec<Document>,
        action: &str,
    ) -> Result<Vec<Document>, super::errors::CallError> {
        use futures_util::TryStreamExt;
        let oplog = client.database("local").collection::<Document>("oplog.rs");
        with_one_retry(self.timeout(), action, || async {
            oplog
                .aggregate(pipeline.clone())
                .max_time(self.timeout())
                .await?
                .try_collect()
                .await
        })
        .await
    }

    /// [`MongoStore::count_oplog_on`] on this replica set, or summed over the shards
    /// through a router (each shard counted up to `limit`, the sum capped at it).
    pub(super) async fn count_oplog(
        &self,
        count: OplogCount,
        limit: u64,
        action: &str,
    ) -> StoreResult<u64> {
        self.oplog_kept()?;
        if !self.router {
            return self
                .count_oplog_on(&self.client, count, limit, action)
                .await;
        }
        let mut total: u64 = 0;
        for (shard, client) in self.shard_clients().await? {
            let on_shard = format!("{action} on shard {shard}");
            let counted = self
                .count_oplog_on(&client, count.clone(), limit, &on_shard)
                .await
                .map_err(|e| super::shards::on_shard(&shard, e))?;
            total = total.saturating_add(counted);
        }
        Ok(total.min(limit.max(1)))
    }

    async fn count_oplog_on(
        &self,
        client: &Client,
        count: OplogCount,
        limit: u64,
        action: &str,
    ) -> StoreResult<u64> {
        let mut pipeline = vec![
            doc! { "$match": count.filter },
            doc! { "$limit": i64::try_from(limit.max(1)).unwrap_or(i64::MAX) },
        ];
        pipeline.push(match count.weight {
            None => doc! { "$count": "n" },
            Some(weight) => doc! { "$group": { "_id": Bson::Null, "n": { "$sum": weight } } },
        });
        let replies = self
            .aggregate_oplog(client, pipeline, action)
            .await
            .map_err(|e| e.into_store_hinted(action, OPLOG_HINT))?;
        match replies.first() {
            None => Ok(0),
            Some(reply) => {
                let n = reply.get("n").ok_or_else(|| StoreError::Malformed {
                    what: "oplog count".into(),
                    detail: "field n: missing".into(),
                })?;
                let n = super::codec::integer("oplog count", n, "n")?;
                // A weighted sum over `limit` entries may pass it: "at least `limit`".
                Ok(u64::try_from(n).unwrap_or(0).min(limit.max(1)))
            }
        }
    }
}

impl ChangeFeed for MongoStore {
    type Stream = MongoChangeStream;

    fn profile(&self) -> StreamProfile {
        self.profile
    }

    /// A partition's stream carries [`Partition::change_stream_stage`] (MongoDB 6.0
    /// and newer have `$toHashedIndexKey`); refused under the Cosmos DB profile. Under
    /// that profile the stream has the pipeline Cosmos DB requires
    /// ([`cosmos::change_stream_pipeline`]) and opens after a token or at now: a start
    /// at a time is refused here (`InvalidArgument`), never sent.
    async fn open_partition(
        &self,
        ns: &Namespace,
        partition: Option<Partition>,
        start: StartPoint,
        options: FeedOptions,
    ) -> StoreResult<MongoChangeStream> {
        let action = format!("open a change stream on {ns}");
        let collection = self.collection(ns);
        let mut pipeline = match self.profile {
            StreamProfile::MongoDb => Vec::new(),
            StreamProfile::CosmosDb => {
                if let StartPoint::At(at) = &start {
                    return Err(cosmos::no_start_at_time(ns, *at));
                }
                cosmos::change_stream_pipeline()
            }
        };
        if let Some(partition) = partition {
            if self.profile == StreamProfile::CosmosDb {
                return Err(StoreError::InvalidArgument(format!(
                    "partition {partition} of {ns}: Azure Cosmos DB change streams take only \
                     the pipeline it requires, not a filter by hashed document key"
                )));
            }
            pipeline.push(partition.change_stream_stage());
        }
        if self.profile == StreamProfile::MongoDb && self.splits_large_events {
            // Last, as the stage must be; the events it splits are put back together
            // in `next_changes`.
            pipeline.push(doc! { "$changeStreamSplitLargeEvent": {} });
        }
        let started_after = match &start {
            StartPoint::After(token) => Some(token.as_document().clone()),
            _ => None,
        };
        let resume_after = match &start {
            StartPoint::After(token) => Some(driver_token(token)?),
            _ => None,
        };
        let resume_time = match &start {
            StartPoint::After(token) => token.time(),
            _ => None,
        };
        let start_at = match start {
            StartPoint::At(time) => Some(bson::Timestamp::from(time)),
            _ => None,
        };
        let (pace, server_wait) = ReadPace::choose(&self.read_slots, options.max_await);
        // Read ahead only where reads wait on the server: a polling stream's reads take
        // turns (`ReadPace`), and Azure Cosmos DB's batches are whole pages.
        let prefetch = options.read_ahead
            && matches!(pace, ReadPace::Await(_))
            && self.profile == StreamProfile::MongoDb;
        let opened = bounded(self.timeout() + options.max_await, &action, async {
            // An explicit session only so its `$clusterTime` can be read after each
            // reply (the stream's lag, no extra query); on the wire it is what the
            // implicit one would be: an `lsid`, and no causal `afterClusterTime`.
            let mut session = self
                .client
                .start_session()
                .causal_consistency(false)
                .await?;
            let mut watch = collection
                .watch()
                .pipeline(pipeline)
                .max_await_time(server_wait)
                .resume_after(resume_after);
            if !prefetch {
                // Read ahead, the server fills its own batches (up to 16 MB).
                watch = watch.batch_size(options.batch_size.max(1));
            }
            if let Some(post) = post_image(options.post_image) {
                watch = watch.full_document(post);
            }
            if let Some(pre) = pre_image(options.pre_image) {
                watch = watch.full_document_before_change(pre);
            }
            if options.expanded_events {
                watch = watch.show_expanded_events(true);
            }
            if let Some(at) = start_at {
                watch = watch.start_at_operation_time(at);
            }
            let stream = watch.session(&mut session).await?;
            Ok::<_, mongodb::error::Error>((stream.with_type::<RawDocumentBuf>(), session))
        })
        .await
        .map_err(|e| {
            let error = unreadable_change(e.into_store_hinted(&action, STREAM_HINT));
            match (self.profile, error) {
                // No cluster time says when a Cosmos DB collection went away (a time
                // recorded beside the token is a document's, not the drop's).
                (StreamProfile::CosmosDb, error) => cosmos::stream_error(error, ns),
                // 260 after an invalidate notification: the token says when.
                (StreamProfile::MongoDb, StoreError::Invalidated { cause, at: None }) => {
                    StoreError::Invalidated {
                        cause,
                        at: resume_time,
                    }
                }
                (StreamProfile::MongoDb, other) => other,
            }
        })?;
        let (stream, session) = opened;
        let read_bound = self.timeout() + options.max_await;
        let action = format!("read the change stream on {ns}");
        let cursor = if prefetch {
            Cursor::Prefetched(Prefetch::start(stream, session, read_bound, action.clone()))
        } else {
            Cursor::Direct {
                stream: Box::new(stream),
                session: Box::new(session),
            }
        };
        Ok(MongoChangeStream {
            cursor,
            batch_size: options.batch_size.max(1) as usize,
            ns: ns.clone(),
            action,
            read_bound,
            ended: None,
            profile: self.profile,
            pending: None,
            last_token: started_after,
            pace,
            fragments: Fragments::default(),
        })
    }

    /// On a replica set its own oplog; through a router the history every shard still
    /// holds ([`ShardWindows::covered`]), or `OplogUnknown` naming the shard that could
    /// not be read.
    async fn oplog_window(&self) -> StoreResult<OplogWindow> {
        self.oplog_kept()?;
        if !self.router {
            return self.oplog_window_on(&self.client).await;
        }
        let mut shards = Vec::new();
        for (shard, window) in self.shard_reads().await? {
            // A refusal stays one (a listener is refused, not left retrying); a shard
            // out of reach leaves the window unknown for now.
            let window = match window {
                Err(e @ (StoreError::NotPermitted { .. } | StoreError::Authentication(_))) => {
                    return Err(e)
                }
                other => other.map_err(super::shards::shard_error_text),
            };
            shards.push(ShardOplog {
                name: shard.name,
                hosts: shard.hosts,
                window,
            });
        }
        ShardWindows(&shards)
            .covered()
            .map_err(StoreError::OplogUnknown)
    }

    async fn cluster_time(&self) -> StoreResult<ClusterTime> {
        let action = "read the cluster time";
        let admin = self.client.database("admin");
        let reply = with_one_retry(self.timeout(), action, || {
            std::future::IntoFuture::into_future(admin.run_command(doc! { "ping": 1 }))
        })
        .await
        .map_err(|e| e.into_store(action))?;
        if let Some(Bson::Timestamp(ts)) = reply.get("operationTime") {
            return Ok(ClusterTime::from(*ts));
        }
        match reply.get_document("$clusterTime") {
            Ok(cluster) => required_timestamp("$clusterTime", cluster, "clusterTime"),
            Err(_) => Err(StoreError::Malformed {
                what: "ping reply".into(),
                detail: "field operationTime: missing, and no $clusterTime either (is this a replica set?)".into(),
            }),
        }
    }

    async fn oplog_entry(&self, at: ClusterTime) -> StoreResult<Option<bson::Document>> {
        self.read_oplog_entry(at).await
    }
}

/// The time of one end of the oplog window from what `find` returned for it, or why
/// the window is unknown: the server showed no entry (an Atlas shared tier hides the
/// oplog from its users; the driver says "no documents in result"), or one without a
/// timestamp `ts`.
fn edge_time(entry: Option<&Document>, which: &str) -> Result<ClusterTime, String> {
    let entry = entry.ok_or_else(|| {
        format!(
            "local.oplog.rs shows this user no {which} entry (an Atlas shared tier hides its \
             oplog; a server outside a replica set keeps none)"
        )
    })?;
    required_timestamp("oplog entry", entry, "ts")
        .map_err(|e| format!("local.oplog.rs's {which} entry cannot be read: {e}"))
}

/// A failed read of an oplog edge: where the server answered but not with an entry (a
/// refusal other than a missing privilege, such as an Atlas shared tier's code 8000, or
/// a reply this program cannot read), the window is unknown rather than the read
/// failed; a missing privilege stays [`StoreError::NotPermitted`] (it names the role),
/// and a connection that failed, a primary stepping down or a read out of time stays
/// what it is: the next read may well succeed, and callers retry those.
fn window_read_error(error: StoreError) -> StoreError {
    match error {
        StoreError::Command { code, .. }
            if error.is_not_primary() || code == super::errors::MAX_TIME_EXPIRED =>
        {
            error
        }
        StoreError::Command { .. } => {
            StoreError::OplogUnknown(format!("the server refused the oplog read: {error}"))
        }
        StoreError::Malformed { .. } => StoreError::OplogUnknown(format!(
            "the server's reply to the oplog read cannot be read: {error}"
        )),
        other => other,
    }
}

/// What [`MongoStore::count_oplog`] counts: the entries `filter` matches, each once, or
/// each by its `weight` (an aggregation expression).
#[derive(Debug, Clone)]
pub(super) struct OplogCount {
    pub filter: Document,
    pub weight: Option<Bson>,
}

impl OplogCount {
    pub fn entries(filter: Document) -> Self {
        Self {
            filter,
            weight: None,
        }
    }
}

/// The changes on `on` in the oplog, and how to name it in errors: its inserts, updates
/// and deletes (on its namespace or, for a lease without `watch`, its UUID, `ui`), one
/// change each, and the transactions (`applyOps`) with one, counted by their such
/// operations on it. Commands are left out: index builds, `collMod` and the like carry
/// the collection's `ui` too, and a change stream delivers none of them unasked, so a
/// caught-up listener would never read as caught up. Chunk migrations (`fromMigrate`)
/// are never delivered as changes either. The caller adds the `ts` range.
pub(super) fn changes_on(on: &WatchedCollection) -> (OplogCount, String) {
    const WRITES: [&str; 3] = ["i", "u", "d"];
    let (field, inner, value) = match on {
        WatchedCollection::Namespace { db, coll, .. } => {
            ("ns", "o.applyOps.ns", Bson::String(format!("{db}.{coll}")))
        }
        WatchedCollection::Collection(uuid) => (
            "ui",
            "o.applyOps.ui",
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Uuid,
                bytes: uuid.to_vec(),
            }),
        ),
    };
    let filter = doc! {
        "fromMigrate": { "$ne": true },
        "$or": [
            { "op": { "$in": WRITES.as_slice() }, field: value.clone() },
            { "op": "c", inner: value.clone() },
        ],
    };
    let operation_field = format!("$$op.{field}");
    let weight = doc! {
        "$cond": [
            { "$isArray": "$o.applyOps" },
            { "$size": { "$filter": {
                "input": "$o.applyOps",
                "as": "op",
                "cond": { "$and": [
                    { "$eq": [operation_field, value] },
                    { "$in": ["$$op.op", WRITES.as_slice()] },
                ] },
            } } },
            1,
        ]
    };
    (
        OplogCount {
            filter,
            weight: Some(Bson::Document(weight)),
        },
        on.to_string(),
    )
}

impl MongoStore {
    pub(super) async fn high_water_token(&self, at: ClusterTime) -> StoreResult<ResumeToken> {
        let action = format!("turn cluster time {at} into a resume token");
        let token = bounded(self.timeout(), &action, async {
            // `batchSize: 0`: the first batch is empty, so its post-batch resume token
            // is the high-water mark at `at` itself, not after the changes there.
            let stream = self
                .client
                .watch()
                .start_at_operation_time(bson::Timestamp::from(at))
                .batch_size(0)
                .await?;
            Ok::<_, mongodb::error::Error>(stream.resume_token())
        })
        .await
        .map_err(|e| {
            e.into_store_hinted(
                &action,
                "changeStream and find on the whole deployment (a cluster-wide change stream)",
            )
        })?;
        match token {
            Some(token) => store_token(&token),
            None => Err(StoreError::Malformed {
                what: "change stream reply".into(),
                detail: format!(
                    "no post-batch resume token for a stream opened at {at} (MongoDB 4.0.7 or later sends one)"
                ),
            }),
        }
    }

    /// One `aggregate` on `local.oplog.rs` ([`changes_on`] in the `ts` range, `$limit`,
    /// the operations summed), bounded server-side by `maxTimeMS`.
    /// ([`crate::store::OperatorStore::count_changes`])
    pub(super) async fn count_oplog_changes(
        &self,
        on: &WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> StoreResult<u64> {
        let (mut count, shown) = changes_on(on);
        count.filter.insert(
            "ts",
            doc! { "$gte": bson::Timestamp::from(from), "$lte": bson::Timestamp::from(to) },
        );
        self.count_oplog(
            count,
            limit,
            &format!("count the changes on {shown} in the oplog"),
        )
        .await
    }
}

fn post_image(asked: crate::store::PostImage) -> Option<FullDocumentType> {
    use crate::store::PostImage;
    match asked {
        PostImage::Off => None,
        PostImage::UpdateLookup => Some(FullDocumentType::UpdateLookup),
        PostImage::WhenAvailable => Some(FullDocumentType::WhenAvailable),
        PostImage::Required => Some(FullDocumentType::Required),
    }
}

fn pre_image(
    asked: crate::store::PreImage,
) -> Option<mongodb::options::FullDocumentBeforeChangeType> {
    use crate::store::PreImage;
    use mongodb::options::FullDocumentBeforeChangeType as Before;
    match asked {
        PreImage::Off => None,
        PreImage::WhenAvailable => Some(Before::WhenAvailable),
        PreImage::Required => Some(Before::Required),
    }
}

/// A change the server cannot return on a stream's open or read (10334: too large;
/// 47: a required image not kept) is that change's problem, not the read's: named, so
/// the listener records it and no read is tried again at once.
fn unreadable_change(error: StoreError) -> StoreError {
    use super::errors::NO_MATCHING_DOCUMENT;
    match error {
        StoreError::Command {
            code: NO_MATCHING_DOCUMENT,
            message,
        } => match crate::model::MissingImage::parse(&message) {
            Some(missing) => StoreError::UnreadableChange(Box::new(
                crate::model::UnreadableChange::ImageMissing(missing),
            )),
            None => StoreError::Command {
                code: NO_MATCHING_DOCUMENT,
                message,
            },
        },
        StoreError::Command {
            code: super::errors::BSON_OBJECT_TOO_LARGE,
            message,
        } => StoreError::UnreadableChange(Box::new(crate::model::UnreadableChange::TooLarge(
            crate::model::TooLargeChange::parse(&message),
        ))),
        other => other,
    }
}

/// A change stream opened by [`ChangeFeed::open`].
pub struct MongoChangeStream {
    /// Events stay raw bytes until [`change_event_from_raw`] reads what a handler gets.
    cursor: Cursor,
    batch_size: usize,
    ns: Namespace,
    /// A getMore waits at most `max_await` on the server; past this the server is not answering.
    read_bound: Duration,
    /// Named in errors; formatted once, not per read.
    action: String,
    /// Why the stream ended for good, once it has: every later read answers this.
    ended: Option<StoreError>,
    profile: StreamProfile,
    /// Cosmos DB: the first event of the next page, read to learn that the page before
    /// it had ended; the next batch starts with it.
    pending: Option<ChangeEvent>,
    /// Cosmos DB: the last token this stream handed out (or started after). An empty
    /// read's token is progress only when it is another one.
    last_token: Option<Document>,
    /// Waiting on the server for changes, or polling ([`ReadPace`]).
    pace: ReadPace,
    /// The part read of an event the server split; kept across reads, since the
    /// cursor does not return a fragment twice.
    fragments: Fragments,
}

/// How a stream's cursor is read.
enum Cursor {
    /// When a batch is asked for, one command at a time. The stream's own session
    /// keeps the `$clusterTime` of its last reply.
    Direct {
        stream: Box<SessionChangeStream<RawDocumentBuf>>,
        session: Box<ClientSession>,
    },
    /// Ahead, on a task of its own ([`Prefetch`]).
    Prefetched(Prefetch),
}

impl std::fmt::Debug for MongoChangeStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoChangeStream")
            .field("ns", &self.ns)
            .field("batch_size", &self.batch_size)
            .finish()
    }
}

impl ChangeStream for MongoChangeStream {
    /// The first `next_if_any` waits up to `max_await` (one getMore). Further events
    /// are taken from the same server batch, or from further getMores while events
    /// keep arriving, until `batch_size` is reached or a getMore comes back empty; so a
    /// batch can linger up to one more `max_await` once the stream goes quiet.
    ///
    /// A drop or rename of the watched collection is read on to its `invalidate` and
    /// becomes the stream's end (`Invalidated`); the changes before it are returned
    /// first. A dead cursor answers `None` at once to every read, so the end is
    /// remembered and returned at once from then on, never read again.
    async fn next_batch(&mut self) -> StoreResult<ChangeBatch> {
        // Held through the read: a polling stream's getMores take one poll slot.
        let _turn = self.pace.turn().await;
        let started = tokio::time::Instant::now();
        let batch = if self.profile == StreamProfile::CosmosDb {
            self.next_pages().await
        } else {
            self.next_changes().await
        };
        let mut batch = batch?;
        self.pace.record(started, batch.events.is_empty());
        batch.cluster_time = self.reply_cluster_time();
        Ok(batch)
    }
}

impl MongoChangeStream {
    /// The next event, in its session, within the read bound (waiting for it).
    async fn read_next(&mut self) -> Result<Option<RawDocumentBuf>, super::errors::CallError> {
        match &mut self.cursor {
            Cursor::Direct { stream, session } => {
                next_within_session(stream, session, self.read_bound, &self.action).await
            }
            Cursor::Prefetched(prefetch) => prefetch.next().await,
        }
    }

    /// The next event if it has already been read (`None`: nothing has, or this
    /// cursor reads only when asked).
    fn read_ready(&mut self) -> Option<Result<Option<RawDocumentBuf>, super::errors::CallError>> {
        match &mut self.cursor {
            Cursor::Direct { .. } => None,
            Cursor::Prefetched(prefetch) => prefetch.ready(),
        }
    }

    fn prefetched(&self) -> bool {
        matches!(self.cursor, Cursor::Prefetched(_))
    }

    fn is_alive(&self) -> bool {
        match &self.cursor {
            Cursor::Direct { stream, .. } => stream.is_alive(),
            Cursor::Prefetched(prefetch) => prefetch.is_alive(),
        }
    }

    /// The driver's post-batch resume token (the last read was empty).
    fn post_batch_token(&self) -> StoreResult<Option<ResumeToken>> {
        let token = match &self.cursor {
            Cursor::Direct { stream, .. } => stream.resume_token(),
            Cursor::Prefetched(prefetch) => prefetch.resume_token(),
        };
        token.as_ref().map(store_token).transpose()
    }

    /// The `$clusterTime` of the stream's last reply, as its session kept it.
    fn reply_cluster_time(&self) -> Option<ClusterTime> {
        match &self.cursor {
            Cursor::Direct { session, .. } => reply_time(session),
            Cursor::Prefetched(prefetch) => prefetch.reply_cluster_time(),
        }
    }

    async fn next_changes(&mut self) -> StoreResult<ChangeBatch> {
        if let Some(ended) = &self.ended {
            return Err(ended.clone());
        }
        let mut batch = ChangeBatch::default();
        // A drop or rename seen, waiting for its `invalidate`.
        let mut closing: Option<(crate::store::InvalidationCause, ClusterTime)> = None;
        // Empty reads while waiting for it: the server sends it in the drop's batch, so
        // a few empty replies mean it is not coming, and the drop alone ends the stream.
        let mut waited = 0;
        // Bytes of the events taken: a batch holds at most the read-ahead budget (and
        // at least one event, however large).
        let mut bytes = 0;
        while closing.is_some()
            || (batch.events.len() < self.batch_size && bytes < READ_AHEAD_BYTES)
        {
            // Read ahead, a batch is what has arrived once it has a first event: it
            // waits only for that, for an event part read, or for an `invalidate`.
            let must_wait =
                batch.events.is_empty() || closing.is_some() || self.fragments.assembling();
            let next = match self.read_ready() {
                Some(ready) => ready,
                None if must_wait || !self.prefetched() => self.read_next().await,
                // Nothing more has arrived; not the stream's end (`at_end`) either.
                None => break,
            };
            let next = next
                .map_err(|e| unreadable_change(e.into_store_hinted(&self.action, STREAM_HINT)))?;
            let Some(document) = next else {
                if self.is_alive() && self.fragments.assembling() {
                    waited += 1;
                    if waited < 3 {
                        continue; // the rest of the event follows
                    }
                    return Err(self.fragments.abandon());
                }
                if self.is_alive() {
                    waited += 1;
                    if closing.is_some() && waited < 3 {
                        continue; // the invalidate follows
                    }
                    if let Some((cause, at)) = closing.take() {
                        self.ended = Some(StoreError::Invalidated {
                            cause,
                            at: Some(at),
                        });
                    }
                    batch.at_end = true;
                    break;
                }
                // The server closed the cursor and every event it sent has been read.
                self.ended = Some(match closing.take() {
                    Some((cause, at)) => StoreError::Invalidated {
                        cause,
                        at: Some(at),
                    },
                    None => StoreError::Network(format!(
                        "{}: the server closed the change stream without an invalidate event",
                        self.action
                    )),
                });
                batch.at_end = true;
                break;
            };
            bytes += document.as_bytes().len();
            let Some(document) = self.fragments.take(document)? else {
                continue;
            };
            match stream_event(&self.ns, document, self.profile)? {
                StreamEvent::Change(event) => {
                    // Only the invalidate closes a stream: a change after a drop or
                    // rename means that one did not.
                    closing = None;
                    batch.events.push(event);
                }
                StreamEvent::Closing { cause, at } => closing = Some((cause, at)),
                StreamEvent::Invalidate { at } => {
                    let (cause, at) = match closing.take() {
                        Some((cause, at)) => (cause, at),
                        None => (crate::store::InvalidationCause::Unknown, at),
                    };
                    self.ended = Some(StoreError::Invalidated {
                        cause,
                        at: Some(at),
                    });
                    batch.at_end = true;
                    break;
                }
            }
        }
        match batch.events.last() {
            Some(event) => batch.resume_token = Some(event.token.clone()),
            None => {
                if let Some(ended) = &self.ended {
                    return Err(ended.clone());
                }
                batch.resume_token = self.post_batch_token()?;
            }
        }
        Ok(batch)
    }

    /// A batch under the Cosmos DB profile: whole pages. Every event of one Cosmos DB
    /// page carries the same resume token, a continuation that resumes after the whole
    /// page (Microsoft's documentation of `GetChangeStreamTokens`: "Each document
    /// returned includes a resume token (they're all the same for each page)"). A
    /// batch that ended inside a page would commit a token that skips the rest of it
    /// on a restart, so a batch takes at least `batch_size` events and then goes on to
    /// the end of the last event's page: until an event with another token (kept for
    /// the next batch) or an empty read. With no events, the batch's token is the
    /// driver's only if it is another one than the last handed out (a post-batch token,
    /// should Cosmos DB send one); the same token again is no progress.
    async fn next_pages(&mut self) -> StoreResult<ChangeBatch> {
        if let Some(ended) = &self.ended {
            return Err(ended.clone());
        }
        let mut events: Vec<ChangeEvent> = self.pending.take().into_iter().collect();
        loop {
            let next = self.read_next().await.map_err(|e| {
                cosmos::stream_error(e.into_store_hinted(&self.action, STREAM_HINT), &self.ns)
            })?;
            let Some(document) = next else {
                if !self.is_alive() {
                    let ended = StoreError::Network(format!(
                        "{}: the server closed the change stream",
                        self.action
                    ));
                    self.ended = Some(ended.clone());
                    if events.is_empty() {
                        return Err(ended);
                    }
                }
                break;
            };
            let event = match stream_event(&self.ns, document, self.profile)? {
                StreamEvent::Change(event) => event,
                // Not produced under this profile (its events are all changes); a
                // stream that ends does so with NamespaceNotFound.
                StreamEvent::Closing { .. } | StreamEvent::Invalidate { .. } => continue,
            };
            let same_page = events
                .last()
                .is_some_and(|last| last.token.as_document() == event.token.as_document());
            if !same_page && events.len() >= self.batch_size {
                self.pending = Some(event);
                break;
            }
            events.push(event);
        }
        let resume_token = match events.last() {
            Some(last) => Some(last.token.clone()),
            None => self
                .post_batch_token()?
                .filter(|token| self.last_token.as_ref() != Some(token.as_document())),
        };
        if let Some(token) = &resume_token {
            self.last_token = Some(token.as_document().clone());
        }
        Ok(ChangeBatch {
            events,
            resume_token,
            cluster_time: None,
            // Azure Cosmos DB has no multi-document transactions to end inside.
            at_end: false,
        })
    }
}

#[cfg(test)]
mod tests;
