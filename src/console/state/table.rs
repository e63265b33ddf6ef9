// Long: one type, the table kept sorted and filtered incrementally; its order, filter and
// selection change together.
//! The leases table: every lease, the filtered and sorted order the screen shows,
//! and the selection. Kept sorted incrementally so one lease change costs a binary
//! search and a shift, and a frame touches only the rows it draws.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};

use crate::model::{
    lease_group, lease_order, HealthEvidence, HealthThresholds, Lease, LeaseHealth, LeaseStatus,
    Partition, Pending, SourceWindows, TimeToLoss,
};
use crate::store::LossReading;

/// Holder and version changes kept per lease for the detail view.
const CHANGES_KEPT: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    Resource,
    Kind,
    Source,
    Holder,
    Version,
    Expires,
    LastCommit,
    TokenTime,
    Lag,
    Headroom,
    LossIn,
    Status,
}

impl Column {
    pub const ALL: [Column; 12] = [
        Column::Resource,
        Column::Kind,
        Column::Source,
        Column::Holder,
        Column::Version,
        Column::Expires,
        Column::LastCommit,
        Column::TokenTime,
        Column::Lag,
        Column::Headroom,
        Column::LossIn,
        Column::Status,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Column::Resource => "RESOURCE",
            Column::Kind => "KIND",
            Column::Source => "SOURCE",
            Column::Holder => "HOLDER",
            Column::Version => "VER",
            Column::Expires => "EXPIRES",
            Column::LastCommit => "COMMIT",
            Column::TokenTime => "TOKEN",
            Column::Lag => "LAG",
            Column::Headroom => "HEADROOM",
            Column::LossIn => "LOSS IN",
            Column::Status => "STATUS",
        }
    }

    /// The name `:sort NAME` accepts.
    pub fn parse(name: &str) -> Option<Column> {
        let name = name.to_ascii_lowercase();
        Column::ALL.into_iter().find(|c| {
            let label = c.label().to_ascii_lowercase();
            label == name
                || (name == "version" && *c == Column::Version)
                || (name == "loss" && *c == Column::LossIn)
        })
    }

    fn next(self) -> Column {
        let i = Column::ALL.iter().position(|c| *c == self).unwrap_or(0);
        Column::ALL[(i + 1) % Column::ALL.len()]
    }
}

/// A holder or version change seen while watching.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderChange {
    pub at: DateTime<Utc>,
    pub holder: Option<String>,
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeaseEntry {
    pub lease: Lease,
    pub health: LeaseHealth,
    pub changes: VecDeque<HolderChange>,
    /// The time to loss as of the last prediction ([`LeaseTable::set_losses`]); `None`
    /// until one was made for it.
    pub loss: Option<TimeToLoss>,
    /// What is left to process as of the last prediction, where it was counted.
    pub pending: Option<Pending>,
}

/// A substring filter over resource, holder, kind, source and status; `!` in front
/// inverts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    text: String,
    needle: String,
    inverted: bool,
}

impl Filter {
    pub fn new(text: &str) -> Self {
        let (inverted, rest) = match text.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        Self {
            text: text.to_string(),
            needle: rest.to_lowercase(),
            inverted,
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn is_empty(&self) -> bool {
        self.needle.is_empty()
    }

    fn matches(&self, entry: &LeaseEntry) -> bool {
        if self.needle.is_empty() {
            return true;
        }
        let lease = &entry.lease;
        let found = contains_folded(&lease.resource, &self.needle)
            || lease
                .holder
                .as_deref()
                .is_some_and(|h| contains_folded(h, &self.needle))
            || contains_folded(lease.kind.as_str(), &self.needle)
            || lease
                .source()
                .is_some_and(|s| contains_folded(s.as_str(), &self.needle))
            || contains_folded(entry.health.status.label(), &self.needle);
        found != self.inverted
    }
}

/// How the RESOURCE column names a lease shown right after `previous`: a partition
/// lease under a row of the same resource as `  #index/count`, every other lease by
/// its id.
pub fn resource_label(lease_id: &str, previous: Option<&str>) -> String {
    match Partition::parse_lease_id(lease_id) {
        Some((resource, partition)) if previous.is_some_and(|p| lease_group(p) == resource) => {
            format!("  #{partition}")
        }
        _ => lease_id.to_string(),
    }
}

fn contains_folded(haystack: &str, lowercase_needle: &str) -> bool {
    if haystack.is_ascii() && lowercase_needle.is_ascii() {
        haystack
            .as_bytes()
            .windows(lowercase_needle.len().max(1))
            .any(|w| w.eq_ignore_ascii_case(lowercase_needle.as_bytes()))
    } else {
        haystack.to_lowercase().contains(lowercase_needle)
    }
}

/// What the health of every lease is measured against.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthContext {
    /// The oplog's window for change-stream leases, each capped collection's entries
    /// for the leases that tail it.
    pub windows: SourceWindows,
    pub now: DateTime<Utc>,
    pub thresholds: HealthThresholds,
}

#[derive(Debug, Clone)]
pub struct LeaseTable {
    entries: Vec<LeaseEntry>,
    by_resource: HashMap<String, usize>,
    /// Indices into `entries` of the rows shown, filtered and sorted.
    order: Vec<usize>,
    /// `order` with each resource's partition leases gathered under it (at the place
    /// of the group's first row in `order`), when there are partition leases; else
    /// empty and `order` is what is shown ([`LeaseTable::regroup`]).
    grouped: Vec<usize>,
    /// How many leases are partition leases (`resource#i/P`).
    partition_leases: usize,
    sort: Column,
    descending: bool,
    filter: Filter,
    selected: usize,
    /// The operator chose the selected row. Until then the selection stays on the
    /// first row as displayed, so it starts on the worst lease once the statuses are
    /// known, not on whichever lease was first before the oplog window arrived.
    chosen: bool,
    /// First row drawn.
    offset: usize,
    context: HealthContext,
    /// Leases per status (indexed by `LeaseStatus as usize`), kept with every change so
    /// the header costs nothing per frame.
    status_counts: [usize; STATUSES],
    /// Leases listed before that are gone (deleted, or their collection dropped), with
    /// the last version seen; one that comes back at that version or above is no
    /// longer gone. Lease documents are never deleted by the protocol, so each is news.
    vanished: BTreeMap<String, i64>,
    /// Whether the oplog is full, as of the last prediction.
    oplog_full: Option<bool>,
}

/// One lease's health from the table's context and what the last prediction said of it.
fn assess_with(
    context: &HealthContext,
    oplog_full: Option<bool>,
    lease: &Lease,
    loss: Option<&TimeToLoss>,
    pending: Option<Pending>,
) -> LeaseHealth {
    LeaseHealth::assess_with(
        lease,
        context.windows.for_lease(lease),
        context.now,
        &context.thresholds,
        &HealthEvidence {
            loss,
            oplog_full,
            pending,
        },
    )
}

const STATUSES: usize = LeaseStatus::Ok as usize + 1;

impl LeaseTable {
    pub fn new(context: HealthContext) -> Self {
        Self {
            entries: Vec::new(),
            by_resource: HashMap::new(),
            order: Vec::new(),
            grouped: Vec::new(),
            partition_leases: 0,
            sort: Column::Status,
            descending: false,
            filter: Filter::default(),
            selected: 0,
            chosen: false,
            offset: 0,
            context,
            status_counts: [0; STATUSES],
            vanished: BTreeMap::new(),
            oplog_full: None,
        }
    }

    /// Leases listed before that are gone, with the last version seen of each.
    pub fn vanished(&self) -> &BTreeMap<String, i64> {
        &self.vanished
    }

    /// Notes which of `leases` came back at or above the version they vanished at.
    fn note_returned<'a>(&mut self, leases: impl IntoIterator<Item = &'a Lease>) {
        for lease in leases {
            if self
                .vanished
                .get(&lease.resource)
                .is_some_and(|gone_at| lease.version >= *gone_at)
            {
                self.vanished.remove(&lease.resource);
            }
        }
    }

    /// How many leases have `status` (filtered or not).
    pub fn count(&self, status: LeaseStatus) -> usize {
        self.status_counts[status as usize]
    }

    fn recount(&mut self) {
        self.status_counts = [0; STATUSES];
        self.partition_leases = 0;
        for entry in &self.entries {
            self.status_counts[entry.health.status as usize] += 1;
            if Partition::parse_lease_id(&entry.lease.resource).is_some() {
                self.partition_leases += 1;
            }
        }
    }

    /// The rows shown, in the order shown.
    fn shown_order(&self) -> &[usize] {
        if self.grouped.is_empty() {
            &self.order
        } else {
            &self.grouped
        }
    }

    /// Gathers each resource's partition leases (and its unpartitioned lease) under
    /// the group's first row in the sorted order: the group sits where its most urgent
    /// member sorts, its members in partition order. O(n), and only while there are
    /// partition leases; without any, the sorted order is shown as it is.
    fn regroup(&mut self) {
        self.grouped.clear();
        if self.partition_leases == 0 {
            return;
        }
        let entries = &self.entries;
        let mut members: HashMap<&str, Vec<usize>> = HashMap::new();
        for &i in &self.order {
            members
                .entry(lease_group(&entries[i].lease.resource))
                .or_default()
                .push(i);
        }
        for group in members.values_mut() {
            group.sort_by(|&a, &b| {
                lease_order(&entries[a].lease.resource, &entries[b].lease.resource)
            });
        }
        let mut grouped = Vec::with_capacity(self.order.len());
        for &i in &self.order {
            if let Some(group) = members.remove(lease_group(&entries[i].lease.resource)) {
                grouped.extend(group);
            }
        }
        self.grouped = grouped;
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Rows shown (after the filter).
    pub fn shown(&self) -> usize {
        self.order.len()
    }

    pub fn sort(&self) -> (Column, bool) {
        (self.sort, self.descending)
    }

    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    pub fn context(&self) -> &HealthContext {
        &self.context
    }

    pub fn selected_index(&self) -> Option<usize> {
        (!self.order.is_empty()).then_some(self.selected)
    }

    pub fn selected(&self) -> Option<&LeaseEntry> {
        self.shown_order()
            .get(self.selected)
            .map(|&i| &self.entries[i])
    }

    pub fn get(&self, resource: &str) -> Option<&LeaseEntry> {
        self.by_resource.get(resource).map(|&i| &self.entries[i])
    }

    pub fn entries(&self) -> impl Iterator<Item = &LeaseEntry> {
        self.entries.iter()
    }

    /// The rows `start..start + count` of the shown order.
    pub fn rows(&self, start: usize, count: usize) -> impl Iterator<Item = &LeaseEntry> {
        let shown = self.shown_order();
        let end = start.saturating_add(count).min(shown.len());
        let start = start.min(end);
        shown[start..end].iter().map(|&i| &self.entries[i])
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Replaces every lease (the watch reopened); keeps the selection on the same
    /// resource. A lease listed before and missing now is noted as vanished.
    pub fn replace_all(&mut self, leases: Vec<Lease>, seen_at: DateTime<Utc>) {
        let listed: HashSet<&str> = leases.iter().map(|l| l.resource.as_str()).collect();
        for entry in &self.entries {
            if !listed.contains(entry.lease.resource.as_str()) {
                self.vanished
                    .insert(entry.lease.resource.clone(), entry.lease.version);
            }
        }
        self.note_returned(&leases);
        self.rebuild(leases, seen_at);
    }

    /// The document of `resource` was deleted: noted as vanished, its row dropped.
    pub fn delete(&mut self, resource: &str, seen_at: DateTime<Utc>) {
        self.note_vanished(resource);
        self.remove(resource, seen_at);
    }

    /// Notes `resource` as vanished, keeping its row (a frozen table drops it later).
    pub fn note_vanished(&mut self, resource: &str) {
        if let Some(entry) = self.get(resource) {
            let version = entry.lease.version;
            self.vanished.insert(resource.to_string(), version);
        }
    }

    fn rebuild(&mut self, leases: Vec<Lease>, seen_at: DateTime<Utc>) {
        let keep = self.selected_resource();
        let mut previous: HashMap<String, LeaseEntry> = std::mem::take(&mut self.entries)
            .into_iter()
            .map(|e| (e.lease.resource.clone(), e))
            .collect();
        self.by_resource.clear();
        for lease in leases {
            let (changes, loss, pending) = match previous.remove(&lease.resource) {
                Some(old) => {
                    let mut changes = old.changes;
                    note_change(&mut changes, &old.lease, &lease, seen_at);
                    (changes, old.loss, old.pending)
                }
                None => (VecDeque::new(), None, None),
            };
            let health = assess_with(
                &self.context,
                self.oplog_full,
                &lease,
                loss.as_ref(),
                pending,
            );
            self.by_resource
                .insert(lease.resource.clone(), self.entries.len());
            self.entries.push(LeaseEntry {
                lease,
                health,
                changes,
                loss,
                pending,
            });
        }
        self.recount();
        self.rebuild_order();
        self.reselect(keep.as_deref());
    }

    /// Drops the row of `resource` (its document can no longer be read). Rare, so it
    /// simply rebuilds the table from the others.
    pub fn remove(&mut self, resource: &str, seen_at: DateTime<Utc>) {
        if !self.by_resource.contains_key(resource) {
            return;
        }
        let others: Vec<Lease> = self
            .entries
            .iter()
            .filter(|e| e.lease.resource != resource)
            .map(|e| e.lease.clone())
            .collect();
        self.rebuild(others, seen_at);
    }

    /// Applies one changed lease in O(log n) plus a shift of the order, and, while
    /// partition leases are shown, a regrouping of every shown row (O(n)).
    pub fn upsert(&mut self, lease: Lease, seen_at: DateTime<Utc>) {
        self.note_returned([&lease]);
        let keep = self.selected_resource();
        let index = match self.by_resource.get(&lease.resource) {
            Some(&index) => {
                if let Some(position) = self.position_of(index) {
                    self.order.remove(position);
                }
                let entry = &mut self.entries[index];
                note_change(&mut entry.changes, &entry.lease, &lease, seen_at);
                self.status_counts[entry.health.status as usize] -= 1;
                entry.health = assess_with(
                    &self.context,
                    self.oplog_full,
                    &lease,
                    entry.loss.as_ref(),
                    entry.pending,
                );
                self.status_counts[entry.health.status as usize] += 1;
                entry.lease = lease;
                index
            }
            None => {
                let health = assess_with(&self.context, self.oplog_full, &lease, None, None);
                self.status_counts[health.status as usize] += 1;
                if Partition::parse_lease_id(&lease.resource).is_some() {
                    self.partition_leases += 1;
                }
                let index = self.entries.len();
                self.by_resource.insert(lease.resource.clone(), index);
                self.entries.push(LeaseEntry {
                    lease,
                    health,
                    changes: VecDeque::new(),
                    loss: None,
                    pending: None,
                });
                index
            }
        };
        if self.filter.matches(&self.entries[index]) {
            let position = self
                .order
                .partition_point(|&i| self.compare(i, index) == Ordering::Less);
            self.order.insert(position, index);
        }
        self.regroup();
        self.reselect(keep.as_deref());
    }

    /// New window or clock: every status may change, so re-assess and re-sort.
    pub fn set_context(&mut self, context: HealthContext) {
        self.context = context;
        let keep = self.selected_resource();
        self.reassess_all();
        self.recount();
        if self.filter.is_empty() {
            // Nothing enters or leaves the order, and from one second to the next
            // few rows move: a stable sort of the old order is close to linear.
            let mut order = std::mem::take(&mut self.order);
            order.sort_by(|&a, &b| self.compare(a, b));
            self.order = order;
            self.regroup();
        } else {
            self.rebuild_order();
        }
        self.reselect(keep.as_deref());
    }

    fn reassess_all(&mut self) {
        let (context, oplog_full) = (&self.context, self.oplog_full);
        for entry in &mut self.entries {
            entry.health = assess_with(
                context,
                oplog_full,
                &entry.lease,
                entry.loss.as_ref(),
                entry.pending,
            );
        }
    }

    /// Every lease's time to loss and what is left to process, from one prediction (a
    /// lease it leaves out has none); their statuses follow.
    pub fn set_losses(&mut self, reading: &LossReading) {
        let keep = self.selected_resource();
        self.oplog_full = reading.oplog_full();
        for entry in &mut self.entries {
            entry.loss = reading.predicted.get(&entry.lease.resource).cloned();
            entry.pending = reading.pending.get(&entry.lease.resource).copied();
        }
        self.reassess_all();
        self.recount();
        self.rebuild_order();
        self.reselect(keep.as_deref());
    }

    pub fn set_filter(&mut self, filter: Filter) {
        let keep = self.selected_resource();
        self.filter = filter;
        self.rebuild_order();
        self.reselect(keep.as_deref());
    }

    pub fn sort_by(&mut self, column: Column, descending: bool) {
        let keep = self.selected_resource();
        self.sort = column;
        self.descending = descending;
        self.rebuild_order();
        self.reselect(keep.as_deref());
    }

    pub fn sort_next(&mut self) {
        self.sort_by(self.sort.next(), false);
    }

    pub fn sort_reverse(&mut self) {
        self.sort_by(self.sort, !self.descending);
    }

    /// The operator chose the selected row (moved, clicked, opened it): from now on
    /// it stays on its lease wherever that lease moves.
    pub fn choose(&mut self) {
        self.chosen = !self.order.is_empty();
    }

    /// Moves the selection by `delta` rows, clamped, and scrolls it into a view of `height` rows.
    pub fn move_selection(&mut self, delta: isize, height: usize) {
        if self.order.is_empty() {
            return;
        }
        self.choose();
        let last = self.order.len() - 1;
        self.selected = self.selected.saturating_add_signed(delta).min(last);
        self.scroll_into_view(height);
    }

    pub fn select_first(&mut self, height: usize) {
        self.choose();
        self.selected = 0;
        self.scroll_into_view(height);
    }

    pub fn select_last(&mut self, height: usize) {
        self.choose();
        self.selected = self.order.len().saturating_sub(1);
        self.scroll_into_view(height);
    }

    /// Selects the row drawn `row` lines below the first visible one (a mouse click).
    pub fn select_visible_row(&mut self, row: usize, height: usize) -> bool {
        let target = self.offset + row;
        if row < height && target < self.order.len() {
            self.choose();
            self.selected = target;
            true
        } else {
            false
        }
    }

    /// Scrolls the view by `delta` rows, keeping the selection inside it.
    pub fn scroll(&mut self, delta: isize, height: usize) {
        let max_offset = self.order.len().saturating_sub(height.max(1));
        self.offset = self.offset.saturating_add_signed(delta).min(max_offset);
        if height > 0 {
            self.choose();
            self.selected = self
                .selected
                .clamp(self.offset, self.offset + height - 1)
                .min(self.order.len().saturating_sub(1));
        }
    }

    /// Keeps the selected row inside a view of `height` rows.
    pub fn scroll_into_view(&mut self, height: usize) {
        self.offset = visible_start(self.selected, self.offset, height, self.order.len());
    }

    fn selected_resource(&self) -> Option<String> {
        self.selected().map(|e| e.lease.resource.clone())
    }

    fn reselect(&mut self, resource: Option<&str>) {
        if !self.chosen {
            self.selected = 0;
            return;
        }
        let found = resource
            .and_then(|r| self.by_resource.get(r).copied())
            .and_then(|index| {
                if self.grouped.is_empty() {
                    self.position_of(index)
                } else {
                    self.grouped.iter().position(|&i| i == index)
                }
            });
        self.selected = match found {
            Some(position) => position,
            None => self.selected.min(self.order.len().saturating_sub(1)),
        };
    }

    /// Where entry `index` sits in the order, if shown: a binary search, valid because
    /// the order is kept sorted under the current comparison.
    fn position_of(&self, index: usize) -> Option<usize> {
        self.order
            .binary_search_by(|&i| self.compare(i, index))
            .ok()
    }

    fn rebuild_order(&mut self) {
        let mut order: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.filter.matches(&self.entries[i]))
            .collect();
        order.sort_unstable_by(|&a, &b| self.compare(a, b));
        self.order = order;
        self.regroup();
    }

    /// A total order: the sort column, then the resource name (unique).
    fn compare(&self, a: usize, b: usize) -> Ordering {
        let (x, y) = (&self.entries[a], &self.entries[b]);
        let by_column = match self.sort {
            Column::Resource => Ordering::Equal,
            Column::Kind => x.lease.kind.as_str().cmp(y.lease.kind.as_str()),
            Column::Source => {
                let name = |e: &LeaseEntry| e.lease.source().map(crate::model::SourceKind::as_str);
                name(x).cmp(&name(y))
            }
            Column::Holder => x.lease.holder.cmp(&y.lease.holder),
            Column::Version => x.lease.version.cmp(&y.lease.version),
            Column::Expires => x.lease.expires_at.cmp(&y.lease.expires_at),
            Column::LastCommit => x.lease.committed_at.cmp(&y.lease.committed_at),
            Column::TokenTime => x.health.token_time.cmp(&y.health.token_time),
            Column::Lag => x.health.lag.cmp(&y.health.lag),
            Column::Headroom => x
                .health
                .headroom_share
                .partial_cmp(&y.health.headroom_share)
                .unwrap_or(Ordering::Equal),
            // Soonest first; leases without a prediction last.
            Column::LossIn => {
                let key = |e: &LeaseEntry| (e.loss.is_none(), e.loss.as_ref().map(|l| l.earliest));
                key(x).cmp(&key(y))
            }
            Column::Status => x.health.status.cmp(&y.health.status),
        };
        let ordering = by_column.then_with(|| x.lease.resource.cmp(&y.lease.resource));
        if self.descending {
            ordering.reverse()
        } else {
            ordering
        }
    }
}

/// The first row to draw so that `selected` is visible in `height` rows, moving as
/// little as possible from `offset`.
pub fn visible_start(selected: usize, offset: usize, height: usize, len: usize) -> usize {
    if height == 0 || len == 0 {
        return 0;
    }
    let max_offset = len.saturating_sub(height);
    let mut start = offset.min(max_offset);
    if selected < start {
        start = selected;
    } else if selected >= start + height {
        start = selected + 1 - height;
    }
    start.min(max_offset)
}

fn note_change(
    changes: &mut VecDeque<HolderChange>,
    before: &Lease,
    after: &Lease,
    seen_at: DateTime<Utc>,
) {
    if before.holder != after.holder || before.version != after.version {
        if changes.len() == CHANGES_KEPT {
            changes.pop_front();
        }
        changes.push_back(HolderChange {
            at: seen_at,
            holder: after.holder.clone(),
            version: after.version,
        });
    }
}

#[cfg(test)]
mod tests;
