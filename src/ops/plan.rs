//! Pure planning: from a request and the facts read, the exact lease change, what it
//! means, and any reason to refuse. No I/O, no clock: everything comes from `PlanFacts`.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::error::exit;
use super::facts::{ChangeCount, ChangeRange, PlanFacts};
use super::request::{ActionKind, ActionRequest, ResetTarget, RewindTarget};
use crate::model::text::short_duration;
use crate::model::{ClusterTime, Lease, LockKind, OplogWindow, ResumePoint, ResumeToken};
use crate::store::{Namespace, OperatorChange, ResumeChange};

/// The (holder, version) the plan was made against: execute swaps only if the lease
/// still has this version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub holder: Option<String>,
    pub version: i64,
}

/// Which way a resume point moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Back: changes already processed are processed again.
    Replay,
    /// Forward: changes not yet processed never will be.
    Skip,
}

/// The changes a move of the resume point replays or skips.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeMove {
    pub direction: Direction,
    /// The watched namespace (`None` when the lease does not say).
    pub ns: Option<Namespace>,
    pub from: ClusterTime,
    pub to: ClusterTime,
    /// How much history that is (`to − from`).
    pub span: Duration,
    /// Bounded count of the changes on `ns` in `from..=to`; `None` when not counted.
    pub count: Option<ChangeCount>,
}

impl ResumeMove {
    pub fn describe(&self) -> String {
        let verb = match self.direction {
            Direction::Replay => "replayed",
            Direction::Skip => "skipped",
        };
        let on = self
            .ns
            .as_ref()
            .map(|ns| format!(" on {ns}"))
            .unwrap_or_default();
        let count = match &self.count {
            Some(c) if c.at_least() => format!("at least {} changes", group_digits(c.counted)),
            Some(c) if c.counted == 1 => "1 change".to_string(),
            Some(c) => format!("{} changes", group_digits(c.counted)),
            None => "an uncounted number of changes".to_string(),
        };
        format!(
            "{count}{on} will be {verb}, {} of history ({} to {})",
            short_duration(self.span),
            self.from,
            self.to
        )
    }
}

/// What the action means, beyond the lease fields.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Effect {
    /// The live holder this action fences out.
    pub fences_out: Option<String>,
    pub resume: Option<ResumeMove>,
    /// One line each, for people.
    pub lines: Vec<String>,
}

/// Why a plan may not be executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    ReadOnly,
    UnknownResource,
    UnknownAuditRecord,
    NoRebuildDefinition,
    /// The target is not in the oplog window.
    OutsideWindow,
    /// A rewind that would move forward over changes still in the oplog.
    WouldSkip,
    /// `reset --to now` without `--accept-skip`.
    SkipNotAccepted,
    /// The lease is bulk: only abort-bulk or the rebuild may change it.
    BulkHeld,
    NotBulk,
    RebuildRunning,
    /// The audit record has no prior resume point to restore.
    NothingToRestore,
    UndecodableToken,
    ConflictingOptions,
    /// The oplog window cannot be read, so the target cannot be checked.
    NoOplogAccess,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub reason: String,
}

impl Refusal {
    fn new(kind: RefusalKind, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }

    /// 3 for a guard; 5 when the refusal is a missing privilege.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            RefusalKind::NoOplogAccess => exit::CANNOT_CONNECT,
            _ => exit::REFUSED,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The outcome of planning: shown as the preview, executed as is.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub request: ActionRequest,
    pub action: ActionKind,
    /// The affected resource (`None` when the request names no known one).
    pub resource: Option<String>,
    pub operator: String,
    pub captured: Option<Captured>,
    pub before: Option<Lease>,
    /// The lease as the write will leave it; times are relative to `planned_at` (the
    /// server sets them from its own clock when it executes). For a rebuild: the
    /// lease while the rebuild runs.
    pub after: Option<Lease>,
    /// What execute sends: a compare-and-swap on `captured.version`, version + 1.
    pub change: Option<OperatorChange>,
    pub effect: Effect,
    pub warnings: Vec<String>,
    /// Why the console must make the operator type the resource name (fences out a live
    /// holder, or moves a resume point); `None`: Cancel/OK is enough.
    pub confirmation: Option<String>,
    pub refusal: Option<Refusal>,
    /// The server's clock when the facts were read.
    pub planned_at: DateTime<Utc>,
}

impl Plan {
    pub fn is_refused(&self) -> bool {
        self.refusal.is_some()
    }

    /// The text the operator types to confirm, when one is needed.
    pub fn confirm_text(&self) -> Option<&str> {
        self.confirmation.as_ref().and(self.resource.as_deref())
    }
}

/// What a decided action changes.
struct Decision {
    change: OperatorChange,
    effect: Effect,
    warnings: Vec<String>,
    confirmation: Option<String>,
}

/// Plans `request` against `facts`. Never fails: a plan that must not run carries a
/// `refusal` and no `change`.
pub fn plan(request: &ActionRequest, facts: &PlanFacts) -> Plan {
    let resource = affected_resource(request, facts);
    let lease = facts.lease.as_ref();
    let mut plan = Plan {
        request: request.clone(),
        action: request.kind(),
        resource: resource.clone(),
        operator: facts.operator.clone(),
        captured: lease.map(|l| Captured {
            holder: l.holder.clone(),
            version: l.version,
        }),
        before: facts.lease.clone(),
        after: None,
        change: None,
        effect: Effect::default(),
        warnings: Vec::new(),
        confirmation: None,
        refusal: None,
        planned_at: facts.now,
    };
    let decided = if facts.read_only {
        Err(Refusal::new(
            RefusalKind::ReadOnly,
            format!(
                "read-only mode: {} is not allowed (drop --read-only / read_only = false to act)",
                request.kind()
            ),
        ))
    } else {
        decide(request, facts, resource.as_deref())
    };
    match decided {
        Ok(decision) => {
            plan.after = lease.map(|l| predict_after(l, &decision.change, facts.now));
            plan.change = Some(decision.change);
            plan.effect = decision.effect;
            plan.warnings = decision.warnings;
            plan.confirmation = decision.confirmation;
        }
        Err(refusal) => plan.refusal = Some(refusal),
    }
    plan
}

fn affected_resource(request: &ActionRequest, facts: &PlanFacts) -> Option<String> {
    match request {
        ActionRequest::Undo { .. } => facts.audit.as_ref().map(|r| r.resource.clone()),
        ActionRequest::Rebuild { .. } => facts.rebuild.as_ref().map(|r| r.resource.clone()),
        other => other.named_resource().map(str::to_string),
    }
}

fn decide(
    request: &ActionRequest,
    facts: &PlanFacts,
    resource: Option<&str>,
) -> Result<Decision, Refusal> {
    // What names the resource must exist before the lease can be looked at.
    match request {
        ActionRequest::Undo { audit_id } if facts.audit.is_none() => {
            return Err(Refusal::new(
                RefusalKind::UnknownAuditRecord,
                format!("there is no audit record {audit_id:?} (streamward audit lists them)"),
            ))
        }
        ActionRequest::Rebuild { name } if facts.rebuild.is_none() => {
            return Err(Refusal::new(
                RefusalKind::NoRebuildDefinition,
                format!(
                    "no rebuild named {name:?} is defined: add [rebuilds.{name}] with resource, db, collection and pipeline to the config file"
                ),
            ))
        }
        _ => {}
    }
    let resource = resource.unwrap_or_default();
    let Some(lease) = facts.lease.as_ref() else {
        return Err(Refusal::new(
            RefusalKind::UnknownResource,
            format!(
                "there is no lease {resource:?}: actions change existing leases only (streamward leases lists them)"
            ),
        ));
    };
    match request {
        ActionRequest::Takeover { to, hold, .. } => takeover(lease, to.as_deref(), *hold, facts),
        ActionRequest::Rewind { to, .. } => rewind(request, lease, to, facts),
        ActionRequest::Reset {
            to, accept_skip, ..
        } => reset(request, lease, *to, *accept_skip, facts),
        ActionRequest::Rebuild { name } => rebuild(lease, name, facts),
        ActionRequest::AbortBulk { .. } => abort_bulk(lease, facts),
        ActionRequest::Undo { audit_id } => undo(request, lease, audit_id, facts),
    }
}

fn change(lease: &Lease, holder: Option<String>, expires_in: Duration) -> OperatorChange {
    OperatorChange {
        resource: lease.resource.clone(),
        expected_version: lease.version,
        holder,
        expires_in,
        kind: LockKind::Update,
        resume: ResumeChange::Keep,
        note: String::new(),
    }
}

fn refuse_bulk(lease: &Lease, action: ActionKind) -> Result<(), Refusal> {
    if lease.kind == LockKind::Bulk {
        return Err(Refusal::new(
            RefusalKind::BulkHeld,
            format!(
                "{} is held for a rebuild (kind bulk, holder {}): a {action} would not let listeners back in. \
                 Re-run the rebuild, or give the lease back with abort-bulk {}",
                lease.resource,
                lease.holder.as_deref().unwrap_or("none"),
                lease.resource
            ),
        ));
    }
    Ok(())
}

fn require_window(facts: &PlanFacts, action: ActionKind) -> Result<OplogWindow, Refusal> {
    facts.window.ok_or_else(|| {
        Refusal::new(
            RefusalKind::NoOplogAccess,
            format!(
                "the oplog window cannot be read, so a {action} cannot be checked against it: \
                 grant the clusterMonitor role (or read on the local database)"
            ),
        )
    })
}

/// "holder X renewed 3s ago: it looks alive", or why there is no live holder.
fn holder_warning(lease: &Lease, now: DateTime<Utc>) -> Option<String> {
    let ago = |at: DateTime<Utc>| short_duration((now - at).to_std().unwrap_or_default());
    match (lease.live_holder(now), &lease.holder) {
        (Some(holder), _) => {
            let last_sign = [lease.renewed_at, lease.committed_at, lease.acquired_at]
                .into_iter()
                .flatten()
                .max();
            Some(match last_sign {
                Some(at) => format!("holder {holder} renewed {} ago: it looks alive", ago(at)),
                None => format!("holder {holder} holds an unexpired lease: it may be alive"),
            })
        }
        (None, Some(holder)) => lease
            .expires_at
            .map(|at| format!("holder {holder} expired {} ago", ago(at))),
        (None, None) => None,
    }
}

fn fence_effect(lease: &Lease, now: DateTime<Utc>, effect: &mut Effect) -> Option<String> {
    let live = lease.live_holder(now).map(str::to_string);
    if let Some(holder) = &live {
        effect.lines.push(format!(
            "fences out {holder}: its next commit (and any lease-fenced write) is rejected and it stops"
        ));
    }
    effect.fences_out = live.clone();
    live.map(|h| format!("fences out the live holder {h}"))
}

fn takeover(
    lease: &Lease,
    to: Option<&str>,
    hold: Option<Duration>,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    refuse_bulk(lease, ActionKind::Takeover)?;
    let mut effect = Effect::default();
    let mut warnings: Vec<String> = holder_warning(lease, facts.now).into_iter().collect();
    let confirmation = fence_effect(lease, facts.now, &mut effect);
    let mut c = match (to, hold) {
        (Some(_), Some(_)) => {
            return Err(Refusal::new(
                RefusalKind::ConflictingOptions,
                "takeover takes either --to LISTENER or --hold DURATION, not both",
            ))
        }
        (None, None) => {
            effect
                .lines
                .push("releases the lease now: any standby takes it over".into());
            change(lease, None, Duration::ZERO)
        }
        (Some(listener), None) => {
            if lease.live_holder(facts.now) == Some(listener) {
                warnings.push(format!(
                    "{listener} already holds it: this only starts a new tenure for it"
                ));
            }
            effect.lines.push(format!(
                "hands the lease to {listener} for {}: it claims it at once if it is standing by",
                short_duration(facts.handover_lease)
            ));
            change(lease, Some(listener.to_string()), facts.handover_lease)
        }
        (None, Some(hold)) => {
            effect.lines.push(format!(
                "{} holds it for {}: processing pauses until then, after which any standby takes it over",
                facts.operator,
                short_duration(hold)
            ));
            change(lease, Some(facts.operator.clone()), hold)
        }
    };
    if let Some(window) = &facts.window {
        if lease
            .resume_point()
            .time()
            .is_some_and(|t| t < window.first)
        {
            warnings.push(
                "the resume point has fallen off the oplog (LOST): the next holder stops with history lost; rewind or reset instead".into(),
            );
        }
    }
    c.note = match (to, hold) {
        (Some(listener), _) => format!("takeover to {listener} by {}", facts.operator),
        (_, Some(hold)) => format!("hold {} by {}", short_duration(hold), facts.operator),
        _ => format!("takeover by {}", facts.operator),
    };
    Ok(Decision {
        change: c,
        effect,
        warnings,
        confirmation,
    })
}

fn next(time: ClusterTime) -> ClusterTime {
    ClusterTime::from_u64(time.as_u64().saturating_add(1))
}

fn prev(time: ClusterTime) -> ClusterTime {
    ClusterTime::from_u64(time.as_u64().saturating_sub(1))
}

/// The first cluster time a listener (re)processes from `point`; `None` when unknown.
fn start_of(point: &ResumePoint, window: Option<&OplogWindow>) -> Option<ClusterTime> {
    match point {
        ResumePoint::Token(token) => token.time().map(next),
        ResumePoint::At(time) => Some(*time),
        ResumePoint::Oldest => window.map(|w| w.first),
    }
}

fn point_of(token: &Option<ResumeToken>, at: Option<ClusterTime>) -> ResumePoint {
    match (token, at) {
        (Some(token), _) => ResumePoint::Token(token.clone()),
        (None, Some(at)) => ResumePoint::At(at),
        (None, None) => ResumePoint::Oldest,
    }
}

/// `resumeToken` and `resumeAt` as an action sets them.
type NewResume = (Option<ResumeToken>, Option<ClusterTime>);

/// The new resume fields a resume-moving request sets, checked against the window.
/// `Ok(None)` for requests that keep the resume point.
fn new_resume(
    request: &ActionRequest,
    lease: &Lease,
    facts: &PlanFacts,
) -> Result<Option<NewResume>, Refusal> {
    let in_window = |time: ClusterTime, what: &str, window: &OplogWindow| {
        if time < window.first || time > window.last {
            Err(Refusal::new(
                RefusalKind::OutsideWindow,
                format!(
                    "{what} {time} is outside the oplog window ({} to {})",
                    window.first, window.last
                ),
            ))
        } else {
            Ok(())
        }
    };
    match request {
        ActionRequest::Rewind { to, .. } => {
            let window = require_window(facts, ActionKind::Rewind)?;
            match to {
                RewindTarget::Time(spec) => {
                    let time = spec.cluster_time();
                    in_window(time, "the target", &window)?;
                    Ok(Some((None, Some(time))))
                }
                RewindTarget::By(by) => {
                    let base = lease.resume_point().time().unwrap_or(window.last);
                    let secs = u32::try_from(by.as_secs()).unwrap_or(u32::MAX);
                    let time = ClusterTime::new(base.secs.saturating_sub(secs), base.inc);
                    in_window(
                        time,
                        &format!("{} back from {base},", short_duration(*by)),
                        &window,
                    )?;
                    Ok(Some((None, Some(time))))
                }
                RewindTarget::Token(token) => {
                    let Some(time) = token.time() else {
                        return Err(Refusal::new(
                            RefusalKind::UndecodableToken,
                            format!("resume token {token} cannot be decoded, so it cannot be checked against the oplog window"),
                        ));
                    };
                    in_window(time, "the token's time", &window)?;
                    Ok(Some((Some(token.clone()), None)))
                }
            }
        }
        ActionRequest::Reset { to, .. } => {
            let window = require_window(facts, ActionKind::Reset)?;
            Ok(Some(match to {
                ResetTarget::Oldest => (None, None),
                ResetTarget::Now => (None, Some(window.last)),
            }))
        }
        ActionRequest::Undo { .. } => {
            let window = require_window(facts, ActionKind::Undo)?;
            let before = facts.audit.as_ref().and_then(|r| r.before.as_ref());
            let Some(before) = before.filter(|b| b.resume_token.is_some() || b.resume_at.is_some())
            else {
                return Err(Refusal::new(
                    RefusalKind::NothingToRestore,
                    "that audit record has no prior resume point to restore (the lease had neither a token nor resumeAt): \
                     use reset --to oldest or rewind instead",
                ));
            };
            match before.resume_point().time() {
                Some(time) => in_window(time, "the resume point recorded before that action,", &window)?,
                None => {
                    return Err(Refusal::new(
                        RefusalKind::UndecodableToken,
                        "the resume token recorded before that action cannot be decoded, so it cannot be checked against the oplog window",
                    ))
                }
            }
            Ok(Some((before.resume_token.clone(), before.resume_at)))
        }
        _ => Ok(None),
    }
}

/// The changes a resume-moving request replays or skips: what [`super::gather`] counts.
/// `None` for other requests, or when either end is unknown.
pub fn affected_range(request: &ActionRequest, facts: &PlanFacts) -> Option<ChangeRange> {
    let lease = facts.lease.as_ref()?;
    let (token, at) = new_resume(request, lease, facts).ok()??;
    let watch = lease.watch.as_ref()?;
    let (_, from, to) = movement(lease, &point_of(&token, at), facts.window.as_ref())?;
    Some(ChangeRange {
        ns: Namespace::new(watch.db.clone(), watch.coll.clone()),
        from,
        to,
    })
}

/// From the lease's resume point to `new`: which way, and the inclusive range of times
/// passed over. `None` when nothing moves or an end is unknown.
fn movement(
    lease: &Lease,
    new: &ResumePoint,
    window: Option<&OplogWindow>,
) -> Option<(Direction, ClusterTime, ClusterTime)> {
    let current = start_of(&lease.resume_point(), window)?;
    let target = start_of(new, window)?;
    match target.cmp(&current) {
        std::cmp::Ordering::Less => Some((Direction::Replay, target, prev(current))),
        std::cmp::Ordering::Greater => Some((Direction::Skip, current, prev(target))),
        std::cmp::Ordering::Equal => None,
    }
}

fn resume_move(
    lease: &Lease,
    new: &ResumePoint,
    facts: &PlanFacts,
    warnings: &mut Vec<String>,
) -> Option<ResumeMove> {
    if start_of(&lease.resume_point(), facts.window.as_ref()).is_none() {
        warnings.push(
            "the current resume token cannot be decoded: what is replayed or skipped cannot be told".into(),
        );
        return None;
    }
    let (direction, from, to) = movement(lease, new, facts.window.as_ref())?;
    let ns = lease
        .watch
        .as_ref()
        .map(|w| Namespace::new(w.db.clone(), w.coll.clone()));
    let count = facts
        .changes
        .clone()
        .filter(|c| c.range.from == from && c.range.to == to && Some(&c.range.ns) == ns.as_ref());
    match &count {
        Some(c) if c.at_least() => warnings.push(format!(
            "counted at least {} changes: the count stops there",
            group_digits(c.limit)
        )),
        Some(_) => {}
        None if ns.is_none() => warnings.push(
            "the lease does not say which collection it watches: the changes cannot be counted"
                .into(),
        ),
        None => warnings.push("the changes were not counted (no access to the oplog?)".into()),
    }
    Some(ResumeMove {
        direction,
        ns,
        from,
        to,
        span: to.saturating_since(from),
        count,
    })
}

/// The shared shape of rewind, reset and undo: fence out, set the resume point.
fn move_resume(
    request: &ActionRequest,
    lease: &Lease,
    facts: &PlanFacts,
    note: String,
) -> Result<(Decision, Option<ResumeMove>), Refusal> {
    refuse_bulk(lease, request.kind())?;
    let Some((token, at)) = new_resume(request, lease, facts)? else {
        return Err(Refusal::new(
            RefusalKind::ConflictingOptions,
            format!("{} does not move a resume point", request.kind()),
        ));
    };
    let mut effect = Effect::default();
    let mut warnings: Vec<String> = holder_warning(lease, facts.now).into_iter().collect();
    fence_effect(lease, facts.now, &mut effect);
    let new_point = point_of(&token, at);
    let moved = resume_move(lease, &new_point, facts, &mut warnings);
    effect.lines.push(match &new_point {
        ResumePoint::Token(t) => format!("the next holder resumes after token {t}"),
        ResumePoint::At(t) => format!("the next holder starts at {t} (inclusive)"),
        ResumePoint::Oldest => "the next holder starts from the oldest oplog entry".into(),
    });
    match &moved {
        Some(m) => effect.lines.push(m.describe()),
        None => effect
            .lines
            .push("the resume point does not move: nothing is replayed or skipped".into()),
    }
    if let Some(window) = &facts.window {
        if lease
            .resume_point()
            .time()
            .is_some_and(|t| t < window.first)
        {
            warnings.push(format!(
                "the current resume point is LOST: changes before {} fell off the oplog and cannot be replayed; a rebuild of derived data may be needed",
                window.first
            ));
        }
    }
    effect.resume = moved.clone();
    let mut c = change(lease, None, Duration::ZERO);
    c.resume = ResumeChange::Set { token, at };
    c.note = note;
    Ok((
        Decision {
            change: c,
            effect,
            warnings,
            confirmation: Some("moves the resume point".into()),
        },
        moved,
    ))
}

fn skipped_in_window(moved: Option<&ResumeMove>, window: Option<&OplogWindow>) -> bool {
    match (moved, window) {
        (Some(m), Some(w)) => m.direction == Direction::Skip && m.to >= w.first,
        _ => false,
    }
}

fn rewind(
    request: &ActionRequest,
    lease: &Lease,
    to: &RewindTarget,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let note = match to {
        RewindTarget::Time(spec) => {
            format!("rewind to {} by {}", spec.cluster_time(), facts.operator)
        }
        RewindTarget::By(by) => format!("rewind by {} by {}", short_duration(*by), facts.operator),
        RewindTarget::Token(_) => format!("rewind to a token by {}", facts.operator),
    };
    let (decision, moved) = move_resume(request, lease, facts, note)?;
    if skipped_in_window(moved.as_ref(), facts.window.as_ref()) {
        let what = moved.map(|m| m.describe()).unwrap_or_default();
        return Err(Refusal::new(
            RefusalKind::WouldSkip,
            format!(
                "the target is after the current resume point, so nothing is replayed and {what}: \
                 use reset --to now --accept-skip to skip on purpose"
            ),
        ));
    }
    Ok(decision)
}

fn reset(
    request: &ActionRequest,
    lease: &Lease,
    to: ResetTarget,
    accept_skip: bool,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let note = match to {
        ResetTarget::Oldest => format!("reset to oldest by {}", facts.operator),
        ResetTarget::Now => format!("reset to now by {}", facts.operator),
    };
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    if to == ResetTarget::Now {
        let what = moved
            .as_ref()
            .filter(|m| m.direction == Direction::Skip)
            .map(ResumeMove::describe)
            .unwrap_or_else(|| "unprocessed changes are skipped".into());
        if !accept_skip {
            return Err(Refusal::new(
                RefusalKind::SkipNotAccepted,
                format!("reset --to now skips what the listener has not processed ({what}): re-run with --accept-skip to accept that"),
            ));
        }
        decision
            .warnings
            .push(format!("skipping on purpose (--accept-skip): {what}"));
    }
    Ok(decision)
}

fn rebuild(lease: &Lease, name: &str, facts: &PlanFacts) -> Result<Decision, Refusal> {
    let target = facts.rebuild.as_ref().ok_or_else(|| {
        Refusal::new(
            RefusalKind::NoRebuildDefinition,
            format!("no rebuild named {name:?}"),
        )
    })?;
    let mut warnings = Vec::new();
    if lease.kind == LockKind::Bulk {
        if let Some(holder) = lease.live_holder(facts.now) {
            return Err(Refusal::new(
                RefusalKind::RebuildRunning,
                format!(
                    "{} is already held for a rebuild by {holder}, which looks alive: wait for it, or abort-bulk {} first",
                    lease.resource, lease.resource
                ),
            ));
        }
        warnings.push(format!(
            "{} is STUCK BULK (left by {}): this rebuild recovers it",
            lease.resource,
            lease.holder.as_deref().unwrap_or("an earlier rebuild")
        ));
    } else if let Some(w) = holder_warning(lease, facts.now) {
        warnings.push(w);
    }
    let mut effect = Effect::default();
    fence_effect(lease, facts.now, &mut effect);
    effect.lines.push(format!(
        "takes {} with kind bulk for {} (renewed while working): incremental listeners stay out",
        lease.resource, facts.operator
    ));
    effect.lines.push(format!("runs {}", target.description));
    effect.lines.push(
        "then sets kind update, resumeToken null, resumeAt = T0 (the cluster time of the bulk write) and releases: \
         listeners replay from T0, and replays of what the rebuild already saw change nothing"
            .into(),
    );
    effect.lines.push(
        "if it fails or is cancelled the lease stays bulk (STUCK BULK): re-run it or abort-bulk"
            .into(),
    );
    let mut c = change(lease, Some(facts.operator.clone()), facts.bulk_lease);
    c.kind = LockKind::Bulk;
    c.note = format!("rebuild {name} by {}", facts.operator);
    Ok(Decision {
        change: c,
        effect,
        warnings,
        confirmation: Some("moves the resume point (to the rebuild's start)".into()),
    })
}

fn abort_bulk(lease: &Lease, facts: &PlanFacts) -> Result<Decision, Refusal> {
    if lease.kind != LockKind::Bulk {
        return Err(Refusal::new(
            RefusalKind::NotBulk,
            format!(
                "{} is not bulk (kind {}): there is no rebuild to abort",
                lease.resource, lease.kind
            ),
        ));
    }
    let mut effect = Effect::default();
    let mut warnings: Vec<String> = holder_warning(lease, facts.now).into_iter().collect();
    let confirmation = fence_effect(lease, facts.now, &mut effect);
    if confirmation.is_some() {
        warnings.push("a rebuild may still be running: it will fail to give the lease back".into());
    }
    effect.lines.push(format!(
        "gives the lease back (kind update, released) without rebuilding; listeners resume from {}",
        describe_point(&lease.resume_point())
    ));
    warnings.push(
        "the aggregate may be inconsistent after abort-bulk: nothing was rebuilt; run the rebuild again to make it exact".into(),
    );
    let mut c = change(lease, None, Duration::ZERO);
    c.note = format!("abort-bulk by {}", facts.operator);
    Ok(Decision {
        change: c,
        effect,
        warnings,
        confirmation,
    })
}

fn undo(
    request: &ActionRequest,
    lease: &Lease,
    audit_id: &str,
    facts: &PlanFacts,
) -> Result<Decision, Refusal> {
    let note = format!("undo {audit_id} by {}", facts.operator);
    let (mut decision, moved) = move_resume(request, lease, facts, note)?;
    if let Some(record) = &facts.audit {
        decision.effect.lines.insert(
            0,
            format!(
                "restores the resume point {} recorded before {} by {} at {}",
                record
                    .before
                    .as_ref()
                    .map(|b| describe_point(&b.resume_point()))
                    .unwrap_or_default(),
                record.action,
                record.operator,
                record.at.to_rfc3339()
            ),
        );
    }
    if moved.is_some_and(|m| m.direction == Direction::Skip) {
        decision.warnings.push(
            "undo moves the resume point forward: the changes in between are not processed (again)"
                .into(),
        );
    }
    Ok(decision)
}

pub fn describe_point(point: &ResumePoint) -> String {
    match point {
        ResumePoint::Token(token) => match token.time() {
            Some(time) => format!("after token at {time}"),
            None => format!("after token {token}"),
        },
        ResumePoint::At(time) => format!("at {time}"),
        ResumePoint::Oldest => "the oldest oplog entry".into(),
    }
}

/// The lease as the store will leave it, with `now` for the server's `$$NOW`.
pub fn predict_after(lease: &Lease, change: &OperatorChange, now: DateTime<Utc>) -> Lease {
    change.applied_to(lease, now)
}

/// `12345` → `12 345`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
