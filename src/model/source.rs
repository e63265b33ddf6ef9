//! What a resource reads: a collection's change stream, or a capped collection read
//! as an event store with a tailable cursor (docs/capped.md). For the latter the
//! resume point is the `_id` of the last entry processed, kept in the lease's
//! `resumeToken` as `{_id: ObjectId}`, and its time is the ObjectId's.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use bson::oid::ObjectId;
use bson::{doc, Bson};
use chrono::{DateTime, Utc};

use super::{ClusterTime, Lease, OplogWindow, ResumeToken};

/// How a resource's changes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SourceKind {
    /// A change stream on the collection (the default).
    #[default]
    ChangeStream,
    /// A capped collection's entries in insertion order, by a tailable cursor.
    Capped,
}

impl SourceKind {
    /// As stored in the lease's `watch.source` and shown by the console.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ChangeStream => "stream",
            SourceKind::Capped => "capped",
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SourceKind {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "stream" => Ok(SourceKind::ChangeStream),
            "capped" => Ok(SourceKind::Capped),
            other => Err(format!(
                "unknown source {other:?}: expected \"stream\" or \"capped\""
            )),
        }
    }
}

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

/// The position token of a capped-collection resource: after the entry `id`.
pub fn entry_token(id: ObjectId) -> ResumeToken {
    ResumeToken::from_document(doc! { "_id": id })
}

/// The entry a capped-collection position token names: a document whose only field is
/// an ObjectId `_id`. Anything else (a change stream's token) is `None`.
pub fn token_entry(token: &ResumeToken) -> Option<ObjectId> {
    let document = token.as_document();
    match (document.len(), document.get("_id")) {
        (1, Some(Bson::ObjectId(id))) => Some(*id),
        _ => None,
    }
}

/// The time an ObjectId carries (its first four bytes, whole seconds) as a cluster
/// time, so a capped collection's positions and window compare like the oplog's.
pub fn entry_time(id: &ObjectId) -> ClusterTime {
    ClusterTime::new(u32::from_be_bytes(id_time_bytes(id)), 0)
}

fn id_time_bytes(id: &ObjectId) -> [u8; 4] {
    let bytes = id.bytes();
    [bytes[0], bytes[1], bytes[2], bytes[3]]
}

/// The smallest ObjectId of second `secs`: every entry whose `_id` was made in that
/// second or later is at or above it.
pub fn first_id_of(secs: u32) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&secs.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// An ObjectId made at `at` by the source `source` (5 bytes) with `counter` (low 24
/// bits), laid out as MongoDB's drivers lay theirs out.
pub fn object_id_at(at: DateTime<Utc>, source: [u8; 5], counter: u32) -> ObjectId {
    let secs = u32::try_from(at.timestamp().max(0)).unwrap_or(u32::MAX);
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&secs.to_be_bytes());
    bytes[4..9].copy_from_slice(&source);
    bytes[9..].copy_from_slice(&counter.to_be_bytes()[1..]);
    ObjectId::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn source_kinds_parse_their_names_only() {
        assert_eq!("capped".parse::<SourceKind>(), Ok(SourceKind::Capped));
        assert_eq!("stream".parse::<SourceKind>(), Ok(SourceKind::ChangeStream));
        assert!("Capped".parse::<SourceKind>().is_err());
    }
}
