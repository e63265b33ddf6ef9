//! The two-step idempotent increment and its cleanup on the real replica set of
//! `STREAMWARD_TEST_URI` (started with `enableTestCommands=1`), with the server's
//! `failCommand` fail point armed just before one chosen step: `closeConnection` (the
//! step does not run; the adapter sends it once more) and `writeConcernError` (the step
//! runs and its reply says it failed). Counts must be exact: never double, never lost
//! once the caller retries, and the cleanup folds exactly the increments left pending.
//! What each step does without faults, on both stores, is the store contract's
//! (`streamward::contract::increments`).

mod support;

#[path = "support/failpoint.rs"]
mod failpoint;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use assert_cmd::Command;
use bson::{doc, Bson, Document};
use failpoint::{with_app_name, ReplicaSet};
use rand::{rngs::StdRng, Rng, SeedableRng};
use streamward::engine::{increment_once, Increment};
use streamward::model::FOLD_INCREMENTS_ACTION;
use streamward::model::{AuditRecord, AuditState, Lease};
use streamward::ops::{self, FoldError};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::*;
use support::live::{live, run, streamward, LiveDb};

const APP: &str = "sw-increment-faults";

/// `failCommand` is one fail point per server: the tests here take turns.
static FAIL_POINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    AddPending,
    Apply,
    Fold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The connection is closed before the step runs (`times` of them in a row).
    Drop { times: i64 },
    /// The step runs; its reply carries a write-concern error with this code: 64
    /// (wtimeout: applied, not confirmed by a majority) or 91 (the server shutting
    /// down, which also makes the driver forget the server until it checks it again).
    WriteConcern(i32),
}

const WTIMEOUT: Fault = Fault::WriteConcern(64);
const SHUTDOWN: Fault = Fault::WriteConcern(91);

impl Fault {
    fn data(self) -> (i64, Document) {
        match self {
            Fault::Drop { times } => (times, doc! { "closeConnection": true }),
            Fault::WriteConcern(code) => (
                1,
                doc! { "writeConcernError": {
                    "code": code,
                    "codeName": if code == 91 { "ShutdownInProgress" } else { "WriteConcernFailed" },
                    "errmsg": "injected: the write ran, its reply says it failed",
                } },
            ),
        }
    }
}

/// The writer's store, with a fault armed just before the next call of one step. Its
/// commands carry `appName`, so the fail point hits them alone.
#[derive(Clone)]
struct Faulty {
    inner: MongoStore,
    set: Arc<ReplicaSet>,
    armed: Arc<Mutex<Option<(Step, Fault)>>>,
    /// How often an armed fault fired, over the store's life.
    fired: Arc<Mutex<i64>>,
}

impl Faulty {
    async fn connect(live: &LiveDb, set: Arc<ReplicaSet>) -> Faulty {
        let mut settings = MongoSettings::new(with_app_name(&live.uri, APP));
        settings.leases = live.ns("leases");
        settings.operation_timeout = Duration::from_secs(3);
        let inner = MongoStore::connect(settings)
            .await
            .expect("connect the writer's store");
        Faulty {
            inner,
            set,
            armed: Arc::default(),
            fired: Arc::default(),
        }
    }

    fn arm(&self, step: Step, fault: Fault) {
        *self.armed.lock().unwrap() = Some((step, fault));
    }

    /// Runs `call`, with the fault armed for `step` turned on around it.
    async fn around<T>(&self, step: Step, call: impl std::future::Future<Output = T>) -> T {
        let fault = {
            let mut armed = self.armed.lock().unwrap();
            match *armed {
                Some((s, fault)) if s == step => {
                    *armed = None;
                    Some(fault)
                }
                _ => None,
            }
        };
        let Some(fault) = fault else {
            return call.await;
        };
        let (times, mut data) = fault.data();
        data.insert("failCommands", vec!["update"]);
        data.insert("appName", APP);
        // The writes go to the primary, whichever member that is now.
        let primary = self.set.wait_for_primary(Duration::from_secs(10)).await;
        let point = self.set.fail_command(primary, times, data).await;
        let result = call.await;
        let fired = point.off(&self.set).await;
        assert_eq!(fired, times, "{step:?} {fault:?}: the fault fired as armed");
        *self.fired.lock().unwrap() += fired;
        result
    }
}

impl IncrementStore for Faulty {
    async fn add_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
        amount: i64,
    ) -> StoreResult<()> {
        let call = self
            .inner
            .add_pending_increment(ns, id, counter, token, amount);
        self.around(Step::AddPending, call).await
    }

    async fn apply_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
    ) -> StoreResult<bool> {
        let call = self.inner.apply_pending_increment(ns, id, counter, token);
        self.around(Step::Apply, call).await
    }

    async fn pending_increments(
        &self,
        ns: &Namespace,
        counter: &Counter,
    ) -> StoreResult<Vec<PendingDocument>> {
        self.inner.pending_increments(ns, counter).await
    }

    async fn fold_pending(
        &self,
        ns: &Namespace,
        counter: &Counter,
        document: &PendingDocument,
    ) -> StoreResult<FoldOutcome> {
        let call = self.inner.fold_pending(ns, counter, document);
        self.around(Step::Fold, call).await
    }
}

impl AuditLog for Faulty {
    async fn begin_audit(&self, intent: &AuditIntent) -> StoreResult<String> {
        self.inner.begin_audit(intent).await
    }

    async fn audit_step(
        &self,
        id: &str,
        what: &str,
        after: Option<&Lease>,
        intends: Option<&Lease>,
    ) -> StoreResult<()> {
        self.inner.audit_step(id, what, after, intends).await
    }

    async fn finish_audit(&self, id: &str, finish: &AuditFinish) -> StoreResult<()> {
        self.inner.finish_audit(id, finish).await
    }

    async fn audit_log(&self, limit: usize) -> StoreResult<Listing<AuditRecord>> {
        self.inner.audit_log(limit).await
    }

    async fn audit_record(&self, id: &str) -> StoreResult<Option<AuditRecord>> {
        self.inner.audit_record(id).await
    }
}

const ATTEMPTS: usize = 6;

/// Calls the helper until it answers, at most [`ATTEMPTS`] times, as a caller should.
async fn until_answered(
    store: &Faulty,
    ns: &Namespace,
    id: &Bson,
    counter: &Counter,
    token: &str,
    amount: i64,
) -> (Increment, Vec<StoreError>) {
    let mut errors = Vec::new();
    for _ in 0..ATTEMPTS {
        match increment_once(store, ns, id, counter, token, amount).await {
            Ok(answer) => return (answer, errors),
            Err(error) => errors.push(error),
        }
    }
    panic!("{token}: no answer after {ATTEMPTS} calls: {errors:?}");
}

async fn stored(live: &LiveDb, ns: &Namespace, id: &Bson) -> Document {
    live.store
        .find_one(ns, id)
        .await
        .expect("read the counted document")
        .expect("the counted document exists")
}

fn number(document: &Document, field: &str) -> i64 {
    match document.get(field) {
        None => 0,
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Int32(n)) => i64::from(*n),
        other => panic!("{field} is {other:?}"),
    }
}

fn pending_tokens(document: &Document, counter: &Counter) -> Vec<String> {
    document
        .get_array(counter.pending_field())
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_document()?.get_str("t").ok().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Each step under each fault, the helper called again until it answers: the counter
/// gains the amount exactly once and nothing is left pending.
#[tokio::test(flavor = "multi_thread")]
async fn each_step_under_each_fault_counts_exactly_once() {
    live("increment_each_fault", |live| async move {
        let _turn = FAIL_POINT.lock().await;
        let set = Arc::new(ReplicaSet::connect(&live.uri).await);
        let writer = Faulty::connect(&live, set).await;
        let ns = live.ns("counts");
        let counter = Counter::new("n").unwrap();
        // With 91 the driver forgets the server, and the next calls may time out
        // before it finds it again: how many errors the caller sees is not fixed.
        let cases = [
            (Step::AddPending, Fault::Drop { times: 1 }, Some(0)),
            (Step::AddPending, Fault::Drop { times: 2 }, Some(1)),
            (Step::AddPending, WTIMEOUT, Some(1)),
            (Step::AddPending, SHUTDOWN, None),
            (Step::Apply, Fault::Drop { times: 1 }, Some(0)),
            (Step::Apply, Fault::Drop { times: 2 }, Some(1)),
            (Step::Apply, WTIMEOUT, Some(1)),
            (Step::Apply, SHUTDOWN, None),
        ];
        for (index, (step, fault, errors_expected)) in cases.into_iter().enumerate() {
            let id = Bson::Int32(index as i32);
            // A count before, so the step meets an existing counter too.
            increment_once(&writer, &ns, &id, &counter, "seed", 10)
                .await
                .unwrap();
            writer.arm(step, fault);
            let (answer, errors) = until_answered(&writer, &ns, &id, &counter, "t", 3).await;
            let document = stored(&live, &ns, &id).await;
            println!(
                "-- {step:?} {fault:?}: {answer:?} after {} errors ({}); n = {}",
                errors.len(),
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
                number(&document, "n")
            );
            if let Some(expected) = errors_expected {
                assert_eq!(errors.len(), expected, "{step:?} {fault:?}: {errors:?}");
            }
            if let Fault::WriteConcern(_) = fault {
                assert!(
                    matches!(errors.first(), Some(StoreError::WriteConcern(_))),
                    "{errors:?}"
                );
            }
            assert_eq!(number(&document, "n"), 13, "{step:?} {fault:?}");
            assert!(pending_tokens(&document, &counter).is_empty());
            // The step ran and its reply was an error: the retry finds it counted.
            let expected = match (step, fault) {
                (Step::Apply, Fault::WriteConcern(_)) => Increment::AlreadyCounted,
                _ => Increment::Counted,
            };
            assert_eq!(answer, expected, "{step:?} {fault:?}");
            // A replay of the same event after all this: nothing more.
            let replay = increment_once(&writer, &ns, &id, &counter, "t", 3).await;
            assert_eq!(replay.unwrap(), Increment::AlreadyCounted);
            assert_eq!(number(&stored(&live, &ns, &id).await, "n"), 13);
        }
    })
    .await;
}

/// What the random run expects of one document.
#[derive(Default, Debug)]
struct Expected {
    counted: i64,
    pending: i64,
    pending_tokens: Vec<String>,
}

/// 200 increments on 8 documents, a random fault before a random step in most of them;
/// some writers give up after their first step (or after a second step whose reply
/// said it failed), some events are replayed. Counts exact throughout; the fold adds
/// exactly the abandoned ones, and a fold whose reply is lost is taken up by the next.
#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_increments_under_random_faults_count_exactly_and_fold_exactly() {
    live("increment_random_faults", |live| async move {
        let _turn = FAIL_POINT.lock().await;
        let set = Arc::new(ReplicaSet::connect(&live.uri).await);
        let writer = Faulty::connect(&live, set.clone()).await;
        let ns = live.ns("counts");
        let counter = Counter::new("likes").unwrap().remembering(50).unwrap();
        let seed: u64 = std::env::var("INCREMENT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random);
        println!("seed {seed} (INCREMENT_SEED={seed} runs this again)");
        let mut rng = StdRng::seed_from_u64(seed);
        let mut expected: BTreeMap<i32, Expected> = BTreeMap::new();
        let mut done: Vec<(i32, String, i64)> = Vec::new();
        let (mut faults, mut abandoned, mut replays) = (0, 0, 0);
        for n in 0..200 {
            let key = rng.gen_range(0..8);
            let id = Bson::Int32(key);
            let token = format!("event-{n}");
            let amount = rng.gen_range(-2..=5);
            let entry = expected.entry(key).or_default();
            let roll = rng.gen_range(0..100);
            if roll < 70 {
                let step = if rng.gen_bool(0.5) {
                    Step::AddPending
                } else {
                    Step::Apply
                };
                let fault = match rng.gen_range(0..3) {
                    0 => Fault::Drop { times: 1 },
                    1 => Fault::Drop { times: 2 },
                    _ => WTIMEOUT,
                };
                writer.arm(step, fault);
                faults += 1;
            }
            if roll >= 90 {
                // The writer gives up after its first step: left pending.
                abandoned += 1;
                if roll >= 95 {
                    writer.arm(Step::AddPending, WTIMEOUT);
                    faults += 1;
                    let first = writer
                        .add_pending_increment(&ns, &id, &counter, &token, amount)
                        .await;
                    assert!(
                        matches!(first, Err(StoreError::WriteConcern(_))),
                        "{first:?}"
                    );
                } else {
                    writer
                        .add_pending_increment(&ns, &id, &counter, &token, amount)
                        .await
                        .unwrap();
                }
                entry.pending += amount;
                entry.pending_tokens.push(token);
                continue;
            }
            let (answer, _) = until_answered(&writer, &ns, &id, &counter, &token, amount).await;
            let _ = answer;
            entry.counted += amount;
            done.push((key, token, amount));
            // Now and then an event already handled is read again (a crash before the
            // commit, a rewind, a takeover): a recent one, within the remembered 50.
            if rng.gen_range(0..10) == 0 {
                let recent = &done[done.len().saturating_sub(5)..];
                let (key, token, amount) = recent[rng.gen_range(0..recent.len())].clone();
                let again =
                    increment_once(&writer, &ns, &Bson::Int32(key), &counter, &token, amount)
                        .await
                        .unwrap();
                assert_eq!(again, Increment::AlreadyCounted, "{token}");
                replays += 1;
            }
        }
        let check = |expected: &BTreeMap<i32, Expected>, folded: bool| {
            let live = live.clone();
            let ns = ns.clone();
            let counter = counter.clone();
            let totals: Vec<(i32, i64, Vec<String>)> = expected
                .iter()
                .map(|(k, e)| {
                    let n = if folded {
                        e.counted + e.pending
                    } else {
                        e.counted
                    };
                    let tokens = if folded {
                        Vec::new()
                    } else {
                        e.pending_tokens.clone()
                    };
                    (*k, n, tokens)
                })
                .collect();
            async move {
                for (key, n, tokens) in totals {
                    let document = stored(&live, &ns, &Bson::Int32(key)).await;
                    assert_eq!(number(&document, "likes"), n, "_id {key}");
                    assert_eq!(pending_tokens(&document, &counter), tokens, "_id {key}");
                }
            }
        };
        check(&expected, false).await;
        let fired = *writer.fired.lock().unwrap();
        println!(
            "200 increments on {} documents: {faults} faults armed ({fired} commands failed), \
             {abandoned} abandoned after their first step, {replays} replays: counts exact",
            expected.len()
        );

        // The cleanup, its first fold's reply lost: stopped, then run again.
        let plan = ops::plan_fold(&writer, &ns, &counter).await.unwrap();
        let pending_total: i64 = expected.values().map(|e| e.pending).sum();
        assert_eq!(plan.tokens(), abandoned);
        assert_eq!(plan.total(), i128::from(pending_total));
        let context = AuditContext {
            operator: "oncall@increments".into(),
            action: FOLD_INCREMENTS_ACTION.into(),
            reason: None,
        };
        if !plan.documents.is_empty() {
            writer.arm(Step::Fold, WTIMEOUT);
            let stopped = ops::fold_pending_increments(&writer, &plan, context.clone()).await;
            match &stopped {
                Err(FoldError::Stopped { what, .. }) => {
                    assert!(what.contains("unknown"), "{what}")
                }
                other => panic!("{other:?}"),
            }
            let records = live.store.audit_log(10).await.unwrap().items;
            assert_eq!(records[0].state, AuditState::Failed, "{:?}", records[0]);
        }
        writer.arm(Step::Fold, Fault::Drop { times: 1 });
        let plan = ops::plan_fold(&writer, &ns, &counter).await.unwrap();
        let report = ops::fold_pending_increments(&writer, &plan, context)
            .await
            .unwrap();
        println!("fold after a lost reply: {report}");
        check(&expected, true).await;
        assert!(ops::plan_fold(&writer, &ns, &counter)
            .await
            .unwrap()
            .documents
            .is_empty());
        // The abandoned writers come back after all: remembered, nothing more counted.
        for (key, e) in &expected {
            for token in &e.pending_tokens {
                let late = increment_once(&writer, &ns, &Bson::Int32(*key), &counter, token, 1)
                    .await
                    .unwrap();
                assert_eq!(late, Increment::AlreadyCounted, "{token}");
            }
        }
        check(&expected, true).await;
    })
    .await;
}

/// The subcommand as an operator runs it: a dry run, a refusal under --read-only, a
/// malformed pending element refused before any write, then the fold and its record.
#[tokio::test(flavor = "multi_thread")]
async fn the_fold_subcommand_lists_folds_and_records() {
    live("increment_cli", |live| async move {
        let ns = live.ns("counts");
        let counter = Counter::new("n").unwrap();
        for (id, token, amount) in [(1, "a", 2), (1, "b", 3), (2, "c", 4)] {
            live.store
                .add_pending_increment(&ns, &Bson::Int32(id), &counter, token, amount)
                .await
                .unwrap();
        }
        let fold = |extra: &[&str]| {
            let mut cmd = streamward(&live);
            cmd.args([
                "increments",
                "fold",
                "--ns",
                &ns.to_string(),
                "--field",
                "n",
            ])
            .args(extra);
            cmd
        };
        let (code, out, err) = run(fold(&[])).await;
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("2 documents of") && out.contains("3 pending increments of n (total +9)"),
            "{out}"
        );
        assert!(out.contains("nothing written"), "{out}");

        let (code, _, err) = run(fold(&["--execute", "--read-only"])).await;
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("read-only"), "{err}");

        let (code, _, err) = run({
            let mut cmd = streamward(&live);
            cmd.args(["increments", "fold", "--ns", "nodot", "--field", "n"]);
            cmd
        })
        .await;
        assert_eq!(code, 2, "{err}");

        // A pending element of another shape: a clear error, nothing written.
        live.store
            .put(&ns, doc! {"_id": 3, "n_pending": [{"t": "d", "n": "four"}]})
            .await
            .unwrap();
        let (code, _, err) = run(fold(&["--execute"])).await;
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("document 3 field n_pending"), "{err}");
        assert!(live.store.audit_log(5).await.unwrap().items.is_empty());
        assert_eq!(number(&stored(&live, &ns, &Bson::Int32(1)).await, "n"), 0);
        live.store.delete_one(&ns, &Bson::Int32(3)).await.unwrap();

        let (code, out, err) = run(fold(&[
            "--execute",
            "--output",
            "json",
            "--reason",
            "cleanup",
        ]))
        .await;
        assert_eq!(code, 0, "{err}");
        let json: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
        assert_eq!(json["written"], true);
        assert_eq!(json["outcome"]["folded"]["total"], 9);
        assert_eq!(number(&stored(&live, &ns, &Bson::Int32(1)).await, "n"), 5);
        assert_eq!(number(&stored(&live, &ns, &Bson::Int32(2)).await, "n"), 4);
        let records = live.store.audit_log(5).await.unwrap().items;
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].action, FOLD_INCREMENTS_ACTION);
        assert_eq!(records[0].state, AuditState::Applied);
        assert_eq!(records[0].steps.len(), 2);
        assert_eq!(records[0].resource, ns.to_string());

        let (code, out, _) = run(fold(&[])).await;
        assert_eq!(code, 0);
        assert!(out.contains("nothing to fold"), "{out}");

        let (code, _, err) = run({
            let mut cmd = Command::cargo_bin("streamward").unwrap();
            cmd.env_remove("STREAMWARD_URI")
                .current_dir(std::env::temp_dir())
                .args(["--uri", "mongodb://127.0.0.1:9/", "--connect-timeout", "1s"])
                .args([
                    "increments",
                    "fold",
                    "--ns",
                    "a.b",
                    "--field",
                    "n",
                    "--execute",
                ]);
            cmd
        })
        .await;
        assert_eq!(code, 5, "{err}");
    })
    .await;
}
