//! The checkpoint port: a bounded history of each resource's committed resume points,
//! in its own collection beside the leases (`<db>.checkpoints` on MongoDB).

use std::future::Future;

use super::{Listing, StoreResult, Tenure};
use crate::model::{Checkpoint, ResumeToken};

/// Checkpoints kept per resource unless configured otherwise.
pub const CHECKPOINTS_KEPT: u32 = 100;

pub trait CheckpointStore: Send + Sync {
    /// Records `token` as committed by `tenure`, at the server's clock, and keeps only
    /// the newest `kept` checkpoints of its resource. Called after a commit landed, at
    /// most once per interval: a checkpoint is a way back, not part of the commit.
    fn record_checkpoint(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        kept: u32,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// The newest `limit` checkpoints of `resource`, newest first, and the documents
    /// that are not readable checkpoints.
    fn checkpoints(
        &self,
        resource: &str,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Listing<Checkpoint>>> + Send;
}
