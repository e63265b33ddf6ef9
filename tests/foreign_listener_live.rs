//! Leases written by another implementation of the lease algorithm (the seed protocol,
//! docs/protocol.md "Leases written by other implementations"), on the replica set named
//! by `STREAMWARD_TEST_URI`. The other implementation is written here, from its
//! description, with the driver alone: it reads `resumeToken` as a document (null throws
//! in its refresh, which ends its refresh for good; missing means the oldest oplog
//! entry), acquires and refreshes with one findOneAndUpdate on "expired or mine"
//! (int32 `version` + 1 when the holder changes), keeps its open stream while its
//! refresh succeeds and stops it when it fails, and commits on `_id` and `listenerId`
//! only. A 4 s lease refreshed every 2 s keeps the test quick.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, Bson, Document};
use futures_util::StreamExt;
use mongodb::change_stream::event::ChangeStreamEvent;
use mongodb::options::ReturnDocument;
use mongodb::{Client, Collection};
use support::live::{live, run, streamward, LiveDb};

const LEASE: Duration = Duration::from_secs(4);
const REFRESH: Duration = Duration::from_secs(2);
const RESOURCE: &str = "seed.orders";

/// What the seed listener did, for the assertions.
#[derive(Debug, Default)]
struct Seen {
    /// The `n` of each insert it handled, in order (a replay shows a number again).
    handled: Vec<i32>,
    /// Where each stream it opened started: "token" or "oldest".
    starts: Vec<&'static str>,
    /// Refreshes that failed (held by another): its stream was stopped each time.
    lost: u32,
    /// Its refresh threw (a null `resumeToken`): it is dead.
    died: bool,
    /// Whether a stream is open now.
    streaming: bool,
}

#[derive(Clone)]
struct SeedListener {
    client: Client,
    leases: Collection<Document>,
    watched: Collection<Document>,
    me: String,
    seen: Arc<Mutex<Seen>>,
}

impl SeedListener {
    fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock().expect("not poisoned"))
    }

    fn note(&self, f: impl FnOnce(&mut Seen)) {
        f(&mut self.seen.lock().expect("not poisoned"))
    }

    /// The seed acquire/refresh: expired or mine → mine for LEASE more.
    async fn acquire(&self) -> mongodb::error::Result<Option<Document>> {
        let me = self.me.as_str();
        let lease_ms = LEASE.as_millis() as i64;
        let taken = self
            .leases
            .find_one_and_update(
                doc! {
                    "_id": RESOURCE,
                    "$or": [
                        { "listenerId": me },
                        { "$expr": { "$lte": ["$expiresAt", "$$NOW"] } },
                    ],
                },
                vec![doc! { "$set": {
                    "version": { "$cond": [
                        { "$eq": ["$listenerId", me] },
                        "$version",
                        { "$add": [{ "$ifNull": ["$version", Bson::Int32(0)] }, Bson::Int32(1)] },
                    ] },
                    "listenerId": me,
                    "expiresAt": { "$add": ["$$NOW", lease_ms] },
                } }],
            )
            .return_document(ReturnDocument::After)
            .await?;
        Ok(taken)
    }

    /// Where its stream starts: after `resumeToken`, or at the oldest oplog entry
    /// when there is none; `Err` for a null one (the seed throws).
    async fn start(
        &self,
        lease: &Document,
    ) -> Result<mongodb::change_stream::ChangeStream<ChangeStreamEvent<Document>>, String> {
        let watch = self.watched.watch();
        let stream = match lease.get("resumeToken") {
            Some(Bson::Document(token)) => {
                let token: mongodb::change_stream::event::ResumeToken =
                    bson::from_document(token.clone()).map_err(|e| e.to_string())?;
                self.note(|s| s.starts.push("token"));
                watch.resume_after(token).await
            }
            None => {
                let oldest = self
                    .client
                    .database("local")
                    .collection::<Document>("oplog.rs")
                    .find_one(doc! { "op": { "$ne": "n" } })
                    .sort(doc! { "$natural": 1 })
                    .await
                    .map_err(|e| e.to_string())?
                    .and_then(|entry| entry.get_timestamp("ts").ok())
                    .ok_or("no oplog entry")?;
                self.note(|s| s.starts.push("oldest"));
                watch.start_at_operation_time(oldest).await
            }
            Some(other) => return Err(format!("resumeToken is {other}, not a document")),
        };
        stream.map_err(|e| e.to_string())
    }

    /// The listener: refresh every REFRESH; while it holds the lease, a stream whose
    /// every insert is handled and committed on `_id` and `listenerId`.
    async fn run(self) {
        type Stream = mongodb::change_stream::ChangeStream<ChangeStreamEvent<Document>>;
        let mut stream: Option<Stream> = None;
        let mut tick = tokio::time::interval(REFRESH);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    match self.acquire().await {
                        Ok(Some(lease)) if lease.get_str("listenerId") == Ok(self.me.as_str()) => {
                            // Refresh succeeded: an open stream is kept as it is.
                            if stream.is_none() {
                                match self.start(&lease).await {
                                    Ok(s) => {
                                        stream = Some(s);
                                        self.note(|s| s.streaming = true);
                                    }
                                    Err(_) => {
                                        // Thrown inside the scheduler: no more refreshes.
                                        self.note(|s| {
                                            s.died = true;
                                            s.streaming = false;
                                        });
                                        return;
                                    }
                                }
                            }
                        }
                        Ok(_) => {
                            if stream.take().is_some() {
                                self.note(|s| {
                                    s.lost += 1;
                                    s.streaming = false;
                                });
                            }
                        }
                        Err(_) => {}
                    }
                }
                event = async {
                    match stream.as_mut() {
                        Some(s) => s.next().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let Some(Ok(event)) = event else {
                        stream = None;
                        self.note(|s| s.streaming = false);
                        continue;
                    };
                    if let Some(n) = event
                        .full_document
                        .as_ref()
                        .and_then(|d| d.get_i32("n").ok())
                    {
                        self.note(|s| s.handled.push(n));
                    }
                    let token = bson::to_bson(&event.id).unwrap_or(Bson::Null);
                    let _ = self
                        .leases
                        .update_one(
                            doc! { "_id": RESOURCE, "listenerId": &self.me },
                            doc! { "$set": { "resumeToken": token } },
                        )
                        .await;
                }
            }
        }
    }
}

/// The lease document as stored, with `$type` of its version.
async fn stored(live: &LiveDb) -> (Document, String) {
    let leases = live
        .store
        .client()
        .database(&live.db)
        .collection::<Document>("leases");
    let document = leases
        .find_one(doc! { "_id": RESOURCE })
        .await
        .expect("read the lease")
        .expect("the lease exists");
    let typed = leases
        .aggregate(vec![
            doc! { "$match": { "_id": RESOURCE } },
            doc! { "$project": { "t": { "$type": "$version" } } },
        ])
        .await
        .expect("aggregate")
        .next()
        .await
        .and_then(Result::ok)
        .and_then(|d| d.get_str("t").ok().map(str::to_string))
        .unwrap_or_default();
    (document, typed)
}

/// Waits up to `secs` for `check` on what the listener saw.
async fn until(listener: &SeedListener, secs: u64, what: &str, check: impl Fn(&Seen) -> bool) {
    for _ in 0..secs * 10 {
        if listener.seen(&check) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{what}: not within {secs}s; seen {:?}",
        listener.seen(|s| format!("{s:?}"))
    );
}

/// Inserts `n` into the watched collection; returns the insert's cluster time.
async fn insert(live: &LiveDb, n: i32) -> bson::Timestamp {
    let mut session = live.store.client().start_session().await.expect("session");
    live.store
        .client()
        .database(&live.db)
        .collection::<Document>("orders")
        .insert_one(doc! { "n": n })
        .session(&mut session)
        .await
        .expect("insert");
    session.operation_time().expect("a replica set sends one")
}

async fn seed_listener(live: &LiveDb) -> SeedListener {
    let client = live.store.client().clone();
    let db = client.database(&live.db);
    // The seed implementation's first lease: the seed fields only, version int32.
    db.collection::<Document>("leases")
        .insert_one(doc! {
            "_id": RESOURCE,
            "listenerId": Bson::Null,
            "expiresAt": bson::DateTime::from_millis(0),
            "version": Bson::Int32(0),
        })
        .await
        .expect("insert the seed lease");
    db.create_collection("orders").await.expect("create orders");
    let listener = SeedListener {
        client: client.clone(),
        leases: db.collection("leases"),
        watched: db.collection("orders"),
        me: "seed-1".into(),
        seen: Arc::default(),
    };
    tokio::spawn(listener.clone().run());
    until(&listener, 10, "the seed listener streams", |s| s.streaming).await;
    listener
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_listener_survives_rewind_reset_and_takeover_and_replays_what_they_say() {
    live("foreign_listener", |live| async move {
        let listener = seed_listener(&live).await;
        let mut times = Vec::new();
        for n in 1..=5 {
            times.push(insert(&live, n).await);
        }
        until(&listener, 10, "handles 1..=5", |s| {
            s.handled == [1, 2, 3, 4, 5]
        })
        .await;
        // The listener commits after handling: let the last commit land.
        tokio::time::sleep(Duration::from_millis(500)).await;

        // (a) Quiet and caught up: recognised as seed, and --check passes.
        let (code, out, err) = run({
            let mut cmd = streamward(&live);
            cmd.args(["leases", "--output", "json"]);
            cmd
        })
        .await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("\"protocol\": \"seed\""), "{out}");
        let (code, out, err) = run({
            let mut cmd = streamward(&live);
            cmd.args(["leases", "--check"]);
            cmd
        })
        .await;
        assert_eq!(
            code, 0,
            "a quiet, caught-up seed lease passes --check:\n{out}{err}"
        );

        // (b) Rewind to the third insert: the holder is held out, restarts from a real
        // token, replays 3..=5, and keeps refreshing.
        let third = times[2];
        let target = format!("{}:{}", third.time, third.increment);
        let (code, out, err) = run({
            let mut cmd = streamward(&live);
            cmd.args([
                "rewind",
                RESOURCE,
                "--to",
                &target,
                "--hold",
                "5s",
                "--execute",
            ]);
            cmd
        })
        .await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("seed lease"), "{out}");
        // No `watch`: the changes are counted on the collection its token names.
        assert!(
            out.contains("3 changes on the collection with UUID"),
            "the replay counted by the token's collection UUID: {out}"
        );
        assert!(
            out.contains("next refresh finds the lease held by another"),
            "{out}"
        );
        let (document, version_type) = stored(&live).await;
        assert!(
            matches!(document.get("resumeToken"), Some(Bson::Document(_))),
            "a real token, never null: {document}"
        );
        assert!(!document.contains_key("resumeAt"), "{document}");
        assert!(!document.contains_key("kind") && !document.contains_key("acquiredAt"));
        assert_eq!(
            version_type, "int",
            "the int32 version stays int32: {document}"
        );
        until(
            &listener,
            5,
            "the refresh fails and the stream stops",
            |s| s.lost == 1,
        )
        .await;
        until(&listener, 15, "replays 3..=5 from the new token", |s| {
            s.handled[5..] == [3, 4, 5]
        })
        .await;
        insert(&live, 6).await;
        until(&listener, 10, "goes on after the replay", |s| {
            s.handled.ends_with(&[6])
        })
        .await;
        assert!(!listener.seen(|s| s.died), "the refresh keeps working");
        tokio::time::sleep(REFRESH * 2).await;
        let (document, version_type) = stored(&live).await;
        assert_eq!(document.get_str("listenerId"), Ok("seed-1"), "{document}");
        assert_eq!(version_type, "int");

        // (c) Reset to the oldest entry: the token is removed, and it replays from there.
        let before = listener.seen(|s| s.handled.len());
        let (code, out, err) = run({
            let mut cmd = streamward(&live);
            cmd.args([
                "reset",
                RESOURCE,
                "--to",
                "oldest",
                "--hold",
                "5s",
                "--execute",
            ]);
            cmd
        })
        .await;
        assert_eq!(code, 0, "{out}{err}");
        let (document, _) = stored(&live).await;
        assert!(!document.contains_key("resumeToken"), "{document}");
        until(&listener, 20, "replays from the oldest entry", |s| {
            s.starts.last() == Some(&"oldest")
                && s.handled[before..].starts_with(&[1, 2, 3, 4, 5, 6])
        })
        .await;
        assert!(!listener.seen(|s| s.died));

        // (d) A plain takeover: the plan says it is taken back, and it is, with the
        // open stream kept (no new start, no replay).
        tokio::time::sleep(REFRESH * 2).await;
        let (starts, handled) = listener.seen(|s| (s.starts.len(), s.handled.len()));
        let (code, out, err) = run({
            let mut cmd = streamward(&live);
            cmd.args(["takeover", RESOURCE, "--execute"]);
            cmd
        })
        .await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("seed-1's next refresh takes it back"), "{out}");
        tokio::time::sleep(REFRESH * 2).await;
        let (document, _) = stored(&live).await;
        assert_eq!(
            document.get_str("listenerId"),
            Ok("seed-1"),
            "taken back: {document}"
        );
        insert(&live, 7).await;
        until(&listener, 10, "goes on from its open stream", |s| {
            s.handled.ends_with(&[7])
        })
        .await;
        listener.seen(|s| {
            assert_eq!(
                s.starts.len(),
                starts,
                "the stream was kept, not restarted: {s:?}"
            );
            assert_eq!(s.handled.len(), handled + 1, "nothing replayed: {s:?}");
        });

        // With --hold the holder's refresh fails and it stops; after the hold it
        // starts again from its token, replaying nothing.
        let lost = listener.seen(|s| s.lost);
        let (code, out, err) = run({
            let mut cmd = streamward(&live);
            cmd.args(["takeover", RESOURCE, "--hold", "5s", "--execute"]);
            cmd
        })
        .await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("its change stream"), "{out}");
        until(&listener, 5, "stops at its next refresh", |s| {
            s.lost == lost + 1
        })
        .await;
        until(&listener, 15, "starts again after the hold", |s| {
            s.streaming && s.starts.len() == starts + 1
        })
        .await;
        insert(&live, 8).await;
        until(&listener, 10, "handles the next change once", |s| {
            s.handled.ends_with(&[7, 8])
        })
        .await;
        assert!(!listener.seen(|s| s.died));
    })
    .await;
}
