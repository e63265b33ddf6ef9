//! Every console view drawn on fixed data at 80×24 and 120×40 (insta snapshots),
//! a "too small" screen below that, no panic at any size, and database strings
//! drawn with their control characters escaped.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use streamward::console::data::{DataEvent, DataSource, MemberRow};
use streamward::console::state::{ConsoleSetup, ConsoleState, Mode};
use streamward::console::theme::Theme;
use streamward::console::view;
use streamward::engine::{ListenerSnapshot, ListenerState};
use streamward::model::{
    entry_token, object_id_at, AuditRecord, AuditState, ClusterTime, Deployment, Invalidation,
    Lease, LockKind, LossInput, LossTime, Member, MemberLag, MemberListener, Missing, OplogAccess,
    OplogStats, OplogWindow, Rate, ResumeToken, ShardOplog, SourceKind, TimeToLoss, TokenKind,
    Topology, WatchTarget,
};
use streamward::store::LossReading;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 3, 14, 0).unwrap()
}

fn secs(at: DateTime<Utc>) -> u32 {
    at.timestamp() as u32
}

fn ago(seconds: i64) -> DateTime<Utc> {
    now() - chrono::Duration::seconds(seconds)
}

fn lease(resource: &str, holder: Option<&str>, version: i64, token_age: u32) -> Lease {
    let mut lease = Lease::vacant(resource);
    lease.holder = holder.map(str::to_string);
    lease.version = version;
    lease.expires_at = Some(now() + chrono::Duration::seconds(8));
    lease.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(secs(now()) - token_age, 1),
        TokenKind::Event,
        version as u64,
    ));
    lease.acquired_at = Some(ago(40));
    lease.renewed_at = Some(ago(2));
    lease.committed_at = Some(ago(1));
    lease.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        pipeline: String::new(),
        ..Default::default()
    });
    lease
}

fn leases() -> Vec<Lease> {
    let mut stuck = lease("pets.rebuild", Some("ops@bastion"), 12, 300);
    stuck.kind = LockKind::Bulk;
    stuck.expires_at = Some(ago(120));
    stuck.note = Some("rebuild by ops@bastion".into());
    let mut expired = lease("shop.invoices", Some("app-2/771"), 4, 3);
    expired.expires_at = Some(ago(30));
    let mut oldest = lease("shop.carts", None, 0, 0);
    oldest.resume_token = None;
    // Its collection was renamed under the listener, which recorded it and gave the lease back.
    let mut closed = lease("shop.returns", None, 6, 600);
    closed.expires_at = Some(ago(540));
    closed.invalidated = Some(Invalidation {
        at: Some(ClusterTime::new(secs(now()) - 540, 4)),
        reason: "shop.returns was renamed to shop.returns_2025\u{1b}[1m".into(),
    });
    // An event store: a capped collection, its position the `_id` of an entry made 2 s ago.
    let mut events = lease("shop.events", Some("app-1/4242-events"), 4, 2);
    events.resume_token = Some(entry_token(object_id_at(ago(2), *b"app-1", 0x2a)));
    events.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "events".into(),
        source: SourceKind::Capped,
        ..Default::default()
    });
    vec![
        lease("shop.orders", Some("app-1/4242-orders"), 7, 1),
        lease("pet-aggregates", Some("app-1/4242-pets"), 3, 0),
        lease("shop.mailer", Some("app-3/90-mailer"), 2, 1500),
        lease("shop.audit-export", Some("app-2/771"), 9, 3400),
        lease("legacy.feed", Some("app-9/1"), 1, 4000),
        stuck,
        expired,
        oldest,
        closed,
        lease("evil\u{1b}[2Jname", Some("host\nforged line"), 5, 2),
        events,
    ]
}

fn window_at(offset: i64) -> DataEvent {
    DataEvent::Window {
        window: OplogWindow::new(
            ClusterTime::new(secs(now()) - 3600 + offset as u32, 1),
            ClusterTime::new(secs(now()), 1),
        ),
        server_now: now(),
        ops_per_sec: Some(40.0 + (offset % 7) as f64 * 5.0),
    }
}

fn listener(
    resource: &str,
    id: &str,
    state: ListenerState,
    version: Option<i64>,
) -> ListenerSnapshot {
    let mut s = ListenerSnapshot::new(resource, id);
    s.state = state;
    s.version = version;
    s.events = 1234;
    s.batches = 1200;
    s.last_batch_size = 1;
    s.events_per_sec = 12.5;
    s.commits = 1200;
    s
}

fn audit() -> Vec<AuditRecord> {
    let before = lease("shop.orders", Some("app-1/4242-orders"), 6, 30);
    let mut after = before.clone();
    after.holder = None;
    after.version = 7;
    // A rebuild killed between its record and its bulk swap: pending, judged against
    // the lease now (still at the version it found), its intended lease shown.
    let pets = lease("pet-aggregates", Some("app-1/4242-pets"), 3, 0);
    let mut bulk = pets.clone();
    bulk.holder = Some("rebuild:pet-aggregates:bob@ops".into());
    bulk.kind = LockKind::Bulk;
    bulk.version = 4;
    vec![
        AuditRecord {
            id: "a-0002".into(),
            operator: "bob@ops".into(),
            at: ago(30),
            action: "rebuild".into(),
            resource: "pet-aggregates".into(),
            state: AuditState::Pending,
            before: Some(pets),
            intended: Some(bulk),
            after: None,
            steps: Vec::new(),
            reason: None,
            outcome: "pending".into(),
            finished_at: None,
        },
        AuditRecord {
            id: "a-0001".into(),
            operator: "alice@bastion".into(),
            at: ago(90),
            action: "takeover".into(),
            resource: "shop.orders".into(),
            state: AuditState::Applied,
            before: Some(before),
            intended: Some(after.clone()),
            after: Some(after),
            steps: Vec::new(),
            reason: Some("holder hung\u{7} (pager 4411)".into()),
            outcome: "applied".into(),
            finished_at: Some(ago(89)),
        },
    ]
}

fn state(mode: Mode) -> ConsoleState {
    let mut state = ConsoleState::new(ConsoleSetup::new(
        mode,
        "mongodb://ops:****@db1.example:27017,db2.example:27017/?replicaSet=rs0",
        now(),
    ));
    for offset in 0..30 {
        state.apply(window_at(offset), now());
    }
    state.apply(DataEvent::LeaseSnapshot((leases()).into()), now());
    state.apply(window_at(30), now());
    // shop.events' collection holds the last ten minutes of entries.
    state.apply(
        DataEvent::CappedWindows(streamward::store::CappedReading {
            entries: std::collections::HashMap::from([(
                "shop.events".to_string(),
                streamward::store::CappedWindow {
                    oldest: object_id_at(ago(600), *b"app-1", 1),
                    newest: object_id_at(ago(1), *b"app-1", 0x30),
                },
            )]),
            unread: Default::default(),
        }),
        now(),
    );
    state.apply(
        DataEvent::Members(Ok(vec![
            MemberRow {
                name: "db1.example:27017".into(),
                state: "PRIMARY".into(),
                healthy: true,
                lag: MemberLag::Behind(Duration::ZERO),
            },
            MemberRow {
                name: "db2.example:27017".into(),
                state: "SECONDARY".into(),
                healthy: true,
                lag: MemberLag::Behind(Duration::from_secs(2)),
            },
            MemberRow {
                name: "db3.example:27017".into(),
                state: "(not reachable/healthy)".into(),
                healthy: false,
                lag: MemberLag::Unreachable,
            },
        ])),
        now(),
    );
    if mode.runs_listeners() {
        let mut failing = listener(
            "shop.mailer",
            "app-1/4242-mailer",
            ListenerState::HistoryLost,
            None,
        );
        failing.last_error = Some("history lost: resume point fell off the oplog".into());
        let mut closed = listener(
            "shop.returns",
            "app-4/12-returns",
            ListenerState::Invalidated,
            None,
        );
        closed.last_error = Some(
            "change stream closed by the server (invalidate): shop.returns was renamed to shop.returns_2025"
                .into(),
        );
        state.apply(
            DataEvent::Listeners(vec![
                listener(
                    "shop.orders",
                    "app-1/4242-orders",
                    ListenerState::Streaming,
                    Some(7),
                ),
                listener(
                    "shop.orders",
                    "app-1/4243-orders",
                    ListenerState::Standby,
                    None,
                ),
                listener(
                    "pet-aggregates",
                    "app-1/4242-pets",
                    ListenerState::Committing,
                    Some(3),
                ),
                failing,
                closed,
            ]),
            now(),
        );
    }
    state.apply(DataEvent::Audit((audit()).into()), now());
    state.apply(
        DataEvent::TimeToLoss {
            read_at: now(),
            reading: losses(),
        },
        now(),
    );
    state
}

/// Two checkpoints of `resource`, the newer first.
fn checkpoints(resource: &str) -> Vec<streamward::model::Checkpoint> {
    [(60, 3), (3660, 2)]
        .into_iter()
        .map(|(ago_secs, version)| streamward::model::Checkpoint {
            id: format!("{version:024x}"),
            resource: resource.into(),
            at: ago(ago_secs),
            token: ResumeToken::encode(
                ClusterTime::new(secs(now()) - ago_secs as u32, 1),
                TokenKind::Event,
                0,
            ),
            version,
            holder: format!("app-1/42{version}-pets"),
        })
        .collect()
}

/// Predictions for some of the leases: one soon (a warning), one far, one never, one
/// lost, one with missing inputs; the rest have none.
fn losses() -> LossReading {
    let minutes = |m: u64| LossTime::In(Duration::from_secs(m * 60));
    let predicted = [
        ("shop.mailer", minutes(12), Some(minutes(31)), vec![]),
        (
            "shop.orders",
            LossTime::Never,
            Some(LossTime::Never),
            vec![],
        ),
        (
            "pet-aggregates",
            minutes(95),
            None,
            vec![Missing {
                input: LossInput::Progress,
                effect: "the earliest takes the listener as stalled; it may be moving, so there \
                         is no latest"
                    .into(),
            }],
        ),
        (
            "legacy.feed",
            LossTime::AlreadyLost,
            Some(LossTime::AlreadyLost),
            vec![],
        ),
    ]
    .into_iter()
    .map(|(resource, earliest, latest, missing)| {
        (
            resource.to_string(),
            TimeToLoss {
                earliest,
                latest,
                filling: false,
                missing,
            },
        )
    })
    .collect();
    LossReading {
        predicted,
        unknown: None,
        unpredicted: Default::default(),
        pending: Default::default(),
        pending_unknown: Default::default(),
        oplog: Some(OplogStats {
            size_bytes: 50 * 1024 * 1024 - 123_456,
            max_bytes: 50 * 1024 * 1024,
            entries: 180_000,
            written_bytes: Some(9_000_000_000),
            checkpoint_interval: Some(Duration::from_secs(60)),
            min_retention: Some(Duration::ZERO),
            largest_entry_bytes: None,
            truncation_bytes: None,
        }),
        fill_rate: Some(Rate {
            low: 12_000.0,
            high: 18_500.0,
        }),
    }
}

fn press(state: &mut ConsoleState, code: KeyCode) {
    state.on_key(KeyEvent::new(code, KeyModifiers::NONE));
}

fn render(state: &mut ConsoleState, width: u16, height: u16) -> Terminal<TestBackend> {
    state.on_resize(width, height);
    let theme = Theme::by_name("default", None).expect("built-in theme");
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    terminal
        .draw(|frame| view::draw(frame, state, &theme))
        .expect("draw");
    terminal
}

fn screen(state: &mut ConsoleState, width: u16, height: u16) -> String {
    render(state, width, height).backend().to_string()
}

fn snapshot_both_sizes(name: &str, prepare: impl Fn(&mut ConsoleState)) {
    for (width, height) in [(80, 24), (120, 40)] {
        let mut state = state(Mode::Demo);
        prepare(&mut state);
        insta::assert_snapshot!(
            format!("{name}_{width}x{height}"),
            screen(&mut state, width, height)
        );
    }
}

#[test]
fn leases_view() {
    snapshot_both_sizes("leases", |_| {});
}

/// A resource split into three partitions, with the leases of its earlier split in
/// two still there: all five shown together, each partition under the row before.
#[test]
fn leases_view_groups_partitions_under_their_resource() {
    snapshot_both_sizes("leases_partitions", |state| {
        let mut all = leases();
        for (id, holder, version, age) in [
            ("orders-projection#1/3", Some("app-2/812-p1"), 3, 2),
            ("orders-projection#0/2", None, 9, 400),
            ("orders-projection#0/3", Some("app-1/4242-p0"), 2, 1),
            ("orders-projection#2/3", Some("app-3/97-p2"), 2, 1),
            ("orders-projection#1/2", None, 7, 420),
        ] {
            let mut partition = lease(id, holder, version, age);
            if holder.is_none() {
                partition.expires_at = Some(ago(300));
            }
            if let Some((_, p)) = streamward::model::Partition::parse_lease_id(id) {
                if let Some(watch) = partition.watch.as_mut() {
                    watch.pipeline = p.pipeline_text();
                }
            }
            all.push(partition);
        }
        state.apply(DataEvent::LeaseSnapshot(all.into()), now());
    });
}

/// The lease collection dropped under the console: the leases it listed are named as
/// gone (the protocol never deletes one), not "no leases yet".
#[test]
fn leases_that_vanish_are_named_as_gone() {
    snapshot_both_sizes("leases_vanished", |state| {
        state.apply(DataEvent::LeaseSnapshot(Vec::new().into()), now());
    });
    // One deleted while the others stay: flagged in the title, the others shown.
    let mut state = state(Mode::Demo);
    let first = leases()[0].resource.clone();
    state.apply(DataEvent::LeaseDeleted(first.clone()), now());
    let shown = screen(&mut state, 120, 40);
    assert!(shown.contains("1 GONE"), "{shown}");
    assert_eq!(state.leases.vanished().keys().collect::<Vec<_>>(), [&first]);
    // Created anew at a lower version: still gone; back at its version: no longer.
    let mut back = leases()[0].clone();
    let gone_at = back.version;
    back.version = 0;
    state.apply(DataEvent::LeaseChanged(Box::new(back.clone())), now());
    assert!(!state.leases.vanished().is_empty());
    back.version = gone_at;
    state.apply(DataEvent::LeaseChanged(Box::new(back)), now());
    assert!(state.leases.vanished().is_empty());
}

#[test]
fn leases_view_filtered_frozen_and_sorted() {
    snapshot_both_sizes("leases_filtered", |state| {
        press(state, KeyCode::Char('/'));
        for c in "shop".chars() {
            press(state, KeyCode::Char(c));
        }
        press(state, KeyCode::Enter);
        press(state, KeyCode::Char('f'));
        state.execute_command_line("sort lag desc");
        press(state, KeyCode::Char('j'));
    });
}

#[test]
fn lease_detail_view() {
    snapshot_both_sizes("detail", |state| {
        state.execute_command_line("sort resource");
        for _ in 0..3 {
            press(state, KeyCode::Char('j'));
        }
        press(state, KeyCode::Enter);
    });
}

/// A lease on a capped collection: what it reads, and its position as the `_id` of
/// the entry it follows and that entry's time, not a change stream's token.
#[test]
fn detail_of_a_capped_lease_names_its_collection_and_entry() {
    snapshot_both_sizes("detail_capped", |state| {
        state.execute_command_line("filter shop.events");
        press(state, KeyCode::Enter);
        press(state, KeyCode::Enter);
    });
    let mut state = state(Mode::Demo);
    state.execute_command_line("filter shop.events");
    press(&mut state, KeyCode::Enter);
    press(&mut state, KeyCode::Enter);
    let text = screen(&mut state, 120, 40);
    let id = object_id_at(ago(2), *b"app-1", 0x2a).to_hex();
    assert!(
        text.contains("source      capped collection shop.events"),
        "{text}"
    );
    assert!(
        text.contains(&format!("position    after {id} (03:13:58)")),
        "{text}"
    );
    assert!(text.contains("{_id: ObjectId("), "{text}");
    // The leases table says which source each lease reads, where it has the room.
    let mut state = state_with_wide_table();
    let table = screen(&mut state, 160, 40);
    let row = table
        .lines()
        .find(|l| l.contains("shop.events"))
        .expect("its row");
    assert!(row.contains(" capped "), "{row}");
    let other = table
        .lines()
        .find(|l| l.contains("shop.orders"))
        .expect("its row");
    assert!(other.contains(" stream "), "{other}");
}

fn state_with_wide_table() -> ConsoleState {
    state(Mode::Demo)
}

/// `/capped` keeps the leases that read a capped collection, `:sort source` groups them.
#[test]
fn the_filter_and_the_sort_know_the_source() {
    let mut state = state(Mode::Demo);
    state.execute_command_line("filter capped");
    assert_eq!(state.leases.shown(), 1);
    assert_eq!(
        state.leases.selected().map(|e| e.lease.resource.as_str()),
        Some("shop.events")
    );
    let mut state = self::state(Mode::Demo);
    state.execute_command_line("sort source");
    let first = state
        .leases
        .rows(0, 1)
        .next()
        .map(|e| e.lease.resource.clone());
    assert_eq!(
        first.as_deref(),
        Some("shop.events"),
        "capped sorts before stream"
    );
}

#[test]
fn detail_of_an_invalidated_lease_says_what_happened_and_how_to_recover() {
    snapshot_both_sizes("detail_invalidated", |state| {
        state.execute_command_line("filter shop.returns");
        press(state, KeyCode::Enter);
        press(state, KeyCode::Enter);
    });
}

/// A lease written by another implementation says so in its detail; streamward's own
/// leases show no protocol line.
#[test]
fn detail_of_a_seed_lease_says_it_was_written_by_another_implementation() {
    let mut state = state(Mode::Demo);
    let seeded: Vec<Lease> = leases()
        .into_iter()
        .map(|lease| match lease.resource.as_str() {
            "shop.invoices" => Lease {
                protocol: streamward::model::LeaseProtocol::Seed,
                ..lease
            },
            _ => lease,
        })
        .collect();
    state.apply(DataEvent::LeaseSnapshot(seeded.into()), now());
    state.execute_command_line("filter shop.invoices");
    press(&mut state, KeyCode::Enter);
    press(&mut state, KeyCode::Enter);
    let text = screen(&mut state, 120, 40);
    assert!(
        text.contains("protocol    seed: written by another implementation"),
        "{text}"
    );
    let mut own = self::state(Mode::Demo);
    own.execute_command_line("filter shop.invoices");
    press(&mut own, KeyCode::Enter);
    press(&mut own, KeyCode::Enter);
    assert!(!screen(&mut own, 120, 40).contains("protocol    seed"));
}

#[test]
fn detail_of_an_unclaimed_lease_says_no_listener_is_running() {
    snapshot_both_sizes("detail_unclaimed", |state| {
        state.execute_command_line("filter shop.invoices");
        press(state, KeyCode::Enter);
        press(state, KeyCode::Enter);
    });
}

/// The time to loss in the detail view, counted down since it was predicted: the
/// range, and each input that was missing with what it did to the estimate; and why
/// there is none where the oplog's figures cannot be read.
#[test]
fn detail_of_a_lease_says_when_its_history_may_be_lost() {
    snapshot_both_sizes("detail_time_to_loss", |state| {
        state.apply(
            DataEvent::Checkpoints {
                resource: "pet-aggregates".into(),
                read: Ok(checkpoints("pet-aggregates").into()),
            },
            now(),
        );
        state.execute_command_line("filter pet-aggregates");
        press(state, KeyCode::Enter);
        press(state, KeyCode::Enter);
    });
    let mut state = state(Mode::Attached);
    state.apply(
        DataEvent::TimeToLoss {
            read_at: now(),
            reading: LossReading {
                unknown: Some(
                    "not permitted to read the oplog's statistics: needs the clusterMonitor role"
                        .into(),
                ),
                ..LossReading::default()
            },
        },
        now(),
    );
    state.execute_command_line("filter shop.mailer");
    press(&mut state, KeyCode::Enter);
    press(&mut state, KeyCode::Enter);
    let text = screen(&mut state, 120, 40);
    assert!(
        text.contains("loss in     unknown: not permitted to read the oplog's"),
        "{text}"
    );
    assert!(text.contains("clusterMonitor role"), "{text}");
}

/// Through mongos the oplog view lists every shard with its window, names the shard
/// that limits the window, points out a quiet one and says why one was not read.
#[test]
fn the_oplog_view_lists_the_shards_with_their_windows() {
    let at = |ago: u32| ClusterTime::new(secs(now()) - ago, 1);
    let shard = |name: &str, window: Result<OplogWindow, String>| ShardOplog {
        name: name.into(),
        hosts: format!("{name}/db-{name}:27018"),
        window,
    };
    let topology = Topology {
        deployment: Deployment::Sharded,
        oplog: OplogAccess::NotReadable("shard c (c/db-c:27018): cannot reach the shard".into()),
        shards: vec![
            shard("a", Ok(OplogWindow::new(at(7200), at(1)))),
            shard("b", Ok(OplogWindow::new(at(3600), at(95)))),
            shard(
                "c",
                Err("cannot reach the shard: connection refused".into()),
            ),
        ],
    };
    for (width, height) in [(80, 24), (120, 40)] {
        let mut state = state(Mode::Attached);
        state.apply(DataEvent::Topology(topology.clone()), now());
        press(&mut state, KeyCode::Char('2'));
        let shown = screen(&mut state, width, height);
        insta::assert_snapshot!(format!("oplog_shards_{width}x{height}"), shown);
        assert!(
            shown.contains("shards (the window is what every shard still holds)"),
            "{shown}"
        );
        // Each shard's row and the note lines under it, up to the next shard.
        let rows = |name: &str| {
            let lines: Vec<&str> = shown.lines().collect();
            let start = lines
                .iter()
                .position(|l| l.contains(&format!("│{name}  ")))
                .unwrap_or(lines.len());
            lines[start..]
                .iter()
                .take(3)
                .copied()
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(rows("a").starts_with("\"│a   1h59m"), "{shown}");
        assert!(rows("b").contains("limits the window"), "{shown}");
        assert!(
            rows("b").contains("quiet: 94s behind the newest shard"),
            "{shown}"
        );
        assert!(
            rows("c").contains("not read: cannot reach the shard"),
            "{shown}"
        );
    }
}

/// Attached through a mongos: the title names the deployment, the oplog line says what
/// follows instead of a window, and the lease table still lists the leases.
#[test]
fn the_header_names_the_topology_and_what_follows() {
    for (width, height) in [(80, 24), (120, 40)] {
        let mut state = state(Mode::Attached);
        state.apply(
            DataEvent::Topology(Topology::new(
                Deployment::Sharded,
                OplogAccess::NotReadable(
                    "the local database is not readable through mongos".into(),
                ),
            )),
            now(),
        );
        insta::assert_snapshot!(
            format!("topology_sharded_{width}x{height}"),
            screen(&mut state, width, height)
        );
        // The oplog view says what follows, whole.
        press(&mut state, KeyCode::Char('2'));
        let shown = screen(&mut state, width, height).replace(['"', '│'], "");
        let flat: String = shown.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "resets are refused, and a rewind or undo to a named point goes unchecked against the window"
            ),
            "{shown}"
        );
    }
    let mut state = state(Mode::Attached);
    state.apply(
        DataEvent::Topology(Topology::new(
            Deployment::ReplicaSet { name: "rs0".into() },
            OplogAccess::Readable,
        )),
        now(),
    );
    let shown = screen(&mut state, 120, 40);
    assert!(
        shown.contains("ATTACHED   replica set rs0  mongodb://"),
        "{shown}"
    );
    assert!(shown.contains("window 59m30s"), "the window stays: {shown}");
}

#[test]
fn oplog_view() {
    snapshot_both_sizes("oplog", |state| press(state, KeyCode::Char('2')));
}

#[test]
fn listeners_view() {
    snapshot_both_sizes("listeners", |state| press(state, KeyCode::Char('3')));
}

#[test]
fn listeners_view_when_attached() {
    let mut state = state(Mode::Attached);
    press(&mut state, KeyCode::Char('3'));
    insta::assert_snapshot!(screen(&mut state, 80, 24));
}

/// Two live processes of a fleet and a crashed one, over the fixed leases: app-1
/// holds three and stands by for the mailer, app-3 holds the mailer and stands by for
/// two of app-1's; app-2 crashed (its lease an outsider's).
fn fleet_processes() -> DataEvent {
    let member = |process: &str, expires_in: i64, listeners: &[(&str, &str)]| Member {
        process: process.into(),
        host: format!("{process}.example"),
        pid: 4242,
        started_at: ago(600),
        renewed_at: now() + chrono::Duration::seconds(expires_in - 10),
        expires_at: now() + chrono::Duration::seconds(expires_in),
        listeners: listeners
            .iter()
            .map(|(resource, listener)| MemberListener {
                resource: (*resource).into(),
                listener: (*listener).into(),
            })
            .collect(),
    };
    DataEvent::Processes(Ok(vec![
        member(
            "app-1",
            8,
            &[
                ("shop.orders", "app-1/4242-orders"),
                ("pet-aggregates", "app-1/4242-pets"),
                ("shop.events", "app-1/4242-events"),
                ("shop.mailer", "app-1/4242-mailer"),
            ],
        ),
        member(
            "app-3",
            6,
            &[
                ("shop.mailer", "app-3/90-mailer"),
                ("shop.orders", "app-3/90-orders"),
                ("pet-aggregates", "app-3/90-pets"),
            ],
        ),
        member("app-2", -25, &[("shop.invoices", "app-2/771")]),
    ]))
}

#[test]
fn listeners_view_with_fleet_processes() {
    snapshot_both_sizes("listeners_fleet", |state| {
        state.apply(fleet_processes(), now());
        press(state, KeyCode::Char('3'));
    });
    let mut attached = state(Mode::Attached);
    attached.apply(fleet_processes(), now());
    press(&mut attached, KeyCode::Char('3'));
    let shown = screen(&mut attached, 120, 40);
    // Four resources, two live members: shares 2 and 2. app-1 holds three, so it hands
    // one over to app-3 (all acquired alike: the smallest name goes first).
    assert!(shown.contains("Fleet processes (3)"), "{shown}");
    let app1 = shown
        .lines()
        .find(|l| l.contains("│app-1 "))
        .unwrap_or_default();
    assert!(
        app1.contains(" 2 ") && app1.contains("pet-aggregates  "),
        "{app1}"
    );
    insta::assert_snapshot!("listeners_fleet_attached_120x40", shown);
}

#[test]
fn listeners_view_says_why_the_fleet_cannot_be_read() {
    let mut attached = state(Mode::Attached);
    attached.apply(
        DataEvent::Processes(Err(
            "not permitted to list the fleet's processes: not authorized (grant find on sw.processes)"
                .into(),
        )),
        now(),
    );
    press(&mut attached, KeyCode::Char('3'));
    let shown = screen(&mut attached, 120, 40);
    assert!(
        shown.contains("Fleet processes") && shown.contains("cannot read them: not permitted"),
        "{shown}"
    );
}

#[test]
fn audit_view() {
    snapshot_both_sizes("audit", |state| press(state, KeyCode::Char('4')));
}

#[test]
fn help_view() {
    snapshot_both_sizes("help", |state| press(state, KeyCode::Char('?')));
}

#[test]
fn command_line_and_notice() {
    snapshot_both_sizes("command_line", |state| {
        press(state, KeyCode::Char(':'));
        for c in "sor".chars() {
            press(state, KeyCode::Char(c));
        }
    });
    snapshot_both_sizes("notice", |state| {
        state.execute_command_line("nonsense");
    });
}

#[test]
fn lost_connection_marks_the_data_stale() {
    snapshot_both_sizes("stale", |state| {
        state.apply(
            DataEvent::SourceFailed {
                source: DataSource::Leases,
                error: "server selection timeout: db1.example:27017 unreachable".into(),
            },
            now() + chrono::Duration::seconds(12),
        );
    });
}

#[test]
fn read_only_shows_a_lock() {
    let mut state = ConsoleState::new(ConsoleSetup {
        read_only: true,
        ..ConsoleSetup::new(Mode::Attached, "mongodb://db1.example:27017", now())
    });
    state.apply(DataEvent::LeaseSnapshot((Vec::new()).into()), now());
    insta::assert_snapshot!(screen(&mut state, 80, 24));
}

#[test]
fn below_80_by_24_the_console_says_it_is_too_small() {
    let mut state = state(Mode::Demo);
    let text = screen(&mut state, 79, 24);
    assert!(text.contains("terminal too small"), "{text}");
    assert!(text.contains("need 80×24, have 79×24"), "{text}");
    insta::assert_snapshot!(screen(&mut state, 60, 12));
}

#[test]
fn no_size_panics_in_any_view() {
    let theme = Theme::by_name("default", None).expect("built-in theme");
    let mut state = state(Mode::Demo);
    let keys = ['1', '2', '3', '4', '?'];
    let sizes = (0..=130u16)
        .step_by(7)
        .flat_map(|w| (0..=45u16).step_by(4).map(move |h| (w, h)))
        .chain([
            (0, 0),
            (1, 1),
            (80, 24),
            (79, 24),
            (80, 23),
            (u16::MAX / 64, 3),
        ]);
    for (width, height) in sizes {
        for key in keys {
            state.help = None;
            press(&mut state, KeyCode::Char(key));
            state.on_resize(width, height);
            let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
            terminal
                .draw(|frame| view::draw(frame, &state, &theme))
                .expect("draw");
        }
        state.help = None;
        press(&mut state, KeyCode::Char('1'));
        press(&mut state, KeyCode::Enter);
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal
            .draw(|frame| view::draw(frame, &state, &theme))
            .expect("draw");
        press(&mut state, KeyCode::Esc);
    }
}

#[test]
fn a_resize_storm_keeps_the_selection_valid() {
    let theme = Theme::by_name("default", None).expect("built-in theme");
    let mut state = state(Mode::Demo);
    press(&mut state, KeyCode::Char('G'));
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).expect("terminal");
    for i in 0..500u16 {
        let (width, height) = (i * 37 % 200, i * 13 % 70);
        state.on_resize(width, height);
        terminal.backend_mut().resize(width, height);
        terminal
            .draw(|frame| view::draw(frame, &state, &theme))
            .expect("draw");
        assert!(state.leases.selected().is_some());
    }
}

#[test]
fn control_characters_from_the_database_are_escaped() {
    for key in ['1', '2'] {
        let mut state = state(Mode::Demo);
        state.execute_command_line("sort resource");
        press(&mut state, KeyCode::Char(key));
        let terminal = render(&mut state, 120, 40);
        let buffer = terminal.backend().buffer();
        for cell in buffer.content() {
            assert!(
                !cell.symbol().chars().any(char::is_control),
                "a control character reached the screen: {:?}",
                cell.symbol()
            );
        }
        let text = terminal.backend().to_string();
        assert!(text.contains("evil\\u{1b}[2Jname"), "{text}");
    }
    let mut state = state(Mode::Demo);
    state.execute_command_line("filter evil");
    press(&mut state, KeyCode::Enter);
    let text = screen(&mut state, 120, 40);
    assert!(text.contains("host\\nforged line"), "{text}");
    press(&mut state, KeyCode::Esc);
    press(&mut state, KeyCode::Char('4'));
    let text = screen(&mut state, 120, 40);
    assert!(text.contains("holder hung\\u{7}"), "{text}");
}

fn takeover_plan() -> streamward::ops::Plan {
    let lease = leases().remove(0);
    let facts = streamward::ops::PlanFacts {
        lease: Some(lease.clone()),
        window: Some(OplogWindow::new(
            ClusterTime::new(secs(now()) - 3600, 1),
            ClusterTime::new(secs(now()), 1),
        )),
        window_unknown: None,
        capped: None,
        now: now(),
        changes: None,
        read_only: false,
        audit: None,
        rebuild: None,
        checkpoints: Vec::new(),
        operator: "ann@bastion".into(),
        handover_lease: Duration::from_secs(10),
        bulk_lease: Duration::from_secs(30),
        thresholds: streamward::model::HealthThresholds::default(),
        profile: Default::default(),
        skipped_entry: None,
        token_for_time: None,
        restart_hold: None,
    };
    streamward::ops::plan(
        &streamward::ops::ActionRequest::Takeover {
            resource: lease.resource,
            to: None,
            hold: None,
        },
        &facts,
    )
}

#[test]
fn action_dialog_preview_and_progress() {
    snapshot_both_sizes("dialog_preview", |state| {
        state.execute_command_line("filter shop.orders");
        press(state, KeyCode::Char('t'));
        state.apply(DataEvent::Planned(Ok(Box::new(takeover_plan()))), now());
        for c in "shop.ord".chars() {
            press(state, KeyCode::Char(c));
        }
    });
    snapshot_both_sizes("dialog_rebuild", |state| {
        state.dialog = Some(streamward::console::state::Dialog::Running {
            action: streamward::ops::ActionKind::Rebuild,
            resource: "pet-aggregates".into(),
            progress: None,
            stage: streamward::console::state::RunningStage::Working,
        });
        state.apply(
            DataEvent::RebuildProgress(streamward::ops::RebuildProgress {
                done: 3,
                total: Some(7),
                stage: "writing tag documents".into(),
                finished: false,
            }),
            now(),
        );
    });
    snapshot_both_sizes("dialog_rebuild_asks_before_quitting", |state| {
        state.dialog = Some(streamward::console::state::Dialog::Running {
            action: streamward::ops::ActionKind::Rebuild,
            resource: "pet-aggregates".into(),
            progress: None,
            stage: streamward::console::state::RunningStage::Working,
        });
        press(state, KeyCode::Char('q'));
    });
}

/// Cells are cut at the end and marked, never from the left: a lag of 1420 days read
/// `420d11h` in a seven-cell column, and holders were cut without a mark.
#[test]
fn long_values_are_cut_at_the_end_with_a_mark() {
    for (width, height) in [(80, 24), (120, 40)] {
        let mut state = state(Mode::Demo);
        let age = 1420 * 86_400 + 11 * 3600;
        let mut ancient = lease(
            "archive.very-long-resource-name-that-goes-on",
            Some("host-with-a-really-long-name.example.internal/4242"),
            4,
            age,
        );
        ancient.resume_token = None;
        ancient.resume_at = Some(ClusterTime::new(secs(now()) - age, 1));
        state.apply(DataEvent::LeaseChanged(Box::new(ancient)), now());
        state.execute_command_line("filter archive");
        let text = screen(&mut state, width, height);
        let row = text
            .lines()
            .find(|l| l.contains("archive."))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(row.contains("1420d11h"), "{width}: {row}");
        assert!(!row.contains(" 420d11h"), "{width}: {row}");
        assert!(row.contains("archive.very-"), "{width}: {row}");
        assert!(row.contains("host-with-a-"), "{width}: {row}");
        assert_eq!(
            row.matches('…').count(),
            2,
            "both long names are marked: {row}"
        );
    }
}

/// At 112–120 columns the wide layout took the names down to 14 cells while 111
/// columns showed them whole: a wider terminal never shows less now.
#[test]
fn a_wider_terminal_never_shows_less_of_a_name() {
    let names = ["shop.audit-export", "app-1/4242-orders", "app-3/90-mailer"];
    let mut whole_since: Vec<Option<u16>> = vec![None; names.len()];
    for width in 80..=200u16 {
        let mut state = state(Mode::Demo);
        let text = screen(&mut state, width, 40);
        for (i, name) in names.iter().enumerate() {
            match (text.contains(name), whole_since[i]) {
                (true, None) => whole_since[i] = Some(width),
                (false, Some(since)) => {
                    panic!("{name} was whole at {since} columns but is cut at {width}:\n{text}")
                }
                _ => {}
            }
        }
        if width >= 135 {
            assert!(
                text.contains("KIND")
                    && text.contains("SOURCE")
                    && text.contains("COMMIT")
                    && text.contains("LOSS IN"),
                "{width}"
            );
        }
    }
    assert!(whole_since.iter().all(Option::is_some));
}

fn orders_facts(lease: Lease) -> streamward::ops::PlanFacts {
    streamward::ops::PlanFacts {
        lease: Some(lease),
        window: Some(OplogWindow::new(
            ClusterTime::new(secs(now()) - 3600, 1),
            ClusterTime::new(secs(now()), 1),
        )),
        window_unknown: None,
        capped: None,
        now: now(),
        changes: None,
        read_only: false,
        audit: None,
        rebuild: None,
        checkpoints: Vec::new(),
        operator: "ann@bastion".into(),
        handover_lease: Duration::from_secs(10),
        bulk_lease: Duration::from_secs(30),
        thresholds: streamward::model::HealthThresholds::default(),
        profile: Default::default(),
        skipped_entry: None,
        token_for_time: None,
        restart_hold: None,
    }
}

#[test]
fn dialogs_that_stay_true() {
    // A standby took the lease while the preview was open: said at the top, Apply off.
    snapshot_both_sizes("dialog_moved", |state| {
        state.execute_command_line("filter shop.orders");
        press(state, KeyCode::Char('t'));
        state.apply(DataEvent::Planned(Ok(Box::new(takeover_plan()))), now());
        let mut taken = leases().remove(0);
        taken.holder = Some("app-2/5151-orders".into());
        taken.version = 8;
        state.apply(DataEvent::LeaseChanged(Box::new(taken)), now());
    });
    // A reason being typed, the name typed: Apply enabled.
    snapshot_both_sizes("dialog_reason", |state| {
        state.execute_command_line("filter shop.orders");
        press(state, KeyCode::Char('t'));
        state.apply(DataEvent::Planned(Ok(Box::new(takeover_plan()))), now());
        for c in "shop.orders".chars() {
            press(state, KeyCode::Char(c));
        }
        press(state, KeyCode::BackTab);
        for c in "holder hung, pager 4411".chars() {
            press(state, KeyCode::Char(c));
        }
    });
    // Reset to now, refused until the skip is accepted.
    snapshot_both_sizes("dialog_reset_to_now", |state| {
        state.execute_command_line("filter shop.mailer");
        press(state, KeyCode::Char('X'));
        let mailer = leases().remove(2);
        let request = streamward::ops::ActionRequest::Reset {
            resource: mailer.resource.clone(),
            to: streamward::ops::ResetTarget::Now,
            accept_skip: false,
        };
        let plan = streamward::ops::plan(&request, &orders_facts(mailer));
        state.apply(DataEvent::Planned(Ok(Box::new(plan))), now());
    });
    // Hand over: the in-process standbys of the lease, or a typed name.
    snapshot_both_sizes("dialog_handover", |state| {
        state.execute_command_line("filter shop.orders");
        press(state, KeyCode::Char('T'));
        press(state, KeyCode::Down);
    });
    // esc on a running rebuild asks first, and offers the background.
    snapshot_both_sizes("dialog_rebuild_cancel", |state| {
        state.dialog = Some(streamward::console::state::Dialog::Running {
            action: streamward::ops::ActionKind::Rebuild,
            resource: "pet-aggregates".into(),
            progress: None,
            stage: streamward::console::state::RunningStage::Working,
        });
        state.apply(
            DataEvent::RebuildProgress(streamward::ops::RebuildProgress {
                done: 3,
                total: Some(7),
                stage: "writing tag documents".into(),
                finished: false,
            }),
            now(),
        );
        press(state, KeyCode::Esc);
    });
}

/// A reason longer than the dialog is wide wrapped onto the lines under it and pushed
/// the name, the buttons and the keys out of the dialog at 80×24: each field is one
/// line now, showing its end (where the cursor is), marked where it is cut.
#[test]
fn a_long_reason_keeps_the_name_the_buttons_and_the_keys_in_sight() {
    let reason = "holder hung since the deploy at 03:05, pager 4411, see the incident channel for the timeline";
    for (width, height) in [(80, 24), (120, 40)] {
        let mut state = state(Mode::Demo);
        state.execute_command_line("filter shop.orders");
        press(&mut state, KeyCode::Char('t'));
        state.apply(DataEvent::Planned(Ok(Box::new(takeover_plan()))), now());
        for c in "shop.orders".chars() {
            press(&mut state, KeyCode::Char(c));
        }
        press(&mut state, KeyCode::BackTab);
        for c in reason.chars() {
            press(&mut state, KeyCode::Char(c));
        }
        let text = screen(&mut state, width, height);
        let line_with = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("{width}x{height}: no {needle:?} in\n{text}"))
        };
        let field = line_with("reason (for the audit record): ");
        assert!(
            field.contains("for the timeline▏"),
            "the end of the reason, with the cursor: {field}"
        );
        if width == 80 {
            assert!(field.contains(": …"), "marked where it is cut: {field}");
        }
        line_with("type shop.orders to confirm: shop.orders");
        line_with("[ Cancel ]  [ Apply ]");
        line_with("esc cancels");
    }
}

/// A plan taller than the dialog at 80×24 (a LOST lease's reset to now, moved on
/// since it was planned) was cut mid-sentence without a word: its last row says so.
#[test]
fn a_plan_taller_than_the_dialog_says_it_is_cut() {
    let prepare = |state: &mut ConsoleState| {
        state.execute_command_line("filter legacy.feed");
        press(state, KeyCode::Char('X'));
        let lost = leases().remove(4);
        for accept_skip in [false, true] {
            let request = streamward::ops::ActionRequest::Reset {
                resource: lost.resource.clone(),
                to: streamward::ops::ResetTarget::Now,
                accept_skip,
            };
            let plan = streamward::ops::plan(&request, &orders_facts(lost.clone()));
            state.apply(DataEvent::Planned(Ok(Box::new(plan))), now());
            if !accept_skip {
                state.on_key(KeyEvent::new(KeyCode::Char('s'), KeyModifiers::CONTROL));
            }
        }
        let mut moved = lost;
        moved.holder = Some("app-9/2".into());
        moved.version += 1;
        state.apply(DataEvent::LeaseChanged(Box::new(moved)), now());
    };
    let mut state = state(Mode::Demo);
    prepare(&mut state);
    let small = screen(&mut state, 80, 24);
    assert!(small.contains("changed since planned"), "{small}");
    let mark = small
        .lines()
        .find(|l| l.contains("more lines: a taller terminal shows the whole plan"))
        .unwrap_or_else(|| panic!("the cut is marked:\n{small}"));
    assert!(
        small
            .lines()
            .skip_while(|l| *l != mark)
            .nth(1)
            .is_some_and(|l| l.contains("reason (for the audit record)")),
        "right above the fields:\n{small}"
    );
    assert!(small.contains("esc cancels"), "{small}");
    let mut state = self::state(Mode::Demo);
    prepare(&mut state);
    let large = screen(&mut state, 120, 40);
    assert!(
        !large.contains("more lines") && large.contains("! the current resume point is LOST"),
        "nothing cut at 120×40:\n{large}"
    );
}

/// Seen at 80×24 in the recovery walk: the oplog view cut the server time to `03:`
/// without a mark, the audit list cut the resource to `shop.ma…` with nothing naming
/// it whole, and one record was "last 1 operator actions".
#[test]
fn oplog_and_audit_say_it_whole_at_80_columns() {
    let mut state = state(Mode::Demo);
    state.execute_command_line("oplog");
    let text = screen(&mut state, 80, 24);
    let facts = text
        .lines()
        .find(|l| l.contains("server time "))
        .unwrap_or_else(|| panic!("{text}"));
    let time = facts.split("server time ").nth(1).unwrap_or_default();
    let time = time.trim_end_matches(['│', ' ', '"']);
    assert!(
        time.len() == 8 && time.split(':').count() == 3,
        "the server time whole: {facts}"
    );

    state.execute_command_line("audit");
    let text = screen(&mut state, 80, 24);
    assert!(
        text.contains("rebuild pet-aggregates · reason: -"),
        "the selected record's action and resource whole:\n{text}"
    );
    let mut one = state.audit.clone();
    one.truncate(1);
    state.apply(DataEvent::Audit(one.into()), now());
    let text = screen(&mut state, 80, 24);
    assert!(text.contains("Audit: the last operator action "), "{text}");
}

/// A lease whose listeners fail on one change: FAILING, and the detail names the change
/// (its key's control characters escaped), the error, the attempts and the way past it.
#[test]
fn detail_of_a_failing_lease_names_the_change_and_the_way_past_it() {
    snapshot_both_sizes("detail_failing", |state| {
        let mut failing = lease("pet-aggregates", Some("app-1/4242-pets"), 5, 40);
        let at = ClusterTime::new(secs(now()) - 39, 2);
        let mut failure = streamward::model::ChangeFailure::first(
            Some(streamward::model::ResumeToken::encode(
                at,
                streamward::model::TokenKind::Event,
                1,
            )),
            Some(at),
            "demo.animals",
            "insert",
            "{\"_id\":\"rex\u{1b}[2J\"}",
            "animal rex has no valid \"tags\"",
            streamward::model::FailureCause::Handler,
            ago(39),
        );
        failure.attempts = 6;
        failure.last_at = ago(8);
        failing.failure = Some(failure);
        state.apply(DataEvent::LeaseChanged(Box::new(failing)), now());
        state.execute_command_line("filter pet-aggregates");
        press(state, KeyCode::Enter);
        press(state, KeyCode::Enter);
    });
}

/// What is left to process shows beside the time where the LAG column is wide enough
/// (the widest layout), and the time alone where it is not.
#[test]
fn the_lag_column_shows_what_is_left_beside_the_time_where_it_fits() {
    let mut state = state(Mode::Demo);
    state.apply(
        DataEvent::TimeToLoss {
            read_at: now(),
            reading: LossReading {
                pending: [(
                    "shop.mailer".to_string(),
                    streamward::model::Pending::Counted(12),
                )]
                .into_iter()
                .collect(),
                ..losses()
            },
        },
        now(),
    );
    let mailer_row = |text: &str| {
        text.lines()
            .find(|l| l.contains("shop.mailer"))
            .unwrap_or_else(|| panic!("a row for shop.mailer: {text}"))
            .to_string()
    };
    let wide = mailer_row(&screen(&mut state, 240, 40));
    assert!(wide.contains("12 left · 25m"), "{wide}");
    let narrow = mailer_row(&screen(&mut state, 80, 24));
    assert!(
        !narrow.contains("left") && narrow.contains("25m"),
        "{narrow}"
    );
}

/// An in-process listener's last handled change shows in its lease's detail: kind,
/// collection, key and wall time, control characters escaped.
#[test]
fn the_detail_shows_the_last_change_a_listener_here_handled() {
    let mut state = state(Mode::Demo);
    let mut streaming = listener(
        "shop.orders",
        "app-1/4242-orders",
        ListenerState::Streaming,
        Some(7),
    );
    streaming.last_change = Some(std::sync::Arc::new(streamward::store::ChangeEvent {
        token: ResumeToken::encode(ClusterTime::new(secs(now()), 1), TokenKind::Event, 0),
        cluster_time: None,
        operation: streamward::store::OperationType::Update,
        // A collection name may hold an escape sequence; it reaches the screen escaped.
        ns: streamward::store::Namespace::new("shop", "orders\u{1b}[2J"),
        document_key: bson::doc! {"_id": "o-17\u{1b}[2J"},
        full_document: None,
        details: streamward::store::EventDetails {
            wall_time: chrono::DateTime::parse_from_rfc3339("2026-11-28T21:11:43.924Z")
                .ok()
                .map(|t| t.to_utc()),
            ..Default::default()
        },
    }));
    state.apply(DataEvent::Listeners(vec![streaming]), now());
    state.execute_command_line("filter shop.orders");
    press(&mut state, KeyCode::Enter);
    let text = screen(&mut state, 120, 40);
    // Wrapped in the right-hand pane: kind and collection, then key and time.
    assert!(text.contains("last change: update shop.orders"), "{text}");
    assert!(
        text.contains(r#"last change: update shop.orders\u{1b}[2J"#),
        "the collection escaped: {text}"
    );
    // The key is relaxed extended JSON, whose strings escape control characters.
    assert!(
        text.contains(r#"{"_id":"o-17\u001b[2J"} at 21:11:43.924Z"#),
        "the key escaped, the wall time: {text}"
    );
    assert!(!text.contains('\u{1b}'), "no raw escape on screen");
}
