//! The lease port (DESIGN §3): who may take a lease and at which version (`acquire.rs`),
//! and the holder's writes, its expiry, the reads and the watch (`tenure.rs`).

mod acquire;
mod tenure;

pub use acquire::*;
pub use tenure::*;

use std::time::Duration;

use crate::model::{ClusterTime, ResumeToken, TokenKind};
use crate::store::Tenure;

const LONG: Duration = Duration::from_secs(60);
/// Short enough that a check waits it out, long enough that the next call lands before it ends.
const SHORT: Duration = Duration::from_millis(400);

fn token(secs: u32) -> ResumeToken {
    ResumeToken::encode(ClusterTime::new(secs, 1), TokenKind::Event, 1)
}

fn tenure(resource: &str, listener: &str, version: i64) -> Tenure {
    Tenure {
        resource: resource.into(),
        listener: listener.into(),
        version,
    }
}
