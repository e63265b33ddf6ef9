//! Operator actions and health on capped-collection leases: positions are entries'
//! `_id`s, checked against what the collection holds and counted in it; `leases` says
//! LOST once the collection rolled past a lease. On the sandbox and on a real replica
//! set, through the ops API and through the binary.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Document};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use streamward::engine::{Handler, HandlerError, ListenerConfig, ListenerHandle};
use streamward::model::{entry_token, object_id_at, token_entry, Fence, SourceKind};
use streamward::ops::{self, ActionRequest, GatherOptions, ResetTarget, RewindTarget};
use streamward::store::{AuditLog, CappedFeed, ChangeEvent, Namespace, OperatorStore, Store};
use support::live::{live, run, streamward, LiveDb};

const RESOURCE: &str = "events";
const PATIENCE: Duration = Duration::from_secs(30);

/// A store a capped lease can be acted on in: the operator's ports, capped collections
/// among them.
trait CappedOpsStore: Store + AuditLog + OperatorStore + CappedFeed {}
impl<S: Store + AuditLog + OperatorStore + CappedFeed> CappedOpsStore for S {}

/// Creates capped collection `ns` holding at most `bytes`.
async fn create(store: &impl CappedFeed, ns: &Namespace, bytes: u64) {
    store.ensure_capped(ns, bytes).await.expect("create capped");
}

async fn append(store: &impl CappedFeed, ns: &Namespace, entry: Document) {
    store.append_entry(ns, entry).await.expect("append");
}

/// Records the `n` of every entry it is handed.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<i64>>>);

impl Seen {
    fn all(&self) -> Vec<i64> {
        self.0.lock().expect("lock").clone()
    }
    fn len(&self) -> usize {
        self.0.lock().expect("lock").len()
    }
    fn clear(&self) {
        self.0.lock().expect("lock").clear();
    }
}

impl Handler for Seen {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        let mut seen = self.0.lock().expect("lock");
        for event in events {
            let n = event
                .full_document
                .as_ref()
                .and_then(|d| d.get_i64("n").ok())
                .ok_or_else(|| HandlerError::Failed(format!("no n in {event:?}")))?;
            seen.push(n);
        }
        Ok(())
    }
}

fn config(watch: Namespace, listener: &str) -> ListenerConfig {
    let mut config = support::sandbox::config(RESOURCE, listener, watch);
    config.source = SourceKind::Capped;
    config.batch_size = 4;
    config.max_batch_wait = Duration::from_millis(200);
    config.checkpoint_every = None;
    config
}

/// Entry `n`'s `_id`: one a second from `base`, so a time names exactly one entry.
fn id_of(base: DateTime<Utc>, n: i64) -> ObjectId {
    object_id_at(base + TimeDelta::seconds(n), [7; 5], n as u32)
}

async fn append_numbered<S: CappedOpsStore>(
    store: &S,
    ns: &Namespace,
    base: DateTime<Utc>,
    range: std::ops::Range<i64>,
) {
    for n in range {
        append(store, ns, doc! { "_id": id_of(base, n), "n": n }).await;
    }
}

/// Runs a listener until it has handed over `count` entries (and committed the last),
/// then stops it; returns what it handed over.
async fn listen<S: CappedOpsStore>(
    store: &S,
    ns: &Namespace,
    name: &str,
    count: usize,
) -> Vec<i64> {
    let seen = Seen::default();
    let listener = ListenerHandle::spawn(store.clone(), config(ns.clone(), name), seen.clone());
    support::wait::eventually(PATIENCE, &format!("{count} entries for {name}"), || {
        seen.len() >= count
    })
    .await;
    let before = listener.snapshot().commits;
    support::wait::eventually(PATIENCE, "committed", || {
        listener.snapshot().commits > before || seen.len() >= count
    })
    .await;
    // Long enough for anything more to arrive (none should).
    tokio::time::sleep(Duration::from_millis(800)).await;
    listener.stop().await;
    let all = seen.all();
    seen.clear();
    all
}

async fn position<S: CappedOpsStore>(store: &S) -> Option<ObjectId> {
    let lease = store.get(RESOURCE).await.expect("read").expect("lease");
    lease.resume_token.as_ref().and_then(token_entry)
}

async fn act<S: CappedOpsStore>(
    store: &S,
    request: ActionRequest,
) -> Result<ops::Executed, String> {
    let facts = ops::gather(store, &request, &GatherOptions::new("oncall@test"))
        .await
        .map_err(|e| e.to_string())?;
    let plan = ops::plan(&request, &facts);
    if let Some(refusal) = &plan.refusal {
        return Err(format!("{:?}: {}", refusal.kind, refusal.reason));
    }
    ops::execute(store, &plan, Some("test".into()))
        .await
        .map_err(|e| e.to_string())
}

/// Rewind to an entry, reset to now and undo move a capped lease's position, and the
/// listener then hands over exactly the entries the plan said; a position outside the
/// collection's entries and a change stream's token are refused.
async fn moves_and_undo<S: CappedOpsStore>(store: S, ns: Namespace) {
    let base = Utc::now() - TimeDelta::seconds(100);
    create(&store, &ns, 1 << 20).await;
    append_numbered(&store, &ns, base, 0..10).await;
    assert_eq!(
        listen(&store, &ns, "a", 10).await,
        (0..10).collect::<Vec<_>>()
    );
    assert_eq!(position(&store).await, Some(id_of(base, 9)));

    let rewind_to_4 = ActionRequest::Rewind {
        resource: RESOURCE.into(),
        to: RewindTarget::Token(entry_token(id_of(base, 4))),
    };
    let facts = ops::gather(&store, &rewind_to_4, &GatherOptions::new("oncall@test"))
        .await
        .expect("gather");
    let said = ops::plan(&rewind_to_4, &facts).effect.lines.join("\n");
    assert!(
        said.contains(&format!(
            "5 entries of capped collection {ns} will be replayed"
        )),
        "{said}"
    );
    act(&store, rewind_to_4).await.expect("rewound");
    assert_eq!(
        listen(&store, &ns, "b", 5).await,
        (5..10).collect::<Vec<_>>()
    );

    let too_old = ActionRequest::Rewind {
        resource: RESOURCE.into(),
        to: RewindTarget::Token(entry_token(id_of(base, -50))),
    };
    let refused = act(&store, too_old).await.expect_err("refused");
    assert!(
        refused.contains("OutsideWindow") && refused.contains("outside the entries of capped"),
        "{refused}"
    );
    let stream_token = ops::parse_token("8263E5B9D2000000012B04").expect("token");
    let refused = act(
        &store,
        ActionRequest::Rewind {
            resource: RESOURCE.into(),
            to: RewindTarget::Token(stream_token),
        },
    )
    .await
    .expect_err("refused");
    assert!(refused.contains("WrongSource"), "{refused}");

    append_numbered(&store, &ns, base, 10..13).await;
    let reset = act(
        &store,
        ActionRequest::Reset {
            resource: RESOURCE.into(),
            to: ResetTarget::Now,
            accept_skip: true,
        },
    )
    .await
    .expect("reset");
    assert_eq!(position(&store).await, Some(id_of(base, 12)));
    append_numbered(&store, &ns, base, 13..15).await;
    assert_eq!(listen(&store, &ns, "c", 2).await, vec![13, 14]);

    // Back to where the reset found it: 10 to 14 come again.
    act(
        &store,
        ActionRequest::Undo {
            audit_id: reset.audit_id,
        },
    )
    .await
    .expect("undone");
    assert_eq!(position(&store).await, Some(id_of(base, 9)));
    assert_eq!(
        listen(&store, &ns, "d", 5).await,
        (10..15).collect::<Vec<_>>()
    );
}

fn sandbox_ns() -> Namespace {
    Namespace::new("app", "events")
}

#[tokio::test(start_paused = true)]
async fn sandbox_moves_and_undo() {
    moves_and_undo(support::sandbox::sandbox(10_000), sandbox_ns()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn live_moves_and_undo() {
    live("capops_moves", |db: LiveDb| async move {
        let ns = db.ns("events");
        moves_and_undo(db.store, ns).await;
    })
    .await;
}

/// The lease of `leases --output json` for [`RESOURCE`].
async fn listed(db: &LiveDb) -> Value {
    let mut cmd = streamward(db);
    cmd.args(["leases", "--output", "json"]);
    let (code, out, err) = run(cmd).await;
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&out).expect("JSON");
    rows.as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["_id"] == RESOURCE || r["resource"] == RESOURCE)
        })
        .cloned()
        .unwrap_or_else(|| panic!("{RESOURCE} in {out}"))
}

/// A 4 KiB capped collection rolls past a stopped listener's position: `leases` says
/// LOST, in its table and its JSON, measured against the collection, not the oplog.
#[tokio::test(flavor = "multi_thread")]
async fn live_leases_shows_a_rolled_over_lease_lost() {
    live("capops_lost", |db: LiveDb| async move {
        let ns = db.ns("events");
        let store = db.store.clone();
        create(&store, &ns, 4096).await;
        for n in 0..3_i64 {
            append(&store, &ns, doc! { "n": n }).await;
        }
        assert_eq!(listen(&store, &ns, "a", 3).await, vec![0, 1, 2]);
        let row = listed(&db).await;
        assert_ne!(row["status"], "LOST", "{row}");
        // The next entries a second later at least: the window's times are seconds.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        for n in 3..200_i64 {
            append(&store, &ns, doc! { "n": n, "pad": "x".repeat(60) }).await;
        }
        let row = listed(&db).await;
        assert_eq!(row["status"], "LOST", "{row}");
        assert_eq!(row["historyUnknown"], Value::Null, "{row}");
        let mut cmd = streamward(&db);
        cmd.arg("leases");
        let (code, out, err) = run(cmd).await;
        assert_eq!(code, 0, "{err}");
        let line = out
            .lines()
            .find(|l| l.starts_with(RESOURCE))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains("LOST"), "{out}");
    })
    .await;
}

/// The binary's rewind --to-id, rewind --to TIME, reset --to now --accept-skip and undo
/// on a capped lease, each followed by the entries the listener then hands over.
#[tokio::test(flavor = "multi_thread")]
async fn live_cli_moves_a_capped_lease() {
    live("capops_cli", |db: LiveDb| async move {
        let ns = db.ns("events");
        let store = db.store.clone();
        let base = Utc::now() - TimeDelta::seconds(100);
        create(&store, &ns, 1 << 20).await;
        append_numbered(&store, &ns, base, 0..10).await;
        assert_eq!(
            listen(&store, &ns, "a", 10).await,
            (0..10).collect::<Vec<_>>()
        );
        let cli = |args: Vec<String>| {
            let mut cmd = streamward(&db);
            cmd.args(args);
            run(cmd)
        };
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();

        let id3 = id_of(base, 3).to_hex();
        let (code, out, err) = cli(args(&["rewind", RESOURCE, "--to-id", &id3])).await;
        assert_eq!(code, 0, "a plan: {err}");
        assert!(
            out.contains(&format!(
                "6 entries of capped collection {ns} will be replayed"
            )),
            "{out}"
        );
        assert_eq!(position(&store).await, Some(id_of(base, 9)), "a plan only");
        let (code, _, err) = cli(args(&["rewind", RESOURCE, "--to-id", &id3, "--execute"])).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            listen(&store, &ns, "b", 6).await,
            (4..10).collect::<Vec<_>>()
        );

        let at_7 = (base + TimeDelta::seconds(7)).to_rfc3339();
        let (code, _, err) = cli(args(&["rewind", RESOURCE, "--to", &at_7, "--execute"])).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(listen(&store, &ns, "c", 3).await, vec![7, 8, 9]);

        let too_old = id_of(base, -1000).to_hex();
        let (code, _, err) = cli(args(&[
            "rewind",
            RESOURCE,
            "--to-id",
            &too_old,
            "--execute",
        ]))
        .await;
        assert_eq!(code, 3, "refused: {err}");
        assert!(
            err.contains(&format!(
                "outside the entries of capped collection {ns} (oldest"
            )),
            "{err}"
        );
        let (code, _, err) = cli(args(&[
            "rewind",
            RESOURCE,
            "--to-token",
            "8263E5B9D2000000012B04",
            "--execute",
        ]))
        .await;
        assert_eq!(code, 3, "refused: {err}");
        assert!(err.contains("--to-id OBJECTID"), "{err}");

        append_numbered(&store, &ns, base, 10..13).await;
        let (code, out, err) = cli(args(&[
            "reset",
            RESOURCE,
            "--to",
            "now",
            "--accept-skip",
            "--execute",
            "--output",
            "json",
        ]))
        .await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(position(&store).await, Some(id_of(base, 12)));
        let reply: Value = serde_json::from_str(&out).expect("JSON");
        let audit_id = reply["outcome"]["auditId"]
            .as_str()
            .expect("the outcome names its audit record")
            .to_string();
        append_numbered(&store, &ns, base, 13..15).await;
        assert_eq!(listen(&store, &ns, "d", 2).await, vec![13, 14]);

        let (code, _, err) = cli(args(&["undo", &audit_id, "--execute"])).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(position(&store).await, Some(id_of(base, 9)));
        assert_eq!(
            listen(&store, &ns, "e", 5).await,
            (10..15).collect::<Vec<_>>()
        );
    })
    .await;
}
