//! `IncrementStore` on MongoDB: the two steps as `_id`-filtered update pipelines
//! (the first an upsert, so its filter is `_id` alone and the "already pending or
//! applied" test is made inside the pipeline), and the cleanup's conditional fold.

use std::future::IntoFuture;

use bson::{doc, Bson, Document};

use super::errors::with_one_retry;
use super::MongoStore;
use crate::store::{
    counted_since, Counter, DocumentStore, FoldOutcome, IncrementStore, Namespace, PendingDocument,
    StoreResult,
};

fn path(field: &str) -> String {
    format!("${field}")
}

/// The update pipeline of step 1: append `{t, n}` to the pending field unless the
/// token is already pending or applied (then the document stays as it was).
pub(super) fn add_pending_pipeline(counter: &Counter, token: &str, amount: i64) -> Vec<Document> {
    let pending = counter.pending_field();
    let known = doc! { "$or": [
        { "$in": [{ "$literal": token }, { "$ifNull": [path(counter.applied_field()), []] }] },
        { "$in": [{ "$literal": token }, { "$ifNull": [format!("${pending}.t"), []] }] },
    ] };
    vec![doc! { "$set": { pending: { "$cond": [
        known,
        path(pending),
        { "$concatArrays": [
            { "$ifNull": [path(pending), []] },
            [{ "t": { "$literal": token }, "n": amount }],
        ] },
    ] } } }]
}

/// Filter and update pipeline of step 2: matched only while the token is pending; adds
/// its pending amount, removes it, and appends it to the last applied tokens.
pub(super) fn apply_pending_command(
    id: &Bson,
    counter: &Counter,
    token: &str,
) -> (Document, Vec<Document>) {
    let pending = path(counter.pending_field());
    let is_token = |op: &str| doc! { op: ["$$this.t", { "$literal": token }] };
    let amount = doc! { "$sum": { "$map": {
        "input": { "$filter": { "input": &pending, "cond": is_token("$eq") } },
        "in": "$$this.n",
    } } };
    let filter = doc! { "_id": id.clone(), format!("{}.t", counter.pending_field()): token };
    let update = doc! { "$set": {
        counter.field(): { "$add": [{ "$ifNull": [path(counter.field()), 0] }, amount] },
        counter.applied_field(): { "$slice": [
            { "$concatArrays": [
                { "$ifNull": [path(counter.applied_field()), []] },
                [{ "$literal": token }],
            ] },
            -i32::from(counter.remembered()),
        ] },
        counter.pending_field(): { "$filter": { "input": &pending, "cond": is_token("$ne") } },
    } };
    (filter, vec![update])
}

/// The filter of the cleanup's read: documents whose pending field is there and not empty.
pub(super) fn pending_filter(counter: &Counter) -> Document {
    doc! { counter.pending_field(): { "$exists": true, "$ne": [] } }
}

/// Filter and update of a fold: matched only while the pending field is exactly as
/// read; adds the total, clears the field and remembers the tokens as applied.
pub(super) fn fold_command(counter: &Counter, document: &PendingDocument) -> (Document, Document) {
    let tokens: Vec<&str> = document.pending.iter().map(|p| p.token.as_str()).collect();
    let filter =
        doc! { "_id": document.id.clone(), counter.pending_field(): document.read.clone() };
    let update = doc! {
        "$inc": { counter.field(): document.total },
        "$set": { counter.pending_field(): [] },
        "$push": { counter.applied_field(): {
            "$each": tokens,
            "$slice": -i32::from(counter.remembered()),
        } },
    };
    (filter, update)
}

impl IncrementStore for MongoStore {
    /// Majority; retried once (it changes nothing when sent again).
    async fn add_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
        amount: i64,
    ) -> StoreResult<()> {
        crate::store::check_token(token)?;
        let action = format!("add pending increment to {ns} {id}");
        let pipeline = add_pending_pipeline(counter, token, amount);
        let collection = self.collection(ns);
        with_one_retry(self.write_timeout(), &action, || {
            collection
                .update_one(doc! { "_id": id.clone() }, pipeline.clone())
                .upsert(true)
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))?;
        Ok(())
    }

    /// Majority; retried once (sent again after it applied, it matches nothing).
    async fn apply_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
    ) -> StoreResult<bool> {
        let action = format!("apply pending increment in {ns} {id}");
        let (filter, pipeline) = apply_pending_command(id, counter, token);
        let collection = self.collection(ns);
        let result = with_one_retry(self.write_timeout(), &action, || {
            collection
                .update_one(filter.clone(), pipeline.clone())
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))?;
        Ok(result.matched_count > 0)
    }

    async fn pending_increments(
        &self,
        ns: &Namespace,
        counter: &Counter,
    ) -> StoreResult<Vec<PendingDocument>> {
        let action = format!("read the pending increments of {ns}");
        let projection = doc! { counter.pending_field(): 1 };
        let documents = self
            .read_matching(
                self.collection(ns),
                pending_filter(counter),
                Some(projection),
                &action,
            )
            .await
            .map_err(|e| self.document_error(e, &action, ns))?;
        documents
            .iter()
            .map(|d| PendingDocument::from_document(ns, counter, d))
            .collect()
    }

    /// Majority; retried once. Matching nothing is read back: when none of the tokens
    /// is pending any more and all are among the applied ones, they were counted (by a
    /// first attempt whose reply was lost, or by their writers).
    async fn fold_pending(
        &self,
        ns: &Namespace,
        counter: &Counter,
        document: &PendingDocument,
    ) -> StoreResult<FoldOutcome> {
        let action = format!("fold pending increments into {ns} {}", document.id);
        let (filter, update) = fold_command(counter, document);
        let collection = self.collection(ns);
        let result = with_one_retry(self.write_timeout(), &action, || {
            collection
                .update_one(filter.clone(), update.clone())
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.document_error(e, &action, ns))?;
        if result.matched_count > 0 {
            return Ok(FoldOutcome::Folded);
        }
        let now = self.find_one(ns, &document.id).await?;
        Ok(counted_since(counter, document, now.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How often `token` appears in `value` other than as the operand of `$literal`.
    fn bare(value: &Bson, token: &str) -> usize {
        match value {
            Bson::String(s) => usize::from(s == token),
            Bson::Array(items) => items.iter().map(|i| bare(i, token)).sum(),
            Bson::Document(d) => d
                .iter()
                .filter(|(k, _)| k.as_str() != "$literal")
                .map(|(_, v)| bare(v, token))
                .sum(),
            _ => 0,
        }
    }

    #[test]
    fn a_token_is_never_read_as_a_field_path() {
        // A token that looks like a field path must stay a string.
        let counter = Counter::new("likes").unwrap();
        let token = "$token";
        let step1 = add_pending_pipeline(&counter, token, 2);
        assert_eq!(bare(&Bson::from(step1), token), 0);
        let (filter, step2) = apply_pending_command(&Bson::Int32(1), &counter, token);
        assert_eq!(filter, doc! { "_id": 1, "likes_pending.t": "$token" });
        assert_eq!(bare(&Bson::from(step2), token), 0);
    }

    #[test]
    fn a_fold_is_conditional_on_the_array_read() {
        let counter = Counter::new("likes").unwrap().remembering(3).unwrap();
        let read =
            doc! {"_id": "p1", "likes_pending": [{"t": "a", "n": 2_i64}, {"t": "b", "n": 5_i64}]};
        let ns = Namespace::new("shop", "counts");
        let pending = PendingDocument::from_document(&ns, &counter, &read).unwrap();
        let (filter, update) = fold_command(&counter, &pending);
        assert_eq!(
            filter,
            doc! {"_id": "p1", "likes_pending": [{"t": "a", "n": 2_i64}, {"t": "b", "n": 5_i64}]}
        );
        assert_eq!(
            update,
            doc! {
                "$inc": {"likes": 7_i64},
                "$set": {"likes_pending": []},
                "$push": {"likes_applied": {"$each": ["a", "b"], "$slice": -3}},
            }
        );
        let gone = doc! {"_id": "p1", "likes_pending": [], "likes_applied": ["x", "a", "b"]};
        assert_eq!(
            counted_since(&counter, &pending, Some(&gone)),
            FoldOutcome::AlreadyCounted
        );
        let moved =
            doc! {"_id": "p1", "likes_pending": [{"t": "b", "n": 5_i64}], "likes_applied": ["a"]};
        assert_eq!(
            counted_since(&counter, &pending, Some(&moved)),
            FoldOutcome::Changed
        );
        assert_eq!(
            counted_since(&counter, &pending, None),
            FoldOutcome::Changed
        );
    }
}
