//! Partitioned resources (docs/protocol.md, "Partitions"), on the sandbox and on the
//! real replica set named by `STREAMWARD_TEST_URI` (the live tests say they are skipped
//! without it, and fail instead under `STREAMWARD_REQUIRE_LIVE=1` or CI):
//!
//! - the sandbox's hash is the server's `$toHashedIndexKey`, for many values of many
//!   BSON types (the proof that the sandbox partitions as MongoDB does);
//! - P = 4 listeners on one collection deliver every change exactly once, each key's
//!   changes in order and in the partition its hash names;
//! - changing P from 2 to 3 loses nothing: the new partitions start at the oldest
//!   committed point of the old ones, and the source-version fence absorbs what the
//!   more advanced old partition had already handled;
//! - in a fleet of two processes, four partition leases settle at two each.
//!
//! That a partition's stream holds the changes its hash names is a port check, in the
//! store contract (`streamward::contract::partitions`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, oid::ObjectId, Bson, Document};
use chrono::Utc;
use streamward::engine::fenced::{write_with_source_version, Applied};
use streamward::engine::{
    Handler, HandlerError, ListenerConfig, ListenerExit, ListenerHandle, ListenerState,
};
use streamward::model::{hashed_index_key, Fence, Partition, SourceKind};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{
    ChangeEvent, DocumentStore, LeaseStore, MembershipStore, Namespace, Store,
};
use support::live::{live, LiveDb};

const RESOURCE: &str = "orders-projection";
/// Bounds every wait: the flows take a few seconds.
const PATIENCE: Duration = Duration::from_secs(60);

/// One delivery: which partition lease handled which change of which key.
#[derive(Debug, Clone)]
struct Delivery {
    lease: String,
    key: String,
    n: i64,
}

/// Records every delivery and projects each key's latest `n` into `target`, fenced by
/// the source version (`n`): a replay changes nothing and is counted.
#[derive(Clone)]
struct Recorder<S> {
    store: S,
    target: Namespace,
    seen: Arc<Mutex<Vec<Delivery>>>,
    replays: Arc<Mutex<u64>>,
}

impl<S> Recorder<S> {
    fn new(store: S, target: Namespace) -> Self {
        Self {
            store,
            target,
            seen: Arc::default(),
            replays: Arc::default(),
        }
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

/// A key as text, the same for every BSON type used here.
fn key_text(id: &Bson) -> String {
    id.clone().into_relaxed_extjson().to_string()
}

impl<S: DocumentStore + Clone + Send + Sync + 'static> Handler for Recorder<S> {
    async fn handle(&mut self, events: &[ChangeEvent], fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            let id = event.document_key.get("_id").cloned().unwrap_or(Bson::Null);
            let n = event
                .full_document
                .as_ref()
                .and_then(|d| d.get_i64("n").ok())
                .ok_or_else(|| HandlerError::Failed(format!("no n in {event:?}")))?;
            let applied = write_with_source_version(
                &self.store,
                &self.target,
                &Bson::String(key_text(&id)),
                n,
                doc! { "n": n },
            )
            .await?;
            if applied == Applied::AlreadyApplied {
                *self.replays.lock().expect("not poisoned") += 1;
            }
            self.seen.lock().expect("not poisoned").push(Delivery {
                lease: fence.resource.clone(),
                key: key_text(&id),
                n,
            });
        }
        Ok(())
    }
}

/// Keys of several BSON types: strings, 32- and 64-bit integers, ObjectIds, documents.
fn keys(count: usize) -> Vec<Bson> {
    (0..count)
        .map(|i| match i % 5 {
            0 => Bson::String(format!("order-{i}")),
            1 => Bson::Int32(i32::try_from(i).expect("small") - 20),
            2 => Bson::Int64(i64::try_from(i).expect("small") * 1_000_000_007),
            3 => Bson::ObjectId(ObjectId::new()),
            _ => Bson::Document(doc! { "region": "eu", "seq": i64::try_from(i).expect("small") }),
        })
        .collect()
}

/// Writes round `n` of every key: an insert at round 0, a replacement after.
async fn write_round(store: &impl DocumentStore, ns: &Namespace, keys: &[Bson], n: i64) {
    for key in keys {
        store
            .put(ns, doc! { "_id": key.clone(), "n": n })
            .await
            .expect("write");
    }
}

fn config(ns: &Namespace, partition: Partition, id: &str) -> ListenerConfig {
    let mut config = ListenerConfig::new(RESOURCE, id, ns.clone()).partitioned(partition);
    config.batch_size = 16;
    config.lease = Duration::from_secs(5);
    config.max_batch_wait = Duration::from_millis(200);
    config.heartbeat = Duration::from_millis(300);
    config.retry_backoff = Duration::from_millis(200);
    config.checkpoint_every = None;
    config
}

fn start<S: Store + DocumentStore + Sync>(
    store: &S,
    recorder: &Recorder<S>,
    ns: &Namespace,
    count: u32,
    generation: &str,
) -> Vec<ListenerHandle> {
    Partition::all(count)
        .expect("a valid count")
        .into_iter()
        .map(|p| {
            let id = format!("{generation}-{}", p.index());
            ListenerHandle::spawn(store.clone(), config(ns, p, &id), recorder.clone())
        })
        .collect()
}

/// Waits until `done` holds of the deliveries, then a little longer so that a
/// duplicate would show.
async fn wait_for<S>(recorder: &Recorder<S>, what: &str, done: impl Fn(&[Delivery]) -> bool) {
    let waited = tokio::time::timeout(PATIENCE, async {
        while !done(&recorder.deliveries()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "{what}: not done within {PATIENCE:?}; delivered {:?}",
        recorder.deliveries()
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
}

async fn stop_all(handles: Vec<ListenerHandle>) {
    for handle in handles {
        assert_eq!(handle.stop().await, Some(ListenerExit::Stopped));
    }
}

/// The partition `count` ways that holds `key`, by the hash computed here.
fn partition_of(key: &Bson, count: u32) -> u32 {
    Partition::of_hash(hashed_index_key(key).expect("hashable"), count)
}

fn lease_of(key: &Bson, count: u32) -> String {
    Partition::new(partition_of(key, count), count)
        .expect("valid")
        .lease_id(RESOURCE)
}

async fn four_partitions_deliver_every_change_once_in_key_order<S>(store: S, db: &str)
where
    S: Store + DocumentStore + Sync,
{
    let ns = Namespace::new(db, "orders");
    let target = Namespace::new(db, "projection");
    let keys = keys(40);
    for n in 0..3 {
        write_round(&store, &ns, &keys, n).await;
    }
    let recorder = Recorder::new(store.clone(), target.clone());
    let handles = start(&store, &recorder, &ns, 4, "p4");
    let expected = keys.len() * 3;
    wait_for(&recorder, "every change", |d| d.len() >= expected).await;
    // One more round while they stream.
    write_round(&store, &ns, &keys, 3).await;
    let expected = keys.len() * 4;
    wait_for(&recorder, "the fourth round", |d| d.len() >= expected).await;
    let states: Vec<ListenerState> = handles.iter().map(|h| h.snapshot().state).collect();
    stop_all(handles).await;

    let deliveries = recorder.deliveries();
    assert_eq!(
        deliveries.len(),
        expected,
        "every change exactly once (states {states:?})"
    );
    let mut per_key: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    for d in &deliveries {
        per_key
            .entry(d.key.clone())
            .or_default()
            .push((d.lease.clone(), d.n));
    }
    let mut leases_used = BTreeSet::new();
    for key in &keys {
        let got = per_key.get(&key_text(key)).cloned().unwrap_or_default();
        let lease = lease_of(key, 4);
        assert_eq!(
            got,
            (0..4).map(|n| (lease.clone(), n)).collect::<Vec<_>>(),
            "{key}: every change, in order, from the partition its hash names"
        );
        leases_used.insert(lease);
    }
    assert_eq!(
        leases_used.len(),
        4,
        "40 keys spread over all four partitions"
    );
    assert_eq!(*recorder.replays.lock().expect("not poisoned"), 0);
    for partition in Partition::all(4).expect("valid") {
        let lease = store
            .get(&partition.lease_id(RESOURCE))
            .await
            .expect("read the lease")
            .expect("the partition's lease exists");
        assert!(lease.resume_token.is_some(), "{} committed", lease.resource);
        let watch = lease.watch.expect("the listener recorded what it reads");
        assert_eq!(watch.source, SourceKind::ChangeStream);
        assert!(
            watch.pipeline.contains("$toHashedIndexKey")
                && watch.pipeline.contains(&format!("{}", partition.index())),
            "{}",
            watch.pipeline
        );
    }
}

async fn changing_from_two_partitions_to_three_loses_nothing<S>(store: S, db: &str)
where
    S: Store + DocumentStore + Sync,
{
    let ns = Namespace::new(db, "orders");
    let target = Namespace::new(db, "projection");
    let keys = keys(30);
    let in_old = |key: &Bson| partition_of(key, 2);
    let old_zero = keys.iter().filter(|k| in_old(k) == 0).count();
    assert!(
        old_zero > 0 && old_zero < keys.len(),
        "both old partitions have keys"
    );

    // Two partitions handle rounds 0 and 1.
    for n in 0..2 {
        write_round(&store, &ns, &keys, n).await;
    }
    let old = Recorder::new(store.clone(), target.clone());
    let mut two = start(&store, &old, &ns, 2, "p2");
    wait_for(&old, "rounds 0 and 1", |d| d.len() >= keys.len() * 2).await;
    // Partition 1/2 stops; partition 0/2 goes on through round 2: its committed
    // point is now later than 1/2's.
    let zero = two.remove(0);
    stop_all(two).await;
    write_round(&store, &ns, &keys, 2).await;
    wait_for(&old, "round 2 of partition 0/2", |d| {
        d.len() >= keys.len() * 2 + old_zero
    })
    .await;
    stop_all(vec![zero]).await;
    write_round(&store, &ns, &keys, 3).await;

    // Three partitions take over.
    let new = Recorder::new(store.clone(), target.clone());
    let three = start(&store, &new, &ns, 3, "p3");
    let must = |d: &[Delivery]| -> BTreeSet<(String, i64)> {
        d.iter().map(|d| (d.key.clone(), d.n)).collect()
    };
    wait_for(&new, "rounds 2 and 3 under three partitions", |d| {
        let got = must(d);
        keys.iter().all(|k| {
            got.contains(&(key_text(k), 3)) && (in_old(k) == 0 || got.contains(&(key_text(k), 2)))
        })
    })
    .await;
    stop_all(three).await;

    let before = old.deliveries();
    let after = new.deliveries();
    // Nothing lost: every change of every key was handled by one generation or both.
    let all: BTreeSet<(String, i64)> = must(&before).union(&must(&after)).cloned().collect();
    for key in &keys {
        for n in 0..4 {
            assert!(all.contains(&(key_text(key), n)), "{key} round {n} lost");
        }
    }
    // The new split started at the old one's oldest committed point, not at the
    // oldest oplog entry: no round 0 again.
    assert!(
        after.iter().all(|d| d.n >= 1),
        "the new partitions started before the old ones' committed points: {after:?}"
    );
    // Each new partition's deliveries are its keys', each key's in order.
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for d in &after {
        let key = keys
            .iter()
            .find(|k| key_text(k) == d.key)
            .expect("a written key");
        assert_eq!(d.lease, lease_of(key, 3), "{} in its new partition", d.key);
        per_key.entry(d.key.clone()).or_default().push(d.n);
    }
    for (key, ns_seen) in &per_key {
        assert!(
            ns_seen.windows(2).all(|w| w[0] < w[1]),
            "{key} in order: {ns_seen:?}"
        );
    }
    // What the advanced partition had already handled came again, and the fence
    // skipped it: the projection holds every key's last round.
    let replays = *new.replays.lock().expect("not poisoned");
    assert!(
        replays >= u64::try_from(old_zero).expect("small"),
        "round 2 of 0/2's keys came again (replays {replays})"
    );
    let projected = store.find_all(&target).await.expect("read the projection");
    assert_eq!(projected.len(), keys.len());
    for document in projected {
        assert_eq!(document.get_i64("n"), Ok(3), "{document}");
    }
}

fn sandbox() -> SandboxStore {
    SandboxStore::new(SandboxConfig::default(), Clock::System)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_four_partitions_deliver_every_change_once_in_key_order() {
    four_partitions_deliver_every_change_once_in_key_order(sandbox(), "shop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_changing_from_two_partitions_to_three_loses_nothing() {
    changing_from_two_partitions_to_three_loses_nothing(sandbox(), "shop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_four_partitions_deliver_every_change_once_in_key_order() {
    live("partitions_four", |live: LiveDb| async move {
        four_partitions_deliver_every_change_once_in_key_order(live.store.clone(), &live.db).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_changing_from_two_partitions_to_three_loses_nothing() {
    live("partitions_two_to_three", |live: LiveDb| async move {
        changing_from_two_partitions_to_three_loses_nothing(live.store.clone(), &live.db).await;
    })
    .await;
}

/// Values of many BSON types, with the edges of each that the server treats apart.
fn hash_samples() -> Vec<Bson> {
    let mut values = vec![
        Bson::Null,
        Bson::Boolean(true),
        Bson::Boolean(false),
        Bson::Int32(0),
        Bson::Int32(i32::MIN),
        Bson::Int32(i32::MAX),
        Bson::Int64(i64::MIN),
        Bson::Int64(i64::MAX),
        Bson::Double(-0.0),
        Bson::Double(2.5),
        Bson::Double(-2.5),
        Bson::Double(f64::NAN),
        Bson::Double(f64::INFINITY),
        Bson::Double(f64::NEG_INFINITY),
        Bson::Double(9_223_372_036_854_775_808.0),
        Bson::Double(-9_223_372_036_854_775_808.0),
        Bson::Double(1e300),
        Bson::String(String::new()),
        Bson::String("ünïcödé ✓".into()),
        Bson::String("x".repeat(300)),
        Bson::DateTime(bson::DateTime::from_millis(1_700_000_000_123)),
        Bson::DateTime(bson::DateTime::from_millis(-5)),
        Bson::Timestamp(bson::Timestamp {
            time: 1_700_000_000,
            increment: 7,
        }),
        Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: vec![0, 1, 2, 255],
        }),
        Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: (0..16).collect(),
        }),
        Bson::RegularExpression(bson::Regex {
            pattern: "^a.*".into(),
            options: "i".into(),
        }),
        Bson::JavaScriptCode("function() {}".into()),
        Bson::Symbol("sym".into()),
        Bson::MinKey,
        Bson::MaxKey,
        Bson::Undefined,
        Bson::Document(doc! {}),
        Bson::Document(doc! { "a": 1, "b": { "c": [1, "two", { "d": null }] } }),
        Bson::Document(doc! { "b": 1, "a": 1 }),
        Bson::Array(vec![]),
        Bson::Array(vec![Bson::Int32(1), Bson::Array(vec![Bson::Double(1.5)])]),
    ];
    for text in [
        "0",
        "1.7",
        "2.5",
        "-2.5",
        "3.5",
        "1E+30",
        "-1E+30",
        "NaN",
        "Infinity",
        "-Infinity",
        "0.5000001",
        "12345E-2",
        "9223372036854775807.5",
        "1E-40",
    ] {
        values.push(Bson::Decimal128(text.parse().expect("a decimal")));
    }
    for i in 0..200_i64 {
        values.push(Bson::String(format!("key-{i}")));
        values.push(Bson::Int32(i32::try_from(i * 7919 - 500).expect("small")));
        values.push(Bson::Int64(i * 1_000_000_007 - 3));
        values.push(Bson::Double(i as f64 * 0.37 - 20.0));
        values.push(Bson::ObjectId(ObjectId::new()));
        values.push(Bson::Document(
            doc! { "tenant": i % 7, "id": format!("{i}") },
        ));
    }
    values
}

#[tokio::test]
async fn live_the_sandbox_hashes_as_the_server_does() {
    live("partitions_hash", |live: LiveDb| async move {
        use futures_util::TryStreamExt;
        let values = hash_samples();
        let documents: Vec<Document> = values
            .iter()
            .enumerate()
            .map(|(i, v)| doc! { "i": i64::try_from(i).expect("small"), "v": v.clone() })
            .collect();
        let pipeline = vec![
            doc! { "$documents": documents },
            doc! { "$project": { "i": 1, "h": { "$toHashedIndexKey": "$v" } } },
        ];
        let replies: Vec<Document> = live
            .store
            .client()
            .database(&live.db)
            .aggregate(pipeline)
            .await
            .expect("aggregate $toHashedIndexKey")
            .try_collect()
            .await
            .expect("read the hashes");
        assert_eq!(replies.len(), values.len());
        let mut mismatched = Vec::new();
        for reply in replies {
            let i = usize::try_from(reply.get_i64("i").expect("i")).expect("an index");
            let server = reply.get_i64("h").expect("the server's hash is a long");
            let here = hashed_index_key(&values[i]);
            if here != Ok(server) {
                mismatched.push(format!("{:?}: server {server}, here {here:?}", values[i]));
            }
        }
        assert!(
            mismatched.is_empty(),
            "{} of {} values hash differently:\n{}",
            mismatched.len(),
            values.len(),
            mismatched.join("\n")
        );
        eprintln!(
            "{} values of {} BSON types hash as $toHashedIndexKey does ({})",
            values.len(),
            values
                .iter()
                .map(|v| v.element_type() as u8)
                .collect::<BTreeSet<_>>()
                .len(),
            Utc::now()
        );
    })
    .await;
}

#[tokio::test]
async fn a_partition_of_a_capped_source_is_refused_before_anything_is_written() {
    let store = sandbox();
    let mut config = config(
        &Namespace::new("shop", "events"),
        Partition::new(0, 2).expect("valid"),
        "capped",
    );
    config.source = SourceKind::Capped;
    let recorder = Recorder::new(store.clone(), Namespace::new("shop", "t"));
    let exit = ListenerHandle::spawn(store.clone(), config, recorder)
        .join()
        .await;
    let Some(ListenerExit::Refused(why)) = exit else {
        panic!("not refused: {exit:?}");
    };
    assert!(why.contains("capped") && why.contains("0/2"), "{why}");
    assert_eq!(store.get("orders-projection#0/2").await.expect("get"), None);
}

#[tokio::test]
async fn a_partition_whose_lease_id_is_not_its_own_is_refused() {
    let store = sandbox();
    let mut config = config(
        &Namespace::new("shop", "orders"),
        Partition::new(1, 2).expect("valid"),
        "x",
    );
    config.resource = "orders-projection".into();
    let recorder = Recorder::new(store.clone(), Namespace::new("shop", "t"));
    let exit = ListenerHandle::spawn(store, config, recorder).join().await;
    let Some(ListenerExit::Refused(why)) = exit else {
        panic!("not refused: {exit:?}");
    };
    assert!(why.contains("ListenerConfig::partitioned"), "{why}");
}

/// Partition leases in a fleet (docs/protocol.md, "Membership and balancing"): two
/// processes (one store each), each running a listener for each of four partitions,
/// end up holding two each, and every change is delivered from the partition its hash
/// names.
async fn a_fleet_of_two_processes_holds_two_of_four_partitions_each<S>(stores: [S; 2], db: &str)
where
    S: Store + DocumentStore + MembershipStore + Sync,
{
    use streamward::engine::{Fleet, FleetConfig};
    let store = stores[0].clone();
    let ns = Namespace::new(db, "orders");
    let recorder = Recorder::new(store.clone(), Namespace::new(db, "projection"));
    let lease = Duration::from_secs(2);
    let held = |leases: &[streamward::model::Lease], now| {
        let mut held = BTreeMap::new();
        for lease in leases {
            if let Some(holder) = lease.live_holder(now) {
                let process = holder.split('/').next().unwrap_or(holder).to_string();
                *held.entry(process).or_insert(0_usize) += 1;
            }
        }
        held
    };
    let wait_for_holdings = |wanted: BTreeMap<String, usize>| {
        let store = store.clone();
        async move {
            let deadline = tokio::time::Instant::now() + PATIENCE;
            loop {
                let now = store.server_now().await.expect("now");
                let leases = store.list().await.expect("list").items;
                if held(&leases, now) == wanted {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "not {wanted:?} within {PATIENCE:?}: {:?}",
                    held(&leases, now)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // a alone takes all four; b joins and each ends with two, handed over.
    let mut processes = Vec::new();
    for (name, process_store) in ["a", "b"].into_iter().zip(stores) {
        let fleet = Fleet::start(
            process_store.clone(),
            FleetConfig::new(name).with_ttl(lease),
        );
        let listeners: Vec<ListenerHandle> = Partition::all(4)
            .expect("valid")
            .into_iter()
            .map(|p| {
                let mut config = config(&ns, p, &format!("{name}/p{}", p.index()));
                config.lease = lease;
                config.heartbeat = Duration::from_secs(1);
                ListenerHandle::spawn_in_fleet(
                    process_store.clone(),
                    config,
                    recorder.clone(),
                    &fleet,
                )
            })
            .collect();
        processes.push((fleet, listeners));
        if name == "a" {
            wait_for_holdings(BTreeMap::from([("a".to_string(), 4)])).await;
        }
    }
    let balanced = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 2)]);
    wait_for_holdings(balanced.clone()).await;
    // And it stays so, two lease periods on.
    tokio::time::sleep(2 * lease).await;
    wait_for_holdings(balanced).await;
    let keys = keys(20);
    write_round(&store, &ns, &keys, 0).await;
    write_round(&store, &ns, &keys, 1).await;
    wait_for(&recorder, "both rounds", |d| {
        let got: BTreeSet<(String, i64)> = d.iter().map(|d| (d.key.clone(), d.n)).collect();
        keys.iter()
            .all(|k| got.contains(&(key_text(k), 0)) && got.contains(&(key_text(k), 1)))
    })
    .await;
    for d in recorder.deliveries() {
        let key = keys.iter().find(|k| key_text(k) == d.key).expect("written");
        assert_eq!(d.lease, lease_of(key, 4), "{} in its partition", d.key);
    }
    for (fleet, listeners) in processes {
        stop_all(listeners).await;
        fleet.stop().await;
    }
}

/// On a virtual clock.
#[tokio::test(start_paused = true)]
async fn sandbox_a_fleet_of_two_processes_holds_two_of_four_partitions_each() {
    let epoch = chrono::TimeZone::with_ymd_and_hms(&Utc, 2031, 6, 1, 12, 0, 0)
        .single()
        .expect("a valid date");
    let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
    a_fleet_of_two_processes_holds_two_of_four_partitions_each([store.clone(), store], "shop")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_a_fleet_of_two_processes_holds_two_of_four_partitions_each() {
    live("partitions_fleet", |live: LiveDb| async move {
        use streamward::store::mongo::{MongoSettings, MongoStore};
        // The second process: its own client, leases in the same database.
        let mut settings = MongoSettings::new(live.uri.clone());
        settings.leases = Namespace::new(live.db.clone(), "leases");
        let second = MongoStore::connect(settings).await.expect("connect");
        a_fleet_of_two_processes_holds_two_of_four_partitions_each(
            [live.store.clone(), second],
            &live.db,
        )
        .await;
    })
    .await;
}
