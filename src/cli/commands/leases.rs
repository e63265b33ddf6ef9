//! `streamward leases`: every lease and what it says, as a table or JSON.
//! `leases --watch` prints again whenever a lease changes hands or status; `leases
//! --check` is for cron and monitors: exit 6 when a lease needs attention.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use crate::cli::common::connect::{connect, reading_the_cluster};
use crate::cli::common::exit::{OplogUnknown, Unhealthy};
use crate::cli::common::lease_json::LeaseRowJson;
use crate::cli::common::lease_table::{
    render_failures, render_invalidations, render_leases, LeaseRow,
};
use crate::cli::common::output::say;
use crate::cli::common::settings::{OutputFormat, ReaderArgs, Settings};
use crate::model::text::escape_control;
use crate::model::{
    capped_collection, vanished_leases, HealthThresholds, Lease, LeaseHealth, LeaseStatus,
    LossTracker, VanishedLease,
};
use crate::observe::ClusterSnapshot;
use crate::ops::json::{ListedJson, MalformedJson};
use crate::store::mongo::MongoStore;
use crate::store::{AuditLog, LossReading};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LeasesArgs {
    /// Without one, list the leases.
    #[command(subcommand)]
    pub action: Option<crate::cli::commands::lease_transfer::LeasesAction>,
    /// Keep listing: print again whenever a lease changes holder, version, kind or
    /// status (with --output json: one JSON document per line). Ctrl-C stops.
    #[arg(long, conflicts_with = "check")]
    pub watch: bool,
    /// How often --watch reads the leases.
    #[arg(long, default_value = "2s", value_name = "DURATION", requires = "watch", value_parser = parse_interval)]
    pub interval: Duration,
    /// For cron and monitors: list only the leases that need attention (or are
    /// unreadable) and exit 6 if there is one; exit 0 if none.
    #[arg(long, help = check_help())]
    pub check: bool,
    #[command(flatten)]
    pub common: ReaderArgs,
}

/// At least 100 ms (a tighter loop only loads the cluster), at most a day.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval =
        crate::cli::common::limits::duration_at_most(text, Duration::from_secs(24 * 3600))?;
    if interval < Duration::from_millis(100) {
        return Err(format!("{text} is shorter than the least allowed, 100ms"));
    }
    Ok(interval)
}

/// What `leases` shows: one read of the cluster, each lease's time to loss predicted from
/// it, and the leases the audit log names that are gone.
pub(super) struct Snapshot {
    pub(super) cluster: ClusterSnapshot,
    /// Each lease's time to loss, once predicted ([`Snapshot::predict_loss`]).
    pub(super) loss: LossReading,
    /// Leases the audit log names that the collection no longer holds (or holds at a
    /// lower version): dropped or deleted under their listeners.
    pub(super) vanished: Vec<VanishedLease>,
}

impl Snapshot {
    pub(super) async fn read(store: &MongoStore, settings: &Settings) -> anyhow::Result<Snapshot> {
        let cluster = ClusterSnapshot::read(store)
            .await
            .with_context(|| reading_the_cluster(settings))?;
        Ok(Snapshot {
            cluster,
            loss: LossReading::default(),
            vanished: Vec::new(),
        })
    }

    /// [`Snapshot::time_to_loss`], kept with the snapshot for its table and JSON.
    async fn predict_loss(&mut self, store: &MongoStore, tracker: &mut LossTracker) {
        self.loss = self.cluster.time_to_loss(store, tracker).await;
    }

    /// Finds the leases the audit log names that are gone or went back (for a one-shot
    /// listing and `--check`; `--watch` does not read the audit log at every tick).
    async fn find_vanished(&mut self, store: &MongoStore) {
        self.vanished = match store.audit_log(VANISHED_AUDIT_SCAN).await {
            Ok(audit) => vanished_leases(&audit.items, &self.cluster.leases),
            // Without the audit log nothing can be said of what was there before.
            Err(error) => {
                tracing::debug!(%error, "the audit log could not be read to find vanished leases");
                Vec::new()
            }
        };
    }

    /// Said on stderr for each lease the audit log names that is gone or went back.
    fn warn_vanished(&self) {
        for gone in &self.vanished {
            say(format_args!("warning: {}", vanished_sentence(gone)));
        }
    }

    /// Said on stderr when the oplog cannot be read: what the cluster is and what
    /// follows; and for each capped collection that could not be read, why.
    fn note_window_unknown(&self) {
        if let (None, Some(topology)) = (self.cluster.window, &self.cluster.topology) {
            say(format_args!("note: {topology}"));
        }
        for why in self.cluster.capped.unread.values() {
            say(format_args!(
                "note: {}; the headroom and history status of its leases are unknown",
                escape_control(why)
            ));
        }
    }

    fn health(&self, lease: &Lease, thresholds: &HealthThresholds) -> LeaseHealth {
        LeaseHealth::assess_with(
            lease,
            self.cluster.windows().for_lease(lease),
            self.cluster.now,
            thresholds,
            &self.loss.evidence(&lease.resource),
        )
    }

    /// The rows of `--output json`: each lease with its status, then (with `malformed`)
    /// each document that could not be read.
    fn json<'a>(
        &'a self,
        thresholds: &HealthThresholds,
        leases: &[&'a Lease],
        malformed: bool,
    ) -> Vec<ListedJson<'a, LeaseRowJson<'a>>> {
        let windows = self.cluster.windows();
        let shown = leases.iter().map(|l| {
            let mut row = LeaseRowJson::of(
                l,
                windows.for_lease(l),
                self.cluster.now,
                thresholds,
                &self.loss,
            );
            if let Some(name) = capped_collection(l) {
                row.history_unknown =
                    Some(self.cluster.capped.unread.get(&name).map(String::as_str));
            }
            ListedJson::Read(row)
        });
        let unreadable = self
            .cluster
            .malformed
            .iter()
            .filter(|_| malformed)
            .map(|m| ListedJson::Malformed(MalformedJson::of(m)));
        shown.chain(unreadable).collect()
    }

    fn table(&self, thresholds: &HealthThresholds, leases: &[&Lease]) -> String {
        let windows = self.cluster.windows();
        let rows: Vec<LeaseRow> = leases
            .iter()
            .map(|l| {
                LeaseRow::new(
                    l,
                    windows.for_lease(l),
                    self.cluster.now,
                    thresholds,
                    &self.loss.evidence(&l.resource),
                )
            })
            .collect();
        let owned: Vec<Lease> = leases.iter().map(|l| (*l).clone()).collect();
        format!(
            "{}{}{}",
            render_leases(&rows),
            render_invalidations(&owned),
            render_failures(&owned)
        )
    }

    /// What `--watch` compares: who holds what, at which version, in which status —
    /// not the token or the lag, which move with every commit.
    fn fingerprint(&self, thresholds: &HealthThresholds) -> Vec<String> {
        let mut seen: Vec<String> = self
            .cluster
            .leases
            .iter()
            .map(|l| {
                format!(
                    "{:?} {:?} {} {} {} {:?}",
                    l.resource,
                    l.live_holder(self.cluster.now),
                    l.version,
                    l.kind,
                    self.health(l, thresholds).status.label(),
                    l.invalidated.as_ref().map(|i| &i.reason),
                )
            })
            .collect();
        seen.extend(
            self.cluster
                .malformed
                .iter()
                .map(|m| format!("malformed {m}")),
        );
        seen
    }
}

/// Audit records read for the leases they name: the newest, enough for every lease an
/// operator acted on recently.
const VANISHED_AUDIT_SCAN: usize = 1_000;

/// What a vanished lease means and what to do, in one sentence.
fn vanished_sentence(gone: &VanishedLease) -> String {
    let what = match gone.found_version {
        None => "has no lease document now".to_string(),
        Some(found) => format!("is back at version {found}"),
    };
    let (resource, seen) = (escape_control(&gone.resource), gone.seen_version);
    format!(
        "{resource} was at version {seen} (audit log) and {what}: lease documents are never \
         deleted, so the lease collection was dropped or the document deleted; its listeners \
         stop rather than start over below that version. Create it again at a version above \
         {seen}, restore its resume point (`leases import` of an export), then restart them"
    )
}

/// The statuses `--check` fails on.
const NEEDS_ATTENTION: [LeaseStatus; 6] = [
    LeaseStatus::AtRisk,
    LeaseStatus::Lost,
    LeaseStatus::Invalidated,
    LeaseStatus::Failing,
    LeaseStatus::StuckBulk,
    LeaseStatus::Unclaimed,
];

/// `--check`'s help, naming the statuses it fails on from [`NEEDS_ATTENTION`].
fn check_help() -> String {
    format!(
        "For cron and monitors: list only the leases that are {} (or unreadable) and exit 6 \
         if there is one; exit 0 if none",
        needs_attention_list()
    )
}

/// "AT RISK, LOST, …, STUCK BULK or UNCLAIMED".
fn needs_attention_list() -> String {
    let labels: Vec<&str> = NEEDS_ATTENTION.iter().map(|s| s.label()).collect();
    match labels.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

pub async fn leases(
    settings: &Settings,
    args: &LeasesArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let store = connect(settings).await?;
    if args.watch {
        return watch(&store, settings, args.interval, out).await;
    }
    let mut snapshot = Snapshot::read(&store, settings).await?;
    if snapshot.cluster.window.is_some() && !snapshot.cluster.leases.is_empty() {
        // One read gives the oplog's average fill rate, so the time to loss (and with
        // it AT RISK) is known from it, `--check` included.
        let mut tracker = LossTracker::default();
        snapshot.predict_loss(&store, &mut tracker).await;
    }
    snapshot.find_vanished(&store).await;
    if args.check {
        return check(&snapshot, settings, out);
    }
    snapshot.note_window_unknown();
    snapshot.warn_vanished();
    let thresholds = settings.thresholds;
    let all: Vec<&Lease> = snapshot.cluster.leases.iter().collect();
    match settings.output {
        OutputFormat::Table => {
            crate::cli::common::output::warn_malformed(
                "lease document",
                &snapshot.cluster.malformed,
            );
            if all.is_empty() && snapshot.cluster.malformed.is_empty() {
                writeln!(out, "no leases in {}", settings.leases)?;
                return Ok(());
            }
            write!(out, "{}", snapshot.table(&thresholds, &all))?;
        }
        OutputFormat::Json => {
            let items = snapshot.json(&thresholds, &all, true);
            writeln!(out, "{}", serde_json::to_string_pretty(&items)?)?;
        }
    }
    Ok(())
}

/// `leases --check`: the leases that need attention, or a line saying there are none.
fn check(snapshot: &Snapshot, settings: &Settings, out: &mut dyn Write) -> anyhow::Result<()> {
    let thresholds = settings.thresholds;
    let problems: Vec<&Lease> = snapshot
        .cluster
        .leases
        .iter()
        .filter(|l| NEEDS_ATTENTION.contains(&snapshot.health(l, &thresholds).status))
        .collect();
    let named: Vec<String> = problems
        .iter()
        .map(|l| {
            format!(
                "{} {}",
                escape_control(&l.resource),
                snapshot.health(l, &thresholds).status.label()
            )
        })
        .chain(
            snapshot
                .cluster
                .malformed
                .iter()
                .map(|m| format!("{} MALFORMED", escape_control(&m.to_string()))),
        )
        .chain(
            snapshot
                .vanished
                .iter()
                .map(|v| format!("{} VANISHED", escape_control(&v.resource))),
        )
        .collect();
    snapshot.warn_vanished();
    let total =
        snapshot.cluster.leases.len() + snapshot.cluster.malformed.len() + snapshot.vanished.len();
    match settings.output {
        OutputFormat::Table if named.is_empty() => {
            if snapshot.cluster.window.is_some() {
                writeln!(out, "ok: {total} leases, none {}", needs_attention_list())?;
            }
        }
        OutputFormat::Table => {
            crate::cli::common::output::warn_malformed(
                "lease document",
                &snapshot.cluster.malformed,
            );
            if !problems.is_empty() {
                write!(out, "{}", snapshot.table(&thresholds, &problems))?;
            }
        }
        OutputFormat::Json => {
            let document = CheckJson {
                ok: named.is_empty() && snapshot.cluster.window.is_some(),
                leases: total,
                problems: snapshot.json(&thresholds, &problems, true),
                vanished: snapshot.vanished.iter().map(VanishedJson::of).collect(),
            };
            writeln!(out, "{}", serde_json::to_string_pretty(&document)?)?;
        }
    }
    if !named.is_empty() {
        return Err(Unhealthy(format!(
            "{} of {total} leases need attention: {}",
            named.len(),
            named.join(", ")
        ))
        .into());
    }
    if snapshot.cluster.window.is_none() {
        // AT RISK and LOST cannot be told without the oplog: not a pass.
        let why = snapshot.cluster.topology.as_ref().map_or_else(
            || "the oplog window is unknown".to_string(),
            ToString::to_string,
        );
        return Err(OplogUnknown(format!(
            "cannot check for AT RISK and LOST leases without reading the oplog: {why}"
        ))
        .into());
    }
    Ok(())
}

/// `leases --watch`: a listing at once, then again whenever it changes. A failed read
/// is a warning (once until it recovers), not the end: the cluster may be electing.
async fn watch(
    store: &MongoStore,
    settings: &Settings,
    interval: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let thresholds = settings.thresholds;
    let clear = settings.output == OutputFormat::Table && std::io::stdout().is_terminal();
    let mut shown: Option<Vec<String>> = None;
    let mut failing: Option<String> = None;
    let mut noted = false;
    let mut tracker = LossTracker::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            biased;
            _ = &mut ctrl_c => return Ok(()),
            _ = ticker.tick() => {}
        }
        let mut snapshot = match Snapshot::read(store, settings).await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                let message = crate::cli::common::output::error_message(&error);
                if failing.as_ref() != Some(&message) {
                    say(format_args!(
                        "warning: {}; trying again every {}",
                        escape_control(&message),
                        humantime::format_duration(interval)
                    ));
                    failing = Some(message);
                }
                continue;
            }
        };
        if failing.take().is_some() {
            say("note: reading the leases again");
        }
        snapshot.predict_loss(store, &mut tracker).await;
        if !noted {
            snapshot.note_window_unknown();
            noted = true;
        }
        let fingerprint = snapshot.fingerprint(&thresholds);
        if shown.as_ref() == Some(&fingerprint) {
            continue;
        }
        let all: Vec<&Lease> = snapshot.cluster.leases.iter().collect();
        match settings.output {
            OutputFormat::Json => {
                let items = snapshot.json(&thresholds, &all, true);
                writeln!(out, "{}", serde_json::to_string(&items)?)?;
            }
            OutputFormat::Table => {
                if clear {
                    write!(out, "\x1b[H\x1b[2J")?;
                } else if shown.is_some() {
                    writeln!(out)?;
                }
                writeln!(
                    out,
                    "leases in {} at {}",
                    settings.leases,
                    snapshot.cluster.now.format("%Y-%m-%d %H:%M:%S UTC")
                )?;
                crate::cli::common::output::warn_malformed(
                    "lease document",
                    &snapshot.cluster.malformed,
                );
                if all.is_empty() && snapshot.cluster.malformed.is_empty() {
                    writeln!(out, "no leases")?;
                } else {
                    write!(out, "{}", snapshot.table(&thresholds, &all))?;
                }
            }
        }
        out.flush()?;
        shown = Some(fingerprint);
    }
}

/// `leases --check --output json`: whether all is well, how many leases were read, and
/// those that need attention.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct CheckJson<'a> {
    ok: bool,
    leases: usize,
    problems: Vec<ListedJson<'a, LeaseRowJson<'a>>>,
    vanished: Vec<VanishedJson<'a>>,
}

/// A lease the audit log names that the collection no longer holds (or holds lower).
#[derive(Debug, Clone, PartialEq, Serialize)]
struct VanishedJson<'a> {
    resource: &'a str,
    #[serde(rename = "seenVersion")]
    seen_version: i64,
    #[serde(rename = "foundVersion")]
    found_version: Option<i64>,
}

impl<'a> VanishedJson<'a> {
    fn of(gone: &'a VanishedLease) -> Self {
        Self {
            resource: &gone.resource,
            seen_version: gone.seen_version,
            found_version: gone.found_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The help says what `--check` fails on from the one list it fails on.
    #[test]
    fn the_check_help_names_every_status_it_fails_on() {
        let help = check_help();
        for status in NEEDS_ATTENTION {
            assert!(help.contains(status.label()), "{status:?} in {help}");
        }
    }
}
