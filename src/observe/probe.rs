//! What the views read about a cluster beyond the store ports: who it is, its members,
//! and how busy its oplog is.

use std::future::Future;

use crate::model::{ClusterTime, OplogWindow, Topology};
#[cfg(feature = "mongo")]
use crate::store::mongo::MongoStore;
#[cfg(feature = "sandbox")]
use crate::store::sandbox::SandboxStore;
use crate::store::{MembershipStore, OplogFigures, OpsStore, StoreResult};

/// Entries counted per oplog read at most; beyond that the rate shows as a lower bound
/// (a bound on the read's cost: the exporter reads every 15 s by default).
pub const OPS_COUNT_LIMIT: u32 = 1_000_000;

/// One replica-set member as the console's header shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberRow {
    pub name: String,
    pub state: String,
    pub healthy: bool,
    pub lag: crate::model::MemberLag,
}

pub trait ClusterProbe: OpsStore + OplogFigures + MembershipStore {
    /// Where the console is connected, safe to print (no password).
    fn describe(&self) -> String;

    fn members(&self) -> impl Future<Output = StoreResult<Vec<MemberRow>>> + Send;

    /// What the cluster is and whether its oplog can be read, with the window when it
    /// was read on the way (`None`: the sandbox, which the title already names).
    fn topology(
        &self,
    ) -> impl Future<Output = StoreResult<Option<(Topology, Option<OplogWindow>)>>> + Send;

    /// Oplog entries written after `after`, at most [`OPS_COUNT_LIMIT`].
    fn entries_after(&self, after: ClusterTime) -> impl Future<Output = StoreResult<u64>> + Send;
}

/// Oplog entries written per second between successive reads, from the entries after
/// the previous read's newest one: what the console's header and the exporter show.
#[derive(Debug, Default)]
pub struct WriteRate {
    previous: Option<(ClusterTime, tokio::time::Instant)>,
}

impl WriteRate {
    /// The rate since the previous sample, now that the newest entry is `last`; `None`
    /// on the first sample. Counting the entries is the one read.
    pub async fn sample<S: ClusterProbe>(
        &mut self,
        store: &S,
        last: ClusterTime,
    ) -> StoreResult<Option<f64>> {
        let rate = match self.previous {
            Some((before, at)) if last > before => {
                let entries = store.entries_after(before).await?;
                let elapsed = at.elapsed().as_secs_f64();
                (elapsed > 0.0).then(|| entries as f64 / elapsed)
            }
            Some(_) => Some(0.0),
            None => None,
        };
        self.previous = Some((last, tokio::time::Instant::now()));
        Ok(rate)
    }
}

#[cfg(feature = "sandbox")]
impl ClusterProbe for SandboxStore {
    fn describe(&self) -> String {
        "embedded sandbox (in-process)".into()
    }

    async fn members(&self) -> StoreResult<Vec<MemberRow>> {
        Ok(vec![MemberRow {
            name: "sandbox".into(),
            state: "PRIMARY".into(),
            healthy: true,
            lag: crate::model::MemberLag::Behind(std::time::Duration::ZERO),
        }])
    }

    async fn topology(&self) -> StoreResult<Option<(Topology, Option<OplogWindow>)>> {
        Ok(None)
    }

    async fn entries_after(&self, after: ClusterTime) -> StoreResult<u64> {
        Ok(SandboxStore::entries_after(
            self,
            after,
            u64::from(OPS_COUNT_LIMIT),
        ))
    }
}

#[cfg(feature = "mongo")]
impl ClusterProbe for MongoStore {
    fn describe(&self) -> String {
        self.redacted_uri()
    }

    async fn topology(&self) -> StoreResult<Option<(Topology, Option<OplogWindow>)>> {
        Ok(Some(MongoStore::topology(self).await?))
    }

    async fn members(&self) -> StoreResult<Vec<MemberRow>> {
        let members = MongoStore::members(self).await?;
        Ok(members
            .into_iter()
            .map(|m| MemberRow {
                name: m.name,
                state: m.state.as_str().to_string(),
                healthy: m.healthy,
                lag: m.lag,
            })
            .collect())
    }

    async fn entries_after(&self, after: ClusterTime) -> StoreResult<u64> {
        self.oplog_entries_after(after, OPS_COUNT_LIMIT).await
    }
}
