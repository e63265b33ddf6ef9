//! The Azure Cosmos DB profile end to end: a real `ListenerHandle` drives the real
//! driver over TCP against the scripted Cosmos DB peer (`support::wire::cosmos`), which
//! holds the lease collection and a change feed and answers only as Cosmos DB does
//! (the required pipeline, events without `operationType` or `clusterTime`, one token
//! per page, resume by token, no `local` database, no cluster time in replies).
//! docs/cosmos.md describes the profile.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document};
use chrono::{DateTime, Utc};
use streamward::engine::{
    Bootstrap, Handler, HandlerError, ListenerConfig, ListenerExit, ListenerHandle, ListenerState,
};
use streamward::model::{
    ClusterTime, Fence, HealthThresholds, LeaseHealth, LeaseStatus, ResumePoint, StreamProfile,
};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::{
    ChangeEvent, ChangeFeed, ChangeStream, FeedOptions, InvalidationCause, LeaseStore, Namespace,
    OperationType, StartPoint, StoreError,
};
use support::wire::cosmos::Cosmos;
use support::wire::WireServer;

const RESOURCE: &str = "shop.orders";
const ORDERS: &str = "shop.orders";
const LEASES: &str = "sw.leases";
/// Bounds every wait; the flows themselves take well under a second.
const PATIENCE: Duration = Duration::from_secs(15);

fn orders() -> Namespace {
    Namespace::new("shop", "orders")
}

async fn connect(server: &WireServer, profile: Option<StreamProfile>) -> MongoStore {
    let mut settings = MongoSettings::new(server.cosmos_uri());
    settings.leases = Namespace::new("sw", "leases");
    settings.server_selection_timeout = Duration::from_secs(5);
    settings.operation_timeout = Duration::from_secs(5);
    settings.profile = profile;
    MongoStore::connect(settings).await.expect("connect")
}

/// A Cosmos DB peer with the orders collection (a change stream on a collection that
/// does not exist is NamespaceNotFound there) and a store under the Cosmos profile.
async fn cosmos() -> (WireServer, Cosmos, MongoStore) {
    let server = WireServer::start().await;
    let cosmos = server.become_cosmos();
    cosmos.create(ORDERS);
    let store = connect(&server, Some(StreamProfile::CosmosDb)).await;
    (server, cosmos, store)
}

fn config(listener: &str) -> ListenerConfig {
    let mut config = ListenerConfig::new(RESOURCE, listener, orders());
    config.bootstrap = Bootstrap::Now;
    config.document_time_field = Some("updatedAt".into());
    config.lease = Duration::from_secs(60);
    config.heartbeat = Duration::from_secs(60);
    config.max_batch_wait = Duration::from_millis(200);
    config.retry_backoff = Duration::from_millis(100);
    config
}

/// Records every event it is handed, batch by batch.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Vec<ChangeEvent>>>>);

impl Handler for Recorder {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        self.0.lock().unwrap().push(events.to_vec());
        Ok(())
    }
}

impl Recorder {
    fn events(&self) -> Vec<ChangeEvent> {
        self.0.lock().unwrap().iter().flatten().cloned().collect()
    }

    fn batches(&self) -> Vec<usize> {
        self.0.lock().unwrap().iter().map(Vec::len).collect()
    }

    fn keys(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| {
                e.document_key
                    .get_str("_id")
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }
}

fn order(id: &str, status: &str, at: DateTime<Utc>) -> Document {
    doc! { "_id": id, "status": status, "updatedAt": bson::DateTime::from_chrono(at) }
}

/// A whole second, so the token time (to the second) compares exactly.
fn seconds_ago(seconds: i64) -> DateTime<Utc> {
    let now = Utc::now().timestamp();
    DateTime::from_timestamp(now - seconds, 0).unwrap()
}

/// The commits on the lease: `update` commands on the lease collection that set a token.
fn commits(server: &WireServer) -> Vec<Document> {
    server
        .commands("update")
        .into_iter()
        .filter(|c| c.get_str("update") == Ok("leases"))
        .filter_map(|c| c.get_array("updates").ok()?[0].as_document().cloned())
        .filter(|u| {
            u.get_array("u")
                .ok()
                .and_then(|p| p[0].as_document()?.get_document("$set").ok().cloned())
                .is_some_and(|set| set.contains_key("resumeToken"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_streams_a_page_commits_its_token_with_the_document_time_and_resumes_by_token() {
    let (server, cosmos, store) = cosmos().await;
    let recorder = Recorder::default();
    let first = ListenerHandle::spawn(store.clone(), config("listener-a"), recorder.clone());
    support::wait::eventually(PATIENCE, "the stream is open", || {
        cosmos.streams_opened().len() == 1
    })
    .await;
    // Opened at now: no token, and never a time.
    let opened = &cosmos.streams_opened()[0];
    assert_eq!(opened, &doc! { "fullDocument": "updateLookup" }, "{opened}");

    // Three orders in one page; the listener asks for one event per batch.
    cosmos.set_page_size(3);
    let (t1, t2, t3) = (seconds_ago(100), seconds_ago(95), seconds_ago(90));
    cosmos.write_all(
        ORDERS,
        vec![
            order("o1", "placed", t1),
            order("o2", "placed", t3),
            order("o3", "paid", t2),
        ],
    );
    support::wait::eventually(PATIENCE, "the page is handled and committed", || {
        recorder.events().len() == 3 && !commits(&server).is_empty()
    })
    .await;
    assert_eq!(recorder.keys(), ["o1", "o2", "o3"]);
    assert_eq!(
        recorder.batches(),
        [3],
        "a page is one batch: its token resumes after all of it"
    );
    let events = recorder.events();
    let page = cosmos.pages()[0].clone();
    for event in &events {
        assert_eq!(
            event.operation,
            OperationType::Upsert,
            "Cosmos DB does not say which"
        );
        assert_eq!(
            event.cluster_time, None,
            "Cosmos DB events carry no cluster time"
        );
        assert_eq!(event.token.as_document(), &page, "one token per page");
        assert_eq!(event.ns, orders());
    }
    assert_eq!(
        events[2].full_document,
        Some(order("o3", "paid", t2)),
        "the document as it is (updateLookup)"
    );

    // One commit, after the whole page: the page's token, its newest document time.
    let commits_now = commits(&server);
    assert_eq!(commits_now.len(), 1, "{commits_now:?}");
    let lease = store.get(RESOURCE).await.unwrap().expect("the lease");
    let token = lease.resume_token.clone().expect("a committed token");
    assert_eq!(token.as_document(), &page);
    assert_eq!(
        token.recorded_time(),
        Some(t3),
        "the newest updatedAt of the page"
    );
    let stored = cosmos
        .document(LEASES, RESOURCE)
        .expect("the lease document");
    assert_eq!(
        stored.get_datetime("tokenTime").map(|d| d.to_chrono()),
        Ok(t3),
        "recorded beside the token: {stored}"
    );
    // The commit left a checkpoint with the same token and document time: on Cosmos DB
    // the way back in time (written after the commit, on its own task).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let checkpoint = loop {
        let listed = streamward::store::CheckpointStore::checkpoints(&store, RESOURCE, 10)
            .await
            .unwrap();
        if let Some(first) = listed.items.into_iter().next() {
            break first;
        }
        assert!(tokio::time::Instant::now() < deadline, "a checkpoint");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(checkpoint.token.as_document(), &page);
    assert_eq!(checkpoint.token.recorded_time(), Some(t3));
    // Lag and token time from the document time: the console and `leases` read these.
    let health = LeaseHealth::assess(&lease, None, Utc::now(), &HealthThresholds::default());
    assert_eq!(
        health.token_time,
        Some(ClusterTime::new(u32::try_from(t3.timestamp()).unwrap(), 0))
    );
    let lag = health.lag.expect("a lag, from the document time");
    assert!(
        (Duration::from_secs(90)..Duration::from_secs(120)).contains(&lag),
        "{lag:?}"
    );
    assert_eq!(
        health.status,
        LeaseStatus::Behind,
        "90 s behind is over the default 60 s"
    );
    assert_eq!(
        first.snapshot().last_error,
        None,
        "every change had its time"
    );

    // Stopped (the lease released), a change meanwhile, and another listener takes over.
    first.stop().await;
    cosmos.write(ORDERS, order("o4", "placed", seconds_ago(5)));
    let second_recorder = Recorder::default();
    let second =
        ListenerHandle::spawn(store.clone(), config("listener-b"), second_recorder.clone());
    support::wait::eventually(
        PATIENCE,
        "the second listener handles the change made meanwhile",
        || !second_recorder.events().is_empty(),
    )
    .await;
    let resumed = &cosmos.streams_opened()[1];
    assert_eq!(
        resumed,
        &doc! { "fullDocument": "updateLookup", "resumeAfter": page.clone() },
        "resumed after the committed token, by token only"
    );
    assert_eq!(
        second_recorder.keys(),
        ["o4"],
        "nothing of the committed page again"
    );
    second.stop().await;

    assert!(cosmos.refusals().is_empty(), "{:?}", cosmos.refusals());
    assert_eq!(
        cosmos.local_commands(),
        0,
        "Cosmos DB has no local database to read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_the_required_pipeline_is_refused_and_the_cosmos_profile_is_not() {
    let server = WireServer::start().await;
    let cosmos = server.become_cosmos();
    cosmos.create(ORDERS);
    let options = FeedOptions::default();

    let mongodb = connect(&server, Some(StreamProfile::MongoDb)).await;
    match mongodb.open(&orders(), StartPoint::Now, options).await {
        Err(StoreError::Command { code: 2, message }) => assert!(
            message.contains("Change stream must be followed by a match and then a project stage"),
            "{message}"
        ),
        other => panic!("expected BadValue, got {other:?}"),
    }
    assert_eq!(cosmos.refusals().len(), 1, "{:?}", cosmos.refusals());

    // The same peer, the Cosmos profile: accepted, and the pipeline is the documented one.
    let store = connect(&server, Some(StreamProfile::CosmosDb)).await;
    assert_eq!(store.profile(), StreamProfile::CosmosDb);
    let mut stream = store
        .open(&orders(), StartPoint::Now, options)
        .await
        .expect("the Cosmos profile's stream opens");
    let aggregate = server.commands("aggregate").pop().expect("an aggregate");
    let pipeline = aggregate.get_array("pipeline").unwrap();
    assert_eq!(
        pipeline[1..],
        [
            Bson::Document(
                doc! { "$match": { "operationType": { "$in": ["insert", "update", "replace"] } } }
            ),
            Bson::Document(
                doc! { "$project": { "_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1 } }
            ),
        ]
    );
    cosmos.write(ORDERS, doc! { "_id": "o1" });
    // The first read answers the empty first batch; the next one is a getMore.
    let mut events = Vec::new();
    for _ in 0..3 {
        events.extend(stream.next_batch().await.unwrap().events);
    }
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(cosmos.refusals().len(), 1, "nothing more refused");

    // A start at a time is refused before anything is sent: Cosmos DB resumes by token.
    let sent = server.commands("aggregate").len();
    match store
        .open(
            &orders(),
            StartPoint::At(ClusterTime::new(1_700_000_000, 1)),
            options,
        )
        .await
    {
        Err(StoreError::InvalidArgument(message)) => {
            assert!(message.contains("never at a time"), "{message}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(server.commands("aggregate").len(), sent, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_from_the_oldest_entry_is_refused_before_anything_is_written() {
    let (server, cosmos, store) = cosmos().await;
    let mut config = config("listener-a");
    config.bootstrap = Bootstrap::Oldest;
    let listener = ListenerHandle::spawn(store, config, Recorder::default());
    support::wait::eventually(PATIENCE, "the listener refuses", || {
        listener.snapshot().state == ListenerState::Refused
    })
    .await;
    let snapshot = listener.snapshot();
    let message = snapshot.last_error.unwrap_or_default();
    assert!(
        message.contains("Azure Cosmos DB")
            && message.contains("no oplog")
            && message.contains("bootstrap = now"),
        "{message}"
    );
    match listener.stop().await {
        Some(ListenerExit::Refused(why)) => assert_eq!(why, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(
        server.commands("findAndModify").is_empty(),
        "no lease was taken"
    );
    assert!(
        server.commands("aggregate").is_empty(),
        "no stream was opened"
    );
    assert_eq!(cosmos.local_commands(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_document_time_the_lag_is_unknown_and_a_missing_one_is_reported() {
    let (_server, cosmos, store) = cosmos().await;
    let recorder = Recorder::default();
    let mut no_field = config("listener-a");
    no_field.document_time_field = None;
    let listener = ListenerHandle::spawn(store.clone(), no_field, recorder.clone());
    support::wait::eventually(PATIENCE, "the stream is open", || {
        cosmos.streams_opened().len() == 1
    })
    .await;
    cosmos.write(ORDERS, order("o1", "placed", seconds_ago(30)));
    support::wait::eventually(PATIENCE, "committed", || {
        cosmos
            .document(LEASES, RESOURCE)
            .is_some_and(|l| l.get_document("resumeToken").is_ok())
    })
    .await;
    let lease = store.get(RESOURCE).await.unwrap().unwrap();
    assert!(!cosmos
        .document(LEASES, RESOURCE)
        .unwrap()
        .contains_key("tokenTime"));
    assert_eq!(
        lease.resume_point().time(),
        None,
        "no field configured: no time"
    );
    let health = LeaseHealth::assess(&lease, None, Utc::now(), &HealthThresholds::default());
    assert_eq!(
        (health.token_time, health.lag),
        (None, None),
        "unknown, not invented"
    );
    listener.stop().await;

    // The field configured, but a document keeps its time as text: reported, no time.
    let listener = ListenerHandle::spawn(store.clone(), config("listener-b"), recorder.clone());
    support::wait::eventually(PATIENCE, "the stream is open again", || {
        cosmos.streams_opened().len() == 2
    })
    .await;
    cosmos.write(
        ORDERS,
        doc! { "_id": "o2", "updatedAt": "2024-05-01T12:00:00Z" },
    );
    support::wait::eventually(PATIENCE, "the change is handled", || {
        recorder.events().len() == 2
    })
    .await;
    support::wait::eventually(PATIENCE, "the problem is reported", || {
        listener.snapshot().last_error.is_some()
    })
    .await;
    let message = listener.snapshot().last_error.unwrap();
    assert!(
        message.contains("\"updatedAt\"")
            && message.contains("o2")
            && message.contains("not a date")
            && message.contains("unknown"),
        "{message}"
    );
    support::wait::eventually(PATIENCE, "committed without a time", || {
        cosmos.document(LEASES, RESOURCE).is_some_and(|l| {
            l.get_document("resumeToken").ok()
                != lease.resume_token.as_ref().map(|t| t.as_document())
        })
    })
    .await;
    let stored = cosmos.document(LEASES, RESOURCE).unwrap();
    assert!(!stored.contains_key("tokenTime"), "{stored}");
    listener.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_are_invisible_and_a_soft_delete_marker_is_seen() {
    let (_server, cosmos, store) = cosmos().await;
    let recorder = Recorder::default();
    let listener = ListenerHandle::spawn(store, config("listener-a"), recorder.clone());
    support::wait::eventually(PATIENCE, "the stream is open", || {
        cosmos.streams_opened().len() == 1
    })
    .await;
    cosmos.write(ORDERS, order("o1", "placed", seconds_ago(3)));
    support::wait::eventually(PATIENCE, "the insert is seen", || {
        recorder.events().len() == 1
    })
    .await;
    // A delete: Cosmos DB's change streams carry none.
    cosmos.delete(ORDERS, "o1");
    cosmos.write(ORDERS, order("o2", "placed", seconds_ago(2)));
    support::wait::eventually(PATIENCE, "the next change is seen", || {
        recorder.events().len() == 2
    })
    .await;
    assert_eq!(
        recorder.keys(),
        ["o1", "o2"],
        "the delete of o1 never arrived"
    );
    // The documented workaround: mark it deleted (an update, so it is seen), let a TTL
    // remove it later.
    let mut marked = order("o2", "placed", seconds_ago(1));
    marked.insert("deleted", true);
    cosmos.write(ORDERS, marked.clone());
    support::wait::eventually(PATIENCE, "the soft delete is seen", || {
        recorder.events().len() == 3
    })
    .await;
    let last = recorder.events().pop().unwrap();
    assert_eq!(last.full_document, Some(marked));
    assert_eq!(last.operation, OperationType::Upsert);
    listener.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_collection_leaves_the_listener_invalidated() {
    let (_server, cosmos, store) = cosmos().await;
    let recorder = Recorder::default();
    let listener = ListenerHandle::spawn(store.clone(), config("listener-a"), recorder.clone());
    support::wait::eventually(PATIENCE, "the stream is open", || {
        cosmos.streams_opened().len() == 1
    })
    .await;
    cosmos.write(ORDERS, order("o1", "placed", seconds_ago(3)));
    support::wait::eventually(PATIENCE, "the change is seen", || {
        recorder.events().len() == 1
    })
    .await;
    // Cosmos DB answers NamespaceNotFound where MongoDB sends an invalidate event.
    cosmos.drop_collection(ORDERS);
    support::wait::eventually(PATIENCE, "the listener is invalidated", || {
        listener.snapshot().state == ListenerState::Invalidated
    })
    .await;
    let lease = store.get(RESOURCE).await.unwrap().unwrap();
    let invalidated = lease.invalidated.clone().expect("recorded on the lease");
    assert_eq!(
        invalidated.reason,
        InvalidationCause::Missing(orders()).to_string()
    );
    assert!(matches!(lease.resume_point(), ResumePoint::Token(_)));
    listener.stop().await;

    assert_eq!(invalidated.at, None, "no cluster time says when");

    // Opening on a collection that is not there says the same, also after a token with
    // a time recorded beside it: that is a document's time, not the drop's.
    let token = lease.resume_token.clone().unwrap();
    assert!(token.recorded_time().is_some());
    for start in [StartPoint::Now, StartPoint::After(token)] {
        match store.open(&orders(), start, FeedOptions::default()).await {
            Err(StoreError::Invalidated {
                cause: InvalidationCause::Missing(ns),
                at: None,
            }) => assert_eq!(ns, orders()),
            other => panic!("expected the collection missing, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_profile_follows_cosmos_host_names_unless_configured() {
    // Host names decide (no server reply needed); the scripted peer is at 127.0.0.1, so
    // detection is tested on the names, and the configured profile on the store.
    let cosmos_hosts = vec!["shop.mongo.cosmos.azure.com:10255".to_string()];
    assert_eq!(
        StreamProfile::detect(&cosmos_hosts),
        StreamProfile::CosmosDb
    );
    let server = WireServer::start().await;
    server.become_cosmos();
    let unset = connect(&server, None).await;
    assert_eq!(
        unset.profile(),
        StreamProfile::MongoDb,
        "127.0.0.1 is no Cosmos DB host"
    );
    let configured = connect(&server, Some(StreamProfile::CosmosDb)).await;
    assert_eq!(configured.profile(), StreamProfile::CosmosDb);
    assert_eq!(ChangeFeed::profile(&configured), StreamProfile::CosmosDb);
}

/// The peer holds to the documented shape, so the tests above prove the adapter sends
/// it: every departure from it is refused, and only the documented shapes are taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_refuses_every_departure_from_the_documented_shape() {
    use mongodb::options::FullDocumentType;
    let server = WireServer::start().await;
    let cosmos = server.become_cosmos();
    cosmos.create(ORDERS);
    let store = connect(&server, Some(StreamProfile::CosmosDb)).await;
    let collection = store
        .client()
        .database("shop")
        .collection::<Document>("orders");
    let operations =
        doc! { "$match": { "operationType": { "$in": ["insert", "update", "replace"] } } };
    let project = doc! { "$project": { "_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1 } };
    let cases: Vec<(&str, Vec<Document>, bool, bool)> = vec![
        (
            "documented",
            vec![operations.clone(), project.clone()],
            true,
            true,
        ),
        (
            "a filter of its own, $and-combined",
            vec![
                doc! { "$match": { "$and": [{ "fullDocument.a": 1 }, operations.get_document("$match").unwrap().clone()] } },
                project.clone(),
            ],
            true,
            true,
        ),
        (
            "no fullDocument option",
            vec![operations.clone(), project.clone()],
            false,
            false,
        ),
        ("no $project", vec![operations.clone()], true, false),
        (
            "the stages swapped",
            vec![project.clone(), operations.clone()],
            true,
            false,
        ),
        (
            "deletes asked for",
            vec![
                doc! { "$match": { "operationType": { "$in": ["insert", "update", "replace", "delete"] } } },
                project.clone(),
            ],
            true,
            false,
        ),
        (
            "operationType projected",
            vec![
                operations.clone(),
                doc! { "$project": { "_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1, "operationType": 1 } },
            ],
            true,
            false,
        ),
    ];
    for (name, pipeline, lookup, accepted) in cases {
        let mut watch = collection.watch().pipeline(pipeline);
        if lookup {
            watch = watch.full_document(FullDocumentType::UpdateLookup);
        }
        let opened = watch.await;
        assert_eq!(opened.is_ok(), accepted, "{name}: {:?}", opened.err());
        if let Err(error) = opened {
            assert!(error.to_string().contains("BadValue"), "{name}: {error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_waits_on_the_lease_through_a_cosmos_change_stream_and_takes_over() {
    let (server, cosmos, store) = cosmos().await;
    let first_recorder = Recorder::default();
    let first = ListenerHandle::spawn(store.clone(), config("listener-a"), first_recorder.clone());
    support::wait::eventually(PATIENCE, "the first listener streams", || {
        first.snapshot().state == ListenerState::Streaming
    })
    .await;
    let standby = ListenerHandle::spawn(store.clone(), config("listener-b"), Recorder::default());
    support::wait::eventually(PATIENCE, "the second stands by, watching the lease", || {
        standby.snapshot().state == ListenerState::Standby
            && server
                .commands("aggregate")
                .iter()
                .any(|c| c.get_str("aggregate") == Ok("leases"))
    })
    .await;
    // The process's one lease stream has the shape Cosmos DB requires; the standby's
    // lease is picked out of it in the process.
    let watch = server
        .commands("aggregate")
        .into_iter()
        .find(|c| c.get_str("aggregate") == Ok("leases"))
        .unwrap();
    let pipeline = watch.get_array("pipeline").unwrap();
    assert_eq!(
        &pipeline[1..],
        &[
            Bson::Document(
                doc! { "$match": { "operationType": { "$in": ["insert", "update", "replace"] } } }
            ),
            Bson::Document(
                doc! { "$project": { "_id": 1, "fullDocument": 1, "ns": 1, "documentKey": 1 } }
            ),
        ]
    );
    first.stop().await;
    support::wait::eventually(PATIENCE, "the standby takes over", || {
        standby.snapshot().state == ListenerState::Streaming
    })
    .await;
    let lease = store.get(RESOURCE).await.unwrap().unwrap();
    assert_eq!(lease.holder.as_deref(), Some("listener-b"));
    assert_eq!(standby.snapshot().last_error, None);
    assert!(cosmos.refusals().is_empty(), "{:?}", cosmos.refusals());
    standby.stop().await;
}

/// The binary on a Cosmos DB account, as an operator runs it with `profile = "cosmos"`
/// in the config file: `leases` lists with the topology noted, `oplog` says there is no
/// oplog (exit 5) without asking for one, and a takeover is planned and executed with
/// its audit record, though Cosmos DB sends no `operationTime`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_oplog_and_a_takeover_work_on_cosmos_with_the_limits_stated() {
    let (server, _cosmos, store) = cosmos().await;
    let listener = ListenerHandle::spawn(store.clone(), config("listener-a"), Recorder::default());
    support::wait::eventually(PATIENCE, "the listener streams", || {
        listener.snapshot().state == ListenerState::Streaming
    })
    .await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let config_file = dir.path().join("streamward.toml");
    std::fs::write(
        &config_file,
        "profile = \"cosmos\"\n\n[rebuilds.order-rollup]\nresource = \"shop.orders\"\n\
         db = \"shop\"\ncollection = \"orders\"\n\
         pipeline = '[{\"$merge\": {\"into\": \"order_counts\"}}]'\n",
    )
    .expect("write the config");
    let uri = server.cosmos_uri();
    let run = |args: &[&str]| {
        let mut cmd = assert_cmd::Command::cargo_bin("streamward").expect("binary");
        cmd.args(args)
            .args(["--uri", &uri, "--leases", LEASES, "--config"])
            .arg(&config_file)
            .env_remove("STREAMWARD_URI")
            .env("NO_COLOR", "1")
            .current_dir(dir.path())
            .timeout(Duration::from_secs(60));
        async move {
            tokio::task::spawn_blocking(move || cmd.output().expect("runs"))
                .await
                .expect("ran")
        }
    };
    let text = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };

    let out = run(&["leases"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains(RESOURCE), "{}", text(&out));
    assert!(
        text(&out).contains("note: Azure Cosmos DB"),
        "{}",
        text(&out)
    );

    let out = run(&["oplog"]).await;
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(
        text(&out).contains("topology      Azure Cosmos DB"),
        "{}",
        text(&out)
    );
    assert!(
        server
            .commands("find")
            .iter()
            .all(|c| c.get_str("$db") != Ok("local")),
        "nothing asked of a local database Cosmos DB does not have"
    );
    // Nor for the time to loss (the exporter's and `leases --watch`'s reads).
    assert!(matches!(
        store.oplog_stats().await,
        Err(StoreError::NoOplog(_))
    ));
    assert!(matches!(
        store
            .oplog_history_before(ClusterTime::new(1_800_000_000, 1), 10)
            .await,
        Err(StoreError::NoOplog(_))
    ));
    let on_local: Vec<String> = server
        .received()
        .into_iter()
        .filter(|r| r.body.get_str("$db") == Ok("local"))
        .map(|r| r.name)
        .collect();
    assert!(
        on_local.is_empty(),
        "no command of any kind on local: {on_local:?}"
    );

    let out = run(&[
        "takeover",
        RESOURCE,
        "--execute",
        "--reason",
        "hung",
        "--operator",
        "ann",
    ])
    .await;
    eprintln!("takeover on Cosmos DB:\n{}", text(&out));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("applied: takeover"), "{}", text(&out));
    let lease = store.get(RESOURCE).await.unwrap().unwrap();
    assert_eq!(lease.holder, None, "released to any standby");

    // A rebuild cannot hand its listeners a time to replay from: refused, nothing written.
    let writes_before = server.commands("findAndModify").len();
    let out = run(&["rebuild", "order-rollup", "--execute"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("Azure Cosmos DB has no cluster time"),
        "{}",
        text(&out)
    );
    assert_eq!(server.commands("findAndModify").len(), writes_before);
    listener.stop().await;
}
