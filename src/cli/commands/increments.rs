//! `streamward increments fold`: the cleanup of the two-step increment
//! (docs/increments.md). A dry run by default that lists what it would fold;
//! `--execute` folds, audited. Generic over the store, so tests run it on the sandbox.

use std::io::Write;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::cli::common::exit::UsageError;
use crate::cli::common::lease_table::render_columns;
use crate::cli::common::output::{print_json, tell_early_refusal};
use crate::cli::common::settings::{ActingArgs, OutputFormat, Settings};
use crate::model::text::escape_control;
use crate::model::FOLD_INCREMENTS_ACTION;
use crate::ops::{self, FoldError, FoldPlan, FoldReport, OpsError};
use crate::store::{AuditContext, AuditLog, Counter, IncrementStore, Namespace, StoreError};

#[derive(Debug, Args)]
pub struct IncrementsArgs {
    #[command(subcommand)]
    pub command: IncrementsCommand,
}

#[derive(Debug, Subcommand)]
pub enum IncrementsCommand {
    /// Add the pending tokens of interrupted increments to their counters and clear
    /// them. Run it only where nothing writes to the counter any more.
    Fold(FoldArgs),
}

#[derive(Debug, Args)]
pub struct FoldArgs {
    /// The collection of the counted documents.
    #[arg(long, value_name = "DB.COLL")]
    pub ns: Namespace,
    /// The counter field (a top-level field).
    #[arg(long, value_name = "FIELD")]
    pub field: String,
    /// Where the pending tokens are kept [default: FIELD_pending].
    #[arg(long, value_name = "FIELD")]
    pub pending_field: Option<String>,
    /// Where the applied tokens are kept [default: FIELD_applied].
    #[arg(long, value_name = "FIELD")]
    pub applied_field: Option<String>,
    /// How many applied tokens a document keeps (as the writers keep them) [default: 100].
    #[arg(long, value_name = "N")]
    pub remembered: Option<u16>,
    /// Fold. Without it the command is a dry run: it lists what it would fold and writes nothing.
    #[arg(long)]
    pub execute: bool,
    /// Why, for the audit record (at most 1,024 characters).
    #[arg(long, value_parser = crate::cli::common::limits::reason)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub common: ActingArgs,
}

impl IncrementsArgs {
    pub fn acting(&self) -> &ActingArgs {
        match &self.command {
            IncrementsCommand::Fold(args) => &args.common,
        }
    }
}

impl FoldArgs {
    /// The counter the options name; a usage error when a field name is not plain.
    pub fn counter(&self) -> anyhow::Result<Counter> {
        let usage = |e: StoreError| anyhow::Error::new(UsageError(e.to_string()));
        let mut counter = Counter::new(&self.field).map_err(usage)?;
        if let Some(pending) = &self.pending_field {
            counter = counter.with_pending_field(pending).map_err(usage)?;
        }
        if let Some(applied) = &self.applied_field {
            counter = counter.with_applied_field(applied).map_err(usage)?;
        }
        if let Some(count) = self.remembered {
            counter = counter.remembering(count).map_err(usage)?;
        }
        Ok(counter)
    }
}

/// What `fold` needs from the settings.
#[derive(Debug, Clone)]
pub struct FoldSettings {
    pub operator: String,
    pub output: OutputFormat,
}

/// Read-only mode refuses the fold, dry run included, by the guarded actions' rule.
fn refuse_read_only(read_only: bool) -> anyhow::Result<()> {
    ops::refuse_read_only(read_only, FOLD_INCREMENTS_ACTION)
        .map_err(|refusal| OpsError::Refused(refusal).into())
}

/// Runs `increments` against `--uri`.
pub async fn run(
    settings: &Settings,
    args: &IncrementsArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let IncrementsCommand::Fold(args) = &args.command;
    tell_early_refusal(refuse_read_only(settings.read_only), settings.output, out)?;
    let counter = args.counter()?;
    let store = crate::cli::common::connect::connect(settings).await?;
    let fold = FoldSettings {
        operator: settings.operator.clone(),
        output: settings.output,
    };
    run_fold(&store, args, &counter, &fold, out).await
}

fn shown_id(id: &bson::Bson) -> String {
    escape_control(&id.clone().into_relaxed_extjson().to_string())
}

/// `increments fold --output json`: the plan, whether anything was written (null:
/// unknown), and, once it ran, what it did (null when it did not get to say).
#[derive(Debug, Clone, PartialEq, Serialize)]
struct FoldJson<'a> {
    plan: FoldPlanJson<'a>,
    written: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<Option<FoldReportJson<'a>>>,
}

/// What a fold would add: per document its pending tokens and their sum.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct FoldPlanJson<'a> {
    ns: String,
    field: &'a str,
    #[serde(rename = "pendingField")]
    pending_field: &'a str,
    #[serde(rename = "appliedField")]
    applied_field: &'a str,
    documents: Vec<PendingDocumentJson<'a>>,
    tokens: usize,
    total: SumJson,
}

impl<'a> FoldPlanJson<'a> {
    fn of(plan: &'a FoldPlan) -> Self {
        Self {
            ns: plan.ns.to_string(),
            field: plan.counter.field(),
            pending_field: plan.counter.pending_field(),
            applied_field: plan.counter.applied_field(),
            documents: plan
                .documents
                .iter()
                .map(|d| PendingDocumentJson {
                    id: d.id.clone().into_relaxed_extjson(),
                    tokens: d
                        .pending
                        .iter()
                        .map(|p| PendingTokenJson {
                            t: &p.token,
                            n: p.amount,
                        })
                        .collect(),
                    total: d.total,
                })
                .collect(),
            tokens: plan.tokens(),
            total: SumJson::of(plan.total()),
        }
    }
}

/// A counted document's pending increments; `_id` as relaxed extended JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct PendingDocumentJson<'a> {
    #[serde(rename = "_id")]
    id: serde_json::Value,
    tokens: Vec<PendingTokenJson<'a>>,
    total: i64,
}

/// One pending increment: its token and amount.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct PendingTokenJson<'a> {
    t: &'a str,
    n: i64,
}

/// What a fold did.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct FoldReportJson<'a> {
    folded: FoldedJson,
    #[serde(rename = "alreadyCounted")]
    already_counted: usize,
    changed: usize,
    summary: String,
    #[serde(rename = "auditId")]
    audit_id: Option<&'a str>,
}

impl<'a> FoldReportJson<'a> {
    fn of(report: &'a FoldReport) -> Self {
        let (documents, tokens, total) = report.folded();
        Self {
            folded: FoldedJson {
                documents,
                tokens,
                total: SumJson::of(total),
            },
            already_counted: report.already_counted(),
            changed: report.changed(),
            summary: report.to_string(),
            audit_id: report.audit_id.as_deref(),
        }
    }
}

/// What a fold added to counters.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct FoldedJson {
    documents: usize,
    tokens: usize,
    total: SumJson,
}

/// A sum: a number while it fits an int64, else its digits as a string.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
enum SumJson {
    Number(i64),
    Digits(String),
}

impl SumJson {
    fn of(total: i128) -> Self {
        i64::try_from(total).map_or_else(|_| SumJson::Digits(total.to_string()), SumJson::Number)
    }
}

fn print_plan(out: &mut dyn Write, plan: &FoldPlan) -> anyhow::Result<()> {
    if plan.documents.is_empty() {
        writeln!(
            out,
            "no pending increments of {} in {} ({}): nothing to fold",
            plan.counter.field(),
            plan.ns,
            plan.counter.pending_field()
        )?;
        return Ok(());
    }
    let rows: Vec<[String; 3]> = plan
        .documents
        .iter()
        .map(|d| {
            [
                shown_id(&d.id),
                d.pending.len().to_string(),
                format!("{:+}", d.total),
            ]
        })
        .collect();
    write!(out, "{}", render_columns(["_ID", "TOKENS", "TOTAL"], &rows))?;
    writeln!(
        out,
        "{} documents of {} hold {} pending increments of {} (total {:+}).\n\
         Fold only where nothing writes to this counter any more (docs/increments.md).",
        plan.documents.len(),
        plan.ns,
        plan.tokens(),
        plan.counter.field(),
        plan.total()
    )?;
    Ok(())
}

/// Reads what is pending and prints it; with `--execute` folds it, audited.
pub async fn run_fold<S: IncrementStore + AuditLog>(
    store: &S,
    args: &FoldArgs,
    counter: &Counter,
    settings: &FoldSettings,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let plan = ops::plan_fold(store, &args.ns, counter)
        .await
        .with_context(|| format!("reading the pending increments of {}", args.ns))?;
    let json = settings.output == OutputFormat::Json;
    if !json {
        print_plan(out, &plan)?;
    }
    if !args.execute || plan.documents.is_empty() {
        if json {
            print_json(
                out,
                FoldJson {
                    plan: FoldPlanJson::of(&plan),
                    written: Some(false),
                    outcome: None,
                },
            )?;
        } else if !plan.documents.is_empty() {
            writeln!(out, "\nnothing written; re-run with --execute to fold")?;
        }
        return Ok(());
    }
    let context = AuditContext {
        operator: settings.operator.clone(),
        action: FOLD_INCREMENTS_ACTION.into(),
        reason: args.reason.clone(),
    };
    match ops::fold_pending_increments(store, &plan, context).await {
        Ok(report) => {
            if json {
                print_json(
                    out,
                    FoldJson {
                        plan: FoldPlanJson::of(&plan),
                        written: Some(report.wrote()),
                        outcome: Some(Some(FoldReportJson::of(&report))),
                    },
                )?;
            } else {
                writeln!(
                    out,
                    "\n{report} (audit record {})",
                    report.audit_id.as_deref().unwrap_or("-")
                )?;
            }
            Ok(())
        }
        Err(error) => {
            if json {
                let (written, outcome) = match &error {
                    FoldError::NotStarted { .. } => (Some(false), None),
                    FoldError::Stopped { report, cause, .. } => (
                        (!cause.write_may_have_applied()).then(|| report.wrote()),
                        Some(FoldReportJson::of(report)),
                    ),
                    FoldError::AuditUnfinished { report, .. } => {
                        (Some(report.wrote()), Some(FoldReportJson::of(report)))
                    }
                };
                print_json(
                    out,
                    FoldJson {
                        plan: FoldPlanJson::of(&plan),
                        written,
                        outcome: Some(outcome),
                    },
                )?;
            }
            Err(error.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson};

    use super::*;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use crate::store::DocumentStore;

    fn args(execute: bool) -> FoldArgs {
        FoldArgs {
            ns: Namespace::new("shop", "counts"),
            field: "n".into(),
            pending_field: None,
            applied_field: None,
            remembered: None,
            execute,
            reason: Some("after the outage".into()),
            common: ActingArgs::default(),
        }
    }

    async fn run(store: &SandboxStore, args: &FoldArgs, output: OutputFormat) -> (String, bool) {
        let settings = FoldSettings {
            operator: "ann".into(),
            output,
        };
        let mut out = Vec::new();
        let counter = args.counter().unwrap();
        let ok = run_fold(store, args, &counter, &settings, &mut out)
            .await
            .is_ok();
        (String::from_utf8(out).unwrap(), ok)
    }

    #[tokio::test]
    async fn a_dry_run_lists_what_it_would_fold_and_writes_nothing() {
        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let ns = Namespace::new("shop", "counts");
        store
            .put(&ns, doc! {"_id": "p1", "n": 1, "n_pending": [{"t": "a", "n": 2_i64}, {"t": "b", "n": 3_i64}]})
            .await
            .unwrap();
        let before = store.find_all(&ns).await.unwrap();
        let (text, ok) = run(&store, &args(false), OutputFormat::Table).await;
        assert!(ok);
        assert_eq!(store.find_all(&ns).await.unwrap(), before);
        assert!(text.contains("\"p1\""), "{text}");
        assert!(
            text.contains("1 documents of shop.counts hold 2 pending increments of n (total +5)"),
            "{text}"
        );
        assert!(text.contains("nothing written"), "{text}");
        assert_eq!(store.calls().operator_writes(), 0);
        let (json, _) = run(&store, &args(false), OutputFormat::Json).await;
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["written"], false);
        assert_eq!(value["plan"]["total"], 5);

        let (text, ok) = run(&store, &args(true), OutputFormat::Table).await;
        assert!(ok, "{text}");
        assert!(
            text.contains("folded 2 pending increments (total +5) into 1 documents"),
            "{text}"
        );
        let stored = store
            .find_one(&ns, &Bson::from("p1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.get("n"), Some(&Bson::Int64(6)));
        let records = store.audit_log(5).await.unwrap().items;
        assert_eq!(records[0].action, FOLD_INCREMENTS_ACTION);
        assert_eq!(records[0].reason.as_deref(), Some("after the outage"));
    }

    #[tokio::test]
    async fn a_pending_fold_record_is_judged_without_reading_a_lease() {
        use std::sync::atomic::Ordering;

        use crate::store::AuditIntent;

        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let intent = AuditIntent {
            resource: "shop.counts".into(),
            context: AuditContext {
                operator: "ann".into(),
                action: FOLD_INCREMENTS_ACTION.into(),
                reason: None,
            },
            before: None,
            intended: None,
        };
        store.begin_audit(&intent).await.unwrap();
        let (gets, clock) = (&store.calls().get, &store.calls().server_now);
        let before = (gets.load(Ordering::Relaxed), clock.load(Ordering::Relaxed));
        let mut out = Vec::new();
        crate::cli::commands::audit::run_audit(&store, 5, OutputFormat::Json, &mut out)
            .await
            .unwrap();
        let after = (gets.load(Ordering::Relaxed), clock.load(Ordering::Relaxed));
        assert_eq!(before, after, "no lease nor server clock read");
        let listed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let pending = &listed[0]["pending"];
        assert_eq!(pending["verdict"], "run again");
        let recovery = pending["recovery"].as_str().unwrap_or_default();
        assert!(
            recovery.contains("run `streamward increments fold` again"),
            "{recovery}"
        );
    }

    #[test]
    fn read_only_refuses_and_bad_fields_are_usage_errors() {
        let refused = refuse_read_only(true).unwrap_err();
        assert_eq!(
            crate::cli::common::exit::code_of(&refused),
            crate::cli::common::exit::REFUSED
        );
        let mut bad = args(false);
        bad.field = "a.b".into();
        let error = bad.counter().unwrap_err();
        assert_eq!(
            crate::cli::common::exit::code_of(&error),
            crate::cli::common::exit::USAGE
        );
    }
}
