//! Reading what planning needs from a store: the only I/O before execute.

use super::facts::{CappedHistory, ChangeCount, GatherOptions, PlanFacts, SkippedEntry};
use super::target::{affected_range, resume_target, skipped_token};
use super::transaction::{self, TransactionMiss};
use super::{ActionRequest, OpsError, RewindTarget};
use crate::model::SourceKind;
use crate::store::{
    no_capped_feed, skipped_entry, CappedFeed, CheckpointStore, Namespace, OpsStore, StoreError,
    CHECKPOINTS_KEPT, NO_CHECKPOINTS,
};

/// Reads the facts `request` needs: the audit record (undo), the lease, the server's
/// clock, the oplog window (absent when not permitted), a rewind's checkpoints and, for
/// actions that move a resume point, a bounded count of the changes replayed or
/// skipped. Reads only.
pub async fn gather<S: OpsStore>(
    store: &S,
    request: &ActionRequest,
    options: &GatherOptions,
) -> Result<PlanFacts, OpsError> {
    let audit = match request {
        ActionRequest::Undo { audit_id } => store.audit_record(audit_id).await?,
        _ => None,
    };
    let resource = match request {
        // A record that concerns no lease names no lease to read.
        ActionRequest::Undo { .. } => audit
            .as_ref()
            .filter(|r| r.concerns_lease())
            .map(|r| r.resource.clone()),
        ActionRequest::Rebuild { .. } => options.rebuild.as_ref().map(|r| r.resource.clone()),
        other => other.named_resource().map(str::to_string),
    };
    let lease = match &resource {
        Some(resource) => store.get(resource).await?,
        None => None,
    };
    let now = store.server_now().await?;
    // A capped lease is measured against its collection's entries, others against the
    // oplog (the rule of `SourceWindows::for_lease`).
    let capped_ns = lease
        .as_ref()
        .and_then(|lease| lease.watch.as_ref())
        .filter(|watch| watch.source == SourceKind::Capped)
        .map(|watch| Namespace::new(watch.db.clone(), watch.coll.clone()));
    let (window, capped, window_unknown) = match capped_ns {
        Some(ns) => {
            let Some(feed) = store.capped_feed() else {
                return Err(StoreError::InvalidArgument(no_capped_feed(&ns)).into());
            };
            let entries = feed.capped_window(&ns).await?;
            (
                entries.map(|e| e.times()),
                Some(CappedHistory { ns, entries }),
                None,
            )
        }
        None => match store.oplog_window().await {
            Ok(window) => (Some(window), None, None),
            // A missing privilege, a mongos, an oplog that shows no entry: plans that
            // need the window say so, and why.
            Err(e) => match e.why_oplog_unreadable() {
                Some(why) => (None, None, Some(why)),
                None => return Err(e.into()),
            },
        },
    };
    let mut facts = PlanFacts {
        lease,
        window,
        window_unknown,
        capped,
        now,
        changes: None,
        read_only: options.read_only,
        audit,
        rebuild: options.rebuild.clone(),
        checkpoints: Vec::new(),
        operator: options.operator.clone(),
        handover_lease: options.handover_lease,
        bulk_lease: options.bulk_lease,
        thresholds: options.thresholds,
        profile: store.profile(),
        skipped_entry: None,
        token_for_time: None,
        restart_hold: options.restart_hold,
    };
    if let (
        ActionRequest::Rewind {
            resource,
            to: RewindTarget::Checkpoint(_),
        },
        Some(_),
    ) = (request, &facts.lease)
    {
        // Said as such: "no such checkpoint" would send the operator looking for one.
        let Some(checkpoints) = store.checkpoint_store() else {
            return Err(StoreError::InvalidArgument(NO_CHECKPOINTS.to_string()).into());
        };
        facts.checkpoints = checkpoints
            .checkpoints(resource, CHECKPOINTS_KEPT * 10)
            .await?
            .items;
    }
    if let (Some((to_token, whole)), Some(lease)) = (request.skip_target(), &facts.lease) {
        if let Ok(token) = skipped_token(lease, to_token) {
            facts.skipped_entry = Some(skipped(store, lease, &token, whole, &facts).await);
        }
    }
    // A seed listener reads only `resumeToken`: a move to a time is written as the
    // token that stands for it.
    if let Some(lease) = facts.lease.as_ref().filter(|l| l.protocol.is_seed()) {
        if let Ok(Some((None, Some(at)))) = resume_target(request, lease, &facts) {
            facts.token_for_time = Some(
                store
                    .token_at(at)
                    .await
                    .map(|token| (at, token))
                    .map_err(|e| e.to_string()),
            );
        }
    }
    // Not counted on an oplog whose window could not be read: one that shows no entry
    // would count none, and a refused read would be refused again. The count is unknown.
    let countable = |range: &super::facts::ChangeRange| {
        range.entries.is_some() || facts.window_unknown.is_none()
    };
    if let Some(range) = affected_range(request, &facts).filter(countable) {
        let limit = options.count_limit.max(1);
        // A capped lease's move is counted in entries of its collection, by `_id`.
        let counted = match (range.entries, &facts.capped, store.capped_feed()) {
            (Some(span), Some(capped), Some(feed)) => {
                feed.count_entries(&capped.ns, span, limit).await
            }
            _ => {
                store
                    .count_changes(&range.on, range.from, range.to, limit)
                    .await
            }
        };
        match counted {
            Ok(counted) => {
                facts.changes = Some(ChangeCount {
                    range,
                    counted,
                    limit,
                })
            }
            // The plan says the count is unknown; whether the action may go ahead is planning's call.
            Err(e) if e.oplog_unreadable() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(facts)
}

/// What a skip reads of the change it steps over: its oplog entry and, for `skip
/// --whole-transaction`, its transaction's changes as the lease sees them.
async fn skipped<S: OpsStore>(
    store: &S,
    lease: &crate::model::Lease,
    token: &crate::model::ResumeToken,
    whole: bool,
    facts: &PlanFacts,
) -> SkippedEntry {
    let entry = skipped_entry(store, token, lease.failure.as_ref()).await;
    let transaction = match (&entry, whole) {
        (_, false) => None,
        (Ok(entry), true) => {
            Some(transaction::resolve(store, lease, entry, facts.window.as_ref()).await)
        }
        (Err(why), true) if facts.window.is_none() && facts.capped.is_none() => {
            Some(Err(TransactionMiss::OplogUnreadable(why.clone())))
        }
        (Err(why), true) => Some(Err(TransactionMiss::Unresolved(why.clone()))),
    };
    SkippedEntry {
        entry: entry.ok(),
        transaction,
    }
}
