use super::*;
use crate::model::lease_field as F;
use crate::model::{Lease, LeaseProtocol};
use crate::store::ResumeChange;

/// A printed lease's keys are its document's field names (serde's renames cannot name
/// the constants, so this holds them to one spelling).
#[test]
fn a_printed_lease_is_named_as_its_document() {
    let shown = serde_json::to_value(LeaseJson::of(&Lease::vacant("r"))).unwrap();
    let keys: Vec<&str> = shown
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "resource",
            F::HOLDER,
            F::EXPIRES_AT,
            F::VERSION,
            F::KIND,
            F::RESUME_TOKEN,
            F::RESUME_AT,
            F::ACQUIRED_AT,
            F::RENEWED_AT,
            F::COMMITTED_AT,
            F::NOTE,
            F::INVALIDATED,
            F::FAILURE,
            "protocol",
        ]
    );
    let filter = serde_json::to_value(FilterJson {
        resource: "r",
        version: 1,
    })
    .unwrap();
    assert_eq!(
        filter,
        serde_json::json!({ (F::RESOURCE): "r", (F::VERSION): 1 })
    );
}

#[test]
fn a_resume_write_says_keep_removed_or_the_value() {
    let shown = |change: &ResumeChange, seed| {
        serde_json::to_value(ResumeWriteJson::of(change, seed))
            .unwrap()
            .to_string()
    };
    assert_eq!(shown(&ResumeChange::Keep, false), r#""keep""#);
    let cleared = ResumeChange::Set {
        token: None,
        at: None,
    };
    assert_eq!(
        shown(&cleared, false),
        format!(r#"{{"{}":null,"{}":null}}"#, F::RESUME_TOKEN, F::RESUME_AT)
    );
    assert_eq!(
        shown(&cleared, true),
        format!(
            r#"{{"{}":"removed","{}":"removed"}}"#,
            F::RESUME_TOKEN,
            F::RESUME_AT
        )
    );
}

#[test]
fn a_listing_row_is_the_item_or_the_malformed_document() {
    let lease = Lease {
        protocol: LeaseProtocol::Seed,
        ..Lease::vacant("r")
    };
    let bad = crate::store::MalformedDocument {
        id: None,
        problem: "field _id: missing".into(),
    };
    let rows = [
        ListedJson::Read(LeaseJson::of(&lease)),
        ListedJson::Malformed(MalformedJson::of(&bad)),
    ];
    let shown = serde_json::to_value(rows).unwrap();
    assert_eq!(shown[0]["protocol"], "seed");
    assert_eq!(
        shown[1],
        serde_json::json!({"id": null, "status": "MALFORMED", "malformed": "field _id: missing"})
    );
}
