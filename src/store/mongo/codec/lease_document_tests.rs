use bson::{doc, oid::ObjectId};
use serde::de::{self, Deserializer, Visitor};

use super::*;
use crate::store::mongo::codec::{lease_from_document, lease_to_document, read_each};
use crate::store::StoreError;

/// The field names a derived `Deserialize` reads, as serde hands them to a deserializer.
fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Names(std::rc::Rc<std::cell::Cell<&'static [&'static str]>>);
    impl<'de> Deserializer<'de> for Names {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.set(fields);
            Err(de::Error::custom("only the names"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let names = std::rc::Rc::new(std::cell::Cell::new(&[][..]));
    let _ = T::deserialize(Names(names.clone()));
    names.get()
}

/// One spelling of the lease's field names: serde's renames are checked against
/// `model::lease_field`, which the writes and every other view of the document use.
#[test]
fn a_lease_document_is_read_under_the_lease_field_names() {
    assert_eq!(
        field_names::<LeaseDocument>(),
        [
            F::RESOURCE,
            F::HOLDER,
            F::EXPIRES_AT,
            F::VERSION,
            F::RESUME_TOKEN,
            F::KIND,
            F::RESUME_AT,
            F::ACQUIRED_AT,
            F::RENEWED_AT,
            F::COMMITTED_AT,
            F::WATCH,
            F::NOTE,
            F::INVALIDATED,
            F::FAILURE,
            F::TOKEN_TIME,
        ]
    );
}

fn detail_of(document: bson::Document) -> (String, String) {
    match lease_from_document(&document) {
        Err(StoreError::Malformed { what, detail }) => (what, detail),
        other => panic!("{document}: expected Malformed, got {other:?}"),
    }
}

/// A malformed lease names its `_id` (in `what`, and as the listing's id) and the
/// field, with what was found there and what was expected.
#[test]
fn a_malformed_lease_names_its_id_and_field() {
    let (what, detail) = detail_of(doc! {"_id": "r", "version": "seven"});
    assert_eq!(what, r#"lease document "r""#);
    assert_eq!(
        detail,
        r#"field version: invalid type: string "seven", expected an integer"#
    );
    for (document, expected) in [
        (
            doc! {"_id": "r", "expiresAt": 5},
            "field expiresAt: invalid type: integer `5`, expected a date",
        ),
        (
            doc! {"_id": "r", "resumeToken": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1] }},
            "field resumeToken: invalid type: binary data, expected a document",
        ),
        (
            doc! {"_id": "r", "resumeAt": bson::DateTime::from_millis(0)},
            "field resumeAt: invalid type: DateTime, expected a timestamp",
        ),
        (
            doc! {"_id": "r", "version": 1.5},
            "field version: invalid type: floating point `1.5`, expected an integer",
        ),
        (
            doc! {"_id": "r", "watch": "yes"},
            r#"field watch: invalid type: string "yes", expected a document"#,
        ),
        (
            doc! {"_id": "r", "watch": {"db": "a", "coll": ["b"]}},
            "field watch.coll: invalid type: sequence, expected a string",
        ),
        (
            doc! {"_id": "r", "failure": {"firstAt": bson::DateTime::from_millis(0)}},
            "field failure.lastAt: missing",
        ),
        (
            doc! {"_id": "r", "failure": {"attempts": "two"}},
            r#"field failure.attempts: invalid type: string "two", expected an integer"#,
        ),
        (
            doc! {"_id": "r", "kind": "BULK"},
            r#"field kind: unknown lock kind "BULK": expected "update" or "bulk""#,
        ),
    ] {
        let (what, detail) = detail_of(document.clone());
        assert_eq!(what, r#"lease document "r""#);
        assert_eq!(detail, expected, "{document}");
    }
    // A lease whose `_id` is not a string is named by the listing, as extended JSON.
    let oid = ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").unwrap();
    let (what, detail) = detail_of(doc! {"_id": oid});
    assert_eq!(what, "lease document");
    assert_eq!(
        detail,
        "field _id: invalid type: ObjectId, expected a string"
    );
    let listing = read_each(
        &[doc! {"_id": oid}, doc! {"_id": "ok"}, doc! {"version": 1}],
        lease_from_document,
    );
    assert_eq!(listing.items.len(), 1);
    let named: Vec<String> = listing.malformed.iter().map(ToString::to_string).collect();
    assert!(
        named[0].contains("65a1b2c3d4e5f60718293a4b") && named[0].contains("field _id"),
        "{named:?}"
    );
    assert_eq!(listing.malformed[1].id, None);
    assert_eq!(listing.malformed[1].problem, "field _id: missing");
}

#[test]
fn a_long_string_in_the_wrong_place_is_clipped_in_the_error() {
    let (_, detail) = detail_of(doc! {"_id": "r", "resumeAt": "x".repeat(1000)});
    assert!(detail.len() < 120, "{detail}");
    assert!(
        detail.starts_with("field resumeAt: invalid type: string"),
        "{detail}"
    );
}

/// What a lease written by hand or by another tool may hold: numbers of any integral
/// type, nulls for absent values, fields this program does not know.
#[test]
fn lenient_where_the_stored_types_vary() {
    let lease = lease_from_document(&doc! {
        "_id": "r", "version": 3.0, "listenerId": null, "kind": null,
        "watch": {"db": "a", "coll": "b", "pipeline": [{"$match": {"x": 1}}]},
        "somethingElse": {"nested": true},
    })
    .unwrap();
    assert_eq!(lease.version, 3);
    assert_eq!(lease.kind, LockKind::Update);
    assert_eq!(
        lease.watch.map(|w| w.pipeline),
        Some(r#"[{"$match":{"x":1}}]"#.to_string())
    );
    // `tokenTime` and a handler failure's `size` are read only where they mean something.
    let lease = lease_from_document(&doc! {
        "_id": "r", "tokenTime": "noon",
        "failure": {"cause": "handler", "size": "big", "firstAt": bson::DateTime::from_millis(0), "lastAt": bson::DateTime::from_millis(0)},
    })
    .unwrap();
    assert_eq!(lease.resume_token, None);
    assert_eq!(lease.failure.map(|f| f.cause), Some(FailureCause::Handler));
}

#[test]
fn every_lease_field_round_trips() {
    let mut lease = Lease::vacant("shop.orders");
    let at = chrono::DateTime::from_timestamp(1_714_564_800, 0).unwrap();
    lease.holder = Some("w1".into());
    lease.expires_at = Some(at);
    lease.version = 9;
    lease.resume_token = Some(ResumeToken::from_document(doc! {"_data": "82"}));
    lease.kind = LockKind::Bulk;
    lease.resume_at = Some(ClusterTime::new(5, 1));
    lease.acquired_at = Some(at);
    lease.renewed_at = Some(at);
    lease.committed_at = Some(at);
    lease.watch = Some(WatchTarget {
        db: "shop".into(),
        coll: "orders".into(),
        pipeline: "[]".into(),
        source: SourceKind::Capped,
    });
    lease.note = Some("n".into());
    lease.invalidated = Some(Invalidation {
        at: None,
        reason: "dropped".into(),
    });
    lease.failure = Some(ChangeFailure {
        token: None,
        at: None,
        namespace: "shop.orders".into(),
        operation: "insert".into(),
        document_key: "{}".into(),
        error: "e".into(),
        cause: FailureCause::TooLarge {
            size: None,
            limit: Some(16_793_600),
        },
        attempts: 2,
        first_at: at,
        last_at: at,
    });
    assert_eq!(
        lease_from_document(&lease_to_document(&lease)).unwrap(),
        lease
    );
}

/// Each of `LeaseProtocol::OWN_FIELDS` alone makes a document streamward's, and none of
/// them leaves it a seed: a field added to that list and not to `has_value` fails here.
#[test]
fn each_own_field_alone_makes_a_lease_streamwards() {
    let value_of = |field: &str| -> bson::Bson {
        if field == crate::model::lease_field::WATCH {
            bson::Bson::Document(doc! {"db": "a", "coll": "b", "pipeline": ""})
        } else {
            bson::Bson::DateTime(bson::DateTime::from_millis(1_700_000_000_000))
        }
    };
    for field in crate::model::LeaseProtocol::OWN_FIELDS {
        let mut document = doc! {"_id": "r"};
        document.insert(field, value_of(field));
        let lease = lease_from_document(&document).unwrap_or_else(|e| panic!("{field}: {e}"));
        assert_eq!(
            lease.protocol,
            crate::model::LeaseProtocol::Streamward,
            "{field}"
        );
    }
    let seed = lease_from_document(&doc! {"_id": "r"}).expect("a bare lease");
    assert_eq!(seed.protocol, crate::model::LeaseProtocol::Seed);
}
