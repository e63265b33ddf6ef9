use std::sync::{Arc, Mutex};

use chrono::{TimeDelta, TimeZone, Utc};
use tracing_subscriber::layer::SubscriberExt;

use super::*;
use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
use crate::store::StoreError;

/// The waits double from a quarter second and stop at five seconds.
#[test]
fn the_retry_waits_double_up_to_their_bound() {
    let waits: Vec<u128> = [1, 2, 3, 4, 5, 6, 40, u32::MAX]
        .iter()
        .map(|&n| retry_delay(n).as_millis())
        .collect();
    assert_eq!(waits, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
}

/// Stopped keeps when it stopped and counts the failures; the first write after
/// says it resumed and after how long; the screen says each, the resume for a
/// minute only.
#[test]
fn the_status_says_when_the_workload_stopped_and_when_it_resumed() {
    let t0 = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("valid date");
    let at = |secs: i64| t0 + TimeDelta::seconds(secs);
    let writing = WorkloadStatus::default();
    assert_eq!(writing.headline(t0), None);
    assert_eq!(writing.wrote(t0), writing, "writing stays writing");
    let stopped = writing
        .failed("no primary".into(), at(0))
        .failed("no primary\u{1b}[2J".into(), at(3));
    assert_eq!(
        stopped,
        WorkloadStatus::Stopped {
            since: at(0),
            error: "no primary\u{1b}[2J".into(),
            failures: 2
        }
    );
    let line = stopped.headline(at(20)).expect("said while stopped");
    assert!(
        line.starts_with("workload stopped writing 20s ago (2 failed")
            && line.ends_with("no primary\\u{1b}[2J"),
        "{line}"
    );
    let resumed = stopped.wrote(at(21));
    assert_eq!(
        resumed,
        WorkloadStatus::Writing {
            resumed: Some(Resumed {
                at: at(21),
                after: Duration::from_secs(21)
            })
        }
    );
    let line = resumed.headline(at(30)).expect("said after resuming");
    assert_eq!(line, "workload resumed writing 9s ago, after 21s stopped");
    assert_eq!(resumed.headline(at(21 + 61)), None, "for a minute");
}

#[derive(Clone, Default)]
struct LogCapture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogCapture {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields(format!("{} ", event.metadata().level()));
        event.record(&mut fields);
        self.0.lock().expect("log lock").push(fields.0);
    }
}

/// Writes that fail (as while a replica set has no primary) do not end the
/// workload: it says it stopped, on its status and in the log, tries again with
/// waits of at most [`WORKLOAD_RETRY_MAX`], and resumes within that of the writes
/// going through again, saying so.
#[tokio::test(start_paused = true)]
async fn a_workload_whose_writes_fail_says_so_retries_and_resumes() {
    let log = LogCapture::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(log.clone()));
    let epoch = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("valid date");
    let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
    let ns = DemoNamespaces::default();
    let written = || store.document_count(&ns.animals) + store.document_count(&ns.orders);
    let workload = Workload::new(store.clone(), WorkloadConfig::default());
    let mut status = workload.status();
    let stop = CancellationToken::new();
    let task = tokio::spawn(workload.run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(written() > 0, "writing before the fault");

    for ns in [&ns.animals, &ns.orders] {
        store.fail_writes_to(ns, Some(StoreError::Unreachable("no primary".into())));
    }
    tokio::time::timeout(
        Duration::from_secs(1),
        status.wait_for(|s| matches!(s, WorkloadStatus::Stopped { .. })),
    )
    .await
    .expect("stopped is said at the first failed write")
    .expect("the workload runs");
    let at_stop = written();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(!task.is_finished(), "a failed write does not end it");
    assert_eq!(written(), at_stop, "nothing written while writes fail");
    let stopped = status.borrow().clone();
    match &stopped {
        WorkloadStatus::Stopped {
            error, failures, ..
        } => {
            assert!(error.contains("no primary"), "{error}");
            // 0.25 + 0.5 + 1 + 2 + 4 + 5 + 5 s: tried again, not hammered.
            assert!((5..=10).contains(failures), "{failures} tries in 20 s");
        }
        other => panic!("expected stopped, got {other:?}"),
    }
    let warned = log.0.lock().expect("log lock").clone();
    let warnings: Vec<&String> = warned
        .iter()
        .filter(|l| l.starts_with("WARN") && l.contains("stopped writing"))
        .collect();
    assert_eq!(warnings.len(), 1, "said once per stop: {warned:?}");
    assert!(warnings[0].contains("no primary"), "{warnings:?}");

    for ns in [&ns.animals, &ns.orders] {
        store.fail_writes_to(ns, None);
    }
    tokio::time::timeout(
        WORKLOAD_RETRY_MAX + Duration::from_secs(1),
        status.wait_for(|s| matches!(s, WorkloadStatus::Writing { resumed: Some(_) })),
    )
    .await
    .expect("resumed within the longest wait")
    .expect("the workload runs");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(written() > at_stop, "writing again");
    let resumed = log.0.lock().expect("log lock").clone();
    assert!(
        resumed
            .iter()
            .any(|l| l.starts_with("INFO") && l.contains("resumed writing")),
        "{resumed:?}"
    );
    stop.cancel();
    assert!(task.await.expect("the workload task") > 0);
}

#[tokio::test(start_paused = true)]
async fn the_shop_keeps_only_its_newest_orders() {
    let epoch = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("valid date");
    let store = SandboxStore::new(SandboxConfig::default(), Clock::virtual_from(epoch));
    let kept = 30;
    let mut workload = Workload::new(
        store.clone(),
        WorkloadConfig {
            orders_kept: kept,
            order_share: 0.5,
            ..WorkloadConfig::default()
        },
    );
    let orders = DemoNamespaces::default().orders;
    for _ in 0..2_000 {
        workload.step().await.expect("write");
        assert!(store.document_count(&orders) <= kept);
    }
    assert!(
        workload.placed > 10 * kept as u64,
        "placed {} orders: enough to retire many",
        workload.placed
    );
    let stored: Vec<(String, usize)> = store
        .find_all(&orders)
        .await
        .expect("read")
        .iter()
        .map(|d| {
            let id = d.get_str("_id").expect("id").to_string();
            let status = d.get_str("status").expect("status");
            let state = ORDER_STATES.iter().position(|s| *s == status);
            (id, state.expect("a known status"))
        })
        .collect();
    let remembered: Vec<(String, usize)> = workload.orders().collect();
    assert_eq!(stored, remembered, "the workload remembers what it holds");
    let newest: Vec<String> = (workload.placed + 1 - kept as u64..=workload.placed)
        .map(order_id)
        .collect();
    let held: Vec<String> = stored.into_iter().map(|(id, _)| id).collect();
    assert_eq!(held, newest, "the oldest were retired");
}
