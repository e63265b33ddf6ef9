//! The engine's series as a host application sees them: listeners spawned with
//! `ListenerHandle::spawn_observed` (given `EngineMetrics::observer`) on the sandbox record what they do, and the
//! counts match what happened (the changes written, the tenures held), not what the
//! listener says of itself.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bson::doc;
use streamward::engine::{Bootstrap, ListenerConfig, ListenerHandle, ListenerState, NoopHandler};
use streamward::metrics::{encode, EngineMetrics};
use streamward::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use streamward::store::{DocumentStore, Namespace};

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listeners_events_commits_and_tenures_are_counted() {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    let orders = Namespace::new("shop", "orders");
    let metrics = EngineMetrics::new().expect("metrics");
    let config = |id: &str| {
        let mut config = ListenerConfig::new("shop.orders", id, orders.clone());
        config.bootstrap = Bootstrap::Now;
        config.max_batch_wait = Duration::from_millis(50);
        config.batch_size = 10;
        config
    };
    let observer = |id: &str| metrics.observer(&config(id));
    let first =
        ListenerHandle::spawn_observed(store.clone(), config("w1"), NoopHandler, observer("w1"));
    until("w1 streams", || {
        first.snapshot().state == ListenerState::Streaming
    })
    .await;
    for i in 0..25 {
        store
            .put(&orders, doc! { "_id": i, "status": "placed" })
            .await
            .expect("write an order");
    }
    until("25 events committed", || first.snapshot().events == 25).await;
    let standby =
        ListenerHandle::spawn_observed(store.clone(), config("w2"), NoopHandler, observer("w2"));
    until("w2 stands by", || {
        standby.snapshot().state == ListenerState::Standby
    })
    .await;
    first.stop().await;
    until("w2 takes over", || {
        standby.snapshot().state == ListenerState::Streaming
    })
    .await;
    store
        .put(&orders, doc! { "_id": 100, "status": "placed" })
        .await
        .expect("write an order");
    until("w2 handles it", || standby.snapshot().events == 1).await;

    let text = encode(metrics.registry()).expect("encode");
    let w1 = |name: &str| format!("{name}{{listener=\"w1\",resource=\"shop.orders\"}}");
    let w2 = |name: &str| format!("{name}{{listener=\"w2\",resource=\"shop.orders\"}}");
    assert_eq!(
        value(&text, &w1("streamward_listener_events_total")),
        Some(25.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &w2("streamward_listener_events_total")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &w1("streamward_listener_acquires_total")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &w2("streamward_listener_acquires_total")),
        Some(1.0),
        "{text}"
    );
    let version = |who: &str| {
        value(
            &text,
            &format!("streamward_listener_fencing_version{{listener=\"{who}\",resource=\"shop.orders\"}}"),
        )
    };
    assert!(
        version("w2") > version("w1"),
        "a new holder, a new version: {text}"
    );
    assert_eq!(
        value(&text, &w1("streamward_listener_lag_seconds")),
        None,
        "w1 stopped reading: no lag of its own to show"
    );
    assert!(
        value(&text, &w2("streamward_listener_lag_seconds")).is_some(),
        "the holder reads: {text}"
    );
    let batches = value(&text, &w1("streamward_listener_batches_total")).expect("batches");
    assert!(
        (3.0..=25.0).contains(&batches),
        "25 events in batches of at most 10: {batches}"
    );
    let commits = value(&text, &w1("streamward_listener_commits_total")).expect("commits");
    assert_eq!(
        value(
            &text,
            &w1("streamward_listener_commit_duration_seconds_count")
        ),
        Some(commits),
        "every commit timed"
    );
    // Group commits: one commit covers every batch handled since the one before.
    assert!(commits >= 1.0, "{text}");
    assert_eq!(
        value(
            &text,
            "streamward_listener_state{listener=\"w1\",resource=\"shop.orders\",state=\"stopped\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "streamward_listener_state{listener=\"w2\",resource=\"shop.orders\",state=\"streaming\"}"
        ),
        Some(1.0),
        "{text}"
    );
    standby.stop().await;
}

/// `streamward demo --metrics ADDR`, as a user runs it: the endpoint says where it is,
/// serves the demo listeners' series, and they count the demo's changes.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_serves_its_listeners_metrics() {
    let home = tempfile::tempdir().expect("a home");
    let mut child = Command::new(env!("CARGO_BIN_EXE_streamward"))
        .args([
            "demo",
            "--plain",
            "--duration",
            "60s",
            "--metrics",
            "127.0.0.1:0",
        ])
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .current_dir(home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let address = support::http::served_address(&mut child);
    let started = Instant::now();
    let text = loop {
        let (status, text) = support::http::get(&address, "/metrics").await;
        assert_eq!(status, 200, "{text}");
        let events: f64 = text
            .lines()
            .filter(|l| l.starts_with("streamward_listener_events_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if events >= 10.0 {
            break text;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{text}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let _ = child.kill();
    let _ = child.wait();
    for resource in ["pet-aggregates", "shop.orders"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("streamward_listener_state{")
                    && l.contains(&format!("resource=\"{resource}\""))
                    && l.contains("state=\"streaming\"")
                    && l.ends_with(" 1")),
            "a {resource} listener streams:\n{text}"
        );
    }
}

/// Fails on every document marked `poison` while `broken` is set.
#[derive(Clone)]
struct FailsOnPoison(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl streamward::engine::Handler for FailsOnPoison {
    async fn handle(
        &mut self,
        events: &[streamward::store::ChangeEvent],
        _fence: &streamward::model::Fence,
    ) -> Result<(), streamward::engine::HandlerError> {
        let broken = self.0.load(std::sync::atomic::Ordering::SeqCst);
        let poisoned = events.iter().any(|e| {
            e.full_document
                .as_ref()
                .is_some_and(|d| d.get_bool("poison").unwrap_or(false))
        });
        match broken && poisoned {
            true => Err(streamward::engine::HandlerError::Failed("poison".into())),
            false => Ok(()),
        }
    }
}

/// Listener `w1` of `zoo.animals` from the oldest change, failing on poison until the
/// returned flag is cleared.
fn spawn_failing(
    store: &SandboxStore,
    animals: &Namespace,
    retry_backoff: Duration,
    metrics: &EngineMetrics,
) -> (
    ListenerHandle,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let mut config = ListenerConfig::new("zoo.animals", "w1", animals.clone());
    config.bootstrap = Bootstrap::Oldest;
    config.retry_backoff = retry_backoff;
    let broken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let observer = metrics.observer(&config);
    let listener = ListenerHandle::spawn_observed(
        store.clone(),
        config,
        FailsOnPoison(broken.clone()),
        observer,
    );
    (listener, broken)
}

/// A change the handler fails on: counted per failure, and its attempts shown until a
/// commit gets past it (0 then).
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_change_is_counted_and_its_attempts_shown_until_passed() {
    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    let animals = Namespace::new("zoo", "animals");
    store
        .put(&animals, doc! { "_id": 1, "poison": true })
        .await
        .expect("write");
    let metrics = EngineMetrics::new().expect("metrics");
    let (listener, broken) = spawn_failing(&store, &animals, Duration::from_millis(100), &metrics);
    let labels = "{listener=\"w1\",resource=\"zoo.animals\"}";
    let failures = format!("streamward_listener_change_failures_total{labels}");
    let attempts = format!("streamward_listener_failure_attempts{labels}");
    let read = |series: &str| value(&encode(metrics.registry()).unwrap_or_default(), series);
    until("two failed attempts", || read(&failures) >= Some(2.0)).await;
    let (counted, shown) = (read(&failures), read(&attempts));
    assert!(
        shown >= counted && shown.is_some(),
        "attempts {shown:?} count every listener's, failures {counted:?} this one's"
    );
    broken.store(false, std::sync::atomic::Ordering::SeqCst);
    until("past the change", || read(&attempts) == Some(0.0)).await;
    listener.stop().await;
}

/// The `_id` of a change handed over, and the lag gauge when it was.
type LagSeen = (i32, Option<f64>);

/// Reads the listener's lag gauge each time it is handed a change: the value then is
/// the lag measured after the batch before.
#[derive(Clone)]
struct SeesLag {
    metrics: EngineMetrics,
    series: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<LagSeen>>>,
}

impl streamward::engine::Handler for SeesLag {
    async fn handle(
        &mut self,
        events: &[streamward::store::ChangeEvent],
        _fence: &streamward::model::Fence,
    ) -> Result<(), streamward::engine::HandlerError> {
        let lag = value(
            &encode(self.metrics.registry()).unwrap_or_default(),
            &self.series,
        );
        for event in events {
            let id = event.document_key.get_i32("_id").unwrap_or(-1);
            self.seen.lock().unwrap().push((id, lag));
        }
        Ok(())
    }
}

/// Two changes `gap` apart, read one per batch by a listener started after both: after
/// the first, the stream is the gap behind the cluster time its reply carried; once
/// both are handled and the stream is idle, it is not behind.
async fn a_listener_behind_shows_its_lag<S: streamward::store::Store + DocumentStore>(
    store: S,
    ns: Namespace,
    gap: Duration,
    caught_up_within: f64,
) {
    store.put(&ns, doc! { "_id": 1 }).await.expect("write");
    tokio::time::sleep(gap).await;
    store.put(&ns, doc! { "_id": 2 }).await.expect("write");
    let metrics = EngineMetrics::new().expect("metrics");
    let mut config = ListenerConfig::new("lagging", "w1", ns.clone());
    config.bootstrap = Bootstrap::Oldest;
    config.batch_size = 1;
    config.max_batch_wait = Duration::from_millis(200);
    config.heartbeat = Duration::from_millis(200);
    let series =
        "streamward_listener_lag_seconds{listener=\"w1\",resource=\"lagging\"}".to_string();
    let handler = SeesLag {
        metrics: metrics.clone(),
        series: series.clone(),
        seen: Default::default(),
    };
    let seen = handler.seen.clone();
    let observer = metrics.observer(&config);
    let listener = ListenerHandle::spawn_observed(store.clone(), config, handler, observer);
    let handled = || seen.lock().unwrap().iter().any(|(id, _)| *id == 2);
    for _ in 0..400 {
        if handled() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        handled(),
        "both changes handled: {:?}",
        seen.lock().unwrap()
    );
    let at_second = seen
        .lock()
        .unwrap()
        .iter()
        .find(|(id, _)| *id == 2)
        .and_then(|(_, lag)| *lag);
    let gap_secs = gap.as_secs_f64();
    assert!(
        at_second.is_some_and(|lag| lag >= gap_secs - 1.0),
        "after the first change the stream was {gap_secs}s behind; the gauge said {at_second:?}"
    );
    let read = || value(&encode(metrics.registry()).unwrap_or_default(), &series);
    let mut caught_up = read();
    for _ in 0..100 {
        if caught_up.is_some_and(|lag| lag <= caught_up_within) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        caught_up = read();
    }
    assert!(
        caught_up.is_some_and(|lag| lag <= caught_up_within),
        "idle and caught up, yet the gauge says {caught_up:?}"
    );
    listener.stop().await;
}

#[tokio::test(start_paused = true)]
async fn sandbox_a_listener_behind_shows_its_lag() {
    let clock = Clock::Virtual {
        epoch: chrono::Utc::now(),
        start: tokio::time::Instant::now(),
    };
    let store = SandboxStore::new(SandboxConfig::default(), clock);
    a_listener_behind_shows_its_lag(
        store,
        Namespace::new("zoo", "lag"),
        Duration::from_secs(40),
        0.0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mongo_a_listener_behind_shows_its_lag() {
    support::live::live("engine_lag", |db: support::live::LiveDb| async move {
        let ns = db.ns("lag");
        // The cluster time and the stream's post-batch token are whole seconds apart
        // at most once idle (a write elsewhere, the primary's periodic no-op).
        a_listener_behind_shows_its_lag(db.store, ns, Duration::from_secs(3), 1.0).await;
    })
    .await;
}

/// Waits on tokio's paused clock until `done`, for at most ten virtual minutes.
async fn on_paused_clock(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..6_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("waiting for {what}");
}

/// A change that keeps failing holds the stream where it is while the cluster moves on:
/// the lag grows with every attempt, and falls once the change is passed.
#[tokio::test(start_paused = true)]
async fn a_failing_change_shows_the_lag_growing_behind_it() {
    let clock = Clock::Virtual {
        epoch: chrono::Utc::now(),
        start: tokio::time::Instant::now(),
    };
    let store = SandboxStore::new(SandboxConfig::default(), clock);
    let animals = Namespace::new("zoo", "animals");
    store.put(&animals, doc! { "_id": 1 }).await.expect("write");
    store
        .put(&animals, doc! { "_id": 2, "poison": true })
        .await
        .expect("write");
    let metrics = EngineMetrics::new().expect("metrics");
    let (listener, broken) = spawn_failing(&store, &animals, Duration::from_secs(1), &metrics);
    let labels = "{listener=\"w1\",resource=\"zoo.animals\"}";
    let failures = format!("streamward_listener_change_failures_total{labels}");
    let lag = format!("streamward_listener_lag_seconds{labels}");
    let read = |series: &str| value(&encode(metrics.registry()).unwrap_or_default(), series);
    on_paused_clock("the first failure", || read(&failures).is_some()).await;
    // The cluster moves on a minute; the change still fails.
    tokio::time::sleep(Duration::from_secs(60)).await;
    store.put(&animals, doc! { "_id": 3 }).await.expect("write");
    let seen_before = read(&failures);
    on_paused_clock("another attempt", || read(&failures) != seen_before).await;
    let behind = read(&lag);
    assert!(
        behind.is_some_and(|lag| lag >= 60.0),
        "stuck on a change a minute ago while the cluster moved on, the gauge says {behind:?}"
    );
    broken.store(false, std::sync::atomic::Ordering::SeqCst);
    on_paused_clock("caught up", || read(&lag) == Some(0.0)).await;
    listener.stop().await;
}

/// What a service that counts its own way sees: a `ListenerObserver` of its own, on a
/// `Listener` run by hand (no `ListenerHandle`), is told the acquire, the commits with
/// the changes they cover, and every state the listener goes through.
#[tokio::test(flavor = "multi_thread")]
async fn an_observer_of_ones_own_on_a_listener_run_by_hand_is_told_states_and_commits() {
    use std::sync::{Arc, Mutex};
    use streamward::engine::{Listener, ListenerObserver};
    use tokio_util::sync::CancellationToken;

    #[derive(Default)]
    struct Seen {
        states: Vec<ListenerState>,
        acquired: Vec<i64>,
        committed_events: usize,
    }
    struct Recorder(Arc<Mutex<Seen>>);
    impl ListenerObserver for Recorder {
        fn acquired(&self, version: i64) {
            self.0.lock().unwrap().acquired.push(version);
        }
        fn committed(&self, _took: Duration, _batches: usize, events: usize) {
            self.0.lock().unwrap().committed_events += events;
        }
        fn state(&self, state: ListenerState) {
            self.0.lock().unwrap().states.push(state);
        }
    }

    let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
    let orders = Namespace::new("shop", "orders");
    let mut config = ListenerConfig::new("shop.orders", "own", orders.clone());
    config.bootstrap = Bootstrap::Now;
    config.max_batch_wait = Duration::from_millis(50);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shutdown = CancellationToken::new();
    let listener = Listener::new(store.clone(), config, NoopHandler, shutdown.clone())
        .with_observer(Arc::new(Recorder(seen.clone())));
    let task = tokio::spawn(listener.run());
    until("told it streams", || {
        seen.lock()
            .unwrap()
            .states
            .contains(&ListenerState::Streaming)
    })
    .await;
    for i in 0..5 {
        store
            .put(&orders, doc! { "_id": i })
            .await
            .expect("write an order");
    }
    until("five changes told committed", || {
        seen.lock().unwrap().committed_events == 5
    })
    .await;
    shutdown.cancel();
    task.await.expect("the listener returns");
    until("told it stopped", || {
        seen.lock().unwrap().states.last() == Some(&ListenerState::Stopped)
    })
    .await;
    // One tenure, of a lease this listener created: version 0.
    assert_eq!(seen.lock().unwrap().acquired, [0]);
}
