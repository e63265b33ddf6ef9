//! Checks of the demo's per-member fenced upsert ([`FencedMemberWrites`]), held to the
//! same standard on both stores as the store contract ([`crate::contract`]): each member
//! of a document fenced by its own version, and the counts recomputed in the same
//! write. Not a store port, so not a contract group; `tests/contract_sandbox.rs` and
//! `tests/contract_mongo.rs` run them beside it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bson::{doc, Bson, Document};

use super::FencedMemberWrites;
use crate::contract::{assert_made_at_its_cluster_time, options, read_through, Harness};
use crate::store::{ChangeFeed, DocumentStore, Namespace, OperationType, StartPoint, WriteOutcome};

use WriteOutcome::{Applied, Stale};

async fn read(store: &impl DocumentStore, ns: &Namespace, id: &str) -> Option<Document> {
    store
        .find_one(ns, &Bson::String(id.into()))
        .await
        .expect("find_one")
}

pub async fn member_upserts_fence_each_member_and_recount<
    H: Harness<Store: FencedMemberWrites + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("aggregates");
    // (member, its version, its location, outcome), in order.
    let steps = [
        ("a.b$c", 1, Some("house"), Applied),
        ("rex", 1, Some("house"), Applied),
        ("rex", 1, Some("yard"), Stale),
        ("rex", 2, Some("backyard"), Applied),
        ("rex", 2, Some("house"), Stale),
        ("kiki", 5, Some("backyard"), Applied),
        ("rex", 1, Some("yard"), Stale),
    ];
    for (member, version, value, outcome) in steps {
        let written = store
            .fenced_member_upsert(&ns, "cute", member, version, value)
            .await
            .unwrap();
        assert_eq!(written, outcome, "{member} v{version} at {value:?}");
    }
    let expected = doc! {
        "_id": "cute",
        "members": {
            "a.b$c": {"v": 1_i64, "value": "house"},
            "rex": {"v": 2_i64, "value": "backyard"},
            "kiki": {"v": 5_i64, "value": "backyard"},
        },
        "counts": {"house": 1, "backyard": 2},
    };
    assert_eq!(
        read(store, &ns, "cute").await,
        Some(expected),
        "members with their versions; counts recomputed in the same write, as int32"
    );
    // A member that leaves (no value) is no longer counted.
    assert_eq!(
        store
            .fenced_member_upsert(&ns, "cute", "kiki", 6, None)
            .await
            .unwrap(),
        Applied
    );
    let tag = read(store, &ns, "cute").await.unwrap();
    assert_eq!(
        tag.get_document("members").unwrap().get_document("kiki"),
        Ok(&doc! {"v": 6_i64, "value": Bson::Null})
    );
    assert_eq!(
        tag.get_document("counts"),
        Ok(&doc! {"house": 1, "backyard": 1})
    );
}

/// A member's version written by another client: a missing or null version is below
/// every version; a version of another type refuses every write, as MongoDB's query does.
pub async fn member_fences_stored_by_other_clients_compare_like_mongodb<
    H: Harness<Store: FencedMemberWrites + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("foreign");
    let members = [
        (Bson::Null, Applied),
        (Bson::Double(2.0), Applied),
        (Bson::Double(3.0), Stale),
        (Bson::String("1".into()), Stale),
    ];
    for (i, (stored, expected)) in members.into_iter().enumerate() {
        let id = format!("tag-{i}");
        store
            .put(
                &ns,
                doc! {"_id": &id, "members": {"rex": {"v": stored.clone(), "value": "house"}}},
            )
            .await
            .unwrap();
        let written = store
            .fenced_member_upsert(&ns, &id, "rex", 3, Some("yard"))
            .await
            .unwrap();
        assert_eq!(written, expected, "member version stored as {stored:?}");
    }
}

/// A member upsert that creates its document is an insert carrying the document; one
/// that changes it is a pipeline update, which MongoDB logs as an update or as a
/// replacement, as its diff is smaller or not: either carries the document.
pub async fn member_upserts_reach_the_feed_as_an_insert_then_a_change<
    H: Harness<Store: FencedMemberWrites + DocumentStore + ChangeFeed>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("animals");
    let start = store.cluster_time().await.unwrap();
    let mut stream = store
        .open(&ns, StartPoint::At(start), options())
        .await
        .unwrap();
    store
        .fenced_member_upsert(&ns, "tag", "rex", 1, Some("house"))
        .await
        .unwrap();
    let inserted = read_through(&mut stream, "tag").await;
    store
        .fenced_member_upsert(&ns, "tag", "kiki", 1, Some("yard"))
        .await
        .unwrap();
    let changed = read_through(&mut stream, "tag").await;
    let (member_insert, member_update) = match (&inserted[..], &changed[..]) {
        ([insert], [update]) => (insert, update),
        _ => panic!("one event per write: {inserted:?}, {changed:?}"),
    };
    assert_eq!(member_insert.ns, ns, "only the stream's namespace");
    assert_eq!(member_insert.operation, OperationType::Insert);
    assert_eq!(member_insert.document_key, doc! {"_id": "tag"});
    assert_eq!(
        member_insert.full_document,
        Some(doc! {
            "_id": "tag",
            "members": {"rex": {"v": 1_i64, "value": "house"}},
            "counts": {"house": 1},
        }),
        "the document after the change"
    );
    assert_eq!(member_insert.details.update_description, None);
    assert_made_at_its_cluster_time(member_insert);
    assert!(
        matches!(
            member_update.operation,
            OperationType::Update | OperationType::Replace
        ),
        "{member_update:?}"
    );
    let tag = read(store, &ns, "tag").await;
    assert_eq!(member_update.full_document, tag);
    assert!(
        member_insert.cluster_time < member_update.cluster_time,
        "cluster times strictly increase"
    );
}

/// Calls `$run!(member_writes; check, …)` with every check of this file, as
/// [`crate::contract::checks!`] does for the contract's groups: the one list of them.
#[doc(hidden)]
#[macro_export]
macro_rules! __member_writes_checks {
    ($run:ident) => {
        $run!(member_writes;
            member_upserts_fence_each_member_and_recount,
            member_fences_stored_by_other_clients_compare_like_mongodb,
            member_upserts_reach_the_feed_as_an_insert_then_a_change,
        );
    };
}
pub use crate::__member_writes_checks as checks;
