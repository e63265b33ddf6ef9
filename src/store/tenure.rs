//! Who holds which version of which lease: the filter of every write a holder makes.

use std::time::Duration;

use crate::model::{ChangeFailure, Invalidation, Lease, LeaseWrite, ResumeToken};

/// Who holds which version of which lease: the filter of commit and release.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenure {
    pub resource: String,
    pub listener: String,
    pub version: i64,
}

impl Tenure {
    pub fn of(lease: &Lease) -> Option<Self> {
        lease.holder.as_ref().map(|listener| Self {
            resource: lease.resource.clone(),
            listener: listener.clone(),
            version: lease.version,
        })
    }

    pub fn commit(&self, token: &ResumeToken, lease: Duration) -> LeaseWrite {
        LeaseWrite::commit(
            &self.resource,
            &self.listener,
            self.version,
            token,
            lease,
            false,
        )
    }

    /// A commit that also removes the lease's failure: the batch got past its change.
    pub fn commit_past_failure(&self, token: &ResumeToken, lease: Duration) -> LeaseWrite {
        LeaseWrite::commit(
            &self.resource,
            &self.listener,
            self.version,
            token,
            lease,
            true,
        )
    }

    pub fn record_failure(&self, failure: &ChangeFailure) -> LeaseWrite {
        LeaseWrite::record_failure(&self.resource, &self.listener, self.version, failure)
    }

    pub fn renew(&self, lease: Duration) -> LeaseWrite {
        LeaseWrite::renew(&self.resource, &self.listener, self.version, lease)
    }

    pub fn release(&self) -> LeaseWrite {
        LeaseWrite::release(&self.resource, &self.listener, self.version)
    }

    pub fn record_invalidation(&self, invalidation: &Invalidation) -> LeaseWrite {
        LeaseWrite::record_invalidation(&self.resource, &self.listener, self.version, invalidation)
    }
}
