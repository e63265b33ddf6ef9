//! Checkpoints (`CheckpointStore`): a bounded history of each resource's committed
//! resume points, newest first by fencing version.

use crate::model::{ClusterTime, ResumeToken, TokenKind};
use crate::store::{CheckpointStore, Tenure};

use super::Harness;

fn token(secs: u32) -> ResumeToken {
    ResumeToken::encode(
        ClusterTime::new(1_800_000_000 + secs, 1),
        TokenKind::Event,
        0,
    )
}

fn tenure(resource: &str, listener: &str, version: i64) -> Tenure {
    Tenure {
        resource: resource.into(),
        listener: listener.into(),
        version,
    }
}

/// Each resource keeps its newest `kept`, listed newest first, at most `limit` of them;
/// another resource's are its own.
pub async fn the_newest_kept_are_listed_newest_first<H: Harness<Store: CheckpointStore>>(h: &H) {
    let store = h.store();
    for version in 1..=5 {
        let secs = u32::try_from(version).expect("small");
        store
            .record_checkpoint(&tenure("kept", "holder", version), &token(secs), 3)
            .await
            .expect("record");
    }
    store
        .record_checkpoint(&tenure("other", "holder", 1), &token(9), 3)
        .await
        .expect("record");
    let listing = store.checkpoints("kept", 10).await.expect("list");
    assert!(listing.malformed.is_empty(), "{:?}", listing.malformed);
    let listed: Vec<(i64, &str, &ResumeToken)> = listing
        .items
        .iter()
        .map(|c| (c.version, c.holder.as_str(), &c.token))
        .collect();
    assert_eq!(
        listed,
        [
            (5, "holder", &token(5)),
            (4, "holder", &token(4)),
            (3, "holder", &token(3))
        ],
        "the newest three, newest first"
    );
    assert!(
        listing.items.iter().all(|c| c.resource == "kept"),
        "{listing:?}"
    );
    let two = store.checkpoints("kept", 2).await.expect("list").items;
    assert_eq!(
        two.iter().map(|c| c.version).collect::<Vec<_>>(),
        [5, 4],
        "at most the limit"
    );
    let other = store.checkpoints("other", 10).await.expect("list").items;
    assert_eq!(other.len(), 1, "{other:?}");
    let none = store.checkpoints("never", 10).await.expect("list");
    assert!(
        none.items.is_empty() && none.malformed.is_empty(),
        "{none:?}"
    );
}

/// A late checkpoint of an ex-holder (a lower fencing version, recorded after its
/// successor's) is listed below it, and trimmed first: whatever the clocks say, the
/// newest is the current tenure's.
pub async fn a_late_checkpoint_of_an_ex_holder_sorts_below<H: Harness<Store: CheckpointStore>>(
    h: &H,
) {
    let store = h.store();
    store
        .record_checkpoint(&tenure("late", "successor", 8), &token(20), 2)
        .await
        .expect("record");
    store
        .record_checkpoint(&tenure("late", "ex-holder", 7), &token(10), 2)
        .await
        .expect("record");
    store
        .record_checkpoint(&tenure("late", "successor", 8), &token(30), 2)
        .await
        .expect("record");
    let listed = store.checkpoints("late", 10).await.expect("list").items;
    let shown: Vec<(&str, i64)> = listed
        .iter()
        .map(|c| (c.holder.as_str(), c.version))
        .collect();
    assert_eq!(shown, [("successor", 8), ("successor", 8)], "{listed:?}");
    assert_eq!(listed[0].token, token(30));
}
