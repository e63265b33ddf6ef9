//! Recent samples for the oplog view's sparklines: window length, ops/s, and the
//! lag of the leases that lag most.

use std::collections::{HashMap, VecDeque};

use super::table::LeaseTable;

/// Samples kept per series (one per oplog read, so about two minutes).
pub const SAMPLES_KEPT: usize = 120;
/// Leases whose lag is sampled at each read: the ones that lag most.
pub const LAG_SERIES_KEPT: usize = 12;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    samples: VecDeque<u64>,
}

impl Series {
    pub fn push(&mut self, value: u64) {
        if self.samples.len() == SAMPLES_KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back(value);
    }

    pub fn values(&self) -> Vec<u64> {
        self.samples.iter().copied().collect()
    }

    pub fn last(&self) -> Option<u64> {
        self.samples.back().copied()
    }

    pub fn max(&self) -> u64 {
        self.samples.iter().copied().max().unwrap_or(0)
    }
}

#[derive(Debug, Clone, Default)]
pub struct OplogHistory {
    pub window_secs: Series,
    pub ops_per_sec: Series,
    /// Lag in seconds per resource, for the leases that lagged most at recent reads.
    lag: HashMap<String, (Series, u64)>,
    samples_taken: u64,
}

impl OplogHistory {
    /// Records one oplog read: window length, rate, and the lag of the worst leases.
    pub fn record(&mut self, window_secs: u64, ops_per_sec: Option<f64>, table: &LeaseTable) {
        self.samples_taken += 1;
        self.window_secs.push(window_secs);
        if let Some(rate) = ops_per_sec {
            self.ops_per_sec.push(rate.round().max(0.0) as u64);
        }
        let mut lagging: Vec<(&str, u64)> = table
            .entries()
            .filter_map(|e| {
                e.health
                    .lag
                    .map(|l| (e.lease.resource.as_str(), l.as_secs()))
            })
            .collect();
        if lagging.len() > LAG_SERIES_KEPT {
            lagging.select_nth_unstable_by(LAG_SERIES_KEPT - 1, |a, b| {
                b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0))
            });
            lagging.truncate(LAG_SERIES_KEPT);
        }
        let taken = self.samples_taken;
        for (resource, lag) in lagging {
            let (series, seen) = self.lag.entry(resource.to_string()).or_default();
            series.push(lag);
            *seen = taken;
        }
        self.lag
            .retain(|_, (_, seen)| taken - *seen < SAMPLES_KEPT as u64);
    }

    /// Lag series, worst current lag first, then by name.
    pub fn lag_series(&self) -> Vec<(&str, &Series)> {
        let mut series: Vec<(&str, &Series)> = self
            .lag
            .iter()
            .map(|(name, (series, _))| (name.as_str(), series))
            .collect();
        series.sort_by(|a, b| b.1.last().cmp(&a.1.last()).then_with(|| a.0.cmp(b.0)));
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_keep_the_latest_samples() {
        let mut series = Series::default();
        for v in 0..(SAMPLES_KEPT as u64 + 5) {
            series.push(v);
        }
        let values = series.values();
        assert_eq!(values.len(), SAMPLES_KEPT);
        assert_eq!(values[0], 5);
        assert_eq!(series.last(), Some(SAMPLES_KEPT as u64 + 4));
        assert_eq!(series.max(), SAMPLES_KEPT as u64 + 4);
    }
}
