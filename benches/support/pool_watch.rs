//! What the driver's connection pool made commands wait, from its own events: for each
//! command (by name and collection), how long its connection checkout waited and how
//! long the server took to answer. Recorded only while switched on.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mongodb::event::cmap::CmapEvent;
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;

#[derive(Default)]
struct Inner {
    /// The checkout wait of each connection checked out and not yet used by a command.
    checked_out: HashMap<u32, Duration>,
    /// The command each request in flight is, while recording.
    in_flight: HashMap<i32, String>,
    /// Per command: checkout waits, then server round trips.
    by_command: BTreeMap<String, (Vec<Duration>, Vec<Duration>)>,
}

/// Checkout waits and round trips per command, while `on`.
#[derive(Clone, Default)]
pub struct PoolWatch {
    inner: Arc<Mutex<Inner>>,
    on: Arc<AtomicBool>,
}

impl PoolWatch {
    /// Hooks this watch into the driver's pool and command events.
    pub fn install(&self, options: &mut ClientOptions) {
        let watch = self.clone();
        options.cmap_event_handler = Some(EventHandler::callback(move |event: CmapEvent| {
            if let CmapEvent::ConnectionCheckedOut(out) = event {
                watch
                    .lock()
                    .checked_out
                    .insert(out.connection_id, out.duration);
            }
        }));
        let watch = self.clone();
        options.command_event_handler = Some(EventHandler::callback(move |event: CommandEvent| {
            let on = watch.on.load(Ordering::SeqCst);
            let mut inner = watch.lock();
            match event {
                CommandEvent::Started(started) => {
                    let waited = inner.checked_out.remove(&started.connection.id);
                    if on {
                        let name = started.command_name.as_str();
                        // getMore names its collection in `collection`, the rest under their name.
                        let field = if name == "getMore" {
                            "collection"
                        } else {
                            name
                        };
                        let key = match started.command.get_str(field) {
                            Ok(collection) => format!("{name} {collection}"),
                            Err(_) => name.to_string(),
                        };
                        let entry = inner.by_command.entry(key.clone()).or_default();
                        entry.0.push(waited.unwrap_or_default());
                        inner.in_flight.insert(started.request_id, key);
                    }
                }
                CommandEvent::Succeeded(done) => {
                    if let Some(key) = inner.in_flight.remove(&done.request_id) {
                        inner
                            .by_command
                            .entry(key)
                            .or_default()
                            .1
                            .push(done.duration);
                    }
                }
                CommandEvent::Failed(failed) => {
                    if let Some(key) = inner.in_flight.remove(&failed.request_id) {
                        inner
                            .by_command
                            .entry(key)
                            .or_default()
                            .1
                            .push(failed.duration);
                    }
                }
                _ => {}
            }
        }));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts recording, from nothing.
    pub fn start(&self) {
        let mut inner = self.lock();
        inner.by_command.clear();
        inner.in_flight.clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// Stops recording; one line per command, the longest checkout waits first:
    /// `count`, checkout wait p50/p99/max, round trip p50/p99.
    pub fn stop(&self) -> Vec<String> {
        self.on.store(false, Ordering::SeqCst);
        let inner = self.lock();
        let mut rows: Vec<(Duration, String)> = inner
            .by_command
            .iter()
            .filter(|(_, (waits, _))| !waits.is_empty())
            .map(|(key, (waits, trips))| {
                let (mut waits, mut trips) = (waits.clone(), trips.clone());
                waits.sort();
                trips.sort();
                let p = |v: &[Duration], p: f64| {
                    if v.is_empty() {
                        return Duration::ZERO;
                    }
                    let rank = ((v.len() as f64) * p).ceil() as usize;
                    v[rank.clamp(1, v.len()) - 1]
                };
                let max = waits.last().copied().unwrap_or_default();
                (
                    p(&waits, 0.99),
                    format!(
                        "{key}: {} commands, waited for a connection p50 {:.1?} p99 {:.1?} max \
                         {max:.1?}; answered in p50 {:.1?} p99 {:.1?}",
                        waits.len(),
                        p(&waits, 0.5),
                        p(&waits, 0.99),
                        p(&trips, 0.5),
                        p(&trips, 0.99),
                    ),
                )
            })
            .collect();
        rows.sort_by_key(|(wait, _)| std::cmp::Reverse(*wait));
        rows.into_iter().map(|(_, row)| row).collect()
    }
}
