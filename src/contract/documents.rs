//! The two fenced-write patterns and the plain writes (`src/store/documents.rs`).

use crate::model::Fence;
use crate::store::{
    ChangeFeed, DocumentStore, Namespace, OperationType, StartPoint, StoreError, WriteFence,
    WriteOutcome,
};
use bson::{doc, Bson, Document};

use super::support::*;
use super::Harness;

use WriteOutcome::{Applied, Stale};

fn lease_fence(version: i64) -> WriteFence {
    WriteFence::Lease(Fence {
        resource: "res".into(),
        version,
    })
}

async fn read(store: &impl DocumentStore, ns: &Namespace, id: &str) -> Option<Document> {
    store
        .find_one(ns, &Bson::String(id.into()))
        .await
        .expect("find_one")
}

pub async fn lease_fenced_writes_admit_the_same_or_a_newer_version<
    H: Harness<Store: DocumentStore + ChangeFeed>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("outbox");
    let id = Bson::String("m1".into());
    // (lease version, value written, outcome, the document after it).
    let steps = [
        (2, 1, Applied, doc! {"_id": "m1", "x": 1, "_fence": 2_i64}),
        (2, 2, Applied, doc! {"_id": "m1", "x": 2, "_fence": 2_i64}),
        (1, 3, Stale, doc! {"_id": "m1", "x": 2, "_fence": 2_i64}),
        (3, 4, Applied, doc! {"_id": "m1", "x": 4, "_fence": 3_i64}),
        (0, 5, Stale, doc! {"_id": "m1", "x": 4, "_fence": 3_i64}),
    ];
    for (version, x, outcome, expected) in steps {
        let written = store
            .fenced_upsert(&ns, &id, &lease_fence(version), doc! {"x": x})
            .await
            .unwrap();
        assert_eq!(written, outcome, "lease version {version} writing x = {x}");
        assert_eq!(
            read(store, &ns, "m1").await,
            Some(expected),
            "after version {version}"
        );
    }
    // A document the application wrote without a fence admits any holder, which fences it.
    store.put(&ns, doc! {"_id": "plain", "y": 1}).await.unwrap();
    let plain = Bson::String("plain".into());
    assert_eq!(
        store
            .fenced_upsert(&ns, &plain, &lease_fence(0), doc! {"x": 1})
            .await
            .unwrap(),
        Applied
    );
    assert_eq!(
        read(store, &ns, "plain").await,
        Some(doc! {"_id": "plain", "y": 1, "x": 1, "_fence": 0_i64}),
        "fields are set, others kept"
    );
}

pub async fn source_versioned_writes_admit_only_a_newer_version<
    H: Harness<Store: DocumentStore + ChangeFeed>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("projection");
    let id = Bson::String("rex".into());
    // (source version, value written, outcome, the document after it).
    let steps = [
        (3, 3, Applied, doc! {"_id": "rex", "n": 3, "_v": 3_i64}),
        (3, 9, Stale, doc! {"_id": "rex", "n": 3, "_v": 3_i64}),
        (2, 9, Stale, doc! {"_id": "rex", "n": 3, "_v": 3_i64}),
        (4, 4, Applied, doc! {"_id": "rex", "n": 4, "_v": 4_i64}),
    ];
    for (version, n, outcome, expected) in steps {
        let written = store
            .fenced_upsert(&ns, &id, &WriteFence::SourceVersion(version), doc! {"n": n})
            .await
            .unwrap();
        assert_eq!(written, outcome, "source version {version} writing n = {n}");
        assert_eq!(
            read(store, &ns, "rex").await,
            Some(expected),
            "after v{version}"
        );
    }
}

/// Fences written by another client (a shell stores numbers as doubles) compare by
/// value; a fence that is not a number refuses every write, as MongoDB's query does.
pub async fn fences_stored_by_other_clients_compare_like_mongodb<
    H: Harness<Store: DocumentStore + ChangeFeed>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("foreign");
    // (stored fence, outcome of a lease-fenced write at 3, of a source-versioned write at 3).
    let cases = [
        (Bson::Int32(2), Applied, Applied),
        (Bson::Double(2.0), Applied, Applied),
        (Bson::Double(3.0), Applied, Stale),
        (Bson::Double(5.0), Stale, Stale),
        (Bson::Int64(4), Stale, Stale),
        (Bson::String("2".into()), Stale, Stale),
        (Bson::Null, Stale, Stale),
    ];
    for (i, (stored, by_lease, by_source)) in cases.into_iter().enumerate() {
        for (field, fence, expected) in [
            ("_fence", lease_fence(3), by_lease),
            ("_v", WriteFence::SourceVersion(3), by_source),
        ] {
            let id = format!("{field}-{i}");
            let original = doc! {"_id": &id, field: stored.clone(), "x": 0};
            store.put(&ns, original.clone()).await.unwrap();
            let written = store
                .fenced_upsert(&ns, &Bson::String(id.clone()), &fence, doc! {"x": 1})
                .await
                .unwrap();
            assert_eq!(written, expected, "{field} stored as {stored:?}");
            let now = read(store, &ns, &id).await.unwrap();
            if expected == Stale {
                assert_eq!(now, original, "a refused write changes nothing");
            } else {
                assert_eq!(now.get_i64(field), Ok(3), "the fence is stored as int64");
            }
        }
    }
}

pub async fn fenced_upsert_refuses_an_id_among_the_fields<
    H: Harness<Store: DocumentStore + ChangeFeed>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("outbox");
    let outcome = store
        .fenced_upsert(
            &ns,
            &Bson::String("m1".into()),
            &lease_fence(1),
            doc! {"_id": "other", "x": 1},
        )
        .await;
    assert!(
        matches!(outcome, Err(StoreError::InvalidArgument(_))),
        "{outcome:?}"
    );
    assert_eq!(
        store.find_all(&ns).await.unwrap(),
        vec![],
        "nothing written"
    );
}

pub async fn plain_writes_replace_whole_documents_and_read_in_id_order<
    H: Harness<Store: DocumentStore + ChangeFeed>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("plain");
    assert_eq!(store.find_all(&ns).await.unwrap(), vec![]);
    for id in [9, 10, 2] {
        store.put(&ns, doc! {"_id": id, "n": id}).await.unwrap();
    }
    store.put(&ns, doc! {"_id": 9, "m": 1}).await.unwrap();
    assert_eq!(
        store.find_one(&ns, &Bson::Int32(9)).await.unwrap(),
        Some(doc! {"_id": 9, "m": 1}),
        "put replaces the whole document"
    );
    assert_eq!(store.find_one(&ns, &Bson::Int32(3)).await.unwrap(), None);
    assert_eq!(
        store.find_all(&ns).await.unwrap(),
        vec![
            doc! {"_id": 2, "n": 2},
            doc! {"_id": 9, "m": 1},
            doc! {"_id": 10, "n": 10}
        ],
        "sorted by _id in MongoDB's order: numbers by value"
    );
    let no_id = store.put(&ns, doc! {"n": 1}).await;
    assert!(
        matches!(no_id, Err(StoreError::InvalidArgument(_))),
        "{no_id:?}"
    );

    let refused = store
        .replace_all(&ns, vec![doc! {"_id": 1}, doc! {"n": 1}])
        .await;
    assert!(
        matches!(refused, Err(StoreError::InvalidArgument(_))),
        "{refused:?}"
    );
    assert_eq!(
        store.find_all(&ns).await.unwrap().len(),
        3,
        "nothing written"
    );
    store
        .replace_all(&ns, vec![doc! {"_id": 10, "z": 1}, doc! {"_id": 11}])
        .await
        .unwrap();
    assert_eq!(
        store.find_all(&ns).await.unwrap(),
        vec![doc! {"_id": 10, "z": 1}, doc! {"_id": 11}],
        "replace_all leaves exactly the documents given"
    );
}

pub async fn deletes_remove_by_id_or_by_field_each_a_delete_change<
    H: Harness<Store: DocumentStore + ChangeFeed>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("messages");
    for (id, order) in [("m1", "o1"), ("m2", "o2"), ("m3", "o1"), ("m4", "o3")] {
        store
            .put(&ns, doc! {"_id": id, "order": order})
            .await
            .unwrap();
    }
    store
        .put(&ns, doc! {"_id": "m5", "order": 7_i64})
        .await
        .unwrap();
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();

    let m4 = Bson::String("m4".into());
    assert!(store.delete_one(&ns, &m4).await.unwrap(), "m4 was there");
    assert!(
        !store.delete_one(&ns, &m4).await.unwrap(),
        "deleting again deletes nothing"
    );
    let o1 = Bson::String("o1".into());
    assert_eq!(store.delete_where(&ns, "order", &o1).await.unwrap(), 2);
    assert_eq!(store.delete_where(&ns, "order", &o1).await.unwrap(), 0);
    assert_eq!(
        store
            .delete_where(&ns, "order", &Bson::Int32(7))
            .await
            .unwrap(),
        1,
        "numbers match by value across types"
    );
    for (field, value) in [
        ("order", Bson::Document(doc! {"$ne": "o2"})),
        ("$where", Bson::String("true".into())),
    ] {
        let refused = store.delete_where(&ns, field, &value).await;
        assert!(
            matches!(refused, Err(StoreError::InvalidArgument(_))),
            "{field} {value}: {refused:?}"
        );
    }
    assert_eq!(
        store.find_all(&ns).await.unwrap(),
        vec![doc! {"_id": "m2", "order": "o2"}]
    );

    // The stream starts at the cluster time of the last insert, which it includes.
    let events = read_until(&mut stream, "four deletes", {
        let mut seen = 0;
        move |e| {
            seen += usize::from(e.operation != OperationType::Insert);
            seen == 4
        }
    })
    .await;
    let deleted: Vec<(OperationType, Option<&Bson>, bool)> = events
        .iter()
        .filter(|e| e.operation != OperationType::Insert)
        .map(|e| {
            (
                e.operation.clone(),
                e.document_key.get("_id"),
                e.full_document.is_some(),
            )
        })
        .collect();
    let (m1, m3, m5) = (Bson::from("m1"), Bson::from("m3"), Bson::from("m5"));
    assert_eq!(
        deleted,
        vec![
            (OperationType::Delete, Some(&m4), false),
            (OperationType::Delete, Some(&m1), false),
            (OperationType::Delete, Some(&m3), false),
            (OperationType::Delete, Some(&m5), false),
        ],
        "one delete change per document, without a document"
    );
}
