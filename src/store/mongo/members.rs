//! The replica set's members for the console header and `streamward oplog`:
//! `replSetGetStatus`, each member's state and replication lag behind the primary.

use bson::{doc, Bson, Document};
use chrono::{DateTime, Utc};

use super::errors::with_one_retry;
use super::MongoStore;
use crate::model::{ClusterTime, MemberLag};
use crate::store::{StoreError, StoreResult};

/// One member of the replica set, as `replSetGetStatus` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaMember {
    pub name: String,
    pub state: MemberState,
    pub healthy: bool,
    pub optime: Option<ClusterTime>,
    /// How far this member's last applied write is behind the primary's, or why that
    /// is not known (unreachable, no optime).
    pub lag: MemberLag,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberState {
    Primary,
    Secondary,
    Arbiter,
    /// Any other `stateStr` (RECOVERING, STARTUP2, DOWN, …).
    Other(String),
}

impl MemberState {
    /// The server's `stateStr`.
    pub fn as_str(&self) -> &str {
        match self {
            MemberState::Primary => "PRIMARY",
            MemberState::Secondary => "SECONDARY",
            MemberState::Arbiter => "ARBITER",
            MemberState::Other(s) => s,
        }
    }
}

impl MongoStore {
    /// `replSetGetStatus`: the members with state and replication lag behind the primary.
    pub async fn members(&self) -> StoreResult<Vec<ReplicaMember>> {
        let action = "read the replica set status";
        let admin = self.client.database("admin");
        let reply = with_one_retry(self.timeout(), action, || {
            std::future::IntoFuture::into_future(admin.run_command(doc! { "replSetGetStatus": 1 }))
        })
        .await
        .map_err(|e| e.into_store_hinted(action, "the clusterMonitor role"))?;
        parse_members(&reply)
    }
}

/// The members of a `replSetGetStatus` reply, each with its replication lag behind the
/// primary. A member that is not healthy (unreachable: `health: 0`, its `optimeDate`
/// the epoch) has no lag to show, rather than decades of it.
pub(crate) fn parse_members(reply: &Document) -> StoreResult<Vec<ReplicaMember>> {
    let malformed = |detail: String| StoreError::Malformed {
        what: "replSetGetStatus reply".into(),
        detail,
    };
    let members = reply
        .get_array("members")
        .map_err(|e| malformed(format!("field members: {e}")))?;
    let mut parsed = Vec::with_capacity(members.len());
    for member in members {
        let Bson::Document(member) = member else {
            return Err(malformed(
                "field members: an entry is not a document".into(),
            ));
        };
        let name = member
            .get_str("name")
            .map_err(|e| malformed(format!("field members.name: {e}")))?
            .to_string();
        let state = match member.get_str("stateStr").unwrap_or("UNKNOWN") {
            "PRIMARY" => MemberState::Primary,
            "SECONDARY" => MemberState::Secondary,
            "ARBITER" => MemberState::Arbiter,
            other => MemberState::Other(other.to_string()),
        };
        let healthy = match member.get("health") {
            Some(Bson::Double(h)) => *h > 0.0,
            Some(Bson::Int32(h)) => *h > 0,
            Some(Bson::Int64(h)) => *h > 0,
            _ => false,
        };
        // An unreachable member's optime is `Timestamp(0, 0)`: none known, not 1970.
        let optime = member
            .get_document("optime")
            .ok()
            .and_then(|o| o.get_timestamp("ts").ok())
            .filter(|ts| ts.time != 0 || ts.increment != 0)
            .map(ClusterTime::from);
        parsed.push((
            ReplicaMember {
                name,
                state,
                healthy,
                optime,
                lag: MemberLag::Unknown,
            },
            member
                .get_datetime("optimeDate")
                .ok()
                .map(|d| d.to_chrono()),
        ));
    }
    let primary_date: Option<DateTime<Utc>> = parsed
        .iter()
        .find(|(m, _)| m.state == MemberState::Primary)
        .and_then(|(_, d)| *d);
    Ok(parsed
        .into_iter()
        .map(|(mut member, date)| {
            member.lag = MemberLag::of(member.healthy, date, primary_date);
            member
        })
        .collect())
}

#[cfg(test)]
mod tests;
