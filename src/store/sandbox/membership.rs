//! Membership in process: one `Member` per process id, times by the sandbox's clock,
//! the same rules as the MongoDB pipeline (`store/mongo/membership.rs`).

use std::time::Duration;

use chrono::TimeDelta;

use super::{count, SandboxStore};
use crate::model::{Announcement, Member};
use crate::store::{Listing, MemberScope, MembershipStore, StoreResult};

impl MembershipStore for SandboxStore {
    async fn announce(&self, announcement: &Announcement, ttl: Duration) -> StoreResult<Member> {
        count(&self.inner.calls.membership);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        // Kept while the membership is live; a new or expired one starts now.
        let started_at = state
            .members
            .get(&announcement.process)
            .filter(|m| m.is_live(now))
            .map_or(now, |m| m.started_at);
        let mut listeners = announcement.listeners.clone();
        listeners.sort();
        let millis = TimeDelta::milliseconds(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let member = Member {
            process: announcement.process.clone(),
            host: announcement.host.clone(),
            pid: announcement.pid,
            started_at,
            renewed_at: now,
            expires_at: now + millis,
            listeners,
        };
        state
            .members
            .insert(announcement.process.clone(), member.clone());
        Ok(member)
    }

    async fn list_members(&self, scope: MemberScope) -> StoreResult<Listing<Member>> {
        count(&self.inner.calls.membership);
        let now = self.inner.clock.now();
        let state = self.lock();
        Ok(Listing::complete(
            state
                .members
                .values()
                .filter(|m| scope == MemberScope::All || m.is_live(now))
                .cloned()
                .collect(),
        ))
    }

    async fn leave(&self, process: &str) -> StoreResult<()> {
        count(&self.inner.calls.membership);
        self.lock().members.remove(process);
        Ok(())
    }
}
