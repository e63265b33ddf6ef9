//! Guarded actions under the server's `failCommand` fail point, on the real replica set
//! of `STREAMWARD_TEST_URI` (started with `enableTestCommands=1`): the operator's
//! compare-and-swap (`findAndModify`), the pending audit record (`insert`) and its
//! finalization (`update`) lose their connection or get a write-concern error. For each
//! fault: what the operator is told, the lease, and the audit record, which must agree:
//! every change of the lease has a record, and a record says what happened or stays
//! pending with a verdict that matches the lease.

mod support;

#[path = "support/failpoint.rs"]
mod failpoint;

use std::time::Duration;

use bson::{doc, Document};
use chrono::Utc;
use failpoint::{with_app_name, ReplicaSet};
use streamward::model::{AuditRecord, AuditState, Lease, LockKind, PendingVerdict};
use streamward::ops::{self, ActionRequest, Executed, GatherOptions, OpsError};
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::*;
use support::live::{live, LiveDb};

const RESOURCE: &str = "shop.orders";
const APP: &str = "sw-operator-faults";

/// `failCommand` is one fail point per server: the tests here take turns.
static FAIL_POINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A store for the operator whose commands carry `appName`, so a fail point picks them
/// alone (not the test's own reads).
async fn operator_store(live: &LiveDb) -> MongoStore {
    let mut settings = MongoSettings::new(with_app_name(&live.uri, APP));
    settings.leases = live.ns("leases");
    settings.operation_timeout = Duration::from_secs(3);
    MongoStore::connect(settings)
        .await
        .expect("connect the operator's store")
}

/// The lease held by a live listener `w1` (taken again if an earlier case released it).
async fn held(live: &LiveDb) -> Lease {
    let request = AcquireRequest {
        resource: RESOURCE.into(),
        listener: "w1".into(),
        kind: LockKind::Update,
        lease: Duration::from_secs(60),
        watch: None,
        seen_version: None,
    };
    match live.store.acquire(&request).await.expect("acquire") {
        AcquireOutcome::Acquired(lease) => lease,
        other => panic!("the lease should be free for w1: {other:?}"),
    }
}

struct Case {
    name: &'static str,
    command: &'static str,
    times: i64,
    data: Document,
}

fn wce(code: i32, name: &str, message: &str) -> Document {
    doc! { "writeConcernError": { "code": code, "codeName": name, "errmsg": message } }
}

/// What one case left behind.
struct Seen {
    before: Lease,
    after: Lease,
    result: Result<Executed, OpsError>,
    /// The records this case wrote (newest first).
    records: Vec<AuditRecord>,
}

/// Plans a takeover of the held lease, arms `case` on the operator's commands,
/// executes, and reads what it left.
async fn run_case(live: &LiveDb, set: &ReplicaSet, operator: &MongoStore, case: &Case) -> Seen {
    let before = held(live).await;
    let known = live.store.audit_log(1000).await.unwrap().items.len();
    let request = ActionRequest::Takeover {
        resource: RESOURCE.into(),
        to: None,
        hold: None,
    };
    let facts = ops::gather(operator, &request, &GatherOptions::new("oncall@faults"))
        .await
        .expect("gather");
    let plan = ops::plan(&request, &facts);
    assert!(plan.refusal.is_none(), "{:?}", plan.refusal);
    let mut data = case.data.clone();
    data.insert("failCommands", vec![case.command]);
    data.insert("appName", APP);
    let primary = set.wait_for_primary(Duration::from_secs(10)).await;
    let armed = set.fail_command(primary, case.times, data).await;
    let result = ops::execute(operator, &plan, Some(case.name.into())).await;
    let fired = armed.off(set).await;
    assert_eq!(
        fired, case.times,
        "{}: the fault fired as often as the case says",
        case.name
    );
    let after = live.store.get(RESOURCE).await.unwrap().expect("the lease");
    let mut records = live.store.audit_log(1000).await.unwrap().items;
    records.truncate(records.len() - known);
    println!(
        "-- {} on {} ({}×, fired {fired}×): lease v{} → v{}; {}; records: {}",
        case.name,
        case.command,
        case.times,
        before.version,
        after.version,
        match &result {
            Ok(done) => format!(
                "applied, audit {}{}",
                done.audit_id,
                done.remark
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
            Err(e) => format!("error: {e}"),
        },
        records
            .iter()
            .map(|r| format!("{} [{}]", r.state, r.outcome))
            .collect::<Vec<_>>()
            .join("; ")
    );
    Seen {
        before,
        after,
        result,
        records,
    }
}

/// The rule every case must keep: a lease that changed has a record saying applied (or
/// pending and judged applied); an unchanged one has none saying applied.
fn assert_told_the_truth(case: &Case, seen: &Seen) {
    let changed = seen.after.version != seen.before.version;
    let now = Utc::now();
    let says_applied = |r: &AuditRecord| match r.state {
        AuditState::Applied => true,
        AuditState::Pending => {
            PendingVerdict::of(r, Some(&seen.after), now) == PendingVerdict::Applied
        }
        _ => false,
    };
    assert_eq!(
        seen.records.iter().any(says_applied),
        changed,
        "{}: the lease {} but the records say otherwise: {:?}",
        case.name,
        if changed { "changed" } else { "did not change" },
        seen.records
    );
    assert_eq!(
        seen.result.is_ok(),
        changed,
        "{}: the operator is told {:?} while the lease {}",
        case.name,
        seen.result,
        if changed { "changed" } else { "did not" }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_writes_under_fail_points_change_nothing_unaudited_and_say_what_happened() {
    live("operator_faults", |live| async move {
        let _turn = FAIL_POINT.lock().await;
        let set = ReplicaSet::connect(&live.uri).await;
        let operator = operator_store(&live).await;

        // The swap loses its connection once: sent again, it applies.
        let case = Case {
            name: "closeConnection, once",
            command: "findAndModify",
            times: 1,
            data: doc! { "closeConnection": true },
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        let done = seen.result.as_ref().expect("applied on the second send");
        assert!(done
            .remark
            .as_deref()
            .unwrap_or_default()
            .contains("sent again"));
        assert_eq!(seen.records[0].state, AuditState::Applied);

        // Twice: the outcome is unknown to the tool; the record stays pending and,
        // judged against the lease (closeConnection fires before the command runs),
        // reads not applied.
        let case = Case {
            name: "closeConnection, twice",
            command: "findAndModify",
            times: 2,
            data: doc! { "closeConnection": true },
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        let Err(OpsError::OutcomeUnknown { audit_id, .. }) = &seen.result else {
            panic!("{:?}", seen.result)
        };
        let pending = &seen.records[0];
        assert_eq!(&pending.id, audit_id);
        assert_eq!(pending.state, AuditState::Pending);
        assert_eq!(
            PendingVerdict::of(pending, Some(&seen.after), Utc::now()),
            PendingVerdict::NotApplied
        );
        // The listener still holds it; release it for the next case.
        live.store
            .release(&Tenure::of(&seen.after).unwrap())
            .await
            .unwrap();

        // A write-concern error: the swap was applied on the primary; sent again, it
        // finds the lease as it leaves it.
        let case = Case {
            name: "writeConcernError 64 (wtimeout)",
            command: "findAndModify",
            times: 1,
            data: wce(
                64,
                "WriteConcernFailed",
                "waiting for replication timed out",
            ),
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        let done = seen.result.as_ref().expect("found applied");
        assert!(
            done.remark
                .as_deref()
                .unwrap_or_default()
                .contains("found the lease as this write leaves it"),
            "{:?}",
            done.remark
        );

        // Refused by a node that is no longer primary (an election): nothing ran, so
        // the same swap is sent to the (next) primary once, and applies.
        let case = Case {
            name: "errorCode 10107 NotWritablePrimary, once",
            command: "findAndModify",
            times: 1,
            data: doc! { "errorCode": 10107 },
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        let done = seen.result.as_ref().expect("sent again, applied");
        assert!(
            done.remark
                .as_deref()
                .unwrap_or_default()
                .contains("no longer primary"),
            "{:?}",
            done.remark
        );
        assert_eq!(seen.records[0].state, AuditState::Applied);

        // Refused twice: not applied, and recorded so.
        let case = Case {
            name: "errorCode 10107 NotWritablePrimary, twice",
            command: "findAndModify",
            times: 2,
            data: doc! { "errorCode": 10107 },
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        assert!(
            matches!(seen.result, Err(OpsError::NotApplied { .. })),
            "{:?}",
            seen.result
        );
        assert_eq!(seen.records[0].state, AuditState::NotApplied);
        live.store
            .release(&Tenure::of(&seen.after).unwrap())
            .await
            .unwrap();

        // The pending record's insert loses its connection once: retried, it is written.
        let case = Case {
            name: "closeConnection on the audit insert, once",
            command: "insert",
            times: 1,
            data: doc! { "closeConnection": true },
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        assert_eq!(seen.records.len(), 1, "{:?}", seen.records);

        // Twice: no record, so the action is not started and the lease not touched.
        let case = Case {
            name: "closeConnection on the audit insert, twice",
            command: "insert",
            times: 2,
            data: doc! { "closeConnection": true },
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        assert!(
            matches!(seen.result, Err(OpsError::NotStarted { .. })),
            "{:?}",
            seen.result
        );
        assert!(seen.records.is_empty(), "{:?}", seen.records);
        live.store
            .release(&Tenure::of(&seen.after).unwrap())
            .await
            .unwrap();

        // Unconfirmed: the record is on the primary but may be rolled back, so the
        // action does not go on; the stray pending record reads not applied. (64 is not
        // a retryable code: the insert is sent once.)
        let case = Case {
            name: "writeConcernError 64 on the audit insert",
            command: "insert",
            times: 1,
            data: wce(
                64,
                "WriteConcernFailed",
                "waiting for replication timed out",
            ),
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        assert_told_the_truth(&case, &seen);
        assert!(
            matches!(seen.result, Err(OpsError::NotStarted { .. })),
            "{:?}",
            seen.result
        );
        assert!(seen.records.iter().all(|r| r.state == AuditState::Pending
            && PendingVerdict::of(r, Some(&seen.after), Utc::now()) == PendingVerdict::NotApplied));
        live.store
            .release(&Tenure::of(&seen.after).unwrap())
            .await
            .unwrap();

        // The finalization cannot be written: the change stands, its record stays
        // pending and reads applied, and the operator is told exactly that.
        let case = Case {
            name: "closeConnection on the finalization, twice",
            command: "update",
            times: 2,
            data: doc! { "closeConnection": true },
        };
        let seen = run_case(&live, &set, &operator, &case).await;
        let Err(OpsError::AuditUnfinished {
            audit_id, version, ..
        }) = &seen.result
        else {
            panic!("{:?}", seen.result)
        };
        assert_eq!(*version, seen.after.version);
        let record = &seen.records[0];
        assert_eq!(&record.id, audit_id);
        assert_eq!(record.state, AuditState::Pending);
        assert_eq!(
            PendingVerdict::of(record, Some(&seen.after), Utc::now()),
            PendingVerdict::Applied
        );
        assert_ne!(seen.after.version, seen.before.version, "the change stands");
    })
    .await;
}

/// What an operator sees from the binary when the swap's reply is lost twice: the
/// outcome is unknown, the record stays pending, and `audit` judges it.
#[tokio::test(flavor = "multi_thread")]
async fn the_binary_reports_a_twice_lost_swap_as_unknown_and_audit_judges_it() {
    live("operator_faults_cli", |live| async move {
        let _turn = FAIL_POINT.lock().await;
        let set = ReplicaSet::connect(&live.uri).await;
        let before = held(&live).await;
        let uri = with_app_name(&live.uri, "sw-faults-cli");
        let leases = format!("{}.leases", live.db);
        let streamward = || {
            let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamward"));
            cmd.env("NO_COLOR", "1").env_remove("STREAMWARD_URI").args([
                "--uri",
                &uri,
                "--leases",
                &leases,
                "--operator",
                "oncall@faults",
            ]);
            cmd
        };
        // The swap and its one resend both lose their connection.
        let swap_lost_twice = || async {
            let primary = set.wait_for_primary(Duration::from_secs(10)).await;
            set.fail_command(
                primary,
                2,
                doc! {
                    "closeConnection": true,
                    "failCommands": ["findAndModify"],
                    "appName": "sw-faults-cli",
                },
            )
            .await
        };
        let armed = swap_lost_twice().await;
        let output = streamward()
            .args(["takeover", RESOURCE, "--execute"])
            .output()
            .unwrap();
        let fired = armed.off(&set).await;
        let err = String::from_utf8_lossy(&output.stderr);
        println!(
            "-- the binary, swap closeConnection twice (fired {fired}×): exit {:?}: {err}",
            output.status.code()
        );
        assert_eq!(
            fired, 2,
            "the swap and its one resend both lost their connection"
        );
        assert_eq!(output.status.code(), Some(1), "{err}");
        assert!(err.contains("whether it was applied is unknown"), "{err}");
        assert!(err.contains("stays pending"), "{err}");
        assert_eq!(
            live.store.get(RESOURCE).await.unwrap().unwrap().version,
            before.version,
            "closeConnection fires before the command runs"
        );
        let output = streamward().args(["audit"]).output().unwrap();
        let out = String::from_utf8_lossy(&output.stdout);
        println!("-- then `streamward audit`:\n{out}");
        assert!(out.contains("PENDING"), "{out}");
        assert!(out.contains("nothing was written; plan it again"), "{out}");

        // The same with --output json: one document with the plan, `written: null`
        // (unknown), the pending record's id and the error.
        let armed = swap_lost_twice().await;
        let output = streamward()
            .args(["takeover", RESOURCE, "--execute", "--output", "json"])
            .output()
            .unwrap();
        assert_eq!(armed.off(&set).await, 2);
        assert_eq!(output.status.code(), Some(1));
        let json: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("one JSON document on stdout");
        println!("-- with --output json:\n{json:#}");
        assert_eq!(json["written"], serde_json::Value::Null, "{json}");
        assert_eq!(json["plan"]["resource"], RESOURCE, "{json}");
        assert_eq!(json["error"]["exit"], 1, "{json}");
        let newest = live.store.audit_log(1).await.unwrap().items;
        assert_eq!(newest[0].state, AuditState::Pending);
        assert_eq!(json["auditId"], newest[0].id.as_str(), "{json}");
    })
    .await;
}
