//! Change events the server split with `$changeStreamSplitLargeEvent` (MongoDB 7.0 and
//! 6.0.9 and later), put back together before anything reads them.
//!
//! From the stage's documentation: an event over 16 MB comes as fragments, in order,
//! each holding some of the event's top-level fields (the first as many as fit) and
//! `splitEvent: { fragment: <from 1>, of: <count> }`; each fragment has its own resume
//! token, and a stream resumed after a fragment's token starts with the next fragment,
//! after the last one's with the next event. So the whole event takes the **last**
//! fragment's token: committing it resumes after the whole event, and no token of an
//! earlier fragment ever reaches a batch (a commit between fragments would resume in
//! the middle of an event).

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};

use crate::store::StoreError;

const WHAT: &str = "split change event";

/// The fragments of one event read so far.
#[derive(Debug, Default)]
pub struct Fragments {
    /// The fields of the fragments read, in order, `_id` and `splitEvent` left out.
    fields: Option<RawDocumentBuf>,
    /// Fragments read, and how many the event has.
    read: i32,
    of: i32,
}

impl Fragments {
    /// Whether an event is part read: the stream must be read on until its last
    /// fragment, and nothing before that may be committed.
    pub fn assembling(&self) -> bool {
        self.fields.is_some()
    }

    /// Takes the next event the stream returned: a whole event is given back as it
    /// came; a fragment is kept, and the last one gives back the whole event, under
    /// the last fragment's `_id`. Fragments out of order, of another count, or an
    /// event arriving while one is part read, are `Malformed`: reassembling them
    /// would hand the handler a change the server never made.
    pub fn take(&mut self, raw: RawDocumentBuf) -> Result<Option<RawDocumentBuf>, StoreError> {
        let Some((fragment, of)) = split_of(&raw)? else {
            if self.assembling() {
                return Err(self.broken(format!(
                    "a whole event arrived after fragment {} of {}",
                    self.read, self.of
                )));
            }
            return Ok(Some(raw));
        };
        if fragment != self.read + 1 || (self.assembling() && of != self.of) || of < fragment {
            return Err(self.broken(format!("fragment {fragment} of {of} arrived")));
        }
        let fields = self.fields.get_or_insert_with(RawDocumentBuf::new);
        for element in raw.iter() {
            let (key, value) = element.map_err(|e| malformed(e.to_string()))?;
            if key != "_id" && key != "splitEvent" {
                fields.append(key, value.to_raw_bson());
            }
        }
        self.read = fragment;
        self.of = of;
        if fragment < of {
            return Ok(None);
        }
        let id = raw
            .get("_id")
            .map_err(|e| malformed(e.to_string()))?
            .ok_or_else(|| malformed(format!("fragment {fragment} of {of} has no _id")))?;
        let mut whole = RawDocumentBuf::new();
        whole.append("_id", id.to_raw_bson());
        let fields = self.fields.take().unwrap_or_default();
        for element in fields.iter() {
            let (key, value) = element.map_err(|e| malformed(e.to_string()))?;
            whole.append(key, value.to_raw_bson());
        }
        *self = Self::default();
        Ok(Some(whole))
    }

    /// The stream went quiet in the middle of an event: what was read is dropped, and
    /// the error says which fragment never came.
    pub fn abandon(&mut self) -> StoreError {
        self.broken("no further event arrived".into())
    }

    fn broken(&mut self, what: String) -> StoreError {
        let expected = if self.assembling() {
            format!("fragment {} of {}", self.read + 1, self.of)
        } else {
            "a whole event or fragment 1".to_string()
        };
        *self = Self::default();
        malformed(format!("{what} where {expected} was due"))
    }
}

/// `splitEvent: { fragment, of }` of a fragment; `None` for a whole event.
fn split_of(raw: &RawDocument) -> Result<Option<(i32, i32)>, StoreError> {
    let split = match raw
        .get("splitEvent")
        .map_err(|e| malformed(e.to_string()))?
    {
        None => return Ok(None),
        Some(RawBsonRef::Document(split)) => split,
        Some(other) => {
            return Err(malformed(format!(
                "splitEvent is a {:?}, not a document",
                other.element_type()
            )))
        }
    };
    let number = |field: &str| -> Result<i32, StoreError> {
        match split.get(field).map_err(|e| malformed(e.to_string()))? {
            Some(RawBsonRef::Int32(n)) if n >= 1 => Ok(n),
            Some(RawBsonRef::Int64(n)) if n >= 1 => {
                i32::try_from(n).map_err(|_| malformed(format!("splitEvent.{field} is {n}")))
            }
            Some(other) => Err(malformed(format!("splitEvent.{field} is {other:?}"))),
            None => Err(malformed(format!("splitEvent.{field}: missing"))),
        }
    };
    Ok(Some((number("fragment")?, number("of")?)))
}

fn malformed(detail: String) -> StoreError {
    StoreError::Malformed {
        what: WHAT.into(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Document};

    fn raw(document: Document) -> RawDocumentBuf {
        RawDocumentBuf::from_document(&document).expect("encodes")
    }

    fn fragment(n: i32, of: i32, token: &str, fields: Document) -> RawDocumentBuf {
        let mut document =
            doc! { "_id": { "_data": token }, "splitEvent": { "fragment": n, "of": of } };
        document.extend(fields);
        raw(document)
    }

    #[test]
    fn a_whole_event_passes_as_it_came() {
        let mut fragments = Fragments::default();
        let event = raw(doc! { "_id": { "_data": "01" }, "operationType": "insert" });
        assert_eq!(fragments.take(event.clone()).unwrap(), Some(event));
        assert!(!fragments.assembling());
    }

    #[test]
    fn fragments_become_one_event_under_the_last_token() {
        let mut fragments = Fragments::default();
        let first = fragment(
            1,
            3,
            "A1",
            doc! { "operationType": "update", "clusterTime": bson::Timestamp { time: 5, increment: 1 }, "documentKey": { "_id": 7 } },
        );
        assert_eq!(fragments.take(first).unwrap(), None);
        assert!(fragments.assembling());
        let second = fragment(
            2,
            3,
            "A2",
            doc! { "fullDocument": { "_id": 7, "big": "x" } },
        );
        assert_eq!(fragments.take(second).unwrap(), None);
        let third = fragment(
            3,
            3,
            "A3",
            doc! { "fullDocumentBeforeChange": { "_id": 7 } },
        );
        let whole = fragments
            .take(third)
            .unwrap()
            .expect("the last fragment completes it");
        assert!(!fragments.assembling());
        assert_eq!(
            whole.to_document().unwrap(),
            doc! {
                "_id": { "_data": "A3" },
                "operationType": "update",
                "clusterTime": bson::Timestamp { time: 5, increment: 1 },
                "documentKey": { "_id": 7 },
                "fullDocument": { "_id": 7, "big": "x" },
                "fullDocumentBeforeChange": { "_id": 7 },
            }
        );
    }

    #[test]
    fn a_missing_or_foreign_fragment_is_malformed_and_forgets_the_part_read() {
        let mut fragments = Fragments::default();
        fragments
            .take(fragment(1, 2, "A1", doc! { "operationType": "update" }))
            .unwrap();
        let error = fragments
            .take(raw(
                doc! { "_id": { "_data": "B" }, "operationType": "insert" },
            ))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(
                "a whole event arrived after fragment 1 of 2 where fragment 2 of 2 was due"
            ),
            "{error}"
        );
        assert!(!fragments.assembling());

        let error = fragments
            .take(fragment(2, 2, "A2", doc! {}))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("fragment 2 of 2 arrived where a whole event or fragment 1 was due"),
            "{error}"
        );

        fragments.take(fragment(1, 3, "C1", doc! {})).unwrap();
        let error = fragments
            .take(fragment(2, 4, "C2", doc! {}))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("fragment 2 of 4 arrived where fragment 2 of 3 was due"),
            "{error}"
        );
    }

    #[test]
    fn a_split_event_field_of_the_wrong_shape_is_malformed() {
        let mut fragments = Fragments::default();
        for bad in [
            doc! { "_id": { "_data": "A" }, "splitEvent": 1 },
            doc! { "_id": { "_data": "A" }, "splitEvent": { "fragment": 0, "of": 2 } },
            doc! { "_id": { "_data": "A" }, "splitEvent": { "fragment": 1 } },
            doc! { "_id": { "_data": "A" }, "splitEvent": { "fragment": 3, "of": 2 } },
        ] {
            assert!(
                matches!(
                    fragments.take(raw(bad.clone())),
                    Err(StoreError::Malformed { .. })
                ),
                "{bad}"
            );
        }
    }
}
