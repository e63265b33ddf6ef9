use bson::{doc, oid::ObjectId, DateTime as BsonDateTime};

use super::*;
use crate::store::mongo::codec::{audit_from_document, read_each};
use crate::store::StoreError;

fn record(patch: bson::Document) -> bson::Document {
    let mut record = doc! {
        "_id": ObjectId::parse_str("665f1c2b9d1e8a0012345678").unwrap(),
        "operator": "ann@host",
        "at": BsonDateTime::from_millis(0),
        "action": "takeover",
        "resource": "shop.orders",
        "state": "applied",
        "before": {"_id": "shop.orders", "version": 3},
        "intended": null,
        "after": {"_id": "shop.orders", "version": 4},
        "steps": [{"at": BsonDateTime::from_millis(1), "what": "swapped"}],
        "reason": null,
        "outcome": "applied",
        "finishedAt": BsonDateTime::from_millis(2),
    };
    record.extend(patch);
    record
}

fn detail_of(document: bson::Document) -> String {
    match audit_from_document(&document) {
        Err(StoreError::Malformed { what, detail }) => {
            assert_eq!(what, "audit record");
            detail
        }
        other => panic!("{document}: expected Malformed, got {other:?}"),
    }
}

#[test]
fn an_audit_record_reads_its_leases_and_steps() {
    let read = audit_from_document(&record(doc! {})).unwrap();
    assert_eq!(read.id, "665f1c2b9d1e8a0012345678");
    assert_eq!(read.before.map(|l| l.version), Some(3));
    assert_eq!(read.intended, None);
    assert_eq!(read.steps.len(), 1);
    assert_eq!(read.state, AuditState::Applied);
    // Before intent-first auditing there was no state: the outcome says it.
    let mut legacy = record(doc! {"outcome": "failed: timeout"});
    legacy.remove("state");
    assert_eq!(
        audit_from_document(&legacy).unwrap().state,
        AuditState::Failed
    );
    let by_hand = audit_from_document(&record(doc! {"_id": 7})).unwrap();
    assert_eq!(by_hand.id, "7");
}

/// A malformed record names the field, its path into a lease or step included; the
/// listing names the record by its `_id`.
#[test]
fn a_malformed_audit_record_names_its_field() {
    for (patch, expected) in [
        (
            doc! {"operator": 5},
            "field operator: invalid type: integer `5`, expected a string",
        ),
        (doc! {"operator": null}, "field operator: missing"),
        (
            doc! {"before": {"_id": "shop.orders", "version": "x"}},
            r#"field before.version: invalid type: string "x", expected an integer"#,
        ),
        (
            doc! {"after": {"_id": "shop.orders", "kind": "BULK"}},
            r#"field after.kind: unknown lock kind "BULK": expected "update" or "bulk""#,
        ),
        (
            doc! {"intended": {"version": 1}},
            "field intended._id: missing",
        ),
        (
            doc! {"steps": "none"},
            r#"field steps: invalid type: string "none", expected a sequence"#,
        ),
        (
            doc! {"steps": [5]},
            "field steps.0: invalid type: integer `5`, expected a document",
        ),
        (doc! {"steps": [{"what": "x"}]}, "field steps.0.at: missing"),
        (
            doc! {"state": "done"},
            r#"field state: unknown state "done": expected pending, applied, not applied or failed"#,
        ),
    ] {
        assert_eq!(detail_of(record(patch.clone())), expected, "{patch}");
    }
    let mut no_id = record(doc! {});
    no_id.remove("_id");
    assert_eq!(detail_of(no_id), "field _id: missing");

    let listing = read_each(
        &[record(doc! {}), doc! {"_id": "hand-written", "operator": 5}],
        audit_from_document,
    );
    assert_eq!(listing.items.len(), 1);
    assert_eq!(listing.malformed[0].id.as_deref(), Some("hand-written"));
    assert!(listing.malformed[0].problem.starts_with("field operator"));
}
