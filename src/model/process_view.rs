//! One process of a fleet as operators see it: its membership and what the balance
//! plan makes of it.

use chrono::{DateTime, Utc};

use super::{BalancePlan, Lease, Member, MemberListener};

/// One process as operators see it (`streamward processes`): its membership, the leases
/// its listeners hold, the resources it stands by for, and its fair share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessView {
    pub member: Member,
    pub live: bool,
    /// Its fair share among the live members; `None` once its membership expired.
    pub share: Option<u32>,
    /// Resources whose lease one of its listeners holds live.
    pub holds: Vec<String>,
    /// Resources it runs a listener for without holding the lease.
    pub standby: Vec<String>,
    /// Leases it holds that the plan asks it to hand over.
    pub handing_over: Vec<String>,
}

impl ProcessView {
    /// Every member in `members` (expired ones too, last), sorted by process id within
    /// each group, against `leases` at the server's `now`.
    pub fn all(members: &[Member], leases: &[Lease], now: DateTime<Utc>) -> Vec<Self> {
        let plan = BalancePlan::of(members, leases, now);
        let holder_of: std::collections::BTreeMap<&str, &str> = leases
            .iter()
            .filter_map(|l| l.live_holder(now).map(|h| (l.resource.as_str(), h)))
            .collect();
        let mut views: Vec<Self> = members
            .iter()
            .map(|member| {
                let (holds, standby): (Vec<&MemberListener>, Vec<&MemberListener>) =
                    member.listeners.iter().partition(|l| {
                        holder_of.get(l.resource.as_str()) == Some(&l.listener.as_str())
                    });
                let names = |ls: Vec<&MemberListener>| -> Vec<String> {
                    ls.into_iter().map(|l| l.resource.clone()).collect()
                };
                let holds = names(holds);
                let live = member.is_live(now);
                let handing_over = holds
                    .iter()
                    .filter(|r| {
                        live && plan.hands_over(r).is_some_and(|h| h.from == member.process)
                    })
                    .cloned()
                    .collect();
                Self {
                    member: member.clone(),
                    live,
                    share: live.then(|| plan.share(&member.process)).flatten(),
                    holds,
                    standby: names(standby),
                    handing_over,
                }
            })
            .collect();
        views.sort_by(|a, b| {
            b.live
                .cmp(&a.live)
                .then_with(|| a.member.process.cmp(&b.member.process))
        });
        views
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Lease;
    use chrono::{TimeDelta, TimeZone};

    fn member(process: &str, resources: &[&str], expires_in: i64, now: DateTime<Utc>) -> Member {
        Member {
            process: process.into(),
            host: "h".into(),
            pid: 1,
            started_at: now,
            renewed_at: now,
            expires_at: now + TimeDelta::seconds(expires_in),
            listeners: resources
                .iter()
                .map(|r| MemberListener {
                    resource: (*r).into(),
                    listener: format!("{process}/{r}"),
                })
                .collect(),
        }
    }

    fn held(resource: &str, holder: &str, now: DateTime<Utc>) -> Lease {
        let mut lease = Lease::vacant(resource);
        lease.holder = Some(holder.into());
        lease.expires_at = Some(now + TimeDelta::seconds(5));
        lease
    }

    #[test]
    fn each_process_shows_what_it_holds_stands_by_for_and_hands_over() {
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let members = [
            member("b", &["x", "y"], 5, now),
            member("a", &["x", "y"], 5, now),
            member("dead", &["x"], -1, now),
        ];
        let leases = [held("x", "a/x", now), held("y", "a/y", now)];
        let views = ProcessView::all(&members, &leases, now);
        let ids: Vec<&str> = views.iter().map(|v| v.member.process.as_str()).collect();
        assert_eq!(ids, ["a", "b", "dead"], "live ones first");
        assert_eq!(views[0].holds, ["x", "y"]);
        assert_eq!(views[0].share, Some(1));
        assert_eq!(views[0].handing_over.len(), 1, "{:?}", views[0]);
        assert_eq!(views[1].standby, ["x", "y"]);
        assert!(views[1].holds.is_empty());
        assert_eq!((views[2].live, views[2].share), (false, None));
    }
}
