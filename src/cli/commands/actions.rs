//! The guarded lease actions on the command line: `takeover`, `rewind`, `reset`,
//! `skip`, `abort-bulk` and `undo` (`rebuild` and `audit` have files of their own). A
//! dry run by default that prints the plan; `--execute` applies it. The command logic is generic over the store, so the same
//! code runs against a cluster (`--uri`) and, in tests, against the sandbox.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgGroup, Args};

use crate::cli::common::exit;
use crate::cli::common::json::ActionJson;
use crate::cli::common::limits;
use crate::cli::common::output::{print_json, tell_early_refusal};
use crate::cli::common::settings::{ActingArgs, OutputFormat, Settings};

use crate::model::entry_token;
use crate::ops::json::ExecutedJson;
use crate::ops::{
    self, describe, ActionRequest, GatherOptions, OpsError, Plan, ResetTarget, RewindTarget,
    TimeSpec,
};
use crate::store::OpsStore;

/// What every action takes besides its target.
#[derive(Debug, Clone, Args, Default)]
pub struct ActionOptions {
    /// Apply the plan. Without it the command is a dry run: it prints the plan and writes nothing.
    #[arg(long)]
    pub execute: bool,
    /// Why, for the audit record (at most 1,024 characters).
    #[arg(long, value_parser = limits::reason)]
    pub reason: Option<String>,
}

/// `--hold` of an action that moves a resume point.
#[derive(Debug, Args)]
pub struct RestartHoldArg {
    /// On a seed lease (written by another implementation): hold it as the operator
    /// this long, so its holder's refresh fails and it restarts its stream from the new
    /// point (default: the larger of 5m and twice what its lease has left). Ignored on
    /// streamward's leases, whose holder is fenced out at once.
    #[arg(long = "hold", value_name = "DURATION", value_parser = parse_hold)]
    pub hold: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct TakeoverArgs {
    /// The lease (resource) to take over.
    #[arg(value_parser = limits::name)]
    pub resource: String,
    /// Hand it to this listener instead of releasing it to any standby.
    #[arg(long, value_name = "LISTENER", conflicts_with = "hold", value_parser = limits::name)]
    pub to: Option<String>,
    /// Hold it as the operator for this long (pauses processing), at most 30 days.
    #[arg(long, value_name = "DURATION", value_parser = parse_hold)]
    pub hold: Option<Duration>,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["to", "by", "to_token", "to_id", "to_checkpoint"])))]
pub struct RewindArgs {
    /// The lease (resource) to act on.
    #[arg(value_parser = limits::name)]
    pub resource: String,
    /// Start again at this time: RFC 3339, Timestamp(SECS, INC) or SECS:INC (a capped
    /// collection's lease: at the entries whose _id was made in that second or later).
    #[arg(long, value_name = "TIME")]
    pub to: Option<TimeSpec>,
    /// Go back this long from the current resume point, e.g. 10m.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub by: Option<Duration>,
    /// Resume after this token (its _data hex, or {"_data": "…"}).
    #[arg(long, value_name = "TOKEN", value_parser = ops::parse_token)]
    pub to_token: Option<crate::model::ResumeToken>,
    /// A lease that tails a capped collection: resume after the entry with this _id (24
    /// hex digits), which it holds or which lies between two it holds.
    #[arg(long, value_name = "OBJECTID", value_parser = parse_entry_id)]
    pub to_id: Option<bson::oid::ObjectId>,
    /// Resume after a checkpoint's token: N (1 the newest) or its ID, as `streamward
    /// checkpoints RESOURCE` lists them (an ID names the same one however many are
    /// recorded meanwhile).
    #[arg(long, value_name = "N|ID")]
    pub to_checkpoint: Option<ops::CheckpointRef>,
    #[command(flatten)]
    pub restart: RestartHoldArg,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The lease (resource) to act on.
    #[arg(value_parser = limits::name)]
    pub resource: String,
    /// oldest: bootstrap from the oldest oplog entry; now: skip to the newest entry.
    #[arg(long, value_name = "oldest|now")]
    pub to: ResetTarget,
    /// Accept that --to now skips changes the listener has not processed.
    #[arg(long)]
    pub accept_skip: bool,
    #[command(flatten)]
    pub restart: RestartHoldArg,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

#[derive(Debug, Args)]
pub struct SkipArgs {
    /// The lease (resource) whose failing change to step over.
    #[arg(value_parser = limits::name)]
    pub resource: String,
    /// Step over the change with this resume token (its _data hex, or {"_data": "…"})
    /// instead of the one the lease records as failing; it must be the next change.
    #[arg(long, value_name = "TOKEN", value_parser = ops::parse_token)]
    pub to_token: Option<crate::model::ResumeToken>,
    /// Step over every change, on the lease's collection, of the multi-document
    /// transaction that change belongs to (those not yet handled), and resume after the
    /// last of them; refused when the change is not part of a transaction, or when
    /// anything else would be passed over. Each is kept in the skipped collection.
    #[arg(long)]
    pub whole_transaction: bool,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

impl SkipArgs {
    pub fn request(&self) -> ActionRequest {
        let (resource, to_token) = (self.resource.clone(), self.to_token.clone());
        match self.whole_transaction {
            false => ActionRequest::Skip { resource, to_token },
            true => ActionRequest::SkipTransaction { resource, to_token },
        }
    }
}

#[derive(Debug, Args)]
pub struct AbortBulkArgs {
    /// The lease (resource) to act on.
    #[arg(value_parser = limits::name)]
    pub resource: String,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

#[derive(Debug, Args)]
pub struct UndoArgs {
    /// The audit record whose prior resume point to restore (streamward audit lists them).
    pub audit_id: String,
    #[command(flatten)]
    pub restart: RestartHoldArg,
    #[command(flatten)]
    pub options: ActionOptions,
    #[command(flatten)]
    pub common: ActingArgs,
}

impl TakeoverArgs {
    pub fn request(&self) -> ActionRequest {
        ActionRequest::Takeover {
            resource: self.resource.clone(),
            to: self.to.clone(),
            hold: self.hold,
        }
    }
}

impl RewindArgs {
    pub fn request(&self) -> anyhow::Result<ActionRequest> {
        let to = match (
            &self.to,
            self.by,
            &self.to_token,
            self.to_id,
            &self.to_checkpoint,
        ) {
            (Some(time), None, None, None, None) => RewindTarget::Time(*time),
            (None, Some(by), None, None, None) => RewindTarget::By(by),
            (None, None, Some(token), None, None) => RewindTarget::Token(token.clone()),
            (None, None, None, Some(id), None) => RewindTarget::Token(entry_token(id)),
            (None, None, None, None, Some(which)) => RewindTarget::Checkpoint(which.clone()),
            _ => anyhow::bail!(exit::UsageError(
                "rewind takes exactly one of --to, --by, --to-token, --to-id, --to-checkpoint"
                    .into()
            )),
        };
        Ok(ActionRequest::Rewind {
            resource: self.resource.clone(),
            to,
        })
    }
}

/// An entry's `_id` as typed: 24 hex digits (`ObjectId("…")` as the shell prints it
/// is taken too).
fn parse_entry_id(text: &str) -> Result<bson::oid::ObjectId, String> {
    let text = text.trim();
    let hex = text
        .strip_prefix("ObjectId(")
        .and_then(|rest| rest.strip_suffix(')'))
        .map(|inner| inner.trim().trim_matches(|c| c == '"' || c == '\''))
        .unwrap_or(text);
    bson::oid::ObjectId::parse_str(hex).map_err(|_| {
        format!(
            "{} is not an ObjectId: expected 24 hex digits, as the entry's _id",
            crate::model::text::escape_control(&crate::model::text::clip(text, 40))
        )
    })
}

impl ResetArgs {
    pub fn request(&self) -> ActionRequest {
        ActionRequest::Reset {
            resource: self.resource.clone(),
            to: self.to,
            accept_skip: self.accept_skip,
        }
    }
}

/// What the command line knows that the store does not.
#[derive(Debug, Clone)]
pub struct ActionSettings {
    pub gather: GatherOptions,
    pub output: OutputFormat,
}

impl ActionSettings {
    pub fn from(settings: &Settings) -> Self {
        let mut gather = GatherOptions::new(settings.operator.clone());
        gather.read_only = settings.read_only;
        gather.thresholds = settings.thresholds;
        Self {
            gather,
            output: settings.output,
        }
    }
}

/// With `--output json`, what a failed `--execute` left: the plan, whether the lease was
/// written (`null`: unknown) and the audit record (the error is merged in by the caller's
/// `Out`). Returns the error to end the command with.
pub(super) fn print_failed(
    out: &mut dyn Write,
    plan: &Plan,
    output: OutputFormat,
    error: OpsError,
) -> anyhow::Result<anyhow::Error> {
    if output == OutputFormat::Json {
        print_json(
            out,
            ActionJson::failed(plan, error.written(), error.audit_id()),
        )?;
    }
    Ok(error.into())
}

pub(super) fn print_plan(
    out: &mut dyn Write,
    plan: &Plan,
    output: OutputFormat,
) -> anyhow::Result<()> {
    if output == OutputFormat::Table {
        write!(out, "{}", describe::plan_text(plan))?;
    }
    Ok(())
}

/// Plans `request`; prints the plan; with `--execute` applies it. A refused plan is
/// printed and returned as `OpsError::Refused` (exit 3, or 5 when the oplog cannot
/// be read) without writing anything.
pub async fn run_action<S: OpsStore>(
    store: &S,
    request: ActionRequest,
    settings: &ActionSettings,
    options: &ActionOptions,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let facts = ops::gather(store, &request, &settings.gather)
        .await
        .with_context(|| format!("reading what {} needs", request.kind()))?;
    let plan = ops::plan(&request, &facts);
    print_plan(out, &plan, settings.output)?;
    if let Some(refusal) = &plan.refusal {
        if settings.output == OutputFormat::Json {
            print_json(out, ActionJson::not_written(&plan))?;
        }
        return Err(OpsError::Refused(refusal.clone()).into());
    }
    if !options.execute {
        match settings.output {
            OutputFormat::Table => {
                writeln!(out, "\nnothing written; re-run with --execute to apply")?
            }
            OutputFormat::Json => print_json(out, ActionJson::not_written(&plan))?,
        }
        return Ok(());
    }
    let done = match ops::execute(store, &plan, options.reason.clone()).await {
        Ok(done) => done,
        Err(error) => return Err(print_failed(out, &plan, settings.output, error)?),
    };
    match settings.output {
        OutputFormat::Table => write!(out, "\n{}", describe::executed_text(&done))?,
        OutputFormat::Json => print_json(out, ActionJson::applied(&plan, ExecutedJson::of(&done)))?,
    }
    Ok(())
}

// ---------------------------------------------------------------- against a cluster

/// The guards that need nothing from the cluster, checked before connecting: read-only
/// mode, a rebuild the config file does not define, `reset --to now` without
/// `--accept-skip`. The rules are planning's own ([`ops::refuse_before_reading`]);
/// planning checks them again after reading.
pub fn refuse_before_connecting(
    settings: &Settings,
    request: &ActionRequest,
) -> anyhow::Result<()> {
    let rebuild_defined = match request {
        ActionRequest::Rebuild { name } => settings.rebuilds.contains_key(name),
        _ => true,
    };
    ops::refuse_before_reading(request, settings.read_only, rebuild_defined)
        .map_err(|refusal| OpsError::Refused(refusal).into())
}

/// [`refuse_before_connecting`], and with `--output json` the document a refused plan
/// shows too: no plan (nothing was read), `written: false` (the error is merged in).
pub(super) fn refused_early(
    settings: &Settings,
    request: &ActionRequest,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    tell_early_refusal(
        refuse_before_connecting(settings, request),
        settings.output,
        out,
    )
}

/// Runs one action against `--uri`.
///
/// `restart_hold`: the `--hold` of a rewind, reset or undo (seed leases only).
pub async fn action(
    settings: &Settings,
    request: ActionRequest,
    options: &ActionOptions,
    restart_hold: Option<Duration>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    refused_early(settings, &request, out)?;
    let store = crate::cli::common::connect::connect(settings).await?;
    let mut action_settings = ActionSettings::from(settings);
    action_settings.gather.restart_hold = restart_hold;
    run_action(&store, request, &action_settings, options, out).await
}

/// The longest `--hold`: long enough for any pause, far from date arithmetic limits.
const MAX_HOLD: Duration = Duration::from_secs(30 * 24 * 3600);

fn parse_hold(text: &str) -> Result<Duration, String> {
    let hold = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if hold > MAX_HOLD {
        return Err(format!("at most 30 days, got {text}"));
    }
    Ok(hold)
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, Utc};

    use super::*;
    use crate::model::Lease;
    use crate::model::{ClusterTime, LockKind, OplogWindow};
    use crate::ops::PlanFacts;
    use crate::ops::RebuildTarget;

    /// Facts a plan could meet: no lease, a live one, a bulk one, with and without
    /// the oplog; read-only or not; the rebuild defined or not.
    fn all_facts() -> Vec<(PlanFacts, bool)> {
        let now = Utc::now();
        let mut live = Lease::vacant("shop.orders");
        live.holder = Some("w1".into());
        live.version = 4;
        live.expires_at = Some(now + TimeDelta::seconds(8));
        let mut bulk = live.clone();
        bulk.kind = LockKind::Bulk;
        let window = OplogWindow::new(
            ClusterTime::new(1_700_000_000, 1),
            ClusterTime::new(1_700_000_600, 1),
        );
        let mut all = Vec::new();
        for lease in [None, Some(live), Some(bulk)] {
            for window in [None, Some(window)] {
                for read_only in [false, true] {
                    for defined in [false, true] {
                        let mut options = GatherOptions::new("op@host");
                        options.read_only = read_only;
                        let facts = PlanFacts {
                            lease: lease.clone(),
                            window,
                            window_unknown: None,
                            capped: None,
                            now,
                            changes: None,
                            read_only,
                            audit: None,
                            rebuild: defined.then(|| RebuildTarget {
                                name: "rollup".into(),
                                resource: "shop.orders".into(),
                                description: "d".into(),
                            }),
                            checkpoints: Vec::new(),
                            operator: options.operator,
                            handover_lease: options.handover_lease,
                            bulk_lease: options.bulk_lease,
                            thresholds: options.thresholds,
                            profile: Default::default(),
                            skipped_entry: None,
                            token_for_time: None,
                            restart_hold: None,
                        };
                        all.push((facts, defined));
                    }
                }
            }
        }
        all
    }

    /// What refuses before connecting is refused by planning too, whatever the lease:
    /// the early check never turns away an action the cluster would have allowed.
    #[test]
    fn an_early_refusal_is_one_planning_makes_on_any_lease() {
        let requests = [
            ActionRequest::Reset {
                resource: "shop.orders".into(),
                to: ResetTarget::Now,
                accept_skip: false,
            },
            ActionRequest::Reset {
                resource: "shop.orders".into(),
                to: ResetTarget::Now,
                accept_skip: true,
            },
            ActionRequest::Reset {
                resource: "shop.orders".into(),
                to: ResetTarget::Oldest,
                accept_skip: false,
            },
            ActionRequest::Rebuild {
                name: "rollup".into(),
            },
            ActionRequest::Takeover {
                resource: "shop.orders".into(),
                to: None,
                hold: None,
            },
        ];
        let mut early_refusals = 0;
        for request in &requests {
            for (facts, defined) in all_facts() {
                let Err(early) = ops::refuse_before_reading(request, facts.read_only, defined)
                else {
                    continue;
                };
                early_refusals += 1;
                let planned = ops::plan(request, &facts);
                let refusal = planned
                    .refusal
                    .unwrap_or_else(|| panic!("{request:?} on {facts:?}: planning allowed it"));
                // Planning may name an earlier guard (no such lease, a bulk lease, no
                // access to the oplog); when it names the same rule, it says the same.
                // (A skip's words carry what it skips, counted once the lease is read.)
                if refusal.kind == early.kind {
                    let rule =
                        |reason: &str| reason.split(" (").next().unwrap_or_default().to_string();
                    assert_eq!(rule(&refusal.reason), rule(&early.reason), "{request:?}");
                }
            }
        }
        assert!(early_refusals > 20, "{early_refusals}");
    }

    #[test]
    fn read_only_an_unknown_rebuild_and_an_unaccepted_skip_refuse_before_connecting() {
        let settings = |read_only: bool| {
            let mut settings =
                Settings::resolve(&crate::cli::common::settings::GlobalArgs::default())
                    .expect("defaults resolve");
            settings.read_only = read_only;
            settings
        };
        let refused = |settings: &Settings, request: ActionRequest| {
            let error = refuse_before_connecting(settings, &request).unwrap_err();
            match error.downcast_ref::<OpsError>() {
                Some(OpsError::Refused(r)) => r.kind,
                other => panic!("{other:?}"),
            }
        };
        use crate::ops::RefusalKind;
        let takeover = ActionRequest::Takeover {
            resource: "r".into(),
            to: None,
            hold: None,
        };
        assert_eq!(
            refused(&settings(true), takeover.clone()),
            RefusalKind::ReadOnly
        );
        assert!(refuse_before_connecting(&settings(false), &takeover).is_ok());
        assert_eq!(
            refused(
                &settings(false),
                ActionRequest::Rebuild {
                    name: "not-in-the-config".into()
                }
            ),
            RefusalKind::NoRebuildDefinition
        );
        assert_eq!(
            refused(
                &settings(false),
                ActionRequest::Reset {
                    resource: "r".into(),
                    to: ResetTarget::Now,
                    accept_skip: false
                }
            ),
            RefusalKind::SkipNotAccepted
        );
    }
}
