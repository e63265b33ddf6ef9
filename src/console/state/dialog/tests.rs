use super::*;
use chrono::TimeZone;
use std::time::Duration;

fn target() -> Target {
    Target {
        resource: "shop.orders".into(),
        holder: Some("w1".into()),
        version: 4,
    }
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 3, 14, 0).unwrap()
}

fn to(request: Result<ActionRequest, String>) -> RewindTarget {
    match request {
        Ok(ActionRequest::Rewind { to, .. }) => to,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rewind_to_a_checkpoint_by_number_or_id() {
    assert_eq!(
        to(rewind_request(&target(), "#2", now())),
        RewindTarget::Checkpoint(CheckpointRef::Newest(2))
    );
    assert_eq!(
        to(rewind_request(
            &target(),
            "#6B04F6C4DBB1080187F4C803",
            now()
        )),
        RewindTarget::Checkpoint(CheckpointRef::Id("6b04f6c4dbb1080187f4c803".into()))
    );
    let wrong = rewind_request(&target(), "#0", now()).unwrap_err();
    assert!(wrong.contains("neither a checkpoint number"), "{wrong}");
}

#[test]
fn rewinds_go_back_by_a_duration_or_to_a_time() {
    assert_eq!(
        to(rewind_request(&target(), " 10m ", now())),
        RewindTarget::By(Duration::from_secs(600))
    );
    assert_eq!(
        to(rewind_request(&target(), "2026-11-22T03:00:00Z", now())),
        RewindTarget::Time(TimeSpec::Wall(
            Utc.with_ymd_and_hms(2026, 11, 22, 3, 0, 0).unwrap()
        ))
    );
    // A clock time is today's, in UTC as the console shows times...
    assert_eq!(
        to(rewind_request(&target(), "03:10", now())),
        RewindTarget::Time(TimeSpec::Wall(
            Utc.with_ymd_and_hms(2026, 11, 22, 3, 10, 0).unwrap()
        ))
    );
    // ...or yesterday's when today's is still to come.
    assert_eq!(
        to(rewind_request(&target(), "23:50:30", now())),
        RewindTarget::Time(TimeSpec::Wall(
            Utc.with_ymd_and_hms(2026, 11, 21, 23, 50, 30).unwrap()
        ))
    );
    assert_eq!(
        to(rewind_request(&target(), "1795442561:5", now())),
        RewindTarget::Time(TimeSpec::Cluster(crate::model::ClusterTime::new(
            1_795_442_561,
            5
        )))
    );
    let error = rewind_request(&target(), "soon", now()).unwrap_err();
    assert!(
        error.contains("10m") && error.contains("RFC 3339") && error.contains("03:10"),
        "{error}"
    );
    assert!(rewind_request(&target(), "0s", now()).is_err());
    assert!(rewind_request(&target(), "25:00", now()).is_err());
}

#[test]
fn a_handover_goes_to_the_chosen_standby_or_the_typed_name() {
    let standbys = vec!["w2".to_string(), "w3".to_string()];
    let to_of = |r: Result<ActionRequest, String>| match r {
        Ok(ActionRequest::Takeover { to, .. }) => to,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        to_of(handover_request(&target(), "", &standbys, Some(1))),
        Some("w3".into())
    );
    assert_eq!(
        to_of(handover_request(&target(), " w9 ", &standbys, Some(1))),
        Some("w9".into())
    );
    assert!(handover_request(&target(), "", &standbys, None)
        .unwrap_err()
        .contains("↑/↓"));
    assert_eq!(step_choice(None, 2, KeyCode::Down), Some(0));
    assert_eq!(step_choice(Some(1), 2, KeyCode::Down), Some(0));
    assert_eq!(step_choice(Some(0), 2, KeyCode::Up), Some(1));
    assert_eq!(step_choice(None, 0, KeyCode::Down), None);
}
