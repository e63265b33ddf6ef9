//! What a change event carries beyond where and what changed, where the server sends
//! it: what an update changed, the transaction it belongs to, the wall clock, the
//! collection's UUID, the event as the server sent it. An update's description stays
//! raw bytes until a handler asks.

use bson::{Document, RawBsonRef, RawDocument, RawDocumentBuf};
use chrono::{DateTime, Utc};

use super::StoreError;

/// Each `None` where the server did not send it (an older server, a stream that did
/// not ask, a change made outside a transaction, the sandbox where it has no such thing).
#[derive(Debug, Clone, Default)]
pub struct EventDetails {
    /// `updateDescription`, on an update.
    pub update_description: Option<UpdateDescription>,
    /// `fullDocumentBeforeChange`: the document before an update, replacement or
    /// delete, where the stream asked for it ([`super::PreImage`]) and the server kept it.
    pub full_document_before_change: Option<Document>,
    /// `lsid` and `txnNumber`, on a change made in a transaction.
    pub transaction: Option<TransactionId>,
    /// `wallTime` (MongoDB 6.0+): the server's wall clock when the change was made, the
    /// time a person reads ("when did this happen"), unlike the cluster time.
    pub wall_time: Option<DateTime<Utc>>,
    /// `collectionUUID`, sent with expanded events ([`super::ChangeEvent::collection_uuid`]
    /// falls back on the UUID its resume token carries).
    pub collection_uuid: Option<[u8; 16]>,
    /// The whole event as the server sent it; read it with [`super::ChangeEvent::raw`].
    pub raw: super::RawEvent,
}

/// Equal where every typed field is: the raw event is not compared, since it says
/// the same again (and more, for a server's: fields this program does not read), and
/// an event no server sent has none.
impl PartialEq for EventDetails {
    fn eq(&self, other: &Self) -> bool {
        let Self {
            update_description,
            full_document_before_change,
            transaction,
            wall_time,
            collection_uuid,
            raw: _,
        } = self;
        *update_description == other.update_description
            && *full_document_before_change == other.full_document_before_change
            && *transaction == other.transaction
            && *wall_time == other.wall_time
            && *collection_uuid == other.collection_uuid
    }
}

/// Which transaction a change belongs to: its session's id and its number in that
/// session. Since MongoDB 8.0 changes of different transactions can share one cluster
/// time, so this, not the time, groups a transaction's changes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TransactionId {
    /// `lsid.id`, the logical session's UUID.
    pub session: Vec<u8>,
    pub txn_number: i64,
}

/// An update's `updateDescription`, kept as the server sent it and read on demand, so
/// a handler that never looks does not pay for decoding it.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateDescription {
    raw: RawDocumentBuf,
}

/// An array the update shortened: `field` now holds its first `new_size` elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedArray {
    pub field: String,
    pub new_size: u32,
}

const WHAT: &str = "change event updateDescription";

fn malformed(field: &str, detail: impl ToString) -> StoreError {
    StoreError::Malformed {
        what: WHAT.into(),
        detail: format!("field {field}: {}", detail.to_string()),
    }
}

impl UpdateDescription {
    /// Keeps `raw` as it is; nothing is checked until a field is read.
    pub fn from_raw(raw: RawDocumentBuf) -> Self {
        Self { raw }
    }

    /// Built from its parts, as the sandbox describes an update.
    pub fn new(updated_fields: Document, removed_fields: &[String]) -> Self {
        let document = bson::doc! {
            "updatedFields": updated_fields,
            "removedFields": removed_fields,
            "truncatedArrays": [],
        };
        // A document built here always encodes.
        let raw = RawDocumentBuf::from_document(&document).unwrap_or_default();
        Self { raw }
    }

    pub fn as_raw(&self) -> &RawDocument {
        &self.raw
    }

    /// `updatedFields`: each path the update set (dotted where it reached into a
    /// sub-document or array) with its new value.
    pub fn updated_fields(&self) -> Result<Document, StoreError> {
        match self.field("updatedFields")? {
            Some(RawBsonRef::Document(fields)) => {
                Document::try_from(fields).map_err(|e| malformed("updatedFields", e))
            }
            None => Ok(Document::new()),
            Some(other) => Err(malformed(
                "updatedFields",
                format!("expected a document, found {:?}", other.element_type()),
            )),
        }
    }

    /// `removedFields`: the paths the update removed.
    pub fn removed_fields(&self) -> Result<Vec<String>, StoreError> {
        let Some(value) = self.field("removedFields")? else {
            return Ok(Vec::new());
        };
        let RawBsonRef::Array(paths) = value else {
            return Err(malformed(
                "removedFields",
                format!("expected an array, found {:?}", value.element_type()),
            ));
        };
        paths
            .into_iter()
            .map(
                |path| match path.map_err(|e| malformed("removedFields", e))? {
                    RawBsonRef::String(path) => Ok(path.to_string()),
                    other => Err(malformed(
                        "removedFields",
                        format!("expected strings, found {:?}", other.element_type()),
                    )),
                },
            )
            .collect()
    }

    /// `truncatedArrays`: the arrays the update shortened.
    pub fn truncated_arrays(&self) -> Result<Vec<TruncatedArray>, StoreError> {
        let Some(value) = self.field("truncatedArrays")? else {
            return Ok(Vec::new());
        };
        let RawBsonRef::Array(arrays) = value else {
            return Err(malformed(
                "truncatedArrays",
                format!("expected an array, found {:?}", value.element_type()),
            ));
        };
        arrays
            .into_iter()
            .map(|entry| {
                let entry = entry.map_err(|e| malformed("truncatedArrays", e))?;
                let RawBsonRef::Document(entry) = entry else {
                    return Err(malformed("truncatedArrays", "expected documents"));
                };
                let field = entry
                    .get_str("field")
                    .map_err(|e| malformed("truncatedArrays.field", e))?;
                let new_size = match entry
                    .get("newSize")
                    .map_err(|e| malformed("truncatedArrays.newSize", e))?
                {
                    Some(RawBsonRef::Int32(n)) => i64::from(n),
                    Some(RawBsonRef::Int64(n)) => n,
                    _ => return Err(malformed("truncatedArrays.newSize", "expected an integer")),
                };
                Ok(TruncatedArray {
                    field: field.to_string(),
                    new_size: u32::try_from(new_size)
                        .map_err(|_| malformed("truncatedArrays.newSize", new_size))?,
                })
            })
            .collect()
    }

    /// `disambiguatedPaths` (MongoDB 6.1+ with expanded events): for a path whose
    /// dotted form is ambiguous (a field named like a number, or holding a dot), its
    /// parts; `None` where the server did not send it.
    pub fn disambiguated_paths(&self) -> Result<Option<Document>, StoreError> {
        match self.field("disambiguatedPaths")? {
            None => Ok(None),
            Some(RawBsonRef::Document(paths)) => Document::try_from(paths)
                .map(Some)
                .map_err(|e| malformed("disambiguatedPaths", e)),
            Some(other) => Err(malformed(
                "disambiguatedPaths",
                format!("expected a document, found {:?}", other.element_type()),
            )),
        }
    }

    fn field(&self, name: &str) -> Result<Option<RawBsonRef<'_>>, StoreError> {
        self.raw.get(name).map_err(|e| malformed(name, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    /// Shaped as MongoDB 6.0.5 sends an update's description.
    #[test]
    fn an_update_description_reads_each_part_on_demand() {
        let raw = RawDocumentBuf::from_document(&doc! {
            "updatedFields": { "status": "paid", "lines.2.qty": 3 },
            "removedFields": ["coupon"],
            "truncatedArrays": [ { "field": "history", "newSize": 2 } ],
        })
        .unwrap();
        let description = UpdateDescription::from_raw(raw);
        assert_eq!(
            description.updated_fields().unwrap(),
            doc! { "status": "paid", "lines.2.qty": 3 }
        );
        assert_eq!(description.removed_fields().unwrap(), ["coupon"]);
        assert_eq!(
            description.truncated_arrays().unwrap(),
            [TruncatedArray {
                field: "history".into(),
                new_size: 2
            }]
        );
        assert_eq!(description.disambiguated_paths().unwrap(), None);
    }

    /// A part of the wrong type is an error naming it, found when it is read.
    #[test]
    fn a_malformed_part_is_named_when_read() {
        let raw = RawDocumentBuf::from_document(&doc! {
            "updatedFields": "not a document",
            "removedFields": [1],
            "truncatedArrays": [ { "field": "h", "newSize": -1 } ],
        })
        .unwrap();
        let description = UpdateDescription::from_raw(raw);
        let said = |e: StoreError| e.to_string();
        assert!(said(description.updated_fields().unwrap_err()).contains("updatedFields"));
        assert!(said(description.removed_fields().unwrap_err()).contains("removedFields"));
        assert!(said(description.truncated_arrays().unwrap_err()).contains("newSize"));
    }

    #[test]
    fn the_sandbox_description_reads_back() {
        let description = UpdateDescription::new(doc! {"a": 1}, &["b".to_string()]);
        assert_eq!(description.updated_fields().unwrap(), doc! {"a": 1});
        assert_eq!(description.removed_fields().unwrap(), ["b"]);
        assert!(description.truncated_arrays().unwrap().is_empty());
    }
}
