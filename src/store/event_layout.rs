//! A change event laid out as MongoDB lays one out, for an event no server sent (the
//! sandbox's, a capped collection's entry) when a handler asks for it whole
//! ([`ChangeEvent::raw`]; docs/reference/change-events.md).

use std::borrow::Cow;

use bson::spec::BinarySubtype;
use bson::{Binary, RawBson, RawBsonRef, RawDocument, RawDocumentBuf};

use super::{ChangeEvent, OperationType, StoreError};

impl ChangeEvent {
    /// The whole event, every field the server sent, those this program does not read
    /// included (a kind or field of a newer server). Borrowed: the server's own bytes.
    /// Owned, for an event no server sent (the sandbox's, a capped collection's entry):
    /// its fields laid out as MongoDB lays out a change event, when asked (see
    /// docs/reference/change-events.md). Fails only for such an event holding a field
    /// name with a NUL in it, which a server would not have stored.
    pub fn raw(&self) -> Result<Cow<'_, RawDocument>, StoreError> {
        match self.details.raw.as_sent() {
            Some(raw) => Ok(Cow::Borrowed(raw)),
            None => lay_out(self).map(Cow::Owned),
        }
    }
}

fn malformed(field: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Malformed {
        what: "change event".into(),
        detail: format!("field {field}: {detail}"),
    }
}

fn document(field: &str, value: &bson::Document) -> Result<RawDocumentBuf, StoreError> {
    RawDocumentBuf::from_document(value).map_err(|e| malformed(field, e))
}

fn uuid(bytes: &[u8]) -> RawBson {
    RawBson::Binary(Binary {
        subtype: BinarySubtype::Uuid,
        bytes: bytes.to_vec(),
    })
}

/// `event` laid out as MongoDB 6.0.5 lays out a change event, from its typed fields:
/// `txnNumber`, `lsid` (`id` only), `_id`, `operationType`, `clusterTime`,
/// `collectionUUID`, `wallTime`, `fullDocument`, `ns`, `documentKey`,
/// `updateDescription`, `fullDocumentBeforeChange`, each where the event has it (a
/// field it lacks is left out, never null). Fails only on a document the server would
/// not have stored (a field name holding a NUL). A kind's fields that no typed field
/// holds (a data definition's `operationDescription`) are not there to lay out.
fn lay_out(event: &ChangeEvent) -> Result<RawDocumentBuf, StoreError> {
    let details = &event.details;
    let mut raw = RawDocumentBuf::new();
    if let Some(transaction) = &details.transaction {
        raw.append("txnNumber", transaction.txn_number);
        let mut lsid = RawDocumentBuf::new();
        lsid.append("id", uuid(&transaction.session));
        raw.append("lsid", lsid);
    }
    raw.append("_id", document("_id", event.token.as_document())?);
    if event.operation != OperationType::Upsert {
        raw.append("operationType", event.operation.name());
    }
    if let Some(at) = event.cluster_time {
        raw.append("clusterTime", bson::Timestamp::from(at));
    }
    if let Some(collection) = details.collection_uuid {
        raw.append("collectionUUID", uuid(&collection));
    }
    if let Some(at) = details.wall_time {
        raw.append("wallTime", bson::DateTime::from_chrono(at));
    }
    if let Some(full) = &event.full_document {
        raw.append("fullDocument", document("fullDocument", full)?);
    }
    if !event.ns.db.is_empty() {
        let mut ns = RawDocumentBuf::new();
        ns.append("db", event.ns.db.as_str());
        if !event.ns.coll.is_empty() {
            ns.append("coll", event.ns.coll.as_str());
        }
        raw.append("ns", ns);
    }
    if !event.document_key.is_empty() {
        raw.append("documentKey", document("documentKey", &event.document_key)?);
    }
    if let Some(description) = &details.update_description {
        raw.append_ref(
            "updateDescription",
            RawBsonRef::Document(description.as_raw()),
        );
    }
    if let Some(before) = &details.full_document_before_change {
        raw.append(
            "fullDocumentBeforeChange",
            document("fullDocumentBeforeChange", before)?,
        );
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use bson::{doc, Bson, RawDocument};

    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use crate::store::{
        ChangeFeed, ChangeStream, DocumentStore, FeedOptions, Namespace, StartPoint, WriteFence,
    };

    fn keys(raw: &RawDocument) -> Vec<String> {
        raw.iter()
            .map(|element| element.unwrap().0.to_string())
            .collect()
    }

    /// The sandbox's events have no server bytes: each is laid out when asked, with
    /// the fields in the order MongoDB 6.0.5 sends them for a stream with
    /// `fullDocument: updateLookup` (seen on `scripts/mongo-replset.sh`).
    #[tokio::test]
    async fn a_sandbox_event_is_laid_out_as_mongodb_sends_it() {
        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let ns = Namespace::new("shop", "orders");
        let start = store.cluster_time().await.unwrap();
        store.put(&ns, doc! {"_id": 1, "a": 1}).await.unwrap();
        store.put(&ns, doc! {"_id": 1, "a": 2}).await.unwrap();
        store
            .fenced_upsert(
                &ns,
                &Bson::Int32(1),
                &WriteFence::SourceVersion(3),
                doc! {"a": 3},
            )
            .await
            .unwrap();
        let options = FeedOptions {
            batch_size: 10,
            max_await: Duration::from_millis(10),
            ..Default::default()
        };
        let mut stream = store
            .open(&ns, StartPoint::At(start), options)
            .await
            .unwrap();
        // Read before the delete: the update's document is looked up when read.
        let mut events = stream.next_batch().await.unwrap().events;
        store.delete_one(&ns, &Bson::Int32(1)).await.unwrap();
        events.extend(stream.next_batch().await.unwrap().events);
        let core = ["_id", "operationType", "clusterTime", "wallTime"];
        let with = |rest: &[&str]| -> Vec<String> {
            core.iter().chain(rest).map(|k| k.to_string()).collect()
        };
        let expected = [
            ("insert", with(&["fullDocument", "ns", "documentKey"])),
            ("replace", with(&["fullDocument", "ns", "documentKey"])),
            (
                "update",
                with(&["fullDocument", "ns", "documentKey", "updateDescription"]),
            ),
            ("delete", with(&["ns", "documentKey"])),
        ];
        assert_eq!(events.len(), expected.len(), "{events:?}");
        for (event, (kind, layout)) in events.iter().zip(expected) {
            let raw = event.raw().unwrap();
            assert!(matches!(raw, Cow::Owned(_)), "laid out, not sent");
            assert_eq!(keys(&raw), layout, "{kind}");
            assert_eq!(raw.get_str("operationType").unwrap(), kind);
            assert_eq!(
                bson::Document::try_from(raw.get_document("_id").unwrap()).unwrap(),
                *event.token.as_document()
            );
            let ns = raw.get_document("ns").unwrap();
            assert_eq!(
                (ns.get_str("db").unwrap(), ns.get_str("coll").unwrap()),
                ("shop", "orders")
            );
            assert_eq!(
                raw.get_document("documentKey")
                    .unwrap()
                    .get_i32("_id")
                    .unwrap(),
                1
            );
        }
        let update = events[2].raw().unwrap();
        assert_eq!(
            bson::Document::try_from(
                update
                    .get_document("updateDescription")
                    .and_then(|d| d.get_document("updatedFields"))
                    .unwrap()
            )
            .unwrap(),
            doc! {"a": 3, "_v": 3_i64}
        );
        assert_eq!(
            update
                .get_document("fullDocument")
                .unwrap()
                .get_i32("a")
                .unwrap(),
            3
        );

        // Read once the document is gone, an update has none to look up: its layout
        // leaves `fullDocument` out, where a server sends it as null.
        let mut late = store
            .open(&ns, StartPoint::At(start), options)
            .await
            .unwrap();
        let events = late.next_batch().await.unwrap().events;
        let update = events[2].raw().unwrap();
        assert_eq!(update.get_str("operationType").unwrap(), "update");
        assert_eq!(update.get("fullDocument").unwrap(), None);
    }

    /// A field name no server would store cannot be laid out: the error names it.
    #[test]
    fn a_field_name_with_a_nul_is_an_error_not_a_panic() {
        let event = crate::store::ChangeEvent {
            token: crate::model::ResumeToken::from_document(doc! {"_data": "82"}),
            cluster_time: None,
            operation: crate::store::OperationType::Insert,
            ns: Namespace::new("shop", "orders"),
            document_key: doc! {"_id": 1},
            full_document: Some(doc! {"a\0b": 1}),
            details: Default::default(),
        };
        let error = event.raw().unwrap_err().to_string();
        assert!(error.contains("fullDocument"), "{error}");
    }
}
