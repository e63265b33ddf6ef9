//! History that falls off (DESIGN §3 "History lost"): on a history that really rolls
//! over, a resume point behind its first entry is lost on open and on a later read,
//! never silently skipped; the first entry itself can always be opened.

use crate::model::ResumeToken;
use crate::store::{ChangeFeed, ChangeStream, DocumentStore, Namespace, StartPoint};
use bson::doc;

use super::support::*;
use super::RollingHistory;

/// The token of a change to `ns` the store itself issued.
async fn issued_token<H: RollingHistory<Store: ChangeFeed + DocumentStore>>(
    h: &H,
    ns: &Namespace,
) -> ResumeToken {
    let store = h.store();
    // Opened before the write, at the present: nothing can have rolled off yet.
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(ns, StartPoint::At(start), options())
        .await
        .unwrap();
    store.put(ns, doc! {"_id": "e1"}).await.unwrap();
    read_through(&mut stream, "e1").await.remove(0).token
}

pub async fn a_resume_point_that_fell_off_is_lost_on_open<
    H: RollingHistory<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let token = issued_token(h, &ns).await;
    let time = token.time().expect("an issued token decodes");
    h.roll_history_past(time).await;
    for start in [StartPoint::After(token), StartPoint::At(time)] {
        let opened = store.open(&ns, start.clone(), options()).await;
        assert!(
            is_history_lost(&opened),
            "{start:?} behind the first entry: {:?}",
            opened.map(|_| "opened")
        );
    }
}

pub async fn a_stream_whose_position_fell_off_is_lost_on_its_next_read<
    H: RollingHistory<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let token = issued_token(h, &ns).await;
    let mut stream = store
        .open(&ns, StartPoint::After(token), options())
        .await
        .unwrap();
    let batch = stream.next_batch().await.unwrap();
    let position = batch
        .resume_token
        .and_then(|t| t.time())
        .expect("a post-batch token that decodes");
    // Paused here while the history rolls over past the stream's position.
    h.roll_history_past(position).await;
    let read = stream.next_batch().await;
    assert!(
        is_history_lost(&read),
        "the next read after the position fell off: {read:?}"
    );
}

pub async fn the_first_entry_of_a_rolled_history_can_be_opened<
    H: RollingHistory<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let token = issued_token(h, &ns).await;
    h.roll_history_past(token.time().unwrap()).await;
    store.put(&ns, doc! {"_id": "e2"}).await.unwrap();
    // A real oplog far over its size is truncated at every checkpoint until it fits
    // again: wait (boundedly) until its first entry stays put between two reads.
    let mut first = store.oplog_window().await.unwrap().first;
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
        let now = store.oplog_window().await.unwrap().first;
        if now == first {
            break;
        }
        first = now;
    }
    // Other writers may still roll the history on between reading the window and
    // opening: then, and only then, the open may be lost, and the window must show it moved.
    for _ in 0..20 {
        let window = store.oplog_window().await.unwrap();
        let opened = store
            .open(&ns, StartPoint::At(window.first), options())
            .await;
        let read = match opened {
            Ok(mut stream) => read_first(&mut stream).await,
            Err(e) => Err(e),
        };
        match read {
            Ok(events) => {
                assert!(
                    !ids(&events).contains(&"e1".to_string()),
                    "e1 fell off before the first entry: {events:?}"
                );
                return;
            }
            Err(e) => {
                let moved = store.oplog_window().await.unwrap().first;
                assert!(
                    moved > window.first,
                    "opening at the first entry {:?} was refused although it did not move: {e}",
                    window.first
                );
            }
        }
    }
    panic!("the history kept rolling over faster than a stream could open at its first entry");
}

/// Reads up to e2 (the events of the namespace still held), or the first error.
async fn read_first(
    stream: &mut impl ChangeStream,
) -> Result<Vec<crate::store::ChangeEvent>, crate::store::StoreError> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    loop {
        let batch = stream.next_batch().await?;
        seen.extend(batch.events);
        if ids(&seen).contains(&"e2".to_string()) {
            return Ok(seen);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "e2 did not arrive within {PATIENCE:?}"
        );
    }
}
