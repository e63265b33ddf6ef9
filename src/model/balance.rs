//! Balancing (docs/protocol.md, "Membership and balancing"): from the live members,
//! the resources each runs and who holds which lease, each process's fair share, which
//! leases should be handed over and whether a process should leave a vacant lease to
//! another for a while. Pure: the same view gives every process the same plan.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::{Lease, Member};

/// Who holds a lease, as far as balancing is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    /// No live holder: released, expired or never taken.
    Vacant,
    /// A listener of this live member.
    Process(String),
    /// A live holder that is no listener of any live member (a listener run outside a
    /// fleet, or one of a member whose document expired first): counted for nobody,
    /// never asked to hand over.
    Outsider,
}

/// One resource's lease as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolding {
    pub resource: String,
    pub holding: Holding,
    /// When the current tenure began; the most recent is handed over first.
    pub acquired_at: Option<DateTime<Utc>>,
    /// The lease names a change its listeners keep failing on. Never handed over: it
    /// does no work until its retry, and a new holder would wait out the same back-off
    /// after one more acquire (docs/explanation/listener.md §13a).
    pub failing: bool,
}

/// A live member and the resources it can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runner {
    pub process: String,
    pub resources: BTreeSet<String>,
}

/// A lease its holder should release at its next batch boundary, and the member whose
/// shortfall it makes up (any member under its share that runs it may take it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BalancePlan {
    /// Each live member's fair share; they sum to the number of resources some live
    /// member runs.
    pub shares: BTreeMap<String, u32>,
    /// The leases each live member holds.
    pub held: BTreeMap<String, u32>,
    /// By resource: the leases to hand over.
    pub handovers: BTreeMap<String, Handover>,
    /// By resource: the live members that run it.
    runners: BTreeMap<String, BTreeSet<String>>,
}

impl BalancePlan {
    /// The plan for the live members among `members` and the leases in `leases`, at the
    /// server's `now`. A lease's holder (a listener id) belongs to the live member that
    /// lists it.
    pub fn of(members: &[Member], leases: &[Lease], now: DateTime<Utc>) -> Self {
        let live: Vec<&Member> = members.iter().filter(|m| m.is_live(now)).collect();
        let runners: Vec<Runner> = live
            .iter()
            .map(|m| Runner {
                process: m.process.clone(),
                resources: m.listeners.iter().map(|l| l.resource.clone()).collect(),
            })
            .collect();
        let by_listener: BTreeMap<&str, &str> = live
            .iter()
            .flat_map(|m| {
                m.listeners
                    .iter()
                    .map(|l| (l.listener.as_str(), m.process.as_str()))
            })
            .collect();
        let holdings: Vec<LeaseHolding> = leases
            .iter()
            .map(|lease| LeaseHolding {
                resource: lease.resource.clone(),
                holding: match lease.live_holder(now) {
                    None => Holding::Vacant,
                    Some(holder) => match by_listener.get(holder) {
                        Some(process) => Holding::Process((*process).to_string()),
                        None => Holding::Outsider,
                    },
                },
                acquired_at: lease.acquired_at,
                failing: lease.failure.is_some(),
            })
            .collect();
        Self::from_holdings(&runners, &holdings)
    }

    /// The plan for `runners` (live members) and `holdings` (leases of resources no
    /// runner runs are ignored; a resource without a lease is vacant).
    pub fn from_holdings(runners: &[Runner], holdings: &[LeaseHolding]) -> Self {
        let mut by_resource: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for runner in runners {
            for resource in &runner.resources {
                by_resource
                    .entry(resource.clone())
                    .or_default()
                    .insert(runner.process.clone());
            }
        }
        let mut held: BTreeMap<String, u32> =
            runners.iter().map(|r| (r.process.clone(), 0)).collect();
        // Per member, the leases it holds that balancing may move.
        let mut holds: BTreeMap<&str, Vec<&LeaseHolding>> = BTreeMap::new();
        for holding in holdings {
            if !by_resource.contains_key(&holding.resource) {
                continue;
            }
            if let Holding::Process(process) = &holding.holding {
                if let Some(count) = held.get_mut(process) {
                    *count += 1;
                    holds.entry(process.as_str()).or_default().push(holding);
                }
            }
        }
        let capacities: Vec<Capacity> = runners
            .iter()
            .map(|r| Capacity {
                process: r.process.clone(),
                can_run: u32::try_from(r.resources.len()).unwrap_or(u32::MAX),
                held: held.get(&r.process).copied().unwrap_or(0),
            })
            .collect();
        let total = u32::try_from(by_resource.len()).unwrap_or(u32::MAX);
        let shares = fair_shares(total, &capacities);

        let mut excess: BTreeMap<&str, u32> = BTreeMap::new();
        let mut deficit: BTreeMap<&str, u32> = BTreeMap::new();
        for (process, share) in &shares {
            let have = held.get(process).copied().unwrap_or(0);
            if have > *share {
                excess.insert(process, have - share);
            } else if have < *share {
                deficit.insert(process, share - have);
            }
        }
        let mut handovers = BTreeMap::new();
        // The member most over its share gives first (ties: the smaller id).
        while let Some((&from, _)) = excess
            .iter()
            .filter(|(_, e)| **e > 0)
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        {
            let mut candidates: Vec<&&LeaseHolding> = holds
                .get(from)
                .map(|h| h.iter().collect())
                .unwrap_or_default();
            // The most recently acquired first: it has done the least work here.
            candidates.sort_by(|a, b| {
                b.acquired_at
                    .cmp(&a.acquired_at)
                    .then_with(|| a.resource.cmp(&b.resource))
            });
            let taker = candidates.iter().find_map(|lease| {
                if lease.failing || handovers.contains_key(&lease.resource) {
                    return None;
                }
                let runs = by_resource.get(&lease.resource)?;
                deficit
                    .iter()
                    .filter(|(p, d)| **d > 0 && runs.contains(**p))
                    .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
                    .map(|(to, _)| (lease.resource.clone(), *to))
            });
            match taker {
                Some((resource, to)) => {
                    handovers.insert(
                        resource,
                        Handover {
                            from: from.to_string(),
                            to: to.to_string(),
                        },
                    );
                    if let Some(e) = excess.get_mut(from) {
                        *e -= 1;
                    }
                    if let Some(d) = deficit.get_mut(to) {
                        *d -= 1;
                    }
                }
                // Nothing it holds can go to anyone short of its share.
                None => {
                    excess.insert(from, 0);
                }
            }
        }
        Self {
            shares,
            held,
            handovers,
            runners: by_resource,
        }
    }

    pub fn share(&self, process: &str) -> Option<u32> {
        self.shares.get(process).copied()
    }

    pub fn held(&self, process: &str) -> u32 {
        self.held.get(process).copied().unwrap_or(0)
    }

    /// Whether the holder of `resource`'s lease should release it at its next batch
    /// boundary.
    pub fn hands_over(&self, resource: &str) -> Option<&Handover> {
        self.handovers.get(resource)
    }

    /// Whether `process`, holding `held_now` leases, should leave the vacant lease of
    /// `resource` to another member for a while: it has its share already and another
    /// live member that runs `resource` is short of its own. A process the plan does not
    /// know (not yet a member) never defers, so no lease is left without a taker.
    pub fn defers(&self, process: &str, resource: &str, held_now: u32) -> bool {
        let Some(share) = self.share(process) else {
            return false;
        };
        if held_now < share {
            return false;
        }
        self.runners.get(resource).is_some_and(|runs| {
            runs.iter()
                .any(|other| other != process && self.held(other) < self.share(other).unwrap_or(0))
        })
    }
}

/// One member as [`fair_shares`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    pub process: String,
    /// How many of the resources it can run.
    pub can_run: u32,
    /// How many leases it holds now.
    pub held: u32,
}

/// Splits `total` leases among `members` as evenly as
/// their capacities allow: a member that can run fewer than an even split gets all it
/// can run, the rest is split evenly among the others, and where the split leaves a
/// remainder the members holding the most now get one more (ties: the smaller id), so
/// a fleet already within one of even moves nothing. The shares sum to `total` when
/// the capacities cover it (they do when `total` counts the resources some member runs).
pub fn fair_shares(total: u32, members: &[Capacity]) -> BTreeMap<String, u32> {
    let mut shares = BTreeMap::new();
    let mut active: Vec<&Capacity> = members.iter().collect();
    let mut remaining = total;
    while !active.is_empty() {
        let n = u32::try_from(active.len()).unwrap_or(u32::MAX);
        let even = remaining / n;
        let (capped, open): (Vec<&Capacity>, Vec<&Capacity>) =
            active.iter().partition(|m| m.can_run <= even);
        if capped.is_empty() {
            let mut order = open;
            order.sort_by(|a, b| b.held.cmp(&a.held).then_with(|| a.process.cmp(&b.process)));
            let extra = remaining % n;
            for (i, member) in order.iter().enumerate() {
                let one_more = u32::from(u32::try_from(i).unwrap_or(u32::MAX) < extra);
                shares.insert(member.process.clone(), even + one_more);
            }
            break;
        }
        for member in &capped {
            shares.insert(member.process.clone(), member.can_run);
            remaining -= member.can_run;
        }
        active = open;
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn runner<S: AsRef<str>>(process: &str, resources: &[S]) -> Runner {
        Runner {
            process: process.into(),
            resources: resources.iter().map(|r| r.as_ref().to_string()).collect(),
        }
    }

    fn resources(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("r{i:02}")).collect()
    }

    fn held_by(resource: &str, process: Option<&str>, second: u32) -> LeaseHolding {
        LeaseHolding {
            resource: resource.into(),
            holding: process.map_or(Holding::Vacant, |p| Holding::Process(p.into())),
            acquired_at: Some(
                Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, second)
                    .single()
                    .unwrap_or_default(),
            ),
            failing: false,
        }
    }

    #[test]
    fn a_second_process_gets_half_and_the_first_hands_over_its_newest_leases() {
        let names = resources(12);
        let runners = [runner("a", &names), runner("b", &names)];
        let holdings: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, r)| held_by(r, Some("a"), i as u32))
            .collect();
        let plan = BalancePlan::from_holdings(&runners, &holdings);
        assert_eq!(plan.share("a"), Some(6));
        assert_eq!(plan.share("b"), Some(6));
        let handed: Vec<&str> = plan.handovers.keys().map(String::as_str).collect();
        assert_eq!(handed, ["r06", "r07", "r08", "r09", "r10", "r11"]);
        assert!(plan
            .handovers
            .values()
            .all(|h| h.from == "a" && h.to == "b"));
        // a has its share: it leaves a vacant lease to b, which does not.
        assert!(plan.defers("a", "r00", 6));
        assert!(!plan.defers("b", "r00", 0));
        // Once b is known to hold its share, nobody defers.
        let balanced: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, r)| held_by(r, Some(if i < 6 { "a" } else { "b" }), i as u32))
            .collect();
        let plan = BalancePlan::from_holdings(&runners, &balanced);
        assert!(plan.handovers.is_empty());
        assert!(!plan.defers("a", "r00", 6));
    }

    #[test]
    fn a_failing_lease_stays_and_the_holder_hands_over_another() {
        let names = resources(4);
        let runners = [runner("a", &names), runner("b", &names)];
        let mut holdings: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, r)| held_by(r, Some("a"), i as u32))
            .collect();
        // r03, the newest, would go first; it names a failing change.
        holdings[3].failing = true;
        let plan = BalancePlan::from_holdings(&runners, &holdings);
        let handed: Vec<&str> = plan.handovers.keys().map(String::as_str).collect();
        assert_eq!(handed, ["r01", "r02"]);
        // Nothing else a holds can go: it keeps more than its share, r03 stays.
        holdings[0].failing = true;
        holdings[1].failing = true;
        holdings[2].failing = true;
        let plan = BalancePlan::from_holdings(&runners, &holdings);
        assert!(plan.handovers.is_empty(), "{plan:?}");
    }

    #[test]
    fn an_odd_lease_stays_with_whoever_holds_it() {
        let names = resources(13);
        let runners = [runner("a", &names), runner("b", &names)];
        // b holds 7: b gets the larger share though a has the smaller id.
        let holdings: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, r)| held_by(r, Some(if i < 6 { "a" } else { "b" }), 0))
            .collect();
        let plan = BalancePlan::from_holdings(&runners, &holdings);
        assert_eq!((plan.share("a"), plan.share("b")), (Some(6), Some(7)));
        assert!(plan.handovers.is_empty());
    }

    #[test]
    fn vacant_and_outsider_leases_never_make_anyone_hand_over() {
        let names = resources(4);
        let runners = [runner("a", &names), runner("b", &names)];
        let holdings = vec![
            held_by("r00", Some("a"), 0),
            held_by("r01", Some("a"), 1),
            held_by("r02", None, 0),
            LeaseHolding {
                resource: "r03".into(),
                holding: Holding::Outsider,
                acquired_at: None,
                failing: false,
            },
        ];
        let plan = BalancePlan::from_holdings(&runners, &holdings);
        assert_eq!(plan.held("a"), 2);
        assert!(plan.handovers.is_empty(), "{plan:?}");
        // b is short: a leaves r02 to it.
        assert!(plan.defers("a", "r02", 2));
    }

    #[test]
    fn a_lease_nobody_short_can_run_is_kept_and_never_left_vacant() {
        // b runs only r00, which a holds along with everything else.
        let names = resources(4);
        let runners = [runner("a", &names), runner("b", &["r00"])];
        let holdings: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, r)| held_by(r, Some("a"), i as u32))
            .collect();
        let plan = BalancePlan::from_holdings(&runners, &holdings);
        assert_eq!((plan.share("a"), plan.share("b")), (Some(3), Some(1)));
        // Only r00 can go to b, however recent the others are.
        let handed: Vec<&str> = plan.handovers.keys().map(String::as_str).collect();
        assert_eq!(handed, ["r00"]);
        // a never leaves r03 for b: b cannot run it.
        assert!(!plan.defers("a", "r03", 3));
        assert!(plan.defers("a", "r00", 3));
    }

    #[test]
    fn a_process_the_plan_does_not_know_never_defers() {
        let names = resources(2);
        let plan = BalancePlan::from_holdings(&[runner("a", &names)], &[]);
        assert!(!plan.defers("z", "r00", 5));
        assert_eq!(plan.share("a"), Some(2));
    }

    #[test]
    fn the_plan_reads_holders_through_the_members_listeners() {
        use crate::model::{Member, MemberListener};
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let member = |process: &str, live: bool| Member {
            process: process.into(),
            host: "h".into(),
            pid: 1,
            started_at: now,
            renewed_at: now,
            expires_at: now + chrono::TimeDelta::seconds(if live { 5 } else { -1 }),
            listeners: vec![MemberListener {
                resource: "r".into(),
                listener: format!("{process}/r"),
            }],
        };
        let mut lease = Lease::vacant("r");
        lease.holder = Some("a/r".into());
        lease.expires_at = Some(now + chrono::TimeDelta::seconds(3));
        let plan = BalancePlan::of(
            &[member("a", true), member("b", true)],
            &[lease.clone()],
            now,
        );
        assert_eq!(plan.held("a"), 1);
        // a's document expired: its listener's lease is an outsider's, b is short.
        let plan = BalancePlan::of(&[member("a", false), member("b", true)], &[lease], now);
        assert_eq!(plan.shares.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(plan.held("b"), 0);
        assert!(plan.handovers.is_empty());
    }

    fn fleet() -> impl Strategy<Value = (Vec<Runner>, Vec<LeaseHolding>)> {
        (1usize..6, 0usize..20).prop_flat_map(|(members, n)| {
            let names = resources(n);
            let runs =
                proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), members);
            let holders = proptest::collection::vec(0..members + 2, n);
            (runs, holders).prop_map(move |(runs, holders)| {
                let runners: Vec<Runner> = runs
                    .iter()
                    .enumerate()
                    .map(|(m, can)| Runner {
                        process: format!("p{m}"),
                        resources: names
                            .iter()
                            .zip(can)
                            .filter(|(_, c)| **c)
                            .map(|(r, _)| r.clone())
                            .collect(),
                    })
                    .collect();
                let holdings = names
                    .iter()
                    .zip(&holders)
                    .enumerate()
                    .map(|(i, (r, h))| {
                        // A holder must run the resource; otherwise it is vacant.
                        let holding = match runners.get(*h) {
                            Some(x) if x.resources.contains(r) => {
                                Holding::Process(x.process.clone())
                            }
                            Some(_) => Holding::Vacant,
                            None if *h == members => Holding::Vacant,
                            None => Holding::Outsider,
                        };
                        held_by(r, None, i as u32).with(holding)
                    })
                    .collect();
                (runners, holdings)
            })
        })
    }

    impl LeaseHolding {
        fn with(mut self, holding: Holding) -> Self {
            self.holding = holding;
            self
        }
    }

    proptest! {
        #[test]
        fn shares_sum_to_the_runnable_leases_and_never_exceed_capacity((runners, holdings) in fleet()) {
            let plan = BalancePlan::from_holdings(&runners, &holdings);
            let runnable: BTreeSet<&String> = runners.iter().flat_map(|r| &r.resources).collect();
            prop_assert_eq!(plan.shares.values().sum::<u32>() as usize, runnable.len());
            for r in &runners {
                prop_assert!(plan.share(&r.process).unwrap_or(0) as usize <= r.resources.len());
            }
        }

        #[test]
        fn members_running_the_same_resources_get_shares_within_one((n, members, seed) in (0usize..30, 1usize..6, any::<u64>())) {
            let names = resources(n);
            let runners: Vec<Runner> = (0..members).map(|m| Runner {
                process: format!("p{m}"),
                resources: names.iter().cloned().collect(),
            }).collect();
            let holdings: Vec<LeaseHolding> = names.iter().enumerate().map(|(i, r)| {
                let who = (seed as usize).wrapping_add(i * 7) % (members + 1);
                held_by(r, None, i as u32).with(if who == members {
                    Holding::Vacant
                } else {
                    Holding::Process(format!("p{who}"))
                })
            }).collect();
            let plan = BalancePlan::from_holdings(&runners, &holdings);
            let max = plan.shares.values().max().copied().unwrap_or(0);
            let min = plan.shares.values().min().copied().unwrap_or(0);
            prop_assert!(max - min <= 1, "{:?}", plan.shares);
        }

        #[test]
        fn handovers_never_take_a_member_below_its_share_nor_a_taker_above((runners, holdings) in fleet()) {
            let plan = BalancePlan::from_holdings(&runners, &holdings);
            let mut after = plan.held.clone();
            for (resource, handover) in &plan.handovers {
                let lease = holdings.iter().find(|h| &h.resource == resource);
                prop_assert_eq!(lease.map(|l| &l.holding), Some(&Holding::Process(handover.from.clone())));
                let taker = runners.iter().find(|r| r.process == handover.to);
                prop_assert!(taker.is_some_and(|t| t.resources.contains(resource)));
                *after.entry(handover.from.clone()).or_default() -= 1;
                *after.entry(handover.to.clone()).or_default() += 1;
            }
            for (process, share) in &plan.shares {
                let before = plan.held(process);
                let now = after.get(process).copied().unwrap_or(0);
                if before >= *share {
                    prop_assert!(now >= *share, "{} fell below its share", process);
                } else {
                    prop_assert!(now <= *share, "{} was given past its share", process);
                }
            }
        }

        #[test]
        fn the_plan_does_not_depend_on_the_order_it_is_read_in((runners, holdings) in fleet()) {
            let plan = BalancePlan::from_holdings(&runners, &holdings);
            let mut r2 = runners.clone();
            r2.reverse();
            let mut h2 = holdings.clone();
            h2.reverse();
            prop_assert_eq!(plan, BalancePlan::from_holdings(&r2, &h2));
        }
    }
}
