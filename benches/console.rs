//! The console with 100 and with 100,000 leases: what one frame of the leases view
//! costs (goal: it follows the visible rows, not the lease count), what applying one
//! lease change costs, and, for information, what building the table and a clock
//! tick cost.
//!
//! `cargo bench --bench console`. Plain `Instant` timing, medians over many samples;
//! the two sizes are measured in interleaved rounds so load on a shared machine moves
//! both. The last line is `console: render_100_us=N render_100000_us=N ratio=R`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use streamward::console::data::DataEvent;
use streamward::console::state::{ConsoleSetup, ConsoleState, Mode};
use streamward::console::theme::Theme;
use streamward::console::view;
use streamward::model::{ClusterTime, Lease, LockKind, OplogWindow, ResumeToken, TokenKind};

const SMALL: usize = 100;
const LARGE: usize = 100_000;
const WIDTH: u16 = 120;
const HEIGHT: u16 = 40;
/// Interleaved rounds; each takes `RENDER_PER_ROUND` frames of each size.
const ROUNDS: usize = 8;
const RENDER_PER_ROUND: usize = 40;
const CHANGES: usize = 4_000;
/// The oplog window: one hour ending at `now()`.
const WINDOW_SECS: u32 = 3_600;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 3, 14, 0).unwrap()
}

fn secs(at: DateTime<Utc>) -> u32 {
    u32::try_from(at.timestamp()).expect("a 32-bit cluster time")
}

/// A small deterministic generator (xorshift64*), so every run sees the same data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const SERVICES: [&str; 8] = [
    "shop",
    "pets",
    "billing",
    "search",
    "audit",
    "mail",
    "inventory",
    "ledger",
];
const COLLECTIONS: [&str; 6] = [
    "orders",
    "aggregates",
    "invoices",
    "events",
    "outbox",
    "users",
];

/// Lease `i` of a fleet: varied names, holders (some gone), versions, token times
/// across the window (some before it: lost), expiries (some past: expired), and a
/// few bulk locks.
fn lease(i: usize, rng: &mut Rng) -> Lease {
    let service = SERVICES[i % SERVICES.len()];
    let collection = COLLECTIONS[(i / SERVICES.len()) % COLLECTIONS.len()];
    let mut lease = Lease::vacant(format!("{service}.{collection}-{i:06}"));
    if !rng.chance(8) {
        lease.holder = Some(format!(
            "app-{}/{}-{}",
            rng.below(40),
            1000 + rng.below(60_000),
            &collection[..3]
        ));
    }
    lease.version = i64::try_from(rng.below(5_000)).unwrap_or_default();
    let expires_in = if rng.chance(6) {
        -i64::try_from(rng.below(600)).unwrap_or_default() - 1
    } else {
        1 + i64::try_from(rng.below(15)).unwrap_or_default()
    };
    lease.expires_at = Some(now() + chrono::Duration::seconds(expires_in));
    lease.committed_at =
        Some(now() - chrono::Duration::seconds(i64::try_from(rng.below(900)).unwrap_or(0)));
    // Mostly recent tokens, a tail far behind, a few before the window (lost).
    let age = match rng.below(100) {
        0..=79 => rng.below(30),
        80..=96 => 30 + rng.below(3_000),
        _ => u64::from(WINDOW_SECS) + 1 + rng.below(600),
    };
    let age = u32::try_from(age).unwrap_or(WINDOW_SECS);
    if rng.chance(2) {
        lease.resume_token = None;
    } else {
        lease.resume_token = Some(ResumeToken::encode(
            ClusterTime::new(secs(now()) - age, 1),
            TokenKind::Event,
            rng.next(),
        ));
    }
    if rng.chance(1) {
        lease.kind = LockKind::Bulk;
        lease.note = Some("rebuild by ops@bastion".into());
    }
    lease
}

fn fleet(n: usize, seed: u64) -> Vec<Lease> {
    let mut rng = Rng(seed | 1);
    (0..n).map(|i| lease(i, &mut rng)).collect()
}

fn window_event() -> DataEvent {
    DataEvent::Window {
        window: OplogWindow::new(
            ClusterTime::new(secs(now()) - WINDOW_SECS, 1),
            ClusterTime::new(secs(now()), 1),
        ),
        server_now: now(),
        ops_per_sec: Some(420.0),
    }
}

/// A console that has read the window, then the snapshot of `leases`; returns the
/// time the snapshot took to apply.
fn console(leases: Vec<Lease>) -> (ConsoleState, Duration) {
    let mut state = ConsoleState::new(ConsoleSetup::new(
        Mode::Attached,
        "mongodb://db1.example:27017/?replicaSet=rs0",
        now(),
    ));
    state.apply(window_event(), now());
    state.on_resize(WIDTH, HEIGHT);
    let started = Instant::now();
    state.apply(DataEvent::LeaseSnapshot(leases.into()), now());
    let took = started.elapsed();
    (state, took)
}

fn median(samples: &mut [Duration]) -> Duration {
    assert!(!samples.is_empty());
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Renderer {
    terminal: Terminal<TestBackend>,
    theme: Theme,
}

impl Renderer {
    fn new() -> Renderer {
        Renderer {
            terminal: Terminal::new(TestBackend::new(WIDTH, HEIGHT)).expect("test terminal"),
            theme: Theme::by_name("default", None).expect("built-in theme"),
        }
    }

    fn frame(&mut self, state: &ConsoleState) -> Duration {
        let started = Instant::now();
        self.terminal
            .draw(|frame| view::draw(frame, black_box(state), &self.theme))
            .expect("draw");
        started.elapsed()
    }
}

/// One lease of `state` changed as a listener would: a commit moved its token and
/// version, sometimes the holder changed.
fn changed(state: &ConsoleState, resource: &str, rng: &mut Rng) -> Lease {
    let mut lease = state
        .leases
        .get(resource)
        .expect("the lease exists")
        .lease
        .clone();
    lease.version += 1;
    if rng.chance(20) {
        lease.holder = Some(format!("app-{}/{}-new", rng.below(40), rng.below(60_000)));
    }
    lease.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(secs(now()) - u32::try_from(rng.below(20)).unwrap_or(0), 1),
        TokenKind::Event,
        rng.next(),
    ));
    lease.committed_at = Some(now());
    lease.expires_at = Some(now() + chrono::Duration::seconds(10));
    lease
}

fn main() {
    let started = Instant::now();

    // (c) Building the state from a snapshot, for information.
    let mut build_small: Vec<Duration> = (0..50).map(|s| console(fleet(SMALL, s + 7)).1).collect();
    let mut build_large: Vec<Duration> = (0..5).map(|s| console(fleet(LARGE, s + 7)).1).collect();
    let (mut small, _) = console(fleet(SMALL, 42));
    let (mut large, _) = console(fleet(LARGE, 42));
    eprintln!(
        "console bench: {} and {} leases built in {:.1}s",
        small.leases.len(),
        large.leases.len(),
        started.elapsed().as_secs_f64()
    );

    // Select a row in the middle, so the view is scrolled as an operator would have it.
    large
        .leases
        .move_selection(isize::try_from(LARGE / 2).unwrap_or(0), 35);
    small
        .leases
        .move_selection(isize::try_from(SMALL / 2).unwrap_or(0), 35);

    // (a) One frame of the leases view, in interleaved rounds.
    let mut render_small = Vec::new();
    let mut render_large = Vec::new();
    let mut renderer_small = Renderer::new();
    let mut renderer_large = Renderer::new();
    for _ in 0..10 {
        renderer_small.frame(&small);
        renderer_large.frame(&large);
    }
    for _ in 0..ROUNDS {
        for _ in 0..RENDER_PER_ROUND {
            render_small.push(renderer_small.frame(&small));
        }
        for _ in 0..RENDER_PER_ROUND {
            render_large.push(renderer_large.frame(&large));
        }
    }
    assert!(
        renderer_large
            .terminal
            .backend()
            .to_string()
            .contains(&format!("of {LARGE}")),
        "the frame shows the leases view"
    );

    // (b) One lease change applied with 100,000 present; (b') the same with 100.
    let mut rng = Rng(0x5eed);
    let names_large: Vec<String> = large
        .leases
        .entries()
        .map(|e| e.lease.resource.clone())
        .collect();
    let names_small: Vec<String> = small
        .leases
        .entries()
        .map(|e| e.lease.resource.clone())
        .collect();
    let mut change_large = Vec::with_capacity(CHANGES);
    let mut change_small = Vec::with_capacity(CHANGES);
    for _ in 0..CHANGES {
        let name = &names_large[usize::try_from(rng.below(LARGE as u64)).unwrap_or(0)];
        let lease = changed(&large, name, &mut rng);
        let at = Instant::now();
        large.apply(DataEvent::LeaseChanged(lease.into()), now());
        change_large.push(at.elapsed());

        let name = &names_small[usize::try_from(rng.below(SMALL as u64)).unwrap_or(0)];
        let lease = changed(&small, name, &mut rng);
        let at = Instant::now();
        small.apply(DataEvent::LeaseChanged(lease.into()), now());
        change_small.push(at.elapsed());
    }
    assert_eq!(large.leases.len(), LARGE, "changes replace, never add");

    // (d) The clock tick and an oplog window read, for information: both re-assess
    // every lease. Ticks here are two seconds apart with a read in between, so each
    // tick finds the last assessment over a second old and does the work (as when
    // oplog reads fail and only the clock moves).
    let mut tick_small = Vec::new();
    let mut tick_large = Vec::new();
    let mut window_small = Vec::new();
    let mut window_large = Vec::new();
    for i in 0..10 {
        let t = now() + chrono::Duration::seconds(2 * i + 2);
        let at = Instant::now();
        large.tick(t);
        tick_large.push(at.elapsed());
        let at = Instant::now();
        small.tick(t);
        tick_small.push(at.elapsed());
        let read_at = t + chrono::Duration::seconds(1);
        let at = Instant::now();
        large.apply(window_event(), read_at);
        window_large.push(at.elapsed());
        let at = Instant::now();
        small.apply(window_event(), read_at);
        window_small.push(at.elapsed());
    }

    let render_100 = median(&mut render_small);
    let render_100000 = median(&mut render_large);
    let rows = [
        ("render one frame (120x40)", render_100, render_100000),
        (
            "apply one LeaseChanged",
            median(&mut change_small),
            median(&mut change_large),
        ),
        (
            "apply LeaseSnapshot (build)",
            median(&mut build_small),
            median(&mut build_large),
        ),
        (
            "clock tick",
            median(&mut tick_small),
            median(&mut tick_large),
        ),
        (
            "apply Window (oplog read)",
            median(&mut window_small),
            median(&mut window_large),
        ),
    ];
    println!();
    println!("| median µs | {SMALL} leases | {LARGE} leases | ratio |");
    println!("|---|---:|---:|---:|");
    for (name, a, b) in rows {
        println!(
            "| {name} | {:.1} | {:.1} | {:.2} |",
            micros(a),
            micros(b),
            micros(b) / micros(a).max(f64::MIN_POSITIVE)
        );
    }
    println!(
        "\nsamples: render {} per size, change {CHANGES} per size, build 50/5, tick and window 10; {:.1}s in all",
        ROUNDS * RENDER_PER_ROUND,
        started.elapsed().as_secs_f64()
    );
    let small_us = micros(render_100).round().max(1.0);
    let large_us = micros(render_100000).round();
    println!(
        "console: render_{SMALL}_us={small_us:.0} render_{LARGE}_us={large_us:.0} ratio={:.2}",
        large_us / small_us
    );
}
