//! The demo's tag aggregate write: one document per tag whose members are the animals
//! carrying it, each member fenced by its source version. Only the demo's handler
//! needs it, so it is the demo's port; both stores offer it as a method of their own.

use std::future::Future;

use crate::store::mongo::MongoStore;
use crate::store::sandbox::SandboxStore;
use crate::store::{Namespace, StoreResult, WriteOutcome};

pub trait FencedMemberWrites: Send + Sync {
    /// Sets `members.<member> = {v: version, value}` in document `id` if the stored
    /// member's `v` is below `version` (source-version fence per member), and
    /// recomputes `counts` (value → number of members holding it) in the same write.
    fn fenced_member_upsert(
        &self,
        ns: &Namespace,
        id: &str,
        member: &str,
        version: i64,
        value: Option<&str>,
    ) -> impl Future<Output = StoreResult<WriteOutcome>> + Send;
}

impl FencedMemberWrites for SandboxStore {
    async fn fenced_member_upsert(
        &self,
        ns: &Namespace,
        id: &str,
        member: &str,
        version: i64,
        value: Option<&str>,
    ) -> StoreResult<WriteOutcome> {
        SandboxStore::fenced_member_upsert(self, ns, id, member, version, value).await
    }
}

impl FencedMemberWrites for MongoStore {
    async fn fenced_member_upsert(
        &self,
        ns: &Namespace,
        id: &str,
        member: &str,
        version: i64,
        value: Option<&str>,
    ) -> StoreResult<WriteOutcome> {
        MongoStore::fenced_member_upsert(self, ns, id, member, version, value).await
    }
}
