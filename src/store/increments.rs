//! The two-step idempotent increment's port (docs/increments.md): a pending token added
//! first, then matched, removed and counted in one update; and the cleanup's reads and
//! writes, which fold the pending tokens of interrupted increments into the counter.

use std::future::Future;

use bson::{Bson, Document};

use super::{Namespace, StoreError, StoreResult};

/// A counter field and the two fields its increments keep beside it, all top-level
/// fields of the counted document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    field: String,
    pending: String,
    applied: String,
    remembered: u16,
}

impl Counter {
    /// How many applied tokens a document keeps by default (see [`Counter::remembering`]).
    pub const DEFAULT_REMEMBERED: u16 = 100;
    /// The most a document may keep: tokens of a few hundred bytes each, well within a
    /// document's 16 MB.
    pub const MAX_REMEMBERED: u16 = 10_000;

    /// The counter `field`, its pending tokens in `<field>_pending` and the last
    /// [`Counter::DEFAULT_REMEMBERED`] applied tokens in `<field>_applied`.
    /// `InvalidArgument` unless `field` is a plain top-level name.
    pub fn new(field: &str) -> StoreResult<Counter> {
        plain_field("counter", field)?;
        Counter {
            field: field.to_string(),
            pending: format!("{field}_pending"),
            applied: format!("{field}_applied"),
            remembered: Self::DEFAULT_REMEMBERED,
        }
        .checked()
    }

    /// Keeps the pending tokens in `name` instead.
    pub fn with_pending_field(mut self, name: &str) -> StoreResult<Counter> {
        plain_field("pending", name)?;
        self.pending = name.to_string();
        self.checked()
    }

    /// Keeps the applied tokens in `name` instead.
    pub fn with_applied_field(mut self, name: &str) -> StoreResult<Counter> {
        plain_field("applied", name)?;
        self.applied = name.to_string();
        self.checked()
    }

    /// Keeps the last `count` applied tokens (1 to [`Counter::MAX_REMEMBERED`]): a
    /// replay of an increment is recognised while its token is among them.
    pub fn remembering(mut self, count: u16) -> StoreResult<Counter> {
        if count == 0 || count > Self::MAX_REMEMBERED {
            return Err(StoreError::InvalidArgument(format!(
                "a counter remembers 1 to {} applied tokens, not {count}",
                Self::MAX_REMEMBERED
            )));
        }
        self.remembered = count;
        Ok(self)
    }

    pub fn field(&self) -> &str {
        &self.field
    }

    pub fn pending_field(&self) -> &str {
        &self.pending
    }

    pub fn applied_field(&self) -> &str {
        &self.applied
    }

    pub fn remembered(&self) -> u16 {
        self.remembered
    }

    fn checked(self) -> StoreResult<Counter> {
        if self.field == self.pending || self.field == self.applied || self.pending == self.applied
        {
            return Err(StoreError::InvalidArgument(format!(
                "the counter ({}), its pending tokens ({}) and its applied tokens ({}) need three different fields",
                self.field, self.pending, self.applied
            )));
        }
        Ok(self)
    }
}

/// The names the update pipelines use as `"$name"` paths and `$set` keys must be plain.
fn plain_field(what: &str, name: &str) -> StoreResult<()> {
    let refuse = |why: &str| {
        Err(StoreError::InvalidArgument(format!(
            "{what} field {name:?}: {why}"
        )))
    };
    if name.is_empty() {
        return refuse("empty");
    }
    if name == "_id" {
        return refuse("_id cannot be counted");
    }
    if name.starts_with('$') || name.contains(['.', '\0']) {
        return refuse("a plain top-level field name (no leading $, no dots)");
    }
    Ok(())
}

/// The longest token accepted: an event's resume token and document key fit easily.
const MAX_TOKEN_BYTES: usize = 1024;

/// `InvalidArgument` unless `token` may name an increment. Checked where a token enters
/// a document: by step 1 of each store ([`IncrementStore::add_pending_increment`]).
pub fn check_token(token: &str) -> StoreResult<()> {
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(StoreError::InvalidArgument(format!(
            "an increment token has 1 to {MAX_TOKEN_BYTES} bytes, this one {}",
            token.len()
        )));
    }
    Ok(())
}

/// One pending token as stored: `{t: token, n: amount}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingIncrement {
    pub token: String,
    pub amount: i64,
}

/// A document's pending increments as the cleanup read them.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingDocument {
    pub id: Bson,
    pub pending: Vec<PendingIncrement>,
    /// What folding adds to the counter: the pending amounts' sum, which fits an int64
    /// (checked when read).
    pub total: i64,
    /// The pending array exactly as read: the fold is conditional on it.
    pub read: bson::Array,
}

impl PendingDocument {
    /// Reads `document`'s pending field. `Malformed` unless it is an array of
    /// `{t: string, n: integer}` (the shape this program writes) whose amounts add up
    /// within an int64, naming the document.
    pub fn from_document(
        ns: &Namespace,
        counter: &Counter,
        document: &Document,
    ) -> StoreResult<PendingDocument> {
        let id = document.get("_id").cloned().unwrap_or(Bson::Null);
        let malformed = |detail: String| StoreError::Malformed {
            what: format!("pending increments in {ns}"),
            detail: format!(
                "document {} field {}: {detail}; the fold writes nothing until it is fixed",
                id,
                counter.pending_field()
            ),
        };
        let read = match document.get(counter.pending_field()) {
            Some(Bson::Array(read)) => read.clone(),
            Some(other) => {
                return Err(malformed(format!(
                    "expected an array of {{t, n}}, found {other}"
                )))
            }
            None => Vec::new(),
        };
        let mut pending = Vec::with_capacity(read.len());
        for element in &read {
            let entry = element
                .as_document()
                .and_then(|e| {
                    let token = e.get_str("t").ok()?;
                    let amount = match e.get("n")? {
                        Bson::Int64(n) => *n,
                        Bson::Int32(n) => i64::from(*n),
                        _ => return None,
                    };
                    (e.len() == 2).then(|| PendingIncrement {
                        token: token.to_string(),
                        amount,
                    })
                })
                .ok_or_else(|| {
                    malformed(format!(
                        "element {element} is not {{t: string, n: integer}}"
                    ))
                })?;
            pending.push(entry);
        }
        let total = pending
            .iter()
            .try_fold(0_i64, |sum, p| sum.checked_add(p.amount))
            .ok_or_else(|| {
                malformed("the pending amounts add up beyond a 64-bit integer".into())
            })?;
        Ok(PendingDocument {
            id,
            pending,
            total,
            read,
        })
    }
}

/// What folding one document's pending increments did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldOutcome {
    /// Added to the counter and cleared, the tokens remembered as applied.
    Folded,
    /// The update matched nothing, and read back none of the tokens read is pending
    /// and all are among the applied ones: they are counted, by this fold's first
    /// attempt whose reply was lost, or by their writers' second steps.
    AlreadyCounted,
    /// The pending array is no longer what was read (a writer touched it, or the
    /// document is gone): nothing was changed.
    Changed,
}

/// What a fold that matched nothing means, read against the document as it is `now`:
/// `AlreadyCounted` when none of the tokens read is pending any more and all are among
/// the applied ones, else `Changed` (also when the document is gone). Every store reads
/// a fold that matched nothing back through this, so they report alike.
pub fn counted_since(
    counter: &Counter,
    read: &PendingDocument,
    now: Option<&Document>,
) -> FoldOutcome {
    let Some(now) = now else {
        return FoldOutcome::Changed;
    };
    let holds = |field: &str, token: &str| match now.get(field) {
        Some(Bson::Array(items)) => items.iter().any(|item| match item {
            Bson::String(t) => t == token,
            Bson::Document(d) => d.get_str("t") == Ok(token),
            _ => false,
        }),
        _ => false,
    };
    let all_counted = read.pending.iter().all(|p| {
        !holds(counter.pending_field(), &p.token) && holds(counter.applied_field(), &p.token)
    });
    if all_counted {
        FoldOutcome::AlreadyCounted
    } else {
        FoldOutcome::Changed
    }
}

/// The document writes of the two-step increment and of its cleanup.
pub trait IncrementStore: Send + Sync {
    /// Step 1: `updateOne({_id}, pipeline, upsert)` appending `{t: token, n: amount}` to
    /// the pending field unless `token` is already pending or among the applied
    /// tokens. Sent again it changes nothing. `InvalidArgument` unless [`check_token`]
    /// accepts `token`: this is where a token enters a document, so the one place it is
    /// checked (step 2 only matches a token step 1 wrote).
    fn add_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
        amount: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    /// Step 2: `updateOne({_id, <pending>.t: token}, pipeline)` adding the token's
    /// pending amount to the counter, removing it from the pending field and
    /// remembering it as applied, in one write. `true` when the update matched the
    /// pending token; `false` when it was not pending (counted before, perhaps by this
    /// call's own first send when the adapter sent it again, or never added).
    fn apply_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Every document of `ns` with pending increments, sorted by `_id`. `Malformed`
    /// when any pending field has another shape than this program writes.
    fn pending_increments(
        &self,
        ns: &Namespace,
        counter: &Counter,
    ) -> impl Future<Output = StoreResult<Vec<PendingDocument>>> + Send;

    /// Folds `document`'s pending increments, as read, into the counter: one update
    /// conditional on the pending field still being exactly `document.read`.
    fn fold_pending(
        &self,
        ns: &Namespace,
        counter: &Counter,
        document: &PendingDocument,
    ) -> impl Future<Output = StoreResult<FoldOutcome>> + Send;
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn only_plain_distinct_fields_make_a_counter() {
        let counter = Counter::new("likes").unwrap();
        assert_eq!(
            (counter.pending_field(), counter.applied_field()),
            ("likes_pending", "likes_applied")
        );
        for bad in ["", "_id", "$likes", "a.b", "a\0b"] {
            assert!(
                matches!(Counter::new(bad), Err(StoreError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        assert!(counter.clone().with_pending_field("likes").is_err());
        assert!(counter.clone().with_applied_field("likes_pending").is_err());
        assert!(counter.clone().remembering(0).is_err());
        assert!(counter.clone().remembering(10_001).is_err());
        assert_eq!(counter.remembering(5).unwrap().remembered(), 5);
    }

    #[test]
    fn a_pending_field_of_another_shape_is_malformed_and_named() {
        let ns = Namespace::new("shop", "counts");
        let counter = Counter::new("n").unwrap();
        let read = |d: Document| PendingDocument::from_document(&ns, &counter, &d);
        let good = read(doc! {"_id": 1, "n_pending": [{"t": "a", "n": 2_i64}, {"t": "b", "n": 3}]})
            .unwrap();
        assert_eq!(good.total, 5);
        assert_eq!(good.pending[1].amount, 3);
        for bad in [
            doc! {"_id": 7, "n_pending": "a"},
            doc! {"_id": 7, "n_pending": [{"t": "a"}]},
            doc! {"_id": 7, "n_pending": [{"t": "a", "n": 1.5}]},
            doc! {"_id": 7, "n_pending": [{"t": 1, "n": 1}]},
            doc! {"_id": 7, "n_pending": [{"t": "a", "n": 1, "x": 0}]},
            doc! {"_id": 7, "n_pending": ["a"]},
        ] {
            match read(bad.clone()) {
                Err(StoreError::Malformed { detail, .. }) => {
                    assert!(detail.contains("document 7 field n_pending"), "{detail}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        let huge =
            read(doc! {"_id": 1, "n_pending": [{"t": "a", "n": i64::MAX}, {"t": "b", "n": 1_i64}]});
        assert!(huge.is_err());
    }

    #[test]
    fn tokens_are_bounded() {
        assert!(check_token("").is_err());
        assert!(check_token(&"x".repeat(MAX_TOKEN_BYTES + 1)).is_err());
        assert!(check_token("826B04478C000000012B022C0100296E5A1004|{\"_id\":1}").is_ok());
    }
}
