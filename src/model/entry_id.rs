//! A capped collection's entries are ordered by their ObjectId `_id`: the time an id
//! carries, and the ids that bound a second.

use bson::oid::ObjectId;
use chrono::{DateTime, Utc};

use super::ClusterTime;

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
