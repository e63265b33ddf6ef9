//! MongoDB cluster time: `Timestamp(seconds, increment)`, totally ordered.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A point in a replica set's history, as the oplog orders it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClusterTime {
    pub secs: u32,
    pub inc: u32,
}

impl ClusterTime {
    pub const fn new(secs: u32, inc: u32) -> Self {
        Self { secs, inc }
    }

    /// The 64-bit form used in resume tokens: seconds high, increment low.
    pub const fn as_u64(self) -> u64 {
        ((self.secs as u64) << 32) | self.inc as u64
    }

    pub const fn from_u64(value: u64) -> Self {
        Self {
            secs: (value >> 32) as u32,
            inc: value as u32,
        }
    }

    pub fn to_datetime(self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(i64::from(self.secs), 0)
    }

    /// Wall-clock distance `self - earlier`, by seconds (increments are not time).
    /// Zero when `earlier` is later.
    pub fn saturating_since(self, earlier: ClusterTime) -> Duration {
        Duration::from_secs(u64::from(self.secs.saturating_sub(earlier.secs)))
    }
}

impl From<bson::Timestamp> for ClusterTime {
    fn from(ts: bson::Timestamp) -> Self {
        Self::new(ts.time, ts.increment)
    }
}

impl From<ClusterTime> for bson::Timestamp {
    fn from(ct: ClusterTime) -> Self {
        bson::Timestamp {
            time: ct.secs,
            increment: ct.inc,
        }
    }
}

impl fmt::Display for ClusterTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_datetime() {
            Some(dt) => write!(f, "{} #{}", dt.format("%Y-%m-%dT%H:%M:%SZ"), self.inc),
            None => write!(f, "Timestamp({}, {})", self.secs, self.inc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_form_orders_like_the_pair() {
        let a = ClusterTime::new(10, u32::MAX);
        let b = ClusterTime::new(11, 0);
        assert!(a < b);
        assert!(a.as_u64() < b.as_u64());
        assert_eq!(ClusterTime::from_u64(a.as_u64()), a);
    }

    #[test]
    fn distances_saturate() {
        let a = ClusterTime::new(100, 3);
        let b = ClusterTime::new(40, 9);
        assert_eq!(a.saturating_since(b), Duration::from_secs(60));
        assert_eq!(b.saturating_since(a), Duration::ZERO);
    }
}
