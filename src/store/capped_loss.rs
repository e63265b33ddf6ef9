//! Time to loss for capped-collection leases: a capped collection drops its oldest
//! entries as appends need the room, as an oplog sized in bytes does, so the same
//! model ([`crate::model::predict_time_to_loss`]) predicts when a position falls off,
//! from the collection's size, maximum and fill rate and the bytes before the position.
//!
//! MongoDB keeps no count of the bytes appended to a capped collection, so each read
//! sums the entries whose `_id` is above the greatest `_id` the previous read saw
//! ([`LossTracker`] keeps the running total and that `_id`; by `_id`, not by the last
//! appended, since appenders' ids interleave). An entry appended later with an `_id`
//! below that greatest one is not summed: the fill rate errs low by it.

use chrono::{DateTime, Utc};

use super::capped::ABOVE_EVERY_ID;
use super::{CappedFeed, LossReading, Namespace, HISTORY_COUNT_LIMIT};
use crate::model::{
    capped_collection, entry_time, CappedSample, EntrySpan, EntryStart, HistoryBefore, Lease,
    LossTracker, OplogStats, OplogWindow,
};

/// The most entries summed as one read's appends; past it the read's rate is unknown.
const APPENDED_COUNT_LIMIT: u64 = 1_000_000;

/// Adds each capped lease's prediction (or why there is none) to `reading`; `store`
/// is `None` when the store offers no capped collections.
pub(super) async fn read_capped_time_to_loss<S: CappedFeed>(
    store: Option<&S>,
    tracker: &mut LossTracker,
    now: DateTime<Utc>,
    leases: &[Lease],
    reading: &mut LossReading,
) {
    let collections = super::capped_namespaces(leases);
    let names: Vec<String> = collections.iter().map(ToString::to_string).collect();
    tracker.keep_capped(names.iter().map(String::as_str));
    for ns in collections {
        let name = ns.to_string();
        let tailing: Vec<&Lease> = leases
            .iter()
            .filter(|l| capped_collection(l).as_deref() == Some(name.as_str()))
            .filter(|l| l.resume_point().time().is_some())
            .collect();
        let Some(store) = store else {
            for lease in &tailing {
                reading.unpredicted.insert(
                    lease.resource.clone(),
                    super::capabilities::no_capped_feed(&ns),
                );
            }
            continue;
        };
        let figures = match read_figures(store, tracker, now, &ns).await {
            Ok(Some(figures)) => figures,
            Ok(None) => continue,
            Err(why) => {
                for lease in &tailing {
                    reading
                        .unpredicted
                        .insert(lease.resource.clone(), why.clone());
                }
                continue;
            }
        };
        if tracker.ready_capped(&name).is_err() {
            // Said for its leases, so nothing shows the oplog's state as theirs.
            for lease in &tailing {
                reading.unpredicted.insert(
                    lease.resource.clone(),
                    format!(
                        "measuring the fill rate of capped collection {name} (two reads are \
                         needed)"
                    ),
                );
            }
            continue;
        }
        for lease in tailing {
            let predicted = match history_before(store, &ns, lease, &figures).await {
                Ok(history) => tracker.predict_capped(
                    &name,
                    now,
                    lease,
                    figures.window,
                    &figures.stats,
                    history,
                ),
                Err(why) => {
                    reading.unpredicted.insert(lease.resource.clone(), why);
                    continue;
                }
            };
            reading.record(&lease.resource, predicted);
        }
    }
}

struct Figures {
    window: OplogWindow,
    stats: OplogStats,
}

/// The collection's window and size, and the bytes appended since the last read;
/// `None` while it is empty.
async fn read_figures<S: CappedFeed>(
    store: &S,
    tracker: &mut LossTracker,
    now: DateTime<Utc>,
    ns: &Namespace,
) -> Result<Option<Figures>, String> {
    let name = ns.to_string();
    let unread = |e: super::StoreError| format!("capped collection {name} could not be read: {e}");
    let stats = store.capped_stats(ns).await.map_err(unread)?;
    if let Some(max) = stats.max_count {
        return Err(format!(
            "capped collection {name} is also bounded to {max} entries, which drops entries \
             the byte model does not see coming: its time to loss is not predicted"
        ));
    }
    let Some(window) = store.capped_window(ns).await.map_err(unread)? else {
        return Ok(None);
    };
    let (appended, largest, greatest) = match tracker.capped_newest(&name) {
        None => {
            let all = EntrySpan {
                from: EntryStart::Oldest,
                until: ABOVE_EVERY_ID,
            };
            let counted = store
                .entry_bytes(ns, all, u64::from(HISTORY_COUNT_LIMIT))
                .await
                .map_err(unread)?;
            (None, counted.largest, counted.greatest)
        }
        Some(previous) => {
            let since = EntrySpan {
                from: EntryStart::After(previous),
                until: ABOVE_EVERY_ID,
            };
            let counted = store
                .entry_bytes(ns, since, APPENDED_COUNT_LIMIT)
                .await
                .map_err(unread)?;
            if !counted.complete {
                tracker.forget_capped(&name);
                return Err(format!(
                    "more than {APPENDED_COUNT_LIMIT} entries were appended to capped collection \
                     {name} between two reads, too many to count; measuring again"
                ));
            }
            (
                Some(counted.bytes),
                counted.largest,
                counted.greatest.max(Some(previous)),
            )
        }
    };
    let sample = CappedSample {
        window: window.times(),
        newest: greatest.unwrap_or(window.newest),
        size_bytes: stats.size_bytes,
        max_bytes: stats.max_bytes,
        entries: stats.count,
        appended,
        largest,
    };
    let stats = tracker.record_capped(&name, now, &sample);
    Ok(Some(Figures {
        window: sample.window,
        stats,
    }))
}

/// The bytes of the entries before `lease`'s position: the collection's size less the
/// entries from the position on (few, for a lease that keeps up), else counted from
/// the oldest entry.
async fn history_before<S: CappedFeed>(
    store: &S,
    ns: &Namespace,
    lease: &Lease,
    figures: &Figures,
) -> Result<HistoryBefore, String> {
    let point = lease.resume_point();
    let (Some(start), Some(at)) = (EntryStart::of(&point), point.time()) else {
        return Err("it has no position yet".into());
    };
    // The position's own entry: after an entry, that entry; at a time, the first one then.
    let own = match start {
        EntryStart::After(id) | EntryStart::From(id) => EntryStart::From(id),
        EntryStart::Oldest => EntryStart::Oldest,
    };
    let entry = match start {
        EntryStart::After(id) => Some(entry_time(&id)),
        _ => Some(at),
    };
    let failed =
        |e: super::StoreError| format!("the entries before its position could not be counted: {e}");
    let limit = u64::from(HISTORY_COUNT_LIMIT);
    let newer = EntrySpan {
        from: own,
        until: ABOVE_EVERY_ID,
    };
    let counted = store.entry_bytes(ns, newer, limit).await.map_err(failed)?;
    if counted.complete {
        return Ok(HistoryBefore {
            older_bytes: figures.stats.size_bytes.saturating_sub(counted.bytes),
            entry,
            complete: true,
        });
    }
    let older = EntrySpan {
        from: EntryStart::Oldest,
        until: own,
    };
    let counted = store.entry_bytes(ns, older, limit).await.map_err(failed)?;
    if !counted.complete {
        return Err(format!(
            "more than {HISTORY_COUNT_LIMIT} entries lie on either side of its position, too \
             many to count at every read"
        ));
    }
    Ok(HistoryBefore {
        older_bytes: counted.bytes,
        entry,
        complete: true,
    })
}
