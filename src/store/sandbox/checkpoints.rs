//! Checkpoints in process: a bounded list per resource.

use super::{count, SandboxStore};
use crate::model::{Checkpoint, ResumeToken};
use crate::store::{CheckpointStore, Listing, StoreResult, Tenure};

impl CheckpointStore for SandboxStore {
    async fn record_checkpoint(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        kept: u32,
    ) -> StoreResult<()> {
        count(&self.inner.calls.record_checkpoint);
        let at = self.inner.clock.now();
        let mut state = self.lock();
        let kept_here = state
            .checkpoints
            .entry(tenure.resource.clone())
            .or_default();
        kept_here.push_back(Checkpoint {
            resource: tenure.resource.clone(),
            at,
            token: token.clone(),
            version: tenure.version,
            holder: tenure.listener.clone(),
        });
        while kept_here.len() > kept.max(1) as usize {
            kept_here.pop_front();
        }
        Ok(())
    }

    async fn checkpoints(&self, resource: &str, limit: u32) -> StoreResult<Listing<Checkpoint>> {
        let state = self.lock();
        let newest_first = state
            .checkpoints
            .get(resource)
            .map(|kept| kept.iter().rev().take(limit as usize).cloned().collect())
            .unwrap_or_default();
        Ok(Listing::complete(newest_first))
    }
}
