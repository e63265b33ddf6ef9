//! Times as printed: dates as RFC 3339, cluster times as `{t, i, iso}`.

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};

use crate::model::ClusterTime;

/// A date as RFC 3339 with a numeric offset (`2024-05-01T12:00:00+00:00`), as every
/// printed date has been; chrono's own serde form would end in `Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc3339(pub DateTime<Utc>);

impl Rfc3339 {
    pub fn of(at: Option<DateTime<Utc>>) -> Option<Self> {
        at.map(Self)
    }
}

impl Serialize for Rfc3339 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_rfc3339())
    }
}

/// A cluster time: seconds, increment, and the seconds as a date (null past the
/// dates chrono can hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ClusterTimeJson {
    pub t: u32,
    pub i: u32,
    pub iso: Option<Rfc3339>,
}

impl ClusterTimeJson {
    pub fn of(time: ClusterTime) -> Self {
        Self {
            t: time.secs,
            i: time.inc,
            iso: time.to_datetime().map(Rfc3339),
        }
    }

    /// `None` (printed as null) for no time.
    pub fn of_optional(time: Option<ClusterTime>) -> Option<Self> {
        time.map(Self::of)
    }
}
