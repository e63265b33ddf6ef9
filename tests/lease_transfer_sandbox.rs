//! `leases export` → `leases import` on the sandbox, through the command line's own
//! runners: the file round-trips, a rewound lease and a lease moved on come back to
//! the exported tokens, each move is one audited `import`, a rerun changes nothing,
//! and a move that fails part way stops and says what was moved.

use std::path::PathBuf;
use std::time::Duration;

use bson::doc;
use serde_json::Value;
use streamward::cli::commands::actions::{run_action, ActionOptions, ActionSettings};
use streamward::cli::commands::lease_transfer::{run_import, ImportArgs};
use streamward::cli::common::settings::{ActingArgs, OutputFormat};
use streamward::model::{LockKind, ResumeToken};
use streamward::ops::lease_transfer::{self as transfer, ExportOrigin};
use streamward::ops::{ActionRequest, GatherOptions, RewindTarget, TimeSpec};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::*;

fn here() -> ExportOrigin {
    ExportOrigin {
        uri: Some("sandbox".into()),
        leases: "streamward.leases".into(),
        replica_set: Some("sandbox".into()),
    }
}

async fn tokens(store: &SandboxStore, coll: &str, n: usize) -> Vec<ResumeToken> {
    let ns = Namespace::new("shop", coll);
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(
            &ns,
            StartPoint::At(start),
            FeedOptions {
                batch_size: 100,
                max_await: Duration::from_millis(50),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for i in 0..n {
        store.put(&ns, doc! {"_id": i as i64}).await.unwrap();
    }
    let mut tokens = Vec::new();
    while tokens.len() < n {
        let batch = stream.next_batch().await.unwrap();
        tokens.extend(batch.events.iter().map(|e| e.token.clone()));
    }
    tokens
}

async fn committed(store: &SandboxStore, resource: &str, listener: &str, token: &ResumeToken) {
    let AcquireOutcome::Acquired(lease) = store
        .acquire(&AcquireRequest {
            resource: resource.into(),
            listener: listener.into(),
            kind: LockKind::Update,
            lease: Duration::from_secs(60),
            watch: None,
            seen_version: None,
        })
        .await
        .unwrap()
    else {
        panic!("{listener} acquires {resource}");
    };
    let tenure = Tenure::of(&lease).unwrap();
    assert_eq!(
        store
            .commit(&tenure, token, Duration::from_secs(60))
            .await
            .unwrap(),
        TenureWrite::Done
    );
}

fn settings(output: OutputFormat) -> ActionSettings {
    ActionSettings {
        gather: GatherOptions::new("ann@host"),
        output,
    }
}

fn args(execute: bool, accept_skip: bool) -> ImportArgs {
    ImportArgs {
        file: PathBuf::from("unused.json"),
        only: Vec::new(),
        accept_skip,
        accept_other_cluster: false,
        options: ActionOptions {
            execute,
            reason: Some("restore".into()),
        },
        common: ActingArgs::default(),
    }
}

#[tokio::test]
async fn export_then_import_on_the_sandbox_restores_each_token_as_one_audited_move() {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    let orders = tokens(&store, "orders", 3).await;
    let mails = tokens(&store, "mails", 3).await;
    committed(&store, "shop.orders", "w1", &orders[1]).await;
    committed(&store, "shop.mailer", "w2", &mails[0]).await;

    let export = transfer::export(&store, here()).await.unwrap();
    let text = export.to_text();
    let file = transfer::parse_export(&text).unwrap();
    assert_eq!(file, export, "the file reads back as it was written");
    let before = store.list().await.unwrap().items;

    // Orders is rewound to before its token, the mailer commits a later one.
    let rewind = ActionRequest::Rewind {
        resource: "shop.orders".into(),
        to: RewindTarget::Time(TimeSpec::Cluster(orders[0].time().unwrap())),
    };
    let mut sink = Vec::new();
    run_action(
        &store,
        rewind,
        &settings(OutputFormat::Table),
        &ActionOptions {
            execute: true,
            reason: None,
        },
        &mut sink,
    )
    .await
    .unwrap();
    let mailer = store.get("shop.mailer").await.unwrap().unwrap();
    store
        .commit(
            &Tenure::of(&mailer).unwrap(),
            &mails[2],
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let moved_on = store.list().await.unwrap().items;

    // A dry run: both planned, nothing written.
    let mut out = Vec::new();
    run_import(
        &store,
        &file,
        &here(),
        &settings(OutputFormat::Table),
        &args(false, true),
        &mut out,
    )
    .await
    .unwrap();
    let shown = String::from_utf8(out).unwrap();
    assert!(
        shown.contains("re-run with --execute to move 2 leases"),
        "{shown}"
    );
    assert!(shown.contains("RESOURCE"), "{shown}");
    assert_eq!(store.list().await.unwrap().items, moved_on);

    let mut out = Vec::new();
    run_import(
        &store,
        &file,
        &here(),
        &settings(OutputFormat::Json),
        &args(true, true),
        &mut out,
    )
    .await
    .unwrap();
    let reply: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(reply["moved"].as_array().map(Vec::len), Some(2), "{reply}");
    let after = store.list().await.unwrap().items;
    assert_eq!(
        before.len(),
        after.len(),
        "the same leases, none missing or added"
    );
    for (then, now) in before.iter().zip(&after) {
        assert_eq!(
            then.resume_token.as_ref().map(ResumeToken::as_document),
            now.resume_token.as_ref().map(ResumeToken::as_document),
            "{}",
            now.resource
        );
    }
    let imports: Vec<_> = store
        .audit_log(50)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.action == "import")
        .collect();
    assert_eq!(imports.len(), 2);

    // Rerun: nothing to do, nothing written.
    let mut out = Vec::new();
    run_import(
        &store,
        &file,
        &here(),
        &settings(OutputFormat::Table),
        &args(true, true),
        &mut out,
    )
    .await
    .unwrap();
    assert!(String::from_utf8(out).unwrap().contains("nothing to do"));
    assert_eq!(store.list().await.unwrap().items, after);
}

#[tokio::test]
async fn an_import_that_finds_a_lease_changed_midway_stops_and_names_what_moved() {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    let a = tokens(&store, "a", 2).await;
    committed(&store, "a.first", "w1", &a[0]).await;
    committed(&store, "b.second", "w2", &a[0]).await;
    let file = transfer::export(&store, here()).await.unwrap();
    for resource in ["a.first", "b.second"] {
        let lease = store.get(resource).await.unwrap().unwrap();
        store
            .commit(&Tenure::of(&lease).unwrap(), &a[1], Duration::from_secs(60))
            .await
            .unwrap();
    }
    // Planned, then b.second changes hands before its move: the swap finds another version.
    let selected: Vec<_> = file.leases.iter().collect();
    let plan = transfer::plan_import(
        &store,
        &file,
        &selected,
        &here(),
        &GatherOptions::new("ann@host"),
        &transfer::ImportOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(plan.moves().count(), 2);
    let b = store.get("b.second").await.unwrap().unwrap();
    store.release(&Tenure::of(&b).unwrap()).await.unwrap();
    committed(&store, "b.second", "w3", &a[1]).await;

    let stopped = transfer::execute_import(&store, &plan, None)
        .await
        .expect_err("b.second changed since it was planned");
    assert_eq!(stopped.report.moved.len(), 1);
    assert_eq!(stopped.report.moved[0].resource, "a.first");
    assert_eq!(stopped.report.not_moved, ["b.second"]);
    let message = stopped.to_string();
    assert!(
        message.contains("a.first (audit ") && message.contains("Not moved: b.second"),
        "{message}"
    );
    let error = anyhow::Error::new(*stopped);
    assert_eq!(
        streamward::cli::common::exit::code_of(&error),
        4,
        "changed: exit 4"
    );
}
