//! Everything the console shows and where the operator is, as plain data. Keys,
//! mouse, data events and clock ticks change it; drawing only reads it. No terminal,
//! no network, no clock of its own: tests drive it directly.

mod dialog;
mod effect;
mod hints;
mod history;
mod input;
mod lists;
mod table;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use dialog::{
    blocked, handover_request, opened_moved, replan_offered, request_for, rewind_request,
    skip_not_accepted, Ask, Dialog, Focus, KeyContext, Moved, RunningStage, Target,
    ACCEPT_SKIP_KEY, REPLAN_KEY,
};
pub use effect::Effect;
pub use hints::Hint;
pub use history::{OplogHistory, Series, LAG_SERIES_KEPT, SAMPLES_KEPT};
pub use input::Input;
pub use lists::ListCursor;
pub use table::{
    resource_label, visible_start, Column, Filter, HealthContext, HolderChange, LeaseEntry,
    LeaseTable,
};

use super::data::{DataEvent, DataSource, MemberRow, PlanFailure};
use crate::engine::ListenerSnapshot;
use crate::model::{
    AuditRecord, HealthThresholds, Lease, OplogAccess, OplogStats, OplogWindow, Rate,
    SourceWindows, TimeToLoss, Topology,
};
use crate::ops::ActionKind;
use crate::store::{CappedReading, LossReading, MalformedDocument};

/// Statuses are re-assessed at least this often, so expiries show without data.
const REASSESS_AFTER: Duration = Duration::from_millis(900);

/// How long a notice stays in the footer (the next key press also clears it).
pub const NOTICE_FOR: Duration = Duration::from_secs(10);

/// Checkpoints read for one lease: newest first with how many documents could not be
/// read, or why none could.
#[derive(Debug, Clone, PartialEq)]
pub struct ShownCheckpoints {
    pub resource: String,
    pub read: Result<(Vec<crate::model::Checkpoint>, usize), String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Embedded sandbox with in-process listeners and a workload.
    Demo,
    /// Watching a cluster whose listeners run elsewhere.
    Attached,
    /// Watching a cluster and running listeners in this process.
    InProcess,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Demo => "DEMO",
            Mode::Attached => "ATTACHED",
            Mode::InProcess => "IN-PROCESS",
        }
    }

    pub fn runs_listeners(self) -> bool {
        !matches!(self, Mode::Attached)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Leases,
    /// The selected lease in full.
    Detail,
    Oplog,
    Listeners,
    Audit,
}

impl View {
    pub fn tab(self) -> usize {
        match self {
            View::Leases | View::Detail => 0,
            View::Oplog => 1,
            View::Listeners => 2,
            View::Audit => 3,
        }
    }

    pub fn from_tab(tab: usize) -> View {
        match tab % 4 {
            0 => View::Leases,
            1 => View::Oplog,
            2 => View::Listeners,
            _ => View::Audit,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeLevel {
    Info,
    Error,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub text: String,
    pub level: NoticeLevel,
    pub until: DateTime<Utc>,
}

/// A rebuild running on with its dialog closed.
#[derive(Debug, Clone, PartialEq)]
pub struct BackgroundRebuild {
    pub resource: String,
    pub progress: Option<crate::ops::RebuildProgress>,
}

/// A data source that is failing, and since when.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub error: String,
    pub since: DateTime<Utc>,
}

/// What the console knows when it starts.
#[derive(Debug, Clone)]
pub struct ConsoleSetup {
    pub mode: Mode,
    /// Where it is connected, already redacted.
    pub cluster: String,
    pub read_only: bool,
    pub thresholds: HealthThresholds,
    pub theme: String,
    pub mouse: bool,
    pub now: DateTime<Utc>,
    /// Rebuilds defined here, as (resource, rebuild name).
    pub rebuilds: Vec<(String, String)>,
}

impl ConsoleSetup {
    /// What a caller does not choose: writable, the default thresholds and theme,
    /// mouse on, no rebuilds. Set the rest with struct-update syntax.
    pub fn new(mode: Mode, cluster: impl Into<String>, now: DateTime<Utc>) -> Self {
        Self {
            mode,
            cluster: cluster.into(),
            read_only: false,
            thresholds: HealthThresholds::default(),
            theme: "default".into(),
            mouse: true,
            now,
            rebuilds: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ConsoleState {
    pub mode: Mode,
    pub cluster: String,
    pub read_only: bool,
    pub thresholds: HealthThresholds,
    pub theme: String,
    pub mouse: bool,
    pub view: View,
    /// Help is open, scrolled this many lines.
    pub help: Option<usize>,
    /// A guarded action in progress.
    pub dialog: Option<Dialog>,
    /// A rebuild whose dialog was closed (`b`): it goes on, and its outcome arrives as
    /// a notice.
    pub background_rebuild: Option<BackgroundRebuild>,
    /// Rebuilds defined here, as (resource, rebuild name).
    pub rebuilds: Vec<(String, String)>,
    pub input: Input,
    pub leases: LeaseTable,
    pub frozen: bool,
    pending_snapshot: Option<Vec<Lease>>,
    /// Per resource, the lease as it is now, or `None` when its document can no
    /// longer be read (the row goes on unfreeze).
    pending_changes: HashMap<String, Option<Lease>>,
    pub window: Option<OplogWindow>,
    /// The entries of the capped collections that capped leases tail, as last read:
    /// those leases are measured against them instead of the oplog window.
    pub capped: CappedReading,
    pub ops_per_sec: Option<f64>,
    /// When (the server's clock) the time to loss in the table was predicted.
    loss_read_at: Option<DateTime<Utc>>,
    /// Why no time to loss could be predicted, when the oplog's figures cannot be read.
    pub loss_unknown: Option<String>,
    /// Per resource, why its time to loss was not predicted.
    pub loss_unpredicted: HashMap<String, String>,
    /// The oplog's size and maximum, and how fast it fills, as of the last prediction.
    pub oplog_stats: Option<OplogStats>,
    pub fill_rate: Option<Rate>,
    /// The checkpoints of the lease last shown in the detail view.
    pub checkpoints: Option<ShownCheckpoints>,
    /// A prediction that arrived while frozen, applied on unfreeze.
    pending_losses: Option<(DateTime<Utc>, LossReading)>,
    /// Server clock minus local clock, from the last oplog read.
    server_offset: chrono::Duration,
    pub members: Result<Vec<MemberRow>, String>,
    /// The fleet's process documents as last read, or why they cannot be.
    pub processes: Result<Vec<crate::model::Member>, String>,
    /// What the cluster is, once read (never for the sandbox).
    pub topology: Option<Topology>,
    pub listeners: Vec<ListenerSnapshot>,
    /// The demo workload's status, where this process runs one.
    pub workload: Option<crate::demo::workload::WorkloadStatus>,
    pub listener_cursor: ListCursor,
    pub audit: Vec<AuditRecord>,
    pub audit_cursor: ListCursor,
    pub history: OplogHistory,
    pub failures: BTreeMap<DataSource, Failure>,
    /// Lease documents that cannot be read: not in the table, named in the header.
    pub malformed_leases: Vec<MalformedDocument>,
    /// Audit documents among the newest that cannot be read.
    pub malformed_audit: Vec<MalformedDocument>,
    /// Local time of the last data that arrived.
    pub data_as_of: Option<DateTime<Utc>>,
    pub notice: Option<Notice>,
    /// Local wall clock, as of the last event or tick.
    pub now: DateTime<Utc>,
    /// Terminal size (width, height).
    pub size: (u16, u16),
    /// Local time statuses were last re-assessed.
    assessed_at: DateTime<Utc>,
}

impl ConsoleState {
    pub fn new(setup: ConsoleSetup) -> Self {
        Self {
            mode: setup.mode,
            cluster: setup.cluster,
            read_only: setup.read_only,
            thresholds: setup.thresholds,
            theme: setup.theme,
            mouse: setup.mouse,
            view: View::Leases,
            help: None,
            dialog: None,
            background_rebuild: None,
            rebuilds: setup.rebuilds,
            input: Input::Normal,
            leases: LeaseTable::new(HealthContext {
                windows: SourceWindows::default(),
                now: setup.now,
                thresholds: setup.thresholds,
            }),
            frozen: false,
            pending_snapshot: None,
            loss_read_at: None,
            loss_unknown: None,
            loss_unpredicted: HashMap::new(),
            oplog_stats: None,
            fill_rate: None,
            pending_losses: None,
            checkpoints: None,
            pending_changes: HashMap::new(),
            window: None,
            capped: CappedReading::default(),
            ops_per_sec: None,
            server_offset: chrono::Duration::zero(),
            members: Ok(Vec::new()),
            processes: Ok(Vec::new()),
            topology: None,
            listeners: Vec::new(),
            workload: None,
            listener_cursor: ListCursor::default(),
            audit: Vec::new(),
            audit_cursor: ListCursor::default(),
            history: OplogHistory::default(),
            failures: BTreeMap::new(),
            malformed_leases: Vec::new(),
            malformed_audit: Vec::new(),
            data_as_of: None,
            notice: None,
            now: setup.now,
            size: (0, 0),
            assessed_at: setup.now,
        }
    }

    /// The fleet's processes with the leases they hold and stand by for, against the
    /// leases and the server's clock as the console knows them; empty when no process
    /// announces itself (or the documents cannot be read).
    pub fn process_views(&self) -> Vec<crate::model::ProcessView> {
        let Ok(members) = &self.processes else {
            return Vec::new();
        };
        if members.is_empty() {
            return Vec::new();
        }
        let leases: Vec<Lease> = self.leases.entries().map(|e| e.lease.clone()).collect();
        crate::model::ProcessView::all(members, &leases, self.server_now())
    }

    /// How many rows the fleet table shows (one per membership document, or one
    /// saying why they cannot be read): what the layout needs, without planning the
    /// fleet.
    pub fn process_count(&self) -> usize {
        self.processes.as_ref().map_or(1, Vec::len)
    }

    /// The server's clock, estimated from the last oplog read and the local clock.
    pub fn server_now(&self) -> DateTime<Utc> {
        self.now + self.server_offset
    }

    /// The lease feed is failing: the leases on screen may be old. (A failing oplog or
    /// audit read is reported in the header but does not make the leases stale.)
    pub fn is_stale(&self) -> bool {
        self.failures.contains_key(&DataSource::Leases)
    }

    pub fn apply(&mut self, event: DataEvent, local_now: DateTime<Utc>) {
        self.now = local_now;
        match event {
            DataEvent::LeaseSnapshot(listing) => {
                self.recovered(DataSource::Leases);
                self.malformed_leases = listing.malformed;
                let leases = listing.items;
                if self.frozen {
                    self.pending_changes.clear();
                    self.pending_snapshot = Some(leases);
                } else {
                    self.leases.replace_all(leases, local_now);
                }
            }
            DataEvent::LeaseMalformed(document) => {
                self.recovered(DataSource::Leases);
                if let Some(id) = &document.id {
                    if self.frozen {
                        self.pending_changes.insert(id.clone(), None);
                    } else {
                        self.leases.remove(id, local_now);
                    }
                }
                self.malformed_leases.retain(|d| d.id != document.id);
                self.malformed_leases.push(document);
            }
            DataEvent::LeaseDeleted(resource) => {
                self.recovered(DataSource::Leases);
                if self.frozen {
                    self.leases.note_vanished(&resource);
                    self.pending_changes.insert(resource, None);
                } else {
                    self.leases.delete(&resource, local_now);
                }
            }
            DataEvent::LeaseChanged(lease) => {
                self.recovered(DataSource::Leases);
                self.malformed_leases
                    .retain(|d| d.id.as_deref() != Some(lease.resource.as_str()));
                if self.frozen {
                    self.pending_changes
                        .insert(lease.resource.clone(), Some(*lease));
                } else {
                    self.leases.upsert(*lease, local_now);
                }
            }
            DataEvent::Window {
                window,
                server_now,
                ops_per_sec,
            } => {
                self.recovered(DataSource::Oplog);
                self.server_offset = server_now - local_now;
                self.window = Some(window);
                self.ops_per_sec = ops_per_sec;
                if !self.frozen {
                    self.reassess();
                }
                self.history
                    .record(window.length().as_secs(), ops_per_sec, &self.leases);
            }
            DataEvent::CappedWindows(reading) => {
                self.capped = reading;
                if !self.frozen {
                    self.reassess();
                }
            }
            DataEvent::TimeToLoss { read_at, reading } => {
                if self.frozen {
                    self.pending_losses = Some((read_at, reading));
                } else {
                    self.apply_losses(read_at, reading);
                }
            }
            DataEvent::Checkpoints { resource, read } => {
                self.checkpoints = Some(ShownCheckpoints {
                    resource,
                    read: read.map(|listing| (listing.items, listing.malformed.len())),
                });
                return;
            }
            DataEvent::ServerClock(server_now) => {
                self.server_offset = server_now - local_now;
                if !self.frozen {
                    self.reassess();
                }
            }
            DataEvent::Members(members) => self.members = members,
            DataEvent::Processes(processes) => self.processes = processes,
            DataEvent::Topology(topology) => {
                if topology.oplog != OplogAccess::Readable {
                    // Known unreadable: the header says why; no window to show.
                    self.window = None;
                    self.failures.remove(&DataSource::Oplog);
                    if !self.frozen {
                        self.reassess();
                    }
                }
                self.topology = Some(topology);
            }
            DataEvent::Listeners(listeners) => {
                self.listeners = listeners;
                self.listener_cursor.clamp(self.listeners.len());
            }
            DataEvent::Workload(status) => self.workload = Some(status),
            DataEvent::Audit(listing) => {
                self.recovered(DataSource::Audit);
                self.malformed_audit = listing.malformed;
                let records = listing.items;
                let selected = self
                    .audit
                    .get(self.audit_cursor.selected)
                    .map(|r| r.id.clone());
                self.audit = records;
                if let Some(position) =
                    selected.and_then(|id| self.audit.iter().position(|r| r.id == id))
                {
                    self.audit_cursor.selected = position;
                }
                self.audit_cursor.clamp(self.audit.len());
            }
            DataEvent::Planned(result) => {
                self.planned(result);
                return;
            }
            DataEvent::ActionDone { action, result } => {
                // Only the dialog of this action closes: a rebuild finishing in the
                // background leaves another action's dialog open.
                let rebuild = action == ActionKind::Rebuild;
                if matches!(&self.dialog, Some(Dialog::Running { action: running, .. }) if (*running == ActionKind::Rebuild) == rebuild)
                {
                    self.dialog = None;
                }
                if rebuild {
                    self.background_rebuild = None;
                }
                match result {
                    Ok(text) => self.notify(NoticeLevel::Info, text),
                    Err(text) => self.notify(NoticeLevel::Error, text),
                }
                return;
            }
            DataEvent::RebuildProgress(update) => {
                match (&mut self.dialog, &mut self.background_rebuild) {
                    (
                        Some(Dialog::Running {
                            action: ActionKind::Rebuild,
                            progress,
                            ..
                        }),
                        _,
                    ) => *progress = Some(update),
                    (_, Some(background)) => background.progress = Some(update),
                    _ => {}
                }
                return;
            }
            DataEvent::SourceFailed { source, error } => {
                let since = self.failures.get(&source).map_or(local_now, |f| f.since);
                self.failures.insert(source, Failure { error, since });
                return;
            }
        }
        self.data_as_of = Some(local_now);
        self.follow_dialog();
        self.normalise_scroll();
    }

    /// The lease of `resource` as the console has it now, queued changes included:
    /// `Some(None)` when its document can no longer be read, `None` when never seen.
    pub fn lease_now(&self, resource: &str) -> Option<Option<&Lease>> {
        if let Some(change) = self.pending_changes.get(resource) {
            return Some(change.as_ref());
        }
        if self.frozen {
            if let Some(snapshot) = &self.pending_snapshot {
                return Some(snapshot.iter().find(|l| l.resource == resource));
            }
        }
        if let Some(entry) = self.leases.get(resource) {
            return Some(Some(&entry.lease));
        }
        self.malformed_leases
            .iter()
            .any(|d| d.id.as_deref() == Some(resource))
            .then_some(None)
    }

    /// Keeps an open preview true to the lease feed: a plan whose lease moved on says
    /// so and cannot be applied.
    fn follow_dialog(&mut self) {
        let Some(resource) = self.dialog.as_ref().and_then(Dialog::resource) else {
            return;
        };
        let resource = resource.to_string();
        let lease = self.lease_now(&resource).map(|l| l.cloned());
        if let Some(dialog) = &mut self.dialog {
            dialog.follow(lease.as_ref().map(Option::as_ref));
        }
    }

    /// Keeps each list's stored offset equal to the first row drawn, so a click or a
    /// wheel notch lands on the row under the pointer after rows moved.
    pub fn normalise_scroll(&mut self) {
        let height = self.table_height();
        self.leases.scroll_into_view(height);
        self.listener_cursor.offset = visible_start(
            self.listener_cursor.selected,
            self.listener_cursor.offset,
            height,
            self.listeners.len(),
        );
        self.audit_cursor.offset = visible_start(
            self.audit_cursor.selected,
            self.audit_cursor.offset,
            height,
            self.audit.len(),
        );
    }

    /// The clock moved: expiries count down, statuses follow, notices time out.
    pub fn tick(&mut self, local_now: DateTime<Utc>) {
        self.now = local_now;
        // An oplog read re-assesses too; a tick only does when none came lately.
        let since = (local_now - self.assessed_at).to_std().unwrap_or_default();
        if !self.frozen && since >= REASSESS_AFTER {
            self.reassess();
            self.normalise_scroll();
        }
        if self.notice.as_ref().is_some_and(|n| n.until <= local_now) {
            self.notice = None;
        }
    }

    pub fn on_resize(&mut self, width: u16, height: u16) {
        self.size = (width, height);
        let rows = self.table_height();
        self.leases.scroll_into_view(rows);
    }

    pub fn notify(&mut self, level: NoticeLevel, text: impl Into<String>) {
        self.notice = Some(Notice {
            text: text.into(),
            level,
            until: self.now + chrono::Duration::from_std(NOTICE_FOR).unwrap_or_default(),
        });
    }

    pub fn set_frozen(&mut self, frozen: bool) {
        self.frozen = frozen;
        if !frozen {
            if let Some(leases) = self.pending_snapshot.take() {
                self.leases.replace_all(leases, self.now);
            }
            let now = self.now;
            for (resource, change) in std::mem::take(&mut self.pending_changes) {
                match change {
                    Some(lease) => self.leases.upsert(lease, now),
                    None => self.leases.remove(&resource, now),
                }
            }
            if let Some((read_at, reading)) = self.pending_losses.take() {
                self.apply_losses(read_at, reading);
            }
            self.reassess();
        }
    }

    fn apply_losses(&mut self, read_at: DateTime<Utc>, reading: LossReading) {
        self.leases.set_losses(&reading);
        self.loss_read_at = Some(read_at);
        self.loss_unknown = reading.unknown;
        self.loss_unpredicted = reading.unpredicted;
        self.oplog_stats = reading.oplog;
        self.fill_rate = reading.fill_rate;
    }

    /// The lease the detail view shows, if it is open.
    pub fn detail_resource(&self) -> Option<String> {
        (self.view == View::Detail)
            .then(|| self.leases.selected().map(|e| e.lease.resource.clone()))
            .flatten()
    }

    /// `entry`'s time to loss as of now: the last prediction, counted down since.
    pub fn time_to_loss(&self, entry: &LeaseEntry) -> Option<TimeToLoss> {
        Some(entry.loss.as_ref()?.after(self.since_loss_read()))
    }

    fn since_loss_read(&self) -> Duration {
        self.loss_read_at
            .and_then(|at| (self.server_now() - at).to_std().ok())
            .unwrap_or_default()
    }

    /// Lease changes held back while frozen.
    pub fn pending(&self) -> usize {
        self.pending_changes.len() + usize::from(self.pending_snapshot.is_some())
    }

    /// Rows the current list view shows at this terminal size.
    pub fn table_height(&self) -> usize {
        let area = ratatui::layout::Rect::new(0, 0, self.size.0, self.size.1);
        let body = super::layout::areas(area).body;
        match self.view {
            View::Audit => super::layout::table_rows(super::layout::split_list(body).0).1,
            View::Listeners => {
                let processes = self.process_count();
                super::layout::table_rows(super::layout::split_listeners(body, processes).0).1
            }
            _ => super::layout::table_rows(body).1,
        }
    }

    fn planned(&mut self, result: Result<Box<crate::ops::Plan>, PlanFailure>) {
        let Some(Dialog::Planning {
            target,
            request,
            reason,
        }) = &self.dialog
        else {
            return; // the operator closed the dialog meanwhile
        };
        let asked = match &result {
            Ok(plan) => &plan.request,
            Err(failure) => &failure.request,
        };
        if asked != request {
            return; // the answer to a dialog closed before this one opened
        }
        let (target, reason) = (target.clone(), reason.clone());
        match result {
            Ok(plan) => {
                self.dialog = Some(Dialog::Preview {
                    target,
                    plan,
                    focus: Focus::Cancel,
                    typed: String::new(),
                    reason,
                    moved: None,
                });
                self.follow_dialog();
            }
            Err(failure) => {
                self.dialog = None;
                self.notify(NoticeLevel::Error, failure.message);
            }
        }
    }

    fn reassess(&mut self) {
        self.assessed_at = self.now;
        self.leases.set_context(self.health_context());
    }

    fn health_context(&self) -> HealthContext {
        HealthContext {
            windows: self.capped.source_windows(self.window),
            now: self.server_now(),
            thresholds: self.thresholds,
        }
    }

    fn recovered(&mut self, source: DataSource) {
        self.failures.remove(&source);
    }
}

#[cfg(test)]
mod tests;
