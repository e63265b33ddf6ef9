//! What a resource reads: a collection's change stream, or a capped collection read
//! as an event store with a tailable cursor (docs/capped.md). For the latter the
//! resume point is the `_id` of the last entry processed, kept in the lease's
//! `resumeToken` as `{_id: ObjectId}`, and its time is the ObjectId's.

use std::collections::HashMap;

use bson::oid::ObjectId;

use super::entry_id::first_id_of;
use super::resume_token::token_entry;
use super::source_kind::SourceKind;
use super::{Lease, OplogWindow, ResumePoint};

/// The history each lease's position is measured against: the oplog for a change
/// stream, its own capped collection's entries for a capped source. One rule for the
/// console, `leases`, the exporter and the plans.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceWindows {
    pub oplog: Option<OplogWindow>,
    /// Per capped collection (`db.coll`), the times of its oldest and newest entries;
    /// missing while it is empty or could not be read.
    pub capped: HashMap<String, OplogWindow>,
}

impl SourceWindows {
    pub fn for_lease(&self, lease: &Lease) -> Option<&OplogWindow> {
        match capped_collection(lease) {
            Some(name) => self.capped.get(&name),
            None => self.oplog.as_ref(),
        }
    }
}

/// `db.coll` of the capped collection a lease's resource tails; `None` for a change
/// stream (and for a lease that never recorded what it watches).
pub fn capped_collection(lease: &Lease) -> Option<String> {
    lease
        .watch
        .as_ref()
        .filter(|watch| watch.source == SourceKind::Capped)
        .map(|watch| format!("{}.{}", watch.db, watch.coll))
}

/// Where reading a capped collection (re)starts, in the order of its entries' `_id`s:
/// every entry, the entries at or above an `_id` (a start at a time: [`first_id_of`]),
/// or the entries above one (after an entry). Ordered by where it starts, so the
/// entries between two starts are those at or after the lower one and before the
/// higher one ([`EntrySpan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryStart {
    Oldest,
    From(ObjectId),
    After(ObjectId),
}

impl EntryStart {
    /// Where a listener reading a capped collection starts from `point`: `None` for a
    /// change stream's token, which names no entry.
    pub fn of(point: &ResumePoint) -> Option<Self> {
        match point {
            ResumePoint::Token(token) => token_entry(token).map(EntryStart::After),
            ResumePoint::At(at) => Some(EntryStart::From(first_id_of(at.secs))),
            ResumePoint::Oldest => Some(EntryStart::Oldest),
        }
    }

    fn key(&self) -> (Option<ObjectId>, u8) {
        match self {
            EntryStart::Oldest => (None, 0),
            EntryStart::From(id) => (Some(*id), 0),
            EntryStart::After(id) => (Some(*id), 1),
        }
    }

    /// Whether an entry with `_id` `id` is read from this start on.
    pub fn admits(&self, id: &ObjectId) -> bool {
        match self {
            EntryStart::Oldest => true,
            EntryStart::From(from) => id >= from,
            EntryStart::After(after) => id > after,
        }
    }

    /// The `_id` this start is drawn at, when it is drawn at one.
    pub fn id(&self) -> Option<ObjectId> {
        match self {
            EntryStart::Oldest => None,
            EntryStart::From(id) | EntryStart::After(id) => Some(*id),
        }
    }
}

impl PartialOrd for EntryStart {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EntryStart {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// The entries of a capped collection read from `from` on and not from `until` on: what
/// a move of a capped lease's position from one start to the other replays or skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntrySpan {
    pub from: EntryStart,
    pub until: EntryStart,
}

impl EntrySpan {
    /// Whether the entry with `_id` `id` lies in the span.
    pub fn holds(&self, id: &ObjectId) -> bool {
        self.from.admits(id) && !self.until.admits(id)
    }

    /// The span between two starts, lower first; `None` when they are the same.
    pub fn between(a: EntryStart, b: EntryStart) -> Option<Self> {
        match a.cmp(&b) {
            std::cmp::Ordering::Less => Some(Self { from: a, until: b }),
            std::cmp::Ordering::Greater => Some(Self { from: b, until: a }),
            std::cmp::Ordering::Equal => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{entry_time, entry_token, object_id_at, ClusterTime, ResumeToken};
    use bson::doc;
    use chrono::DateTime;

    #[test]
    fn an_entry_token_names_its_entry_and_tells_its_time() {
        let id = object_id_at(
            DateTime::from_timestamp(1_700_000_123, 0).unwrap(),
            [1, 2, 3, 4, 5],
            7,
        );
        let token = entry_token(id);
        assert_eq!(token_entry(&token), Some(id));
        assert_eq!(entry_time(&id), ClusterTime::new(1_700_000_123, 0));
        assert_eq!(token.time(), Some(ClusterTime::new(1_700_000_123, 0)));
        assert!(first_id_of(1_700_000_123) <= id);
        assert!(first_id_of(1_700_000_124) > id);
    }

    #[test]
    fn a_change_stream_token_is_not_an_entry() {
        let token = ResumeToken::from_document(doc! { "_data": "8265" });
        assert_eq!(token_entry(&token), None);
        let two_fields = ResumeToken::from_document(doc! { "_id": ObjectId::new(), "x": 1 });
        assert_eq!(token_entry(&two_fields), None);
        let string_id = ResumeToken::from_document(doc! { "_id": "abc" });
        assert_eq!(token_entry(&string_id), None);
    }

    #[test]
    fn ids_of_one_source_order_by_time_then_counter() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let a = object_id_at(at, [9; 5], 1);
        let b = object_id_at(at, [9; 5], 2);
        let c = object_id_at(at + chrono::TimeDelta::seconds(1), [0; 5], 0);
        assert!(a < b && b < c);
    }

    #[test]
    fn a_capped_lease_is_measured_against_its_collection_and_others_against_the_oplog() {
        let oplog = OplogWindow::new(ClusterTime::new(10, 0), ClusterTime::new(20, 0));
        let capped = OplogWindow::new(ClusterTime::new(15, 0), ClusterTime::new(16, 0));
        let windows = SourceWindows {
            oplog: Some(oplog),
            capped: HashMap::from([("app.events".to_string(), capped)]),
        };
        let mut lease = Lease::vacant("r");
        assert_eq!(windows.for_lease(&lease), Some(&oplog));
        lease.watch = Some(super::super::WatchTarget {
            db: "app".into(),
            coll: "events".into(),
            source: SourceKind::Capped,
            ..Default::default()
        });
        assert_eq!(windows.for_lease(&lease), Some(&capped));
        lease.watch.as_mut().unwrap().coll = "other".into();
        assert_eq!(
            windows.for_lease(&lease),
            None,
            "an unread capped collection"
        );
    }

    #[test]
    fn entry_starts_order_by_where_reading_begins() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let a = object_id_at(at, [9; 5], 1);
        let b = object_id_at(at, [9; 5], 2);
        let from_second = EntryStart::From(first_id_of(1_700_000_000));
        assert!(EntryStart::Oldest < from_second);
        assert!(from_second < EntryStart::From(a));
        assert!(EntryStart::From(a) < EntryStart::After(a));
        assert!(EntryStart::After(a) < EntryStart::From(b));
        assert_eq!(
            EntryStart::of(&ResumePoint::Token(entry_token(a))),
            Some(EntryStart::After(a))
        );
        assert_eq!(
            EntryStart::of(&ResumePoint::At(ClusterTime::new(1_700_000_000, 1))),
            Some(from_second)
        );
        assert_eq!(
            EntryStart::of(&ResumePoint::Token(ResumeToken::from_document(
                doc! { "_data": "82" }
            ))),
            None
        );
    }

    #[test]
    fn a_span_holds_the_entries_read_from_its_lower_start_and_not_from_its_upper() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let ids: Vec<ObjectId> = (1..=5).map(|n| object_id_at(at, [9; 5], n)).collect();
        // From after entry 4 back to after entry 1: entries 2, 3 and 4 are replayed.
        let span =
            EntrySpan::between(EntryStart::After(ids[3]), EntryStart::After(ids[0])).unwrap();
        let held: Vec<usize> = (0..5).filter(|&i| span.holds(&ids[i])).collect();
        assert_eq!(held, vec![1, 2, 3]);
        // Everything up to and including entry 2.
        let span = EntrySpan::between(EntryStart::Oldest, EntryStart::After(ids[1])).unwrap();
        let held: Vec<usize> = (0..5).filter(|&i| span.holds(&ids[i])).collect();
        assert_eq!(held, vec![0, 1]);
        assert_eq!(
            EntrySpan::between(EntryStart::From(ids[2]), EntryStart::From(ids[2])),
            None
        );
    }

    #[test]
    fn source_kinds_parse_their_names_only() {
        assert_eq!("capped".parse::<SourceKind>(), Ok(SourceKind::Capped));
        assert_eq!("stream".parse::<SourceKind>(), Ok(SourceKind::ChangeStream));
        assert!("Capped".parse::<SourceKind>().is_err());
    }
}
