//! The largest values the command line accepts, and the parsers that enforce them.
//! Anything larger is a usage error (exit 2) before anything connects or writes: a
//! name the tool would store and then fail to show, or a duration past the calendar.

use std::time::Duration;

/// Names the tool writes into a lease or the audit log: `--operator`, `takeover --to`,
/// and resource names.
pub const NAME_MAX_CHARS: usize = 256;
/// `--reason`, stored in the audit record.
pub const REASON_MAX_CHARS: usize = 1_024;
/// `--connect-timeout` and `connect_timeout` in the config file.
pub const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(3_600);
/// A rebuild definition's `timeout`.
pub const REBUILD_TIMEOUT_MAX: Duration = Duration::from_secs(24 * 3_600);
/// `audit --limit`.
pub const AUDIT_LIMIT_MAX: u64 = 10_000;

fn bounded_text(what: &str, text: &str, max: usize) -> Result<String, String> {
    let count = text.chars().count();
    if text.trim().is_empty() {
        Err(format!("{what} is empty"))
    } else if count > max {
        Err(format!("{what} is {count} characters long; at most {max}"))
    } else {
        Ok(text.to_string())
    }
}

/// A listener, operator or resource name.
pub fn name(text: &str) -> Result<String, String> {
    bounded_text("the name", text, NAME_MAX_CHARS)
}

pub fn reason(text: &str) -> Result<String, String> {
    bounded_text("the reason", text, REASON_MAX_CHARS)
}

/// A duration no longer than `max`, in humantime's syntax (`30s`, `5m`, `2h`).
pub fn duration_at_most(text: &str, max: Duration) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration > max {
        return Err(format!(
            "{text} is longer than the most allowed, {}",
            humantime::format_duration(max)
        ));
    }
    Ok(duration)
}

pub fn connect_timeout(text: &str) -> Result<Duration, String> {
    let duration = duration_at_most(text, CONNECT_TIMEOUT_MAX)?;
    if duration.is_zero() {
        return Err("a connect timeout of zero never connects".into());
    }
    Ok(duration)
}

/// The demo's `--poison-after`: within a day, so a typo does not wait for ever.
pub fn poison_after(text: &str) -> Result<Duration, String> {
    duration_at_most(text, Duration::from_secs(24 * 3600))
}

pub fn rebuild_timeout(text: &str) -> Result<Duration, String> {
    duration_at_most(text, REBUILD_TIMEOUT_MAX)
}

/// The demo sandbox's `--oplog-size`: room for a few hundred changes at least, and
/// at most what a laptop keeps in memory without noticing.
pub const OPLOG_SIZE_MIN: u64 = 64 * 1024;
pub const OPLOG_SIZE_MAX: u64 = 1024 * 1024 * 1024;

/// The demo's `--events-size`: its capped event store holds at least a couple of
/// hundred of its order events, and at most what a laptop keeps in memory.
pub const EVENTS_SIZE_MIN: u64 = 16 * 1024;
pub const EVENTS_SIZE_MAX: u64 = 1024 * 1024 * 1024;

/// A size in bytes (`24MiB`, `512 KiB`, `1000000`) within the demo's bounds.
pub fn oplog_size(text: &str) -> Result<u64, String> {
    size_within(text, OPLOG_SIZE_MIN, OPLOG_SIZE_MAX)
}

/// The size of the demo's capped event store (`256KiB`, `4MiB`), within its bounds.
pub fn events_size(text: &str) -> Result<u64, String> {
    size_within(text, EVENTS_SIZE_MIN, EVENTS_SIZE_MAX)
}

fn size_within(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let size: bytesize::ByteSize = text
        .trim()
        .parse()
        .map_err(|e| format!("{text:?} is not a size such as 24MiB or 512KiB ({e})"))?;
    let bytes = size.as_u64();
    if !(min..=max).contains(&bytes) {
        return Err(format!(
            "{text} is outside {} to {}",
            bytesize::ByteSize(min).display().iec(),
            bytesize::ByteSize(max).display().iec()
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oplog_sizes_take_units_and_stay_within_bounds() {
        assert_eq!(oplog_size("24MiB"), Ok(24 * 1024 * 1024));
        assert_eq!(oplog_size("512 KiB"), Ok(512 * 1024));
        assert_eq!(oplog_size("100000"), Ok(100_000));
        let small = oplog_size("1KiB").unwrap_err();
        assert!(small.contains("outside 64.0 KiB to 1.0 GiB"), "{small}");
        assert!(oplog_size("99999999999GiB").is_err());
        let junk = oplog_size("lots").unwrap_err();
        assert!(junk.contains("not a size"), "{junk}");
        assert!(oplog_size("-5MiB").is_err());
        assert!(oplog_size("NaNMiB").is_err());
    }

    #[test]
    fn event_store_sizes_take_units_and_stay_within_bounds() {
        assert_eq!(events_size("256KiB"), Ok(256 * 1024));
        assert_eq!(events_size("16KiB"), Ok(16 * 1024));
        let small = events_size("8KiB").unwrap_err();
        assert!(small.contains("outside 16.0 KiB to 1.0 GiB"), "{small}");
        assert!(events_size("2GiB").is_err());
        assert!(events_size("some").unwrap_err().contains("not a size"));
    }

    #[test]
    fn names_are_bounded_and_not_empty() {
        assert_eq!(name("worker-1").as_deref(), Ok("worker-1"));
        assert!(name(&"x".repeat(NAME_MAX_CHARS)).is_ok());
        let long = name(&"é".repeat(NAME_MAX_CHARS + 1)).unwrap_err();
        assert!(long.contains("257 characters"), "{long}");
        assert!(name("  ").is_err());
        assert!(reason(&"r".repeat(70_000)).is_err());
    }

    #[test]
    fn durations_past_their_maximum_are_refused_not_wrapped() {
        assert_eq!(connect_timeout("5s"), Ok(Duration::from_secs(5)));
        assert!(connect_timeout("18446744073709551615s").is_err());
        assert!(connect_timeout("2h").is_err());
        assert!(connect_timeout("0s").is_err());
        assert!(rebuild_timeout("24h").is_ok());
        let refused = rebuild_timeout("1000000y").unwrap_err();
        assert!(refused.contains("1day"), "{refused}");
    }
}
