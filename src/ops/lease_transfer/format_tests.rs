use bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary};
use chrono::TimeZone;

use super::*;
use crate::model::{TokenKind, WatchTarget};
use serde_json::json;

fn at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single().unwrap()
}

/// Field by field: the struct may gain fields.
#[allow(clippy::field_reassign_with_default)]
pub(super) fn watching(db: &str, coll: &str) -> WatchTarget {
    let mut watch = WatchTarget::default();
    watch.db = db.into();
    watch.coll = coll.into();
    watch
}

fn origin() -> ExportOrigin {
    ExportOrigin {
        uri: Some("mongodb://ops:***@db1/?replicaSet=rs0".into()),
        leases: "streamward.leases".into(),
        replica_set: Some("rs0".into()),
    }
}

/// Leases with every kind of resume point: a MongoDB token, a binary Cosmos DB token
/// with its recorded time, one with an ObjectId and an int32, resumeAt only, none.
fn leases() -> Vec<Lease> {
    let mut mongo = Lease::vacant("shop.orders");
    mongo.resume_token = Some(ResumeToken::encode(
        ClusterTime::new(1_767_322_000, 3),
        TokenKind::Event,
        1,
    ));
    mongo.version = 7;
    mongo.holder = Some("w1".into());
    mongo.watch = Some(watching("shop", "orders"));
    let mut cosmos = Lease::vacant("cosmos.feed");
    cosmos.resume_token = Some(
        ResumeToken::from_document(doc! {
            "_data": Binary { subtype: BinarySubtype::Generic, bytes: vec![0, 1, 2, 254, 255] },
            "_kind": 1_i32,
        })
        .with_recorded_time(Some(at())),
    );
    let mut odd = Lease::vacant("odd");
    odd.resume_token = Some(ResumeToken::from_document(doc! {
        "_data": "82AB",
        "_id": ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").unwrap(),
        "n": 5_i32,
        "big": 5_i64,
        "f": 1.5_f64,
    }));
    odd.kind = LockKind::Bulk;
    let mut at_time = Lease::vacant("at.time");
    at_time.resume_at = Some(ClusterTime::new(1_767_300_000, 9));
    let none = Lease::vacant("b.none");
    let mut capped = Lease::vacant("shop.events");
    capped.resume_token = Some(crate::model::entry_token(
        ObjectId::parse_str("65a1b2c3d4e5f60718293a4c").unwrap(),
    ));
    capped.watch = Some(WatchTarget {
        source: crate::model::SourceKind::Capped,
        ..watching("shop", "events")
    });
    vec![mongo, cosmos, odd, at_time, none, capped]
}

#[test]
fn an_export_round_trips_every_token_byte_for_byte_in_resource_order() {
    let export = LeaseExport::new(at(), origin(), &leases(), Vec::new());
    let text = export.to_text();
    let parsed = parse_export(&text).expect("its own export parses");
    assert_eq!(parsed, export);
    let names: Vec<&str> = parsed.leases.iter().map(|l| l.resource.as_str()).collect();
    assert_eq!(
        names,
        [
            "at.time",
            "b.none",
            "cosmos.feed",
            "odd",
            "shop.events",
            "shop.orders"
        ]
    );
    for (lease, back) in leases().iter().zip_sorted(&parsed.leases) {
        let bytes = |t: Option<&ResumeToken>| {
            t.map(|t| {
                let mut b = Vec::new();
                t.as_document().to_writer(&mut b).unwrap();
                b
            })
        };
        assert_eq!(
            bytes(lease.resume_token.as_ref()),
            bytes(back.resume_token.as_ref()),
            "{}",
            lease.resource
        );
        assert_eq!(lease.resume_at, back.resume_at);
    }
    // Deterministic: the same leases in another order give the same text.
    let mut shuffled = leases();
    shuffled.reverse();
    assert_eq!(
        LeaseExport::new(at(), origin(), &shuffled, Vec::new()).to_text(),
        text
    );
    // Canonical extended JSON: the int32 stays an int32, the binary is base64.
    assert!(text.contains("\"$numberInt\": \"5\""), "{text}");
    assert!(text.contains("\"$binary\""), "{text}");
    assert!(text.contains("\"recordedTokenTime\""), "{text}");
    assert!(text.contains("\"source\": \"capped\""), "{text}");
    assert!(!text.contains("pass"), "no secret: {text}");
}

trait ZipSorted<'a> {
    fn zip_sorted(
        self,
        other: &'a [ExportedLease],
    ) -> Box<dyn Iterator<Item = (&'a Lease, &'a ExportedLease)> + 'a>;
}

impl<'a> ZipSorted<'a> for std::slice::Iter<'a, Lease> {
    fn zip_sorted(
        self,
        other: &'a [ExportedLease],
    ) -> Box<dyn Iterator<Item = (&'a Lease, &'a ExportedLease)> + 'a> {
        Box::new(self.map(move |l| {
            let back = other
                .iter()
                .find(|e| e.resource == l.resource)
                .expect("every lease exported");
            (l, back)
        }))
    }
}

fn file_with(lease: Value) -> String {
    json!({
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "exportedAt": "2026-01-02T03:04:05Z",
        "cluster": { "uri": null, "leases": "streamward.leases", "replicaSet": "rs0" },
        "leases": [lease],
    })
    .to_string()
}

fn error_of(text: &str) -> String {
    parse_export(text).unwrap_err().to_string()
}

#[test]
fn what_is_not_an_export_is_refused_saying_what_it_is() {
    assert!(error_of("{not json").starts_with("the file is not JSON"));
    assert!(error_of("[]").contains("JSON list, not an object"));
    assert!(error_of(r#"{"format": "other", "version": 1}"#).contains("its format is \"other\""));
    assert!(error_of(r#"{"version": 1}"#).contains("it has no format"));
    assert!(error_of(r#"{"format": "streamward-leases", "version": 2}"#).contains("version 2"));
    assert!(error_of(r#"{"format": "streamward-leases"}"#).contains("version missing"));
    let no_leases = r#"{"format": "streamward-leases", "version": 1, "exportedAt": "2026-01-02T03:04:05Z", "cluster": {}}"#;
    assert_eq!(error_of(no_leases), "leases: missing");
}

#[test]
fn a_bad_lease_is_named_with_its_field() {
    let token = json!({"_data": "8263E5B9D2000000012B04"});
    let ok = json!({"resource": "shop.orders", "resumeToken": token, "resumeAt": null});
    assert!(parse_export(&file_with(ok)).is_ok());

    let not_a_document = json!({"resource": "shop.orders", "resumeToken": "8263"});
    assert_eq!(
        error_of(&file_with(not_a_document)),
        "lease \"shop.orders\" (leases[0]), field resumeToken: a string, not a document"
    );
    let no_data = json!({"resource": "r", "resumeToken": {"x": 1}});
    assert!(error_of(&file_with(no_data)).contains("field resumeToken: a document without _data"));
    let bad_extjson = json!({"resource": "r", "resumeToken": {"_data": {"$binary": 5}}});
    assert!(error_of(&file_with(bad_extjson)).contains("field resumeToken"));
    let missing = json!({"resource": "r"});
    assert!(error_of(&file_with(missing)).contains("field resumeToken: missing"));
    let bad_at = json!({"resource": "r", "resumeToken": null, "resumeAt": 5});
    assert!(error_of(&file_with(bad_at)).contains("field resumeAt: not a timestamp"));
    let bad_kind = json!({"resource": "r", "resumeToken": null, "kind": "exclusive"});
    assert!(error_of(&file_with(bad_kind)).contains("field kind: unknown lock kind"));
    let no_resource = json!({"resumeToken": null});
    assert_eq!(
        error_of(&file_with(no_resource)),
        "leases[0].resource: missing"
    );
    let long = json!({"resource": "x".repeat(300), "resumeToken": null});
    assert!(error_of(&file_with(long)).contains("longer than 256"));
    let huge = json!({"resource": "r", "resumeToken": {"_data": "A".repeat(MAX_TOKEN_BYTES)}});
    assert!(error_of(&file_with(huge)).contains("more than the 65536"));
    // A control character in a resource is escaped in the message.
    let control = json!({"resource": "a\u{1b}[2Jb", "resumeToken": 3});
    assert!(!error_of(&file_with(control)).contains('\u{1b}'));
}

#[test]
fn duplicates_and_too_many_leases_are_refused() {
    let row = json!({"resource": "r", "resumeToken": null});
    let text = json!({
        "format": FORMAT, "version": 1, "exportedAt": "2026-01-02T03:04:05Z",
        "cluster": {}, "leases": [row, row],
    })
    .to_string();
    assert_eq!(
        error_of(&text),
        "lease \"r\" is in the file twice (leases[0] and leases[1])"
    );
    let many: Vec<Value> = (0..=MAX_LEASES)
        .map(|i| json!({"resource": format!("r{i}"), "resumeToken": null}))
        .collect();
    let text = json!({
        "format": FORMAT, "version": 1, "exportedAt": "2026-01-02T03:04:05Z",
        "cluster": {}, "leases": many,
    })
    .to_string();
    assert!(error_of(&text).contains("more than the 100000"));
}

/// The file's bytes, pinned: files written before must still import, and other tools
/// may read them.
#[test]
fn an_export_file_is_pinned_byte_for_byte() {
    let unreadable = vec!["kind-shouted: field kind: unknown lock kind \"BULK\"".to_string()];
    insta::assert_snapshot!(LeaseExport::new(at(), origin(), &leases(), unreadable).to_text());
    insta::assert_snapshot!(
        "an_export_file_without_unreadable_leases",
        LeaseExport::new(at(), ExportOrigin::default(), &leases()[..1], Vec::new()).to_text()
    );
}
