//! The sandbox's server clock: the wall clock, or a virtual one for tests.

use chrono::{DateTime, TimeDelta, Utc};

/// What the sandbox reads as "the server's `$$NOW`".
#[derive(Debug, Clone)]
pub enum Clock {
    /// The machine's wall clock.
    System,
    /// `epoch` plus the time tokio has let pass since `start`. Under
    /// `tokio::time::pause()` time only moves when every task is idle, so a test's
    /// timeline is exact and fast.
    Virtual {
        epoch: DateTime<Utc>,
        start: tokio::time::Instant,
    },
}

impl Clock {
    /// A virtual clock starting at `epoch` now. Must be called inside a tokio runtime.
    pub fn virtual_from(epoch: DateTime<Utc>) -> Self {
        Clock::Virtual {
            epoch,
            start: tokio::time::Instant::now(),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::Virtual { epoch, start } => {
                let elapsed = tokio::time::Instant::now().saturating_duration_since(*start);
                *epoch + TimeDelta::from_std(elapsed).unwrap_or(TimeDelta::MAX)
            }
        }
    }
}
