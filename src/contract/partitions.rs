//! Partitioned streams (docs/protocol.md, "Partitions"): a partition's stream holds the
//! changes of the document keys its hash names (`model::hashed_index_key`, MongoDB's
//! `$toHashedIndexKey`), and every change that is not about one document.

use std::collections::BTreeMap;

use bson::{doc, oid::ObjectId, Bson};

use crate::model::{hashed_index_key, Partition};
use crate::store::{
    ChangeFeed, ChangeStream, DocumentStore, FeedOptions, Namespace, StartPoint, StoreError,
};

use super::support::PATIENCE;
use super::Harness;

/// Keys of several BSON types: strings, 32- and 64-bit integers, ObjectIds, documents.
fn keys(count: usize) -> Vec<Bson> {
    (0..count)
        .map(|i| match i % 5 {
            0 => Bson::String(format!("order-{i}")),
            1 => Bson::Int32(i32::try_from(i).expect("small") - 20),
            2 => Bson::Int64(i64::try_from(i).expect("small") * 1_000_000_007),
            3 => Bson::ObjectId(ObjectId::new()),
            _ => Bson::Document(doc! { "region": "eu", "seq": i64::try_from(i).expect("small") }),
        })
        .collect()
}

/// A key as text, the same for every BSON type used here.
fn key_text(id: &Bson) -> String {
    id.clone().into_relaxed_extjson().to_string()
}

/// The partition `count` ways that holds `key`, by the hash computed here.
fn partition_of(key: &Bson, count: u32) -> u32 {
    Partition::of_hash(hashed_index_key(key).expect("hashable"), count)
}

/// Each insert reaches exactly the partition the hash here names, and a drop reaches
/// (closes) every partition's stream.
pub async fn each_change_reaches_the_partition_its_hash_names_and_a_drop_reaches_all<
    H: Harness<Store: ChangeFeed + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns: Namespace = h.ns("orders");
    let start = store.cluster_time().await.expect("cluster time");
    let keys = keys(25);
    for key in &keys {
        store
            .put(&ns, doc! { "_id": key.clone(), "n": 0_i64 })
            .await
            .expect("write");
    }
    store.drop_collection(&ns).await.expect("drop");
    let options = FeedOptions {
        batch_size: 100,
        max_await: std::time::Duration::from_millis(300),
        ..Default::default()
    };
    let mut seen = BTreeMap::new();
    for partition in Partition::all(3).expect("valid") {
        let mut stream = store
            .open_partition(&ns, Some(partition), StartPoint::At(start), options)
            .await
            .expect("open a partition's stream");
        let closed = tokio::time::timeout(PATIENCE, async {
            loop {
                match stream.next_batch().await {
                    Ok(batch) => {
                        for event in batch.events {
                            let id = event.document_key.get("_id").cloned();
                            let id = id.expect("a document change has _id");
                            seen.insert(key_text(&id), partition.index());
                        }
                    }
                    Err(e) => break e,
                }
            }
        })
        .await
        .expect("the drop closes every partition's stream");
        assert!(
            matches!(closed, StoreError::Invalidated { .. }),
            "{partition}: {closed}"
        );
    }
    assert_eq!(seen.len(), keys.len(), "every insert reached one partition");
    for key in &keys {
        assert_eq!(
            seen.get(&key_text(key)),
            Some(&partition_of(key, 3)),
            "{key}"
        );
    }
}
