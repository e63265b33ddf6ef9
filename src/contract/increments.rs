//! The two-step idempotent increment's writes (`IncrementStore`, docs/increments.md):
//! step 1 adds a pending token once, step 2 counts it once, a document remembers its
//! last applied tokens, and the cleanup's fold is conditional on what it read.

use bson::{doc, Bson, Document};

use crate::store::{
    Counter, DocumentStore, FoldOutcome, IncrementStore, Namespace, PendingDocument, StoreError,
};

use super::Harness;

async fn stored(store: &impl DocumentStore, ns: &Namespace, id: &Bson) -> Document {
    store
        .find_one(ns, id)
        .await
        .expect("read the counted document")
        .expect("the counted document exists")
}

/// The counter as a number; a missing one is 0.
fn number(document: &Document, field: &str) -> i64 {
    match document.get(field) {
        None => 0,
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Int32(n)) => i64::from(*n),
        other => panic!("{field} is {other:?}"),
    }
}

/// The tokens of the pending field, in order.
fn pending_tokens(document: &Document, counter: &Counter) -> Vec<String> {
    document
        .get_array(counter.pending_field())
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_document()?.get_str("t").ok().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The applied tokens the document remembers, in order.
fn applied_tokens(document: &Document, counter: &Counter) -> Vec<String> {
    document
        .get_array(counter.applied_field())
        .map(|items| {
            items
                .iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// How many tokens the documents hold pending.
fn tokens(documents: &[PendingDocument]) -> usize {
    documents.iter().map(|d| d.pending.len()).sum()
}

/// Each step sent again changes nothing: a token is pending once, counted once (the
/// second step answers whether it matched), and a token already applied is not added
/// again. The counter is an int64 from its first count.
pub async fn each_step_sent_again_changes_nothing<
    H: Harness<Store: IncrementStore + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("counts");
    let counter = Counter::new("likes").unwrap();
    let id = Bson::Int32(1);
    for _ in 0..2 {
        store
            .add_pending_increment(&ns, &id, &counter, "a", 2)
            .await
            .unwrap();
    }
    let document = stored(store, &ns, &id).await;
    assert_eq!(pending_tokens(&document, &counter), ["a"], "{document}");
    assert_eq!(document.get("likes"), None, "not counted before step 2");
    let applied = [
        store
            .apply_pending_increment(&ns, &id, &counter, "a")
            .await
            .unwrap(),
        store
            .apply_pending_increment(&ns, &id, &counter, "a")
            .await
            .unwrap(),
    ];
    assert_eq!(applied, [true, false], "step 2 matches its token once");
    // A replay of step 1 after both: the token is remembered as applied.
    store
        .add_pending_increment(&ns, &id, &counter, "a", 2)
        .await
        .unwrap();
    assert!(!store
        .apply_pending_increment(&ns, &id, &counter, "a")
        .await
        .unwrap());
    store
        .add_pending_increment(&ns, &id, &counter, "b", -5)
        .await
        .unwrap();
    assert!(store
        .apply_pending_increment(&ns, &id, &counter, "b")
        .await
        .unwrap());
    let document = stored(store, &ns, &id).await;
    assert_eq!(document.get("likes"), Some(&Bson::Int64(-3)), "{document}");
    assert_eq!(pending_tokens(&document, &counter), Vec::<String>::new());
    assert_eq!(applied_tokens(&document, &counter), ["a", "b"]);
}

/// A document remembers its last `remembered` applied tokens: a replay of an older one
/// is pending again (and would count again, as documented); a recent one is not.
pub async fn only_the_last_remembered_tokens_are_kept<
    H: Harness<Store: IncrementStore + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("counts");
    let counter = Counter::new("n").unwrap().remembering(2).unwrap();
    let id = Bson::Int32(1);
    for token in ["a", "b", "c"] {
        store
            .add_pending_increment(&ns, &id, &counter, token, 1)
            .await
            .unwrap();
        assert!(store
            .apply_pending_increment(&ns, &id, &counter, token)
            .await
            .unwrap());
    }
    let document = stored(store, &ns, &id).await;
    assert_eq!(applied_tokens(&document, &counter), ["b", "c"]);
    assert_eq!(number(&document, "n"), 3);
    for token in ["c", "b", "a"] {
        store
            .add_pending_increment(&ns, &id, &counter, token, 1)
            .await
            .unwrap();
    }
    let document = stored(store, &ns, &id).await;
    assert_eq!(
        pending_tokens(&document, &counter),
        ["a"],
        "only the one no longer remembered"
    );
}

/// A counter that is not a number is refused with the server's codes, by step 2's
/// `$add` (16554) and by the fold's `$inc` (14, TypeMismatch), and left as it is.
pub async fn a_counter_of_another_type_is_refused_and_left_alone<
    H: Harness<Store: IncrementStore + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("counts");
    let counter = Counter::new("n").unwrap();
    let id = Bson::Int32(1);
    store.put(&ns, doc! {"_id": 1, "n": "many"}).await.unwrap();
    store
        .add_pending_increment(&ns, &id, &counter, "a", 1)
        .await
        .unwrap();
    let refused = store.apply_pending_increment(&ns, &id, &counter, "a").await;
    assert!(
        matches!(refused, Err(StoreError::Command { code: 16554, .. })),
        "{refused:?}"
    );
    let read = store.pending_increments(&ns, &counter).await.unwrap();
    let folded = store.fold_pending(&ns, &counter, &read[0]).await;
    assert!(
        matches!(folded, Err(StoreError::Command { code: 14, .. })),
        "{folded:?}"
    );
    let document = stored(store, &ns, &id).await;
    assert_eq!(document.get_str("n"), Ok("many"));
    assert_eq!(pending_tokens(&document, &counter), ["a"], "still pending");
}

/// A token that is empty or longer than 1,024 bytes is refused by step 1, before
/// anything is written.
pub async fn a_token_out_of_bounds_is_refused_before_anything_is_written<
    H: Harness<Store: IncrementStore + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("counts");
    let counter = Counter::new("n").unwrap();
    for token in [String::new(), "x".repeat(1025)] {
        let refused = store
            .add_pending_increment(&ns, &Bson::Int32(1), &counter, &token, 1)
            .await;
        assert!(
            matches!(refused, Err(StoreError::InvalidArgument(_))),
            "a token of {} bytes: {refused:?}",
            token.len()
        );
    }
    assert_eq!(store.find_all(&ns).await.unwrap(), Vec::<Document>::new());
}

/// The cleanup's read lists the documents with pending tokens, by `_id`, and refuses a
/// pending field of another shape than this program writes, naming it.
pub async fn pending_increments_are_read_by_id_and_a_malformed_field_is_named<
    H: Harness<Store: IncrementStore + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("counts");
    let counter = Counter::new("n").unwrap();
    for (id, token, amount) in [(2, "c", 4), (1, "a", 2), (1, "b", 3)] {
        store
            .add_pending_increment(&ns, &Bson::Int32(id), &counter, token, amount)
            .await
            .unwrap();
    }
    store.put(&ns, doc! {"_id": 3, "n": 7}).await.unwrap();
    let read = store.pending_increments(&ns, &counter).await.unwrap();
    let shown: Vec<(Bson, usize, i64)> = read
        .iter()
        .map(|d| (d.id.clone(), d.pending.len(), d.total))
        .collect();
    assert_eq!(
        shown,
        [(Bson::Int32(1), 2, 5), (Bson::Int32(2), 1, 4)],
        "the documents with pending tokens, by _id"
    );
    store
        .put(&ns, doc! {"_id": 4, "n_pending": [{"t": "d", "n": "four"}]})
        .await
        .unwrap();
    match store.pending_increments(&ns, &counter).await {
        Err(StoreError::Malformed { detail, .. }) => {
            assert!(detail.contains("document 4 field n_pending"), "{detail}")
        }
        other => panic!("a malformed pending field: {other:?}"),
    }
}

/// The fold's update is conditional on the pending array it read: a writer that took
/// its second step in between makes it change nothing (or find the tokens counted).
pub async fn a_fold_of_a_document_changed_since_it_was_read_counts_nothing_twice<
    H: Harness<Store: IncrementStore + DocumentStore>,
>(
    h: &H,
) {
    let store = h.store();
    let ns = h.ns("counts");
    let counter = Counter::new("n").unwrap();
    let (one, two) = (Bson::Int32(1), Bson::Int32(2));
    for (id, token, amount) in [(&one, "a", 2), (&one, "b", 3), (&two, "c", 4)] {
        store
            .add_pending_increment(&ns, id, &counter, token, amount)
            .await
            .unwrap();
    }
    let read = store.pending_increments(&ns, &counter).await.unwrap();
    // Writers come back between the read and the fold.
    assert!(store
        .apply_pending_increment(&ns, &one, &counter, "a")
        .await
        .unwrap());
    assert!(store
        .apply_pending_increment(&ns, &two, &counter, "c")
        .await
        .unwrap());
    let outcomes = [
        store.fold_pending(&ns, &counter, &read[0]).await.unwrap(),
        store.fold_pending(&ns, &counter, &read[1]).await.unwrap(),
    ];
    assert_eq!(
        outcomes,
        [FoldOutcome::Changed, FoldOutcome::AlreadyCounted]
    );
    assert_eq!(number(&stored(store, &ns, &one).await, "n"), 2);
    assert_eq!(number(&stored(store, &ns, &two).await, "n"), 4);
    let again = store.pending_increments(&ns, &counter).await.unwrap();
    assert_eq!(tokens(&again), 1);
    assert_eq!(
        store.fold_pending(&ns, &counter, &again[0]).await.unwrap(),
        FoldOutcome::Folded
    );
    assert_eq!(number(&stored(store, &ns, &one).await, "n"), 5);
}
