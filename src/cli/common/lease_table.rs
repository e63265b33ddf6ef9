//! Leases as a plain-text table: `demo --plain` and `leases --output table`.

use chrono::{DateTime, Utc};

use crate::engine::ListenerSnapshot;
use crate::model::text::{
    clip, escape_control, pad_to, relative_time, short_duration, CELL_MAX_CHARS,
};
use crate::model::{
    token_time_cell, HealthEvidence, HealthThresholds, Lease, LeaseHealth, OplogWindow, TimeToLoss,
};

fn loss_cell(loss: &TimeToLoss) -> String {
    match loss.filling_bound() {
        // The long form is a sentence; the cell says the bound and why.
        Some(_) => format!("{} (filling)", loss.compact()),
        None => loss.to_string(),
    }
}

/// One lease, as its table row shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRow {
    pub resource: String,
    pub kind: String,
    /// `streamward`, or `seed` for a lease written by another implementation.
    pub protocol: String,
    /// What the resource reads (`stream`, `capped`), `-` while no listener has said.
    pub source: String,
    pub holder: String,
    pub version: String,
    pub expires: String,
    pub token_time: String,
    pub lag: String,
    pub headroom: String,
    /// The time to loss, `-` where none was predicted.
    pub loss: String,
    pub status: String,
}

impl LeaseRow {
    pub fn new(
        lease: &Lease,
        window: Option<&OplogWindow>,
        now: DateTime<Utc>,
        thresholds: &HealthThresholds,
        evidence: &HealthEvidence<'_>,
    ) -> Self {
        let health = LeaseHealth::assess_with(lease, window, now, thresholds, evidence);
        let dash = || "-".to_string();
        Self {
            resource: escape_control(&lease.resource),
            kind: lease.kind.to_string(),
            protocol: lease.protocol.to_string(),
            source: source_cell(lease),
            holder: lease.live_holder(now).map_or_else(
                || match &lease.holder {
                    Some(h) => format!("({}, expired)", escape_control(h)),
                    None => dash(),
                },
                escape_control,
            ),
            version: lease.version.to_string(),
            expires: lease
                .expires_at
                .map_or_else(dash, |at| relative_time(at, now)),
            token_time: token_time_cell(lease, health.token_time, |time| {
                time.to_datetime()
                    .map_or_else(|| time.to_string(), |t| t.format("%H:%M:%S").to_string())
            }),
            lag: health.lag_text(),
            headroom: match (health.headroom, health.headroom_share) {
                (Some(h), Some(share)) => format!("{} ({:.0}%)", short_duration(h), share * 100.0),
                _ => dash(),
            },
            // The time to loss the status was judged from.
            loss: evidence.loss.map_or_else(dash, loss_cell),
            status: health.status.to_string(),
        }
    }

    fn cells(&self) -> [&str; 12] {
        [
            &self.resource,
            &self.kind,
            &self.protocol,
            &self.source,
            &self.holder,
            &self.version,
            &self.expires,
            &self.token_time,
            &self.lag,
            &self.headroom,
            &self.loss,
            &self.status,
        ]
    }
}

/// A lease's source as its cell shows it: `stream` or `capped` from what its listener
/// recorded in `watch`, `-` before any listener has.
pub fn source_cell(lease: &Lease) -> String {
    lease
        .source()
        .map_or_else(|| "-".to_string(), |s| s.to_string())
}

const LEASE_HEADERS: [&str; 12] = [
    "RESOURCE",
    "KIND",
    "PROTOCOL",
    "SOURCE",
    "HOLDER",
    "VERSION",
    "EXPIRES",
    "TOKEN TIME",
    "LAG",
    "HEADROOM",
    "LOSS IN",
    "STATUS",
];

/// Columns padded to their widest cell, two spaces apart; a cell longer than
/// [`CELL_MAX_CHARS`] is clipped with `…`.
pub fn render_columns<const N: usize>(headers: [&str; N], rows: &[[String; N]]) -> String {
    let rows: Vec<[String; N]> = rows
        .iter()
        .map(|row| row.each_ref().map(|cell| clip(cell, CELL_MAX_CHARS)))
        .collect();
    let mut widths = headers.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                text.push_str(cell);
            } else {
                text.push_str(&pad_to(cell, width));
                text.push_str("  ");
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

pub fn render_leases(rows: &[LeaseRow]) -> String {
    let cells: Vec<[String; 12]> = rows.iter().map(|r| r.cells().map(str::to_string)).collect();
    render_columns(LEASE_HEADERS, &cells)
}

/// Under the lease table, one line per lease whose change stream was closed: what
/// happened (database strings escaped) and how to recover.
pub fn render_invalidations(leases: &[Lease]) -> String {
    let mut out = String::new();
    for lease in leases {
        let Some(invalidated) = &lease.invalidated else {
            continue;
        };
        let resource = escape_control(&lease.resource);
        let at = invalidated
            .at
            .map(|t| format!(" at {t}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{resource}: INVALIDATED{at}: {}. To recover: {}\n",
            escape_control(&invalidated.reason),
            invalidated.recovery(&resource)
        ));
    }
    out
}

/// Under the lease table, one line per lease whose listeners fail on a change: which
/// change, how often, and the error (database strings escaped).
pub fn render_failures(leases: &[Lease]) -> String {
    leases
        .iter()
        .filter_map(|lease| {
            let failure = lease.failure.as_ref()?;
            Some(format!(
                "{}: fails on {}\n",
                escape_control(&lease.resource),
                failure.summary()
            ))
        })
        .collect()
}

/// In-process listeners: state, version, counters, last error.
pub fn render_listeners(listeners: &[ListenerSnapshot]) -> String {
    let rows: Vec<[String; 7]> = listeners
        .iter()
        .map(|l| {
            [
                escape_control(&l.listener_id),
                escape_control(&l.resource),
                l.state.to_string(),
                l.version.map_or_else(|| "-".into(), |v| v.to_string()),
                l.events.to_string(),
                format!("{:.1}", l.events_per_sec),
                l.last_error
                    .as_deref()
                    .map_or_else(|| "-".into(), escape_control),
            ]
        })
        .collect();
    render_columns(
        [
            "LISTENER",
            "RESOURCE",
            "STATE",
            "VERSION",
            "EVENTS",
            "EV/S",
            "LAST ERROR",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterTime, LockKind, ResumeToken, TokenKind};
    use chrono::TimeDelta;

    #[test]
    fn a_value_longer_than_any_format_width_is_clipped_not_a_panic() {
        let now = DateTime::from_timestamp(1_700_001_000, 0).unwrap();
        let mut lease = Lease::vacant("r".repeat(70_000));
        lease.holder = Some("h".repeat(70_000));
        let text = render_leases(&[LeaseRow::new(
            &lease,
            None,
            now,
            &HealthThresholds::default(),
            &HealthEvidence::default(),
        )]);
        let row = text.lines().nth(1).unwrap_or_default();
        assert!(
            row.chars().count() < 2 * CELL_MAX_CHARS + 100,
            "clipped: {} chars",
            row.chars().count()
        );
        assert!(row.contains('…'), "says it was cut: {row}");
    }

    #[test]
    fn a_row_shows_holder_lag_headroom_and_status() {
        let now = DateTime::from_timestamp(1_700_001_000, 0).unwrap();
        let mut lease = Lease::vacant("shop.orders");
        lease.holder = Some("host\x1b[31m-1".into());
        lease.version = 7;
        lease.expires_at = Some(now + TimeDelta::seconds(8));
        lease.resume_token = Some(ResumeToken::encode(
            ClusterTime::new(1_700_000_900, 1),
            TokenKind::Event,
            1,
        ));
        let window = OplogWindow::new(
            ClusterTime::new(1_700_000_000, 1),
            ClusterTime::new(1_700_001_000, 1),
        );
        let row = LeaseRow::new(
            &lease,
            Some(&window),
            now,
            &HealthThresholds::default(),
            &HealthEvidence::default(),
        );
        assert_eq!(
            row.holder, "host\\u{1b}[31m-1",
            "control characters never reach the terminal"
        );
        assert_eq!(row.expires, "in 8s");
        assert_eq!(row.lag, "1m40s");
        assert_eq!(row.headroom, "15m00s (90%)");
        assert_eq!(row.status, "BEHIND");
        let table = render_leases(&[row]);
        assert!(
            table.starts_with("RESOURCE     KIND    PROTOCOL    SOURCE  HOLDER"),
            "{table}"
        );
        assert!(
            table.contains("shop.orders  update  streamward  -       host"),
            "{table}"
        );
        let seed = Lease {
            protocol: crate::model::LeaseProtocol::Seed,
            ..lease
        };
        let row = LeaseRow::new(
            &seed,
            Some(&window),
            now,
            &HealthThresholds::default(),
            &HealthEvidence::default(),
        );
        assert!(
            render_leases(&[row]).contains("shop.orders  update  seed      -       host"),
            "a lease written by another implementation says so"
        );
    }

    #[test]
    fn an_invalidated_lease_reads_invalidated_with_a_note_that_says_what_to_do() {
        let now = DateTime::from_timestamp(1_700_001_000, 0).unwrap();
        let mut lease = Lease::vacant("shop.orders");
        lease.resume_token = Some(ResumeToken::encode(
            ClusterTime::new(1_700_000_990, 1),
            TokenKind::Event,
            1,
        ));
        let window = OplogWindow::new(
            ClusterTime::new(1_700_000_000, 1),
            ClusterTime::new(1_700_001_000, 1),
        );
        assert_eq!(render_invalidations(&[lease.clone()]), "", "nothing to say");
        lease.invalidated = Some(crate::model::Invalidation {
            at: Some(ClusterTime::new(1_700_000_995, 4)),
            reason: "shop.orders was renamed to shop.\x1b[2Jorders_old".into(),
        });
        let row = LeaseRow::new(
            &lease,
            Some(&window),
            now,
            &HealthThresholds::default(),
            &HealthEvidence::default(),
        );
        assert_eq!(row.status, "INVALIDATED");
        assert_eq!(
            render_invalidations(&[lease]),
            "shop.orders: INVALIDATED at 2023-11-14T22:29:55Z #4: shop.orders was renamed to \
             shop.\\u{1b}[2Jorders_old. To recover: recreate the collection or fix the \
             configuration if needed, then rewind shop.orders --to 1700000995:5 (right after \
             it, skipping nothing), reset shop.orders --to now --accept-skip, or rebuild\n"
        );
    }

    #[test]
    fn an_expired_bulk_lease_without_token_reads_clearly() {
        let now = Utc::now();
        let mut lease = Lease::vacant("pets");
        lease.kind = LockKind::Bulk;
        lease.holder = Some("op".into());
        lease.expires_at = Some(now - TimeDelta::seconds(90));
        let row = LeaseRow::new(
            &lease,
            None,
            now,
            &HealthThresholds::default(),
            &HealthEvidence::default(),
        );
        assert_eq!(row.holder, "(op, expired)");
        assert_eq!(row.expires, "1m30s ago");
        assert_eq!(row.token_time, "oldest");
        assert_eq!(row.status, "STUCK BULK");
    }

    #[test]
    fn a_capped_lease_says_so_and_shows_its_entry_time() {
        let now = DateTime::from_timestamp(1_700_001_000, 0).unwrap();
        let mut lease = Lease::vacant("shop.events");
        let entry = crate::model::object_id_at(
            DateTime::from_timestamp(1_700_000_990, 0).unwrap(),
            [1; 5],
            1,
        );
        lease.resume_token = Some(crate::model::entry_token(entry));
        lease.watch = Some(crate::model::WatchTarget {
            db: "shop".into(),
            coll: "events".into(),
            source: crate::model::SourceKind::Capped,
            ..Default::default()
        });
        // Its collection's window, as SourceWindows::for_lease gives it.
        let window = OplogWindow::new(
            ClusterTime::new(1_700_000_900, 0),
            ClusterTime::new(1_700_001_000, 0),
        );
        let row = LeaseRow::new(
            &lease,
            Some(&window),
            now,
            &HealthThresholds::default(),
            &HealthEvidence::default(),
        );
        assert_eq!(row.source, "capped");
        assert_eq!(row.lag, "10s");
        assert_eq!(row.headroom, "1m30s (90%)");
        let mut stream = lease.clone();
        stream.watch.as_mut().unwrap().source = crate::model::SourceKind::ChangeStream;
        let table = render_leases(&[
            row,
            LeaseRow::new(
                &stream,
                None,
                now,
                &HealthThresholds::default(),
                &HealthEvidence::default(),
            ),
        ]);
        assert!(
            table.contains("shop.events  update  streamward  capped"),
            "{table}"
        );
        assert!(
            table.contains("shop.events  update  streamward  stream"),
            "{table}"
        );
    }
}
