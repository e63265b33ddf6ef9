//! `streamward leases export [FILE]` and `streamward leases import FILE`: save every
//! lease's resume point as JSON, and restore it through plan, `--execute` and audit
//! (docs/lease-transfer.md). The runners are generic over the store, so the same code
//! runs against a cluster and, in tests, the sandbox.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::cli::commands::actions::{ActionOptions, ActionSettings};
use crate::cli::common::exit::UsageError;
use crate::cli::common::json::plan_json;
use crate::cli::common::lease_table::render_columns;
use crate::cli::common::limits;
use crate::cli::common::output::{print_json, say, tell_early_refusal};
use crate::cli::common::settings::{ActingArgs, OutputFormat, ReaderArgs, Settings};
use crate::model::text::escape_control;
use crate::model::Deployment;
use crate::ops::json::{PlanJson, RefusalJson, Rfc3339};
use crate::ops::lease_transfer::{
    self as transfer, ExportOrigin, ExportOriginJson, ImportItem, ImportOptions, ImportPlan,
    ImportReport, ImportStep, LeaseExport, MAX_FILE_BYTES,
};
use crate::ops::{describe, refuse_read_only, Executed, OpsError, Refusal};
use crate::store::OpsStore;

#[derive(Debug, Subcommand)]
pub enum LeasesAction {
    /// Save every lease's resume point as JSON (reads only).
    Export(ExportArgs),
    /// Restore the resume points of a `leases export` file: a dry run prints the plan;
    /// applied, each changed lease is moved as one audited action (undo restores it).
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Write the export here (replaced whole: written to a temporary file beside it,
    /// then renamed); `-` or nothing: standard output.
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub common: ReaderArgs,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A file `streamward leases export` wrote (`-`: standard input).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Import only this lease of the file (repeat for more).
    #[arg(long, value_name = "RESOURCE", value_parser = limits::name)]
    pub only: Vec<String>,
    /// Allow moves forward: a lease whose resume point is now before the file's skips
    /// the changes in between.
    #[arg(long)]
    pub accept_skip: bool,
    /// Allow a file exported from a replica set of another name.
    #[arg(long)]
    pub accept_other_cluster: bool,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

impl ImportArgs {
    fn import_options(&self) -> ImportOptions {
        ImportOptions {
            accept_skip: self.accept_skip,
            accept_other_cluster: self.accept_other_cluster,
        }
    }
}

// ------------------------------------------------------------------------ export

/// Where an export goes: standard output, or a file written whole.
fn is_stdout(file: Option<&Path>) -> bool {
    file.is_none_or(|f| f.as_os_str() == "-")
}

/// Prints or writes `export`; with a file, says where it went.
pub fn write_export(
    export: &LeaseExport,
    file: Option<&Path>,
    output: OutputFormat,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let text = export.to_text();
    let Some(path) = file.filter(|_| !is_stdout(file)) else {
        out.write_all(text.as_bytes())?;
        return Ok(());
    };
    write_whole(path, text.as_bytes())?;
    match output {
        OutputFormat::Table => writeln!(
            out,
            "exported {} leases from {} to {}",
            export.leases.len(),
            escape_control(export.origin.uri.as_deref().unwrap_or("the cluster")),
            escape_control(&path.display().to_string())
        )?,
        OutputFormat::Json => print_json(
            out,
            ExportWrittenJson {
                file: path.display().to_string(),
                leases: export.leases.len(),
                unreadable: export.unreadable.len(),
                exported_at: Rfc3339(export.exported_at),
            },
        )?,
    }
    Ok(())
}

/// Writes `bytes` to a temporary file beside `path`, flushed to disk, then renames it
/// over `path`: a reader never sees half a file, and a failure leaves the old one.
fn write_whole(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| UsageError(format!("{} names no file", path.display())))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(
        ".{}-{:08x}.tmp",
        std::process::id(),
        rand::random::<u32>()
    ));
    let temporary = dir.join(temporary_name);
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(anyhow::Error::new(error).context(format!("writing {}", path.display())));
    }
    Ok(())
}

/// What the cluster is, as an export records it and an import compares it.
async fn origin_here(
    store: &crate::store::mongo::MongoStore,
    settings: &Settings,
) -> anyhow::Result<ExportOrigin> {
    let (topology, _) = store
        .topology()
        .await
        .context("reading what the cluster is")?;
    Ok(ExportOrigin {
        uri: settings.uri.as_ref().map(|u| u.redacted()),
        leases: settings.leases.to_string(),
        replica_set: match topology.deployment {
            Deployment::ReplicaSet { name } => Some(name),
            _ => None,
        },
    })
}

/// `leases export` against `--uri`.
pub async fn export(
    settings: &Settings,
    args: &ExportArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let store = crate::cli::common::connect::connect(settings).await?;
    let origin = origin_here(&store, settings).await?;
    let export = transfer::export(&store, origin)
        .await
        .with_context(|| format!("reading the leases in {}", settings.leases))?;
    say_unreadable(&export.unreadable);
    write_export(&export, args.file.as_deref(), settings.output, out)
}

// ------------------------------------------------------------------------ import

/// Reads and checks the whole file before anything connects: a file that cannot be
/// read or is not a valid export is a usage error (exit 2) naming the lease and field.
pub fn read_export(file: &Path) -> anyhow::Result<LeaseExport> {
    let shown = escape_control(&file.display().to_string());
    let text = if file.as_os_str() == "-" {
        read_bounded(std::io::stdin().lock(), "standard input")?
    } else {
        let opened = std::fs::File::open(file)
            .map_err(|e| UsageError(format!("cannot read {shown}: {e}")))?;
        read_bounded(opened, &shown)?
    };
    transfer::parse_export(&text)
        .map_err(|e| UsageError(format!("{shown}: {}", escape_control(&e.to_string()))).into())
}

/// At most [`MAX_FILE_BYTES`] (and one more, to tell it is too large), as UTF-8.
fn read_bounded(reader: impl Read, shown: &str) -> anyhow::Result<String> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| UsageError(format!("cannot read {shown}: {e}")))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(UsageError(format!(
            "{shown} is larger than the {MAX_FILE_BYTES} bytes an export may have"
        ))
        .into());
    }
    String::from_utf8(bytes)
        .map_err(|e| UsageError(format!("{shown} is not UTF-8 text: {e}")).into())
}

/// `leases import` against `--uri`: the file checked first, read-only refused before
/// connecting.
pub async fn import(
    settings: &Settings,
    args: &ImportArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let file = read_export(&args.file)?;
    transfer::select(&file, &args.only).map_err(UsageError)?;
    tell_early_refusal(
        refuse_read_only(settings.read_only, transfer::IMPORT_ACTION)
            .map_err(|refusal| OpsError::Refused(refusal).into()),
        settings.output,
        out,
    )?;
    let store = crate::cli::common::connect::connect(settings).await?;
    let here = origin_here(&store, settings).await?;
    run_import(
        &store,
        &file,
        &here,
        &ActionSettings::from(settings),
        args,
        out,
    )
    .await
}

/// Plans the import of `file`; prints the plan; with `--execute` moves the leases. A
/// refused plan (any lease refused, or another cluster's file) writes nothing: exit 3.
pub async fn run_import<S: OpsStore>(
    store: &S,
    file: &LeaseExport,
    here: &ExportOrigin,
    settings: &ActionSettings,
    args: &ImportArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let selected = transfer::select(file, &args.only).map_err(UsageError)?;
    let plan = transfer::plan_import(
        store,
        file,
        &selected,
        here,
        &settings.gather,
        &args.import_options(),
    )
    .await
    .context("reading what the import needs")?;
    let json_out = settings.output == OutputFormat::Json;
    if !json_out {
        write!(out, "{}", import_plan_text(&plan))?;
    }
    if let Some(refusal) = plan.first_refusal() {
        if json_out {
            print_json(out, ImportJson::not_written(&plan, None))?;
        }
        return Err(OpsError::Refused(refusal).into());
    }
    let moves = plan.moves().count();
    if !args.options.execute || moves == 0 {
        match settings.output {
            OutputFormat::Table if moves == 0 => writeln!(
                out,
                "\nnothing to do: every lease is at the file's resume point"
            )?,
            OutputFormat::Table => writeln!(
                out,
                "\nnothing written; re-run with --execute to move {moves} lease{}",
                if moves == 1 { "" } else { "s" }
            )?,
            OutputFormat::Json => {
                print_json(out, ImportJson::not_written(&plan, Some(Vec::new())))?
            }
        }
        return Ok(());
    }
    match transfer::execute_import(store, &plan, args.options.reason.clone()).await {
        Ok(report) => {
            match settings.output {
                OutputFormat::Table => write!(out, "\n{}", report_text(&report))?,
                OutputFormat::Json => print_json(
                    out,
                    ImportJson {
                        unchanged: Some(&report.unchanged),
                        ..ImportJson::moved(&plan, &report)
                    },
                )?,
            }
            Ok(())
        }
        Err(stopped) => {
            match settings.output {
                OutputFormat::Table => write!(out, "\n{}", report_text(&stopped.report))?,
                OutputFormat::Json => print_json(
                    out,
                    ImportJson {
                        not_moved: Some(&stopped.report.not_moved),
                        failed: Some(FailedMoveJson {
                            resource: &stopped.failed,
                            audit_id: stopped.cause.audit_id(),
                        }),
                        ..ImportJson::moved(&plan, &stopped.report)
                    },
                )?,
            }
            Err(anyhow::Error::new(*stopped))
        }
    }
}

/// `leases export FILE --output json`: what was written where.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ExportWrittenJson {
    file: String,
    leases: usize,
    unreadable: usize,
    #[serde(rename = "exportedAt")]
    exported_at: Rfc3339,
}

/// `leases import --output json`: the import's plan, whether anything was written, and
/// as far as it got, what was moved and what not. Members it did not get to are left
/// out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportJson<'a> {
    pub import: ImportPlanJson<'a>,
    pub written: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved: Option<Vec<MovedJson<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<&'a [String]>,
    #[serde(rename = "notMoved", skip_serializing_if = "Option::is_none")]
    pub not_moved: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<FailedMoveJson<'a>>,
}

impl<'a> ImportJson<'a> {
    /// A refused import (`moved` left out) or a dry run (`moved: []`).
    fn not_written(plan: &'a ImportPlan, moved: Option<Vec<MovedJson<'a>>>) -> Self {
        Self {
            import: ImportPlanJson::of(plan),
            written: false,
            moved,
            unchanged: None,
            not_moved: None,
            failed: None,
        }
    }

    /// An import that ran, with what it moved.
    fn moved(plan: &'a ImportPlan, report: &'a ImportReport) -> Self {
        Self {
            written: !report.moved.is_empty(),
            ..Self::not_written(plan, Some(report.moved.iter().map(MovedJson::of).collect()))
        }
    }
}

/// A lease an import moved: its audit record, new version and where it resumes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MovedJson<'a> {
    pub resource: &'a str,
    #[serde(rename = "auditId")]
    pub audit_id: &'a str,
    pub version: i64,
    #[serde(rename = "resumesFrom")]
    pub resumes_from: String,
}

impl<'a> MovedJson<'a> {
    fn of(moved: &'a Executed) -> Self {
        Self {
            resource: &moved.resource,
            audit_id: &moved.audit_id,
            version: moved.after.version,
            resumes_from: moved.after.resume_point().describe(),
        }
    }
}

/// The lease an import stopped at, and the audit record its attempt left.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedMoveJson<'a> {
    pub resource: &'a str,
    #[serde(rename = "auditId")]
    pub audit_id: Option<&'a str>,
}

fn report_text(report: &ImportReport) -> String {
    let mut text = String::new();
    for moved in &report.moved {
        text.push_str(&format!(
            "moved {} to {} (now version {}), audit record {}: `streamward undo {}` restores it\n",
            escape_control(&moved.resource),
            moved.after.resume_point().describe(),
            moved.after.version,
            escape_control(&moved.audit_id),
            escape_control(&moved.audit_id)
        ));
    }
    if !report.unchanged.is_empty() {
        text.push_str(&format!(
            "unchanged (already at the file's point): {}\n",
            escape_control(&report.unchanged.join(", "))
        ));
    }
    if !report.not_moved.is_empty() {
        text.push_str(&format!(
            "NOT moved: {}\n",
            escape_control(&report.not_moved.join(", "))
        ));
    }
    text
}

fn step_name(item: &ImportItem) -> &'static str {
    match &item.step {
        ImportStep::Unchanged => "unchanged",
        ImportStep::Missing(_) => "REFUSED",
        ImportStep::Move(plan) if plan.refusal.is_some() => "REFUSED",
        ImportStep::Move(_) => "move",
    }
}

/// The import's plan for people: where the file comes from, a table of every lease,
/// then each move's (or refusal's) own plan as a rewind shows it.
pub fn import_plan_text(plan: &ImportPlan) -> String {
    let origin = &plan.origin;
    let mut text = format!(
        "import of the leases exported at {} from {}{} (leases {})\n",
        plan.exported_at.format("%Y-%m-%dT%H:%M:%SZ"),
        escape_control(origin.uri.as_deref().unwrap_or("an unnamed cluster")),
        origin
            .replica_set
            .as_deref()
            .map(|s| format!(", replica set {}", escape_control(s)))
            .unwrap_or_default(),
        escape_control(&origin.leases)
    );
    for warning in &plan.warnings {
        text.push_str(&format!("  ! {}\n", escape_control(warning)));
    }
    if let Some(refusal) = &plan.refusal {
        text.push_str(&format!("\nREFUSED: {}\n", escape_control(&refusal.reason)));
        return text;
    }
    if plan.items.is_empty() {
        text.push_str("\nthe file has no leases\n");
        return text;
    }
    let rows: Vec<[String; 4]> = plan
        .items
        .iter()
        .map(|item| {
            [
                escape_control(item.resource()),
                step_name(item).to_string(),
                item.current.as_ref().map_or_else(
                    || "(no such lease)".to_string(),
                    |l| escape_control(&l.resume_point().describe()),
                ),
                escape_control(&item.exported.point().describe()),
            ]
        })
        .collect();
    text.push('\n');
    text.push_str(&render_columns(
        [
            "RESOURCE",
            "IMPORT",
            "RESUMES NOW FROM",
            "FILE'S RESUME POINT",
        ],
        &rows,
    ));
    for item in &plan.items {
        match &item.step {
            ImportStep::Unchanged => {}
            ImportStep::Missing(refusal) => text.push_str(&format!(
                "\n── {}\nREFUSED: {}\n",
                escape_control(item.resource()),
                escape_control(&refusal.reason)
            )),
            ImportStep::Move(move_plan) => text.push_str(&format!(
                "\n── {}\n{}",
                escape_control(item.resource()),
                describe::plan_text(move_plan)
            )),
        }
    }
    text
}

/// The import's plan as JSON: the file's origin and each lease's step with the plan
/// a rewind would show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportPlanJson<'a> {
    #[serde(rename = "exportedAt")]
    pub exported_at: Rfc3339,
    pub cluster: ExportOriginJson<'a>,
    pub warnings: &'a [String],
    pub refusal: Option<RefusalJson<'a>>,
    pub leases: Vec<ImportItemJson<'a>>,
}

impl<'a> ImportPlanJson<'a> {
    pub fn of(plan: &'a ImportPlan) -> Self {
        Self {
            exported_at: Rfc3339(plan.exported_at),
            cluster: ExportOriginJson::of(&plan.origin),
            warnings: &plan.warnings,
            refusal: plan.refusal.as_ref().map(refusal_json),
            leases: plan.items.iter().map(ImportItemJson::of).collect(),
        }
    }
}

/// One lease of the file: what the import does to it, and the plan that does it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportItemJson<'a> {
    pub resource: &'a str,
    /// `unchanged`, `move` or `refused`.
    pub step: String,
    #[serde(rename = "resumesNowFrom")]
    pub resumes_now_from: Option<String>,
    #[serde(rename = "filesResumePoint")]
    pub files_resume_point: String,
    pub plan: Option<PlanJson<'a>>,
    pub refusal: Option<RefusalJson<'a>>,
}

impl<'a> ImportItemJson<'a> {
    fn of(item: &'a ImportItem) -> Self {
        let (plan, refusal) = match &item.step {
            ImportStep::Unchanged => (None, None),
            ImportStep::Missing(refusal) => (None, Some(refusal_json(refusal))),
            ImportStep::Move(p) => (Some(plan_json(p)), p.refusal.as_ref().map(refusal_json)),
        };
        Self {
            resource: item.resource(),
            step: step_name(item).to_lowercase(),
            resumes_now_from: item.current.as_ref().map(|l| l.resume_point().describe()),
            files_resume_point: item.exported.point().describe(),
            plan,
            refusal,
        }
    }
}

fn refusal_json(refusal: &Refusal) -> RefusalJson<'_> {
    RefusalJson::of(refusal).with_exit_code(crate::cli::common::exit::for_refusal)
}

/// The warning lines for lease documents an export could not read.
pub(super) fn say_unreadable(unreadable: &[String]) {
    for document in unreadable {
        say(format_args!(
            "warning: malformed lease {} (not exported; fix or remove the document)",
            escape_control(document)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterTime, Lease, LockKind};
    use crate::ops::lease_transfer::ExportedLease;
    use crate::ops::{ActionKind, ActionRequest, Plan, Refusal, RefusalKind, RewindTarget};

    /// The import's plan as `leases import --output json` prints it, pinned byte for
    /// byte (key order included).
    #[test]
    fn an_import_plan_in_json() {
        let at = ClusterTime::new(1_700_000_000, 1);
        let exported_at = at.to_datetime().unwrap();
        let mut lease = Lease::vacant("a");
        lease.resume_at = Some(at);
        lease.kind = LockKind::Bulk;
        let exported = |resource: &str| {
            let mut lease = lease.clone();
            lease.resource = resource.into();
            ExportedLease::of(&lease)
        };
        let refused = Refusal {
            kind: RefusalKind::NoOplogAccess,
            reason: "no oplog".into(),
        };
        let moving = Plan {
            request: ActionRequest::Rewind {
                resource: "c".into(),
                to: RewindTarget::Time(crate::ops::TimeSpec::Cluster(at)),
            },
            action: ActionKind::Rewind,
            resource: Some("c".into()),
            operator: "ann".into(),
            captured: None,
            before: Some(lease.clone()),
            after: None,
            change: None,
            effect: Default::default(),
            warnings: vec!["careful".into()],
            confirmation: None,
            refusal: Some(refused.clone()),
            planned_at: exported_at,
        };
        let plan = ImportPlan {
            origin: ExportOrigin {
                uri: Some("mongodb://h/".into()),
                leases: "app.leases".into(),
                replica_set: None,
            },
            exported_at,
            refusal: Some(Refusal {
                kind: RefusalKind::OtherCluster,
                reason: "another cluster".into(),
            }),
            warnings: vec!["another collection".into()],
            items: vec![
                ImportItem {
                    exported: exported("a"),
                    current: Some(lease.clone()),
                    step: ImportStep::Unchanged,
                },
                ImportItem {
                    exported: exported("b"),
                    current: None,
                    step: ImportStep::Missing(refused),
                },
                ImportItem {
                    exported: exported("c"),
                    current: Some(lease.clone()),
                    step: ImportStep::Move(moving),
                },
            ],
        };
        insta::assert_snapshot!(serde_json::to_string_pretty(&ImportPlanJson::of(&plan)).unwrap());
    }
}
