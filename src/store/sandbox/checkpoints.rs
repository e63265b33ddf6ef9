//! Checkpoints in process: a bounded list per resource, newest first.

use super::{count, SandboxStore};
use crate::model::{Checkpoint, ResumeToken};
use crate::store::{CheckpointStore, Listing, StoreError, StoreResult, Tenure};

impl CheckpointStore for SandboxStore {
    async fn record_checkpoint(
        &self,
        tenure: &Tenure,
        token: &ResumeToken,
        kept: u32,
    ) -> StoreResult<()> {
        count(&self.inner.calls.record_checkpoint);
        if !self.inner.config.checkpoints_writable {
            return Err(StoreError::NotPermitted {
                action: format!("record a checkpoint of lease {}", tenure.resource),
                detail: "the sandbox was started without write access to its checkpoints".into(),
                hint: "insert, update and remove on streamward.checkpoints".into(),
            });
        }
        let at = self.inner.clock.now();
        let mut state = self.lock();
        state.next_checkpoint += 1;
        let id = format!("{:024x}", state.next_checkpoint);
        let kept_here = state
            .checkpoints
            .entry(tenure.resource.clone())
            .or_default();
        kept_here.push(Checkpoint {
            id,
            resource: tenure.resource.clone(),
            at,
            token: token.clone(),
            version: tenure.version,
            holder: tenure.listener.clone(),
        });
        kept_here.sort_by(Checkpoint::newest_first);
        kept_here.truncate(kept.max(1) as usize);
        Ok(())
    }

    async fn checkpoints(&self, resource: &str, limit: u32) -> StoreResult<Listing<Checkpoint>> {
        let state = self.lock();
        let newest_first = state
            .checkpoints
            .get(resource)
            .map(|kept| kept.iter().take(limit as usize).cloned().collect())
            .unwrap_or_default();
        Ok(Listing::complete(newest_first))
    }
}
