use std::time::Duration;

use super::*;
use bson::Timestamp;

fn member(name: &str, health: f64, state: &str, secs: u32) -> Document {
    doc! {
        "name": name,
        "health": health,
        "stateStr": state,
        "optime": {
            "ts": Timestamp { time: secs, increment: u32::from(secs != 0) },
            "t": 1_i64,
        },
        "optimeDate": bson::DateTime::from_millis(i64::from(secs) * 1000),
    }
}

/// Each end of the window is its entry's `ts`; no entry, or one without a
/// timestamp, is the window unknown, with why.
/// Shaped as MongoDB 6.0.5 answers while one member of three is down: the down
/// member has `health: 0`, `stateStr: "(not reachable/healthy)"`, and an optime at
/// the epoch (`ts: Timestamp(0, 0)`, `optimeDate: 1970-01-01`).
#[test]
fn an_unreachable_member_has_no_lag_instead_of_decades() {
    let reply = doc! { "members": [
        member("a:1", 1.0, "PRIMARY", 1_795_000_000),
        member("b:2", 1.0, "SECONDARY", 1_794_999_997),
        member("c:3", 0.0, "(not reachable/healthy)", 0),
    ] };
    let members = parse_members(&reply).expect("parses");
    assert_eq!(members[0].lag, MemberLag::Behind(Duration::ZERO));
    assert_eq!(members[1].lag, MemberLag::Behind(Duration::from_secs(3)));
    assert!(!members[2].healthy);
    assert_eq!(members[2].lag, MemberLag::Unreachable, "{:?}", members[2]);
    assert_eq!(members[2].optime, None, "no optime rather than the epoch");
    assert_eq!(
        members[2].state,
        MemberState::Other("(not reachable/healthy)".into())
    );
}
