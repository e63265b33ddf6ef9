//! Which MongoDB servers this adapter can talk to, decided from what they report.
//!
//! The oldest server the adapter's commands work on is **MongoDB 5.0** (wire version
//! 13): the fenced member write reads and sets members with `$getField` and
//! `$setField` (new in 5.0); every lease write is a pipeline update (4.2) using
//! `$$NOW` (4.2); rebuilds end in `$merge` (4.2). The driver itself refuses servers
//! before 4.4 (wire version 9) during server selection; those are reported the same way.

use crate::store::StoreError;

/// Wire version of MongoDB 5.0, the oldest server the adapter supports.
pub const MIN_WIRE_VERSION: i32 = 13;
/// The release that introduced [`MIN_WIRE_VERSION`].
pub const MIN_RELEASE: &str = "5.0";

/// The MongoDB release that introduced a wire version (as the driver specifications
/// list them), for messages about servers too old to use.
pub fn release_of_wire(wire: i32) -> Option<&'static str> {
    Some(match wire {
        6 => "3.6",
        7 => "4.0",
        8 => "4.2",
        9 => "4.4",
        10 => "4.7",
        11 => "4.8",
        12 => "4.9",
        13 => "5.0",
        14 => "5.1",
        15 => "5.2",
        16 => "5.3",
        17 => "6.0",
        18 => "6.1",
        19 => "6.2",
        20 => "6.3",
        21 => "7.0",
        _ => return None,
    })
}

/// Wire version of MongoDB 7.0, the first release line with
/// `$changeStreamSplitLargeEvent` in every version.
const SPLIT_EVENTS_WIRE: i32 = 21;
/// Wire version of MongoDB 6.0, where the stage came with 6.0.9.
const SIX_OH_WIRE: i32 = 17;

/// Whether only the server's patch release (`buildInfo.version`) tells if it takes
/// `$changeStreamSplitLargeEvent`.
pub fn patch_decides_splitting(max_wire_version: i32) -> bool {
    max_wire_version == SIX_OH_WIRE
}

/// Whether the server takes `$changeStreamSplitLargeEvent` ("New in MongoDB 7.0 (and
/// 6.0.9)", the stage's documentation): every 7.0 and later, and 6.0 from 6.0.9 on,
/// which only `buildInfo.version` tells apart. The rapid releases 6.1 to 6.3 are not
/// named by the documentation and are taken as without it.
pub fn splits_large_events(max_wire_version: i32, version: Option<&str>) -> bool {
    if max_wire_version >= SPLIT_EVENTS_WIRE {
        return true;
    }
    if max_wire_version != SIX_OH_WIRE {
        return false;
    }
    let Some(version) = version else {
        return false;
    };
    let mut parts = version.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(Some(6)), Some(Some(0)), Some(Some(patch))) if patch >= 9
    )
}

/// "4.4.29 (wire version 12)" from what the server said; the release of the wire
/// version stands in when `buildInfo` could not be read.
fn found(wire: i32, version: Option<&str>) -> String {
    match (version, release_of_wire(wire)) {
        (Some(version), _) => format!("{version} (wire version {wire})"),
        (None, Some(release)) => format!("{release} (wire version {wire})"),
        (None, None) => format!("with wire version {wire}"),
    }
}

/// Refuses a server whose `hello.maxWireVersion` is below 5.0's, naming what was
/// found (`buildInfo.version` when known) and what is needed.
pub fn check(max_wire_version: i32, version: Option<&str>) -> Result<(), StoreError> {
    if max_wire_version >= MIN_WIRE_VERSION {
        return Ok(());
    }
    Err(StoreError::UnsupportedServer {
        found: found(max_wire_version, version),
        needed: format!("{MIN_RELEASE} (wire version {MIN_WIRE_VERSION})"),
    })
}

/// The driver's own refusal during server selection ("Server at H reports wire version
/// N, but this version of the MongoDB Rust driver requires at least 9 (MongoDB 4.4).")
/// as the same error, so every server too old reads alike.
pub fn from_driver_refusal(message: &str) -> Option<StoreError> {
    let rest = message.split("reports wire version ").nth(1)?;
    if !message.contains("driver requires at least") {
        return None;
    }
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let wire = digits.parse::<i32>().ok()?;
    check(wire, None).err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_oh_and_later_pass_older_servers_are_refused_by_name() {
        assert!(check(13, Some("5.0.0")).is_ok());
        assert!(check(17, Some("6.0.5")).is_ok());
        assert!(check(25, None).is_ok(), "newer than the table still passes");
        let error = check(12, Some("4.4.29")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "MongoDB 4.4.29 (wire version 12) is too old: streamward needs MongoDB 5.0 \
             (wire version 13) or newer ($getField/$setField in its fenced writes, pipeline \
             updates with $$NOW in every lease write); upgrade the server"
        );
        let unnamed = check(9, None).unwrap_err().to_string();
        assert!(
            unnamed.starts_with("MongoDB 4.4 (wire version 9) is too old"),
            "{unnamed}"
        );
    }

    #[test]
    fn the_split_stage_is_used_from_6_0_9_and_on_every_7_0_and_later() {
        assert!(!splits_large_events(17, Some("6.0.5")), "the server here");
        assert!(!splits_large_events(17, Some("6.0.8")));
        assert!(splits_large_events(17, Some("6.0.9")));
        assert!(splits_large_events(17, Some("6.0.19")));
        assert!(!splits_large_events(17, None), "6.0 of unknown patch");
        assert!(!splits_large_events(17, Some("6.0.x-rc1")));
        assert!(!splits_large_events(20, Some("6.3.2")), "rapid releases");
        assert!(!splits_large_events(13, Some("5.0.30")));
        assert!(splits_large_events(21, None));
        assert!(splits_large_events(25, Some("8.0.4")));
    }

    #[test]
    fn the_drivers_own_refusal_reads_the_same() {
        let message = "Server selection timeout: No available servers. Topology: { Type: \
                       ReplicaSetWithPrimary, Compatibility Error: Server at 127.0.0.1:4000 \
                       reports wire version 8, but this version of the MongoDB Rust driver \
                       requires at least 9 (MongoDB 4.4). }";
        let error = from_driver_refusal(message).expect("recognised");
        assert!(
            error
                .to_string()
                .starts_with("MongoDB 4.2 (wire version 8) is too old"),
            "{error}"
        );
        assert!(from_driver_refusal("Server selection timeout: No available servers").is_none());
    }
}
