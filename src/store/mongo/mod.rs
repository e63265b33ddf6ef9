//! The store ports on the official `mongodb` driver (production).
//!
//! One driver command per port method, as docs/protocol.md §3 describes, except where a
//! method's contract needs more: `oplog_window` (first and last entry),
//! `operator_swap` (compare-and-swap, then the read-back) and `replace_all`
//! (a replace per document, then one delete). The client is built
//! with `retryWrites=false`/`retryReads=false`: this adapter owns the single retry
//! (see [`errors`]), and every write it retries is conditional: lease writes on
//! holder and version, audit writes on the record's `_id` and state.

mod audit;
mod capped;
mod checkpoints;
mod codec;
mod connect;
mod cosmos;
mod documents;
mod errors;
mod feed;
mod increments;
mod lease_hub;
mod lease_write;
mod leases;
mod members;
mod membership;
mod oplog_stats;
mod prefetch;
mod read_pace;
mod redact;
mod shards;
mod skipped;
mod split_event;
pub mod version;

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use mongodb::options::{Acknowledgment, ClientOptions, WriteConcern};
use mongodb::{Client, Collection};

pub use capped::MongoTail;
pub use connect::MongoSettings;
pub use feed::MongoChangeStream;
pub use lease_hub::MongoLeaseWatch;
#[cfg(test)]
pub(crate) use members::parse_members;
pub use members::{MemberState, ReplicaMember};
pub use redact::{redact_message, redact_uri, ConnectionString};

use crate::model::{Deployment, StreamProfile};
use crate::store::{Namespace, StoreError};

/// How much longer than the write concern's `wtimeout` the client waits for a majority
/// write's reply: the server starts its `wtimeout` clock only once the write is applied,
/// and its reply still has to travel.
const WRITE_CONCERN_GRACE: Duration = Duration::from_secs(1);

/// A connected store. Cloning is cheap (the driver client is shared).
#[derive(Debug, Clone)]
pub struct MongoStore {
    client: Client,
    settings: Arc<MongoSettings>,
    /// The hosts the connection string named (SRV records resolved).
    hosts: Arc<[String]>,
    /// The options the client was built with: a shard's client starts from them.
    client_options: Arc<ClientOptions>,
    /// Connected to a mongos router: the oplog is read on each shard.
    router: bool,
    shard_clients: Arc<shards::ShardClients>,
    /// Set once the checkpoints' index was asked for (made or refused): asked once.
    checkpoint_index: Arc<tokio::sync::OnceCell<()>>,
    /// The one change stream on the lease collection every lease watch shares.
    lease_hub: Arc<lease_hub::LeaseHub>,
    /// How many data streams may wait on the server, and how many polls may be in
    /// the driver's hands, at once ([`read_pace`]).
    read_slots: read_pace::ReadSlots,
    /// The configured profile, else the one the host names tell.
    profile: StreamProfile,
    /// Azure Cosmos DB (by the profile or the host names, vCore included): it keeps no
    /// oplog, and nothing is sent to read one.
    no_oplog: bool,
    /// Change streams end in `$changeStreamSplitLargeEvent`: the server takes it.
    splits_large_events: bool,
}

impl MongoStore {
    /// Connects and verifies the cluster answers. Errors: `InvalidArgument` for a
    /// malformed URI, `Unreachable` when no server answers within the server
    /// selection timeout, `Authentication`, `NotPermitted`. Messages never contain
    /// the password.
    pub async fn connect(settings: MongoSettings) -> Result<MongoStore, StoreError> {
        Self::connect_with(settings, |_| {}).await
    }

    /// [`MongoStore::connect`] with a last say on the driver's options, e.g. a
    /// command event handler for monitoring, or TLS settings the URI cannot carry.
    /// Leave `retry_writes` and `retry_reads` off: this adapter owns the retry.
    pub async fn connect_with(
        settings: MongoSettings,
        tweak: impl FnOnce(&mut mongodb::options::ClientOptions),
    ) -> Result<MongoStore, StoreError> {
        let opened = connect::open_client(&settings, tweak).await?;
        let hosts: Vec<String> = opened
            .options
            .hosts
            .iter()
            .map(ToString::to_string)
            .collect();
        let detected = StreamProfile::detect(&hosts);
        let profile = settings.profile.unwrap_or(detected);
        if profile != detected {
            tracing::warn!(
                configured = %profile,
                by_host_names = %detected,
                "the configured stream profile differs from the one the host names tell; the configured one is used"
            );
        }
        let no_oplog = profile == StreamProfile::CosmosDb
            || Deployment::detect(None, None, &hosts) == Deployment::CosmosDb;
        let read_slots = read_pace::ReadSlots::new(opened.options.max_pool_size);
        Ok(MongoStore {
            client: opened.client,
            settings: Arc::new(settings),
            hosts: hosts.into(),
            client_options: Arc::new(opened.options),
            router: opened.router,
            shard_clients: Arc::default(),
            checkpoint_index: Arc::default(),
            lease_hub: Arc::default(),
            read_slots,
            profile,
            no_oplog,
            splits_large_events: opened.splits_large_events,
        })
    }

    /// Which kind of change streams this store opens (see [`MongoSettings::profile`]).
    pub fn profile(&self) -> StreamProfile {
        self.profile
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn collection(&self, ns: &Namespace) -> Collection<Document> {
        self.client.database(&ns.db).collection(&ns.coll)
    }

    fn leases(&self) -> Collection<Document> {
        self.collection(&self.settings.leases)
    }

    fn audit(&self) -> Collection<Document> {
        self.collection(&self.settings.audit())
    }

    /// The cluster's URI with any password replaced, safe to show.
    pub fn redacted_uri(&self) -> String {
        self.settings.uri.redacted()
    }

    /// `Err(NoOplog)` where the deployment keeps none: every oplog read asks this first.
    fn oplog_kept(&self) -> Result<(), StoreError> {
        if self.no_oplog {
            return Err(StoreError::NoOplog("Azure Cosmos DB keeps no oplog".into()));
        }
        Ok(())
    }

    fn timeout(&self) -> Duration {
        self.settings.operation_timeout
    }

    /// The client's bound on one majority write: the write concern's `wtimeout` (the
    /// operation timeout) plus [`WRITE_CONCERN_GRACE`]. With the same bound on both
    /// sides the client always gave up first, so a majority out of reach was reported
    /// as a lost reply ("no reply within …") and the connection dropped, and the
    /// server's own answer (`writeConcernError` 64: applied here, not confirmed by a
    /// majority) never reached the caller (seen on a real 6.0.5: tests/failover_live.rs).
    fn write_timeout(&self) -> Duration {
        self.settings.operation_timeout + WRITE_CONCERN_GRACE
    }

    /// Every document of `collection` sorted by `_id` (a missing collection is empty).
    async fn read_all(
        &self,
        collection: Collection<Document>,
        action: &str,
    ) -> Result<Vec<Document>, errors::CallError> {
        self.read_matching(collection, bson::doc! {}, None, action)
            .await
    }

    /// The documents of `collection` that `filter` selects, sorted by `_id`, with only
    /// the fields of `projection` when one is given (an empty projection is every
    /// field); retried once (it only reads).
    async fn read_matching(
        &self,
        collection: Collection<Document>,
        filter: Document,
        projection: Option<Document>,
        action: &str,
    ) -> Result<Vec<Document>, errors::CallError> {
        use futures_util::TryStreamExt;
        errors::with_one_retry(self.timeout(), action, || async {
            let mut find = collection
                .find(filter.clone())
                .sort(bson::doc! { "_id": 1 });
            if let Some(projection) = &projection {
                find = find.projection(projection.clone());
            }
            find.await?.try_collect().await
        })
        .await
    }

    /// `{w: "majority", wtimeout: <operation timeout>}`.
    fn majority(&self) -> WriteConcern {
        WriteConcern::builder()
            .w(Acknowledgment::Majority)
            .w_timeout(self.settings.operation_timeout)
            .build()
    }
}
