//! The membership port: each process of a fleet keeps a document renewed on the
//! server's clock in a collection beside the leases (`<db>.processes` on MongoDB),
//! saying which listeners it runs (docs/protocol.md, "Membership and balancing").

use std::future::Future;
use std::time::Duration;

use super::{Listing, StoreResult};
use crate::model::{Announcement, Member};

/// Which membership documents a read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberScope {
    /// Those whose `expiresAt` is after the server's now.
    Live,
    /// Every document, expired ones too (for operators).
    All,
}

pub trait MembershipStore: Send + Sync {
    /// Joins or renews: upserts the process's document by `_id` alone, with
    /// `renewedAt = now` and `expiresAt = now + ttl` by the server's clock; `startedAt`
    /// is kept while the document is live and set to now when it is new or had
    /// expired. The listeners are replaced by the announced ones. Returns the document
    /// as written.
    fn announce(
        &self,
        announcement: &Announcement,
        ttl: Duration,
    ) -> impl Future<Output = StoreResult<Member>> + Send;

    /// The membership documents, sorted by `_id`, and those that cannot be read.
    fn list_members(
        &self,
        scope: MemberScope,
    ) -> impl Future<Output = StoreResult<Listing<Member>>> + Send;

    /// Leaves: deletes the process's own document (a graceful stop). Leaving twice, or
    /// after the document was removed, is not an error.
    fn leave(&self, process: &str) -> impl Future<Output = StoreResult<()>> + Send;
}
