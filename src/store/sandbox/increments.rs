//! `IncrementStore` in the sandbox: the same three updates MongoDB runs
//! (store/mongo/increments.rs), each applied whole under the lock or not at all, with
//! the server's error codes where a field has the wrong type.

use bson::{doc, Bson, Document};

use super::state::WriteKind;
use super::{count, SandboxStore};
use crate::store::{
    check_token, counted_since, Counter, DocumentStore, FoldOutcome, IncrementStore, Namespace,
    PendingDocument, StoreError, StoreResult,
};

fn type_error(code: i32, message: String) -> StoreError {
    StoreError::Command { code, message }
}

/// An array field (missing or null reads as empty), or the server's error `code`.
fn array_of<'a>(
    document: &'a Document,
    field: &str,
    code: i32,
) -> StoreResult<std::borrow::Cow<'a, [Bson]>> {
    match document.get(field) {
        None | Some(Bson::Null) => Ok(std::borrow::Cow::Owned(Vec::new())),
        Some(Bson::Array(items)) => Ok(std::borrow::Cow::Borrowed(items)),
        Some(other) => Err(type_error(
            code,
            format!("field {field} must be an array, found {other}"),
        )),
    }
}

fn is_token(item: &Bson, token: &str) -> bool {
    matches!(item, Bson::Document(d) if d.get_str("t") == Ok(token))
}

/// What MongoDB 6.0.5 answers when a pipeline's `$add` meets a counter that is not a
/// number (step 2), and when `$inc` does (the fold: TypeMismatch).
const ADD_NOT_NUMERIC: i32 = 16554;
const INC_NOT_NUMERIC: i32 = 14;

/// `$add` of a counter and an int64, as the server adds them: an int32 or int64 gives an
/// int64 (a double once it overflows), a double a double; missing or null count as 0.
/// Any other counter is refused with `refusal`, the code of the operator that adds.
fn added(counter: Option<&Bson>, amount: i64, field: &str, refusal: i32) -> StoreResult<Bson> {
    let sum = |base: i64| {
        base.checked_add(amount)
            .map_or(Bson::Double(base as f64 + amount as f64), Bson::Int64)
    };
    match counter {
        None | Some(Bson::Null) => Ok(sum(0)),
        Some(Bson::Int32(c)) => Ok(sum(i64::from(*c))),
        Some(Bson::Int64(c)) => Ok(sum(*c)),
        Some(Bson::Double(c)) => Ok(Bson::Double(c + amount as f64)),
        Some(other) => Err(type_error(
            refusal,
            format!("cannot add to the non-numeric counter {field}: {other}"),
        )),
    }
}

/// The last `kept` of `items` followed by `tokens`.
fn remembered(items: &[Bson], tokens: &[&str], kept: u16) -> Bson {
    let all: Vec<Bson> = items
        .iter()
        .cloned()
        .chain(tokens.iter().map(|t| Bson::String((*t).to_string())))
        .collect();
    let skip = all.len().saturating_sub(usize::from(kept));
    Bson::Array(all.into_iter().skip(skip).collect())
}

impl SandboxStore {
    /// Replaces document `id` of `ns` by what `change` makes of it (`None`: leave it),
    /// logging an update.
    fn update_document(
        &self,
        ns: &Namespace,
        id: &Bson,
        change: impl FnOnce(Option<&Document>) -> StoreResult<Option<Document>>,
    ) -> StoreResult<bool> {
        let now = self.inner.clock.now();
        let state = self.lock();
        let Some(document) = change(state.document(ns, id))? else {
            return Ok(false);
        };
        self.write_under(state, (ns, id, Some(document)), WriteKind::Update, now);
        Ok(true)
    }
}

impl IncrementStore for SandboxStore {
    async fn add_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
        amount: i64,
    ) -> StoreResult<()> {
        count(&self.inner.calls.documents);
        check_token(token)?;
        self.update_document(ns, id, |existing| {
            let mut document = existing
                .cloned()
                .unwrap_or_else(|| doc! {"_id": id.clone()});
            let applied = array_of(&document, counter.applied_field(), 40081)?;
            let pending = array_of(&document, counter.pending_field(), 28664)?;
            let applied_already = applied.iter().any(|a| a.as_str() == Some(token));
            if applied_already || pending.iter().any(|p| is_token(p, token)) {
                return Ok(None);
            }
            let mut pending = pending.into_owned();
            pending.push(Bson::Document(doc! {"t": token, "n": amount}));
            document.insert(counter.pending_field(), pending);
            Ok(Some(document))
        })?;
        Ok(())
    }

    async fn apply_pending_increment(
        &self,
        ns: &Namespace,
        id: &Bson,
        counter: &Counter,
        token: &str,
    ) -> StoreResult<bool> {
        count(&self.inner.calls.documents);
        self.update_document(ns, id, |existing| {
            let Some(existing) = existing else {
                return Ok(None);
            };
            let pending = match existing.get(counter.pending_field()) {
                Some(Bson::Array(items)) if items.iter().any(|p| is_token(p, token)) => items,
                _ => return Ok(None),
            };
            // `$sum` of the token's amounts; non-numbers are skipped, as `$sum` skips them.
            let amount = pending
                .iter()
                .filter(|p| is_token(p, token))
                .filter_map(|p| match p.as_document().and_then(|d| d.get("n")) {
                    Some(Bson::Int64(n)) => Some(*n),
                    Some(Bson::Int32(n)) => Some(i64::from(*n)),
                    _ => None,
                })
                .fold(0_i64, i64::saturating_add);
            let mut document = existing.clone();
            let total = added(
                existing.get(counter.field()),
                amount,
                counter.field(),
                ADD_NOT_NUMERIC,
            )?;
            let applied = array_of(existing, counter.applied_field(), 28664)?;
            let kept: Vec<Bson> = pending
                .iter()
                .filter(|p| !is_token(p, token))
                .cloned()
                .collect();
            document.insert(counter.field(), total);
            document.insert(
                counter.applied_field(),
                remembered(&applied, &[token], counter.remembered()),
            );
            document.insert(counter.pending_field(), kept);
            Ok(Some(document))
        })
    }

    async fn pending_increments(
        &self,
        ns: &Namespace,
        counter: &Counter,
    ) -> StoreResult<Vec<PendingDocument>> {
        // What MongoDB's filter selects: a pending field there and not empty.
        let has_pending = |d: &Document| match d.get(counter.pending_field()) {
            None => false,
            Some(Bson::Array(items)) => !items.is_empty(),
            Some(_) => true,
        };
        self.find_all(ns)
            .await?
            .iter()
            .filter(|d| has_pending(d))
            .map(|d| PendingDocument::from_document(ns, counter, d))
            .collect()
    }

    async fn fold_pending(
        &self,
        ns: &Namespace,
        counter: &Counter,
        read: &PendingDocument,
    ) -> StoreResult<FoldOutcome> {
        count(&self.inner.calls.documents);
        let total = read.total;
        let folded = self.update_document(ns, &read.id, |existing| {
            let Some(existing) = existing else {
                return Ok(None);
            };
            match existing.get(counter.pending_field()) {
                Some(Bson::Array(items)) if *items == read.read => {}
                _ => return Ok(None),
            }
            let mut document = existing.clone();
            let sum = match existing.get(counter.field()) {
                // `$inc` refuses what `$add` refuses, and null too.
                Some(Bson::Null) => {
                    return Err(type_error(
                        INC_NOT_NUMERIC,
                        format!("cannot apply $inc to the null counter {}", counter.field()),
                    ))
                }
                value => added(value, total, counter.field(), INC_NOT_NUMERIC)?,
            };
            let applied = array_of(existing, counter.applied_field(), 2)?;
            let tokens: Vec<&str> = read.pending.iter().map(|p| p.token.as_str()).collect();
            document.insert(counter.field(), sum);
            document.insert(counter.pending_field(), Bson::Array(Vec::new()));
            document.insert(
                counter.applied_field(),
                remembered(&applied, &tokens, counter.remembered()),
            );
            Ok(Some(document))
        })?;
        if folded {
            return Ok(FoldOutcome::Folded);
        }
        // Matched nothing: read back as MongoDB's adapter reads it back.
        let now = self.find_one(ns, &read.id).await?;
        Ok(counted_since(counter, read, now.as_ref()))
    }
}
