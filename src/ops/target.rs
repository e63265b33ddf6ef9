//! The resume point a request moves a lease to, checked against the oplog window, and
//! the range of changes that move passes over (what [`super::gather`] counts).

use super::facts::{ChangeRange, PlanFacts};
use super::refusal::{Refusal, RefusalKind};
use super::request::{ActionKind, ActionRequest, CheckpointRef, ResetTarget, RewindTarget};
use super::resume::{movement, point_of, NewResume};
use crate::model::text::{escape_control, short_duration};
use crate::model::{
    entry_time, entry_token, token_entry, Checkpoint, ClusterTime, Lease, OplogWindow, ResumePoint,
    ResumeToken, SourceKind, StreamProfile, WatchedCollection,
};

use super::transaction::{SteppedChange, TransactionChanges, TransactionMiss};

/// `time` inside the history the lease is measured against, or refused as outside it;
/// not checked where it is unknown (the plan says so). A capped collection's entries
/// tell their time to the second: a time in the second of its oldest or newest entry
/// is inside.
fn in_window(time: ClusterTime, what: &str, facts: &PlanFacts) -> Result<(), Refusal> {
    if let Some(capped) = &facts.capped {
        let Some(entries) = &capped.entries else {
            return Ok(());
        };
        let (oldest, newest) = (entry_time(&entries.oldest), entry_time(&entries.newest));
        if time.secs < oldest.secs || time.secs > newest.secs {
            return Err(Refusal::new(
                RefusalKind::OutsideWindow,
                format!("{what} {time} is outside {}", capped.describe()),
            ));
        }
        return Ok(());
    }
    let Some(window) = facts.window.as_ref() else {
        return Ok(());
    };
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
}

/// The checkpoint `which` names among the facts' (the lease's, newest first).
pub(crate) fn checkpoint_named<'a>(
    which: &CheckpointRef,
    lease: &Lease,
    facts: &'a PlanFacts,
) -> Result<&'a Checkpoint, Refusal> {
    which.find(&facts.checkpoints).ok_or_else(|| {
        let resource = crate::model::text::escape_control(&lease.resource);
        let had = match facts.checkpoints.len() {
            0 => "has no checkpoints".to_string(),
            1 => "has 1 checkpoint".to_string(),
            k => format!("has {k} checkpoints"),
        };
        Refusal::new(
            RefusalKind::UnknownCheckpoint,
            format!(
                "{resource} {had}, so there is no checkpoint {which} (`streamward checkpoints \
                 {resource}` lists them, 1 the newest)"
            ),
        )
    })
}

/// The resume fields of a move to `token`, its time checked against the window (a
/// Cosmos DB token tells no time, and there is no window to check).
fn token_target(
    token: &ResumeToken,
    what: &str,
    facts: &PlanFacts,
) -> Result<Option<NewResume>, Refusal> {
    check_source(token, facts)?;
    if let (Some(capped), Some(id)) = (&facts.capped, token_entry(token)) {
        // Named by the entry, not "the token's time".
        in_entries(id, "the target", capped)?;
        return Ok(Some((Some(token.clone()), None)));
    }
    if facts.profile == StreamProfile::CosmosDb && token.time().is_none() {
        return Ok(Some((Some(token.clone()), None)));
    }
    let Some(time) = token.time() else {
        return Err(Refusal::new(
            RefusalKind::UndecodableToken,
            format!(
                "resume token {token} cannot be decoded, so it cannot be checked against the \
                 oplog window"
            ),
        ));
    };
    in_window(time, what, facts)?;
    Ok(Some((Some(token.clone()), None)))
}

/// A capped lease's position is an entry's `_id`, a change stream's a token of the
/// stream: one of the other kind is refused, saying what to use instead.
fn check_source(token: &ResumeToken, facts: &PlanFacts) -> Result<(), Refusal> {
    let resource = facts
        .lease
        .as_ref()
        .map(|l| escape_control(&l.resource))
        .unwrap_or_default();
    match (&facts.capped, token_entry(token)) {
        (Some(capped), None) => Err(Refusal::new(
            RefusalKind::WrongSource,
            format!(
                "{resource} tails capped collection {}: its position is an entry's _id, and \
                 {token} is a change stream's resume token, not one: use rewind {resource} \
                 --to-id OBJECTID or --to TIME",
                escape_control(&capped.ns.to_string())
            ),
        )),
        (None, Some(id)) => Err(Refusal::new(
            RefusalKind::WrongSource,
            format!(
                "{resource} reads a change stream: its position is a resume token, and entry \
                 {id} is a capped collection's position, not one: use --to TIME or \
                 --to-token TOKEN"
            ),
        )),
        _ => Ok(()),
    }
}

/// After entry `id`: refused when `id` is older than the oldest entry the collection
/// holds (what came after it may be overwritten: the listener would stop LOST) or
/// newer than the newest (nothing names it yet).
fn in_entries(
    id: bson::oid::ObjectId,
    what: &str,
    capped: &super::facts::CappedHistory,
) -> Result<(), Refusal> {
    let Some(entries) = &capped.entries else {
        return Ok(());
    };
    if id < entries.oldest || id > entries.newest {
        return Err(Refusal::new(
            RefusalKind::OutsideWindow,
            format!(
                "{what} (entry {id}, at {}) is outside {}",
                super::facts::entry_clock(&id),
                capped.describe()
            ),
        ));
    }
    Ok(())
}

/// The resume point recorded before an action, checked against the lease's history.
fn point_in_window(point: &ResumePoint, what: &str, facts: &PlanFacts) -> Result<(), Refusal> {
    if let ResumePoint::Token(token) = point {
        check_source(token, facts)?;
        if let (Some(capped), Some(id)) = (&facts.capped, token_entry(token)) {
            return in_entries(id, what, capped);
        }
    }
    match point.time() {
        Some(time) => in_window(time, what, facts),
        None => Err(Refusal::new(
            RefusalKind::UndecodableToken,
            "the resume token recorded before that action cannot be decoded, so it cannot be \
             checked against the oplog window",
        )),
    }
}

pub(crate) fn require_window(
    facts: &PlanFacts,
    action: ActionKind,
) -> Result<OplogWindow, Refusal> {
    if let Some(capped) = &facts.capped {
        return facts.window.ok_or_else(|| {
            Refusal::new(
                RefusalKind::OutsideWindow,
                format!(
                    "{}: there is no entry for a {action} to move to; the listener reads what \
                     is appended from its position",
                    capped.describe()
                ),
            )
        });
    }
    facts.window.ok_or_else(|| {
        Refusal::new(
            RefusalKind::NoOplogAccess,
            format!(
                "{}, so a {action} cannot be checked against it: where a privilege is \
                 missing, grant the clusterMonitor role (or read on the local database; \
                 through a mongos, on every shard); what works without it is a rewind to a \
                 named point, unchecked: `rewind RESOURCE --to TIME` or `--to-token TOKEN`",
                facts.window_unread()
            ),
        )
    })
}

/// The new resume fields a resume-moving request sets, checked against the window.
/// Where the oplog cannot be read, a rewind or an undo to a point it names (a time, a
/// token, or a duration back from a decodable token) goes unchecked (the plan warns);
/// a reset, which needs the window's ends, is refused. `Ok(None)` for requests that
/// keep the resume point.
pub(crate) fn resume_target(
    request: &ActionRequest,
    lease: &Lease,
    facts: &PlanFacts,
) -> Result<Option<NewResume>, Refusal> {
    match request {
        ActionRequest::Rewind { to, .. } => {
            let window = facts.window.as_ref();
            if facts.capped.is_none()
                && facts.profile == StreamProfile::CosmosDb
                && matches!(to, RewindTarget::Time(_) | RewindTarget::By(_))
            {
                return Err(Refusal::new(
                    RefusalKind::NotOnThisDeployment,
                    "an Azure Cosmos DB change stream starts at now or after a token, never \
                     at a time, so a listener could not open from it: rewind --to-token \
                     TOKEN (a token committed before: the audit records keep the one before \
                     each action; docs/cosmos.md)",
                ));
            }
            match to {
                RewindTarget::Time(spec) => {
                    let time = spec.cluster_time();
                    in_window(time, "the target", facts)?;
                    Ok(Some((None, Some(time))))
                }
                RewindTarget::By(by) => {
                    let base = match (lease.resume_point().time(), window) {
                        (Some(time), _) => time,
                        (None, Some(window)) => window.last,
                        // Back from nothing known: a time or a token still works.
                        (None, None) => {
                            return Err(Refusal::new(
                                RefusalKind::NoOplogAccess,
                                format!(
                                    "{} and the resume point has no time, so there is nothing \
                                     to go back from: rewind --to TIME or --to-token works \
                                     without the window",
                                    facts.window_unread()
                                ),
                            ))
                        }
                    };
                    let secs = u32::try_from(by.as_secs()).unwrap_or(u32::MAX);
                    let time = ClusterTime::new(base.secs.saturating_sub(secs), base.inc);
                    in_window(
                        time,
                        &format!("{} back from {base},", short_duration(*by)),
                        facts,
                    )?;
                    Ok(Some((None, Some(time))))
                }
                RewindTarget::Token(token) => token_target(token, "the token's time", facts),
                RewindTarget::Checkpoint(which) => {
                    let checkpoint = checkpoint_named(which, lease, facts)?;
                    token_target(
                        &checkpoint.token,
                        &format!("checkpoint {which}'s token time"),
                        facts,
                    )
                }
            }
        }
        ActionRequest::Reset { to, .. } => {
            // A capped collection's "now" is after its newest entry; its "oldest" is
            // every entry it holds, which an empty one has too.
            if let (Some(capped), ResetTarget::Oldest) = (&facts.capped, to) {
                if capped.entries.is_none() {
                    return Ok(Some((None, None)));
                }
            }
            let window = require_window(facts, ActionKind::Reset)?;
            Ok(Some(
                match (to, facts.capped.as_ref().and_then(|c| c.entries)) {
                    (ResetTarget::Oldest, _) => (None, None),
                    (ResetTarget::Now, Some(entries)) => (Some(entry_token(entries.newest)), None),
                    (ResetTarget::Now, None) => (None, Some(window.last)),
                },
            ))
        }
        ActionRequest::Skip { to_token, .. } => {
            let token = skipped_token(lease, to_token.as_ref())?;
            token_target(&token, "the skipped change's time", facts)
        }
        ActionRequest::SkipTransaction { to_token, .. } => {
            let token = skipped_token(lease, to_token.as_ref())?;
            let last = transaction_end(lease, &token, facts)?;
            token_target(&last.token, "the transaction's last change's time", facts)
        }
        ActionRequest::Undo { .. } => {
            let before = facts.audit.as_ref().and_then(|r| r.before.as_ref());
            // A seed lease without a token resumed at the oldest entry: a point too.
            if before.is_some_and(|b| {
                lease.protocol.is_seed() && b.resume_token.is_none() && b.resume_at.is_none()
            }) {
                return Ok(Some((None, None)));
            }
            let Some(before) = before.filter(|b| b.resume_token.is_some() || b.resume_at.is_some())
            else {
                return Err(Refusal::new(
                    RefusalKind::NothingToRestore,
                    "that audit record has no prior resume point to restore (the lease had neither a token nor resumeAt): \
                     use reset --to oldest or rewind instead",
                ));
            };
            point_in_window(
                &before.resume_point(),
                "the resume point recorded before that action,",
                facts,
            )?;
            Ok(Some((before.resume_token.clone(), before.resume_at)))
        }
        _ => Ok(None),
    }
}

/// The change a skip steps over: the one `to_token` names, else the one the lease
/// records as failing.
pub(crate) fn skipped_token(
    lease: &Lease,
    to_token: Option<&ResumeToken>,
) -> Result<ResumeToken, Refusal> {
    if let Some(token) = to_token {
        return Ok(token.clone());
    }
    let resource = escape_control(&lease.resource);
    match &lease.failure {
        None => Err(Refusal::new(
            RefusalKind::NothingToSkip,
            format!(
                "{resource} records no change its listeners fail on, so there is nothing to \
                 skip: name the change with --to-token TOKEN (its resume token), or use \
                 reset --to now --accept-skip to skip everything up to now"
            ),
        )),
        Some(failure) => failure.token.clone().ok_or_else(|| {
            let at = failure
                .at
                .map(|t| format!(" at cluster time {t}"))
                .unwrap_or_default();
            Refusal::new(
                RefusalKind::NothingToSkip,
                format!(
                    "the server did not name the change {resource} fails on{at}: name it \
                     with --to-token TOKEN, or skip up to now with reset --to now \
                     --accept-skip"
                ),
            )
        }),
    }
}

/// The transaction `token`'s change belongs to, as gathered for `skip
/// --whole-transaction`, and the last of its changes the lease has not handled (where
/// it resumes after): or a refusal that says why not, and what to do instead.
pub(crate) fn transaction_end<'a>(
    lease: &Lease,
    token: &ResumeToken,
    facts: &'a PlanFacts,
) -> Result<&'a SteppedChange, Refusal> {
    let txn = whole_transaction(lease, facts)?;
    let resource = escape_control(&lease.resource);
    if let Some(before) = &txn.before {
        return Err(Refusal::new(
            RefusalKind::NotOneChange,
            format!(
                "a change that is not of the transaction ({}) comes first after where \
                 {resource} resumes: {before}; --whole-transaction steps over only the \
                 transaction's changes: skip that change first (skip {resource} \
                 --to-token TOKEN), or skip more knowingly with reset --to now \
                 --accept-skip",
                txn.id
            ),
        ));
    }
    let Some(last) = txn.stepped.last() else {
        return Err(Refusal::new(
            RefusalKind::NotOneChange,
            format!(
                "{resource} already resumes after every change of the transaction ({}) on \
                 its collection (they were handled): there is nothing to skip; rewind goes \
                 back",
                txn.id
            ),
        ));
    };
    if !txn
        .stepped
        .iter()
        .any(|c| c.token.as_document() == token.as_document())
    {
        return Err(Refusal::new(
            RefusalKind::NotOneChange,
            format!(
                "the change with token {token} is not one of the transaction's ({}) that \
                 {resource} has yet to handle: it was handled (rewind goes back), or it is \
                 not the transaction's (name one of its changes with --to-token)",
                txn.id
            ),
        ));
    }
    Ok(last)
}

/// The gathered transaction, or the refusal its absence means.
pub(crate) fn whole_transaction<'a>(
    lease: &Lease,
    facts: &'a PlanFacts,
) -> Result<&'a TransactionChanges, Refusal> {
    let resource = escape_control(&lease.resource);
    let read = facts
        .skipped_entry
        .as_ref()
        .and_then(|s| s.transaction.as_ref());
    match read {
        Some(Ok(txn)) => Ok(txn),
        Some(Err(TransactionMiss::NotATransaction)) => Err(Refusal::new(
            RefusalKind::NotATransaction,
            format!(
                "the change is not part of a multi-document transaction: plain skip steps \
                 over it (skip {resource}, without --whole-transaction)"
            ),
        )),
        Some(Err(TransactionMiss::OplogUnreadable(why))) => Err(Refusal::new(
            RefusalKind::NoOplogAccess,
            format!(
                "the transaction's changes are read from the oplog, which cannot be read \
                 ({}): grant the clusterMonitor role (or read on the local database); \
                 without it, plain skip steps over the one change {resource} records as \
                 failing",
                escape_control(why)
            ),
        )),
        Some(Err(TransactionMiss::Unresolved(why))) => Err(Refusal::new(
            RefusalKind::TransactionUnknown,
            format!(
                "the transaction's changes cannot be told: {}; nothing is skipped: plain \
                 skip steps over the one change, or reset --to now --accept-skip skips \
                 everything up to now",
                escape_control(why)
            ),
        )),
        None => Err(Refusal::new(
            if facts.window.is_none() && facts.capped.is_none() {
                RefusalKind::NoOplogAccess
            } else {
                RefusalKind::TransactionUnknown
            },
            format!(
                "the change's oplog entry could not be read, so its transaction cannot be \
                 told (`streamward oplog` says whether the oplog can be read; an entry \
                 that fell off it is gone): plain skip steps over the one change \
                 {resource} records as failing"
            ),
        )),
    }
}

/// The changes a resume-moving request replays or skips: what [`super::gather`] counts.
/// `None` for other requests, or when either end is unknown.
/// The collection whose changes a move of `lease`'s resume point passes over: its
/// `watch` (a capped collection's entries for a capped lease), or for a lease without
/// one the collection its resume token names. `None` where neither tells.
pub fn counted_on(lease: &Lease) -> Option<WatchedCollection> {
    match &lease.watch {
        Some(watch) if watch.source == SourceKind::Capped => Some(WatchedCollection::Namespace {
            db: watch.db.clone(),
            coll: watch.coll.clone(),
            filtered: false,
        }),
        _ => WatchedCollection::of(lease),
    }
}

pub fn affected_range(request: &ActionRequest, facts: &PlanFacts) -> Option<ChangeRange> {
    // Counting reads the oplog: nothing to count where it cannot be read (a capped
    // lease's entries are counted in their collection, which may be empty).
    if facts.capped.is_none() {
        facts.window?;
    }
    let lease = facts.lease.as_ref()?;
    let (token, at) = resume_target(request, lease, facts).ok()??;
    let on = counted_on(lease)?;
    let moved = movement(lease, &point_of(&token, at), facts.window.as_ref())?;
    Some(ChangeRange {
        on,
        from: moved.from,
        to: moved.to,
        entries: moved.entries,
    })
}
