//! The two-step idempotent increment (docs/increments.md): `$inc` made safe to retry
//! and to replay, on any [`IncrementStore`].

use bson::Bson;

use crate::store::{ChangeEvent, Counter, IncrementStore, Namespace, StoreResult};

/// What [`increment_once`] found. Either way the amount is in the counter exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Increment {
    /// This call's second step matched the pending token and added it.
    Counted,
    /// The token was not pending when this call's second step arrived: counted already,
    /// by an earlier call with the same token (whose reply may have been lost), by the
    /// cleanup (`fold_pending_increments`), or by this call's own first send of the
    /// step, which the adapter sends once more after a network error.
    AlreadyCounted,
}

/// Adds `amount` to `counter` in document `id` of `ns` once per `token`, however often
/// it is called with that token, in two writes:
///
/// 1. `{t: token, n: amount}` is appended to the pending field (upserting the
///    document), unless the token is already pending or among the applied ones;
/// 2. in one update matching the token: its pending amount is added to the counter, it
///    is removed from the pending field and appended to the applied ones, of which the
///    document keeps the last [`Counter::remembered`].
///
/// On any error call it again with the same token and amount: every outcome of an
/// interrupted call (neither step applied, the first, both) is taken up by the next
/// without counting twice. A token that is only pending when its writer gives up is
/// counted by the cleanup. A replay is recognised while its token is among the last
/// `remembered` applied tokens of the document; an older one counts again. Where the
/// same token is given another amount, the first amount recorded wins. A token that is
/// empty or longer than 1,024 bytes is `InvalidArgument` (step 1 checks it).
pub async fn increment_once<S: IncrementStore>(
    store: &S,
    ns: &Namespace,
    id: &Bson,
    counter: &Counter,
    token: &str,
    amount: i64,
) -> StoreResult<Increment> {
    store
        .add_pending_increment(ns, id, counter, token, amount)
        .await?;
    if store
        .apply_pending_increment(ns, id, counter, token)
        .await?
    {
        Ok(Increment::Counted)
    } else {
        Ok(Increment::AlreadyCounted)
    }
}

/// A token naming the increment a handler makes for `event`: its resume token, its
/// collection and document key, and `part` (which tells apart several increments of
/// one counter for the same event; `""` when there is one). The same event read again
/// after a crash, a rewind or a takeover gives the same token.
///
/// On a replica set or sharded cluster every event has its own resume token. On Azure
/// Cosmos DB every event of one page carries the page's token, so two changes of the
/// same document in one page give the same token: there, derive the token from the
/// application's own data instead (an order line's id, a version).
pub fn event_token(event: &ChangeEvent, part: &str) -> String {
    let resume = match event.token.data_hex() {
        Some(hex) => hex.to_string(),
        None => Bson::Document(event.token.as_document().clone())
            .into_relaxed_extjson()
            .to_string(),
    };
    let key = Bson::Document(event.document_key.clone()).into_relaxed_extjson();
    format!("{resume}|{}|{key}|{part}", event.ns)
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;
    use crate::model::ResumeToken;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use crate::store::{DocumentStore, OperationType};

    fn sandbox() -> SandboxStore {
        SandboxStore::new(SandboxConfig::default(), Clock::System)
    }

    fn ns() -> Namespace {
        Namespace::new("shop", "counts")
    }

    async fn stored(store: &SandboxStore, id: i32) -> bson::Document {
        store
            .find_one(&ns(), &Bson::Int32(id))
            .await
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn a_token_counts_once_however_often_it_is_sent() {
        let store = sandbox();
        let counter = Counter::new("likes").unwrap();
        let id = Bson::Int32(1);
        let once = |token: &'static str, amount| {
            let (store, counter, id) = (store.clone(), counter.clone(), id.clone());
            async move { increment_once(&store, &ns(), &id, &counter, token, amount).await }
        };
        assert_eq!(once("a", 2).await.unwrap(), Increment::Counted);
        assert_eq!(once("a", 2).await.unwrap(), Increment::AlreadyCounted);
        assert_eq!(once("b", -5).await.unwrap(), Increment::Counted);
        let document = stored(&store, 1).await;
        assert_eq!(document.get("likes"), Some(&Bson::Int64(-3)));
        assert_eq!(document.get_array("likes_pending").unwrap().len(), 0);
        assert_eq!(
            document.get_array("likes_applied").unwrap(),
            &vec![Bson::from("a"), Bson::from("b")]
        );
    }

    #[tokio::test]
    async fn each_interruption_is_taken_up_by_the_next_call() {
        let store = sandbox();
        let counter = Counter::new("n").unwrap();
        let id = Bson::Int32(1);
        // Only step 1 ran: the retry counts it.
        store
            .add_pending_increment(&ns(), &id, &counter, "x", 4)
            .await
            .unwrap();
        assert_eq!(stored(&store, 1).await.get("n"), None);
        let retried = increment_once(&store, &ns(), &id, &counter, "x", 4).await;
        assert_eq!(retried.unwrap(), Increment::Counted);
        // Both ran and the reply was lost: the retry counts nothing.
        let retried = increment_once(&store, &ns(), &id, &counter, "x", 4).await;
        assert_eq!(retried.unwrap(), Increment::AlreadyCounted);
        assert_eq!(stored(&store, 1).await.get("n"), Some(&Bson::Int64(4)));
    }

    #[tokio::test]
    async fn a_replay_older_than_the_remembered_tokens_counts_again() {
        let store = sandbox();
        let counter = Counter::new("n").unwrap().remembering(2).unwrap();
        let id = Bson::Int32(1);
        for token in ["a", "b", "c"] {
            increment_once(&store, &ns(), &id, &counter, token, 1)
                .await
                .unwrap();
        }
        let ns = ns();
        let again = |t| increment_once(&store, &ns, &id, &counter, t, 1);
        assert_eq!(again("c").await.unwrap(), Increment::AlreadyCounted);
        assert_eq!(again("b").await.unwrap(), Increment::AlreadyCounted);
        // "a" fell out of the last two: counted again, as documented.
        assert_eq!(again("a").await.unwrap(), Increment::Counted);
        assert_eq!(stored(&store, 1).await.get("n"), Some(&Bson::Int64(4)));
    }

    #[tokio::test]
    async fn a_counter_of_another_type_is_refused_and_left_alone() {
        let store = sandbox();
        let counter = Counter::new("n").unwrap();
        store
            .put(&ns(), doc! {"_id": 1, "n": "many"})
            .await
            .unwrap();
        let refused = increment_once(&store, &ns(), &Bson::Int32(1), &counter, "a", 1).await;
        assert!(
            matches!(
                refused,
                Err(crate::store::StoreError::Command { code: 16554, .. })
            ),
            "{refused:?}"
        );
        assert_eq!(stored(&store, 1).await.get_str("n"), Ok("many"));
    }

    #[tokio::test]
    async fn a_token_out_of_bounds_is_refused_before_anything_is_written() {
        let store = sandbox();
        let counter = Counter::new("n").unwrap();
        for token in [String::new(), "x".repeat(1025)] {
            let refused = increment_once(&store, &ns(), &Bson::Int32(1), &counter, &token, 1).await;
            assert!(
                matches!(refused, Err(crate::store::StoreError::InvalidArgument(_))),
                "{refused:?}"
            );
        }
        assert!(store.find_all(&ns()).await.unwrap().is_empty());
    }

    #[test]
    fn an_event_token_names_the_event_the_document_and_the_part() {
        let event = |data: &str, id: i32| ChangeEvent {
            token: ResumeToken::from_document(doc! {"_data": data}),
            cluster_time: None,
            operation: OperationType::Insert,
            ns: ns(),
            document_key: doc! {"_id": id},
            full_document: None,
            details: Default::default(),
        };
        let token = event_token(&event("8263", 1), "");
        assert_eq!(token, "8263|shop.counts|{\"_id\":1}|");
        assert_ne!(token, event_token(&event("8263", 2), ""));
        assert_ne!(token, event_token(&event("8264", 1), ""));
        assert_ne!(token, event_token(&event("8263", 1), "line-2"));
    }
}
