//! A [`LeaseWrite`] as MongoDB runs it: a filter and an update pipeline, field by field.
//!
//! A write on an existing document puts its requirements in the filter
//! (`{_id, listenerId, version}`), so "matched nothing" means "did not apply". A write
//! that may insert cannot: MongoDB refuses `$expr` in an upsert's query (code 224) and
//! any filter beyond `_id` turns an insert race into 11000. Its alternatives are then
//! chosen inside the pipeline: the first stage stores the number of the first one whose
//! requirements hold, the second sets each field from that alternative (a field it
//! does not set keeps its value), the third removes the number.

use std::time::Duration;

use bson::{doc, Bson, Document};

use super::codec::{failure_to_document, invalidation_to_document, watch_to_document};
use crate::model::lease_field as field;
use crate::model::{FieldSet, LeaseWrite, LockKind, Moment, Requirement};

/// Temporary field holding the chosen alternative between the pipeline's stages.
const CHOSEN: &str = "__streamwardWrite";

/// Milliseconds as the int64 `$add` and `wtimeout` take them.
pub(super) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn moment(at: Moment) -> Bson {
    match at {
        Moment::Now => "$$NOW".into(),
        Moment::NowPlus(duration) => doc! { "$add": ["$$NOW", millis(duration)] }.into(),
    }
}

fn literal(value: impl Into<Bson>) -> Bson {
    doc! { "$literal": value.into() }.into()
}

/// The aggregation expression a field is set to.
fn value(set: &FieldSet) -> Bson {
    match set {
        FieldSet::Holder(Some(holder)) => literal(holder.as_str()),
        FieldSet::Holder(None) => Bson::Null,
        FieldSet::Kind(kind) => kind.as_str().into(),
        FieldSet::ExpiresAt(at)
        | FieldSet::AcquiredAt(at)
        | FieldSet::RenewedAt(at)
        | FieldSet::CommittedAt(at) => moment(*at),
        FieldSet::ResumeToken(token) => literal(
            token
                .as_ref()
                .map(|t| Bson::Document(t.as_document().clone()))
                .unwrap_or(Bson::Null),
        ),
        FieldSet::ResumeTokenRemoved | FieldSet::ResumeAtRemoved => "$$REMOVE".into(),
        FieldSet::TokenTime(Some(at)) => literal(super::codec::date(*at)),
        FieldSet::TokenTime(None) => "$$REMOVE".into(),
        FieldSet::ResumeAt(at) => {
            literal(at.map(|t| Bson::Timestamp(t.into())).unwrap_or(Bson::Null))
        }
        FieldSet::Watch(watch) => literal(watch_to_document(watch)),
        FieldSet::Note(note) => literal(note.as_str()),
        FieldSet::Invalidated(Some(invalidation)) => {
            literal(invalidation_to_document(invalidation))
        }
        FieldSet::Invalidated(None) => "$$REMOVE".into(),
        FieldSet::Failure(Some(failure)) => literal(failure_to_document(failure)),
        FieldSet::Failure(None) => "$$REMOVE".into(),
    }
}

/// A version bump applies only below the largest int64 (the model's rule in
/// `LeaseWrite::admits`): as an expression on the stored document.
fn version_below_max() -> Bson {
    doc! { "$lt": [{ "$ifNull": [format!("${}", field::VERSION), -1_i64] }, i64::MAX] }.into()
}

/// A requirement as a query predicate: `None` for one a plain query cannot express.
fn query_predicate(requirement: &Requirement) -> Option<(&'static str, Bson)> {
    match requirement {
        Requirement::VersionIs(version) => Some((field::VERSION, (*version).into())),
        Requirement::HolderIs(holder) => Some((field::HOLDER, holder.as_str().into())),
        Requirement::Expired | Requirement::NotBulk => None,
    }
}

/// A requirement as an aggregation expression on the stored document.
fn expression(requirement: &Requirement) -> Bson {
    let path = |name: &str| format!("${name}");
    match requirement {
        Requirement::VersionIs(version) => doc! { "$eq": [path(field::VERSION), *version] },
        Requirement::HolderIs(holder) => {
            doc! { "$eq": [path(field::HOLDER), { "$literal": holder.as_str() }] }
        }
        // A missing or null `expiresAt` sorts below every date: expired.
        Requirement::Expired => doc! { "$lte": [path(field::EXPIRES_AT), "$$NOW"] },
        Requirement::NotBulk => doc! { "$ne": [path(field::KIND), LockKind::Bulk.as_str()] },
    }
    .into()
}

/// `version + 1` in the type it is stored in: `$add` of an int32 and an int32 stays
/// int32 (an int64 once it would overflow), so a seed lease's int32 version stays
/// int32, and streamward's int64 versions stay int64 (an insert starts at int64 0).
fn next_version(may_insert: bool) -> Bson {
    let version = format!("${}", field::VERSION);
    if may_insert {
        // 0 on insert.
        doc! { "$add": [{ "$ifNull": [version, -1_i64] }, 1_i32] }.into()
    } else {
        doc! { "$add": [version, 1_i32] }.into()
    }
}

/// A write on an existing document: its requirements as the filter, one `$set`.
/// Matching nothing means it did not apply.
pub(super) fn render_filtered(write: &LeaseWrite) -> Result<(Document, Vec<Document>), String> {
    if write.may_insert {
        return Err(
            "a write that may insert is rendered as alternatives (an upsert on _id)".into(),
        );
    }
    let mut filter = doc! { field::RESOURCE: &write.resource };
    for requirement in &write.requires {
        let (name, value) = query_predicate(requirement).ok_or_else(|| {
            format!("{requirement:?} cannot be a query predicate; render the write as alternatives")
        })?;
        filter.insert(name, value);
    }
    if write.bumps_version {
        // Below the largest int64 too. A version pinned below it says so already; one
        // pinned at it, or none, gets the bound (then nothing matches: not applied).
        let pinned = write.requires.iter().find_map(|r| match r {
            Requirement::VersionIs(version) => Some(*version),
            _ => None,
        });
        match pinned {
            Some(version) if version < i64::MAX => {}
            Some(version) => {
                filter.insert(field::VERSION, doc! { "$lt": i64::MAX, "$eq": version });
            }
            None => {
                filter.insert(field::VERSION, doc! { "$lt": i64::MAX });
            }
        }
    }
    let mut set = Document::new();
    for field_set in &write.sets {
        set.insert(field_set.name(), value(field_set));
    }
    if write.bumps_version {
        set.insert(field::VERSION, next_version(write.may_insert));
    }
    Ok((filter, vec![doc! { "$set": set }]))
}

/// Alternatives of one document, tried in order, as an upsert on `_id` alone with the
/// choice made inside the pipeline. Every alternative names the same resource.
pub(super) fn render_alternatives(writes: &[LeaseWrite]) -> (Document, Vec<Document>) {
    let resource = writes
        .first()
        .map(|w| w.resource.as_str())
        .unwrap_or_default();
    let filter = doc! { field::RESOURCE: resource };
    let branches: Vec<Bson> = writes
        .iter()
        .enumerate()
        .map(|(i, write)| {
            let mut all: Vec<Bson> = write.requires.iter().map(expression).collect();
            if write.bumps_version {
                all.push(version_below_max());
            }
            doc! { "case": { "$and": all }, "then": i as i64 }.into()
        })
        .collect();
    let choose =
        doc! { "$set": { CHOSEN: { "$switch": { "branches": branches, "default": -1_i64 } } } };

    // Each field once, in the order the alternatives first name it.
    let mut names: Vec<&'static str> = Vec::new();
    for write in writes {
        if write.bumps_version && !names.contains(&field::VERSION) {
            names.push(field::VERSION);
        }
        for set in &write.sets {
            if !names.contains(&set.name()) {
                names.push(set.name());
            }
        }
    }
    let chosen = format!("${CHOSEN}");
    let mut set = Document::new();
    for name in names {
        let branches: Vec<Bson> = writes
            .iter()
            .enumerate()
            .filter_map(|(i, write)| {
                let then = if name == field::VERSION && write.bumps_version {
                    next_version(write.may_insert)
                } else {
                    value(write.sets.iter().find(|s| s.name() == name)?)
                };
                Some(doc! { "case": { "$eq": [&chosen, i as i64] }, "then": then }.into())
            })
            .collect();
        set.insert(
            name,
            doc! { "$switch": { "branches": branches, "default": format!("${name}") } },
        );
    }
    (
        filter,
        vec![choose, doc! { "$set": set }, doc! { "$unset": CHOSEN }],
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{ClusterTime, Invalidation, LockKind, ResumeToken, WatchTarget};
    use crate::store::{AcquireRequest, OperatorChange, ResumeChange, Tenure};

    fn json(documents: &[Document]) -> String {
        let values: Vec<_> = documents
            .iter()
            .map(|d| Bson::Document(d.clone()).into_relaxed_extjson())
            .collect();
        serde_json::to_string_pretty(&values).unwrap_or_default()
    }

    fn acquire(kind: LockKind, watch: Option<WatchTarget>) -> [LeaseWrite; 2] {
        AcquireRequest {
            resource: "shop.orders".into(),
            listener: "worker-1".into(),
            kind,
            lease: Duration::from_secs(30),
            watch,
            seen_version: None,
        }
        .writes()
    }

    fn operator(holder: Option<&str>, resume: ResumeChange) -> LeaseWrite {
        operator_change(holder, resume).write()
    }

    fn operator_change(holder: Option<&str>, resume: ResumeChange) -> OperatorChange {
        OperatorChange {
            resource: "shop.orders".into(),
            expected_version: 4,
            holder: holder.map(str::to_string),
            expires_in: Duration::from_secs(600),
            kind: LockKind::Bulk,
            resume,
            note: "hold".into(),
            protocol: Default::default(),
        }
    }

    /// Every lease write the program makes, as MongoDB receives it: one table, pinned.
    #[test]
    fn every_lease_write_renders_as_pinned() {
        let tenure = Tenure {
            resource: "shop.orders".into(),
            listener: "worker-1".into(),
            version: 4,
        };
        let token =
            ResumeToken::from_document(doc! { "_data": "8263E5B9D2000000022B042C0100296E5A1004" });
        let invalidation = Invalidation {
            at: Some(ClusterTime::new(1_700_000_000, 2)),
            reason: "shop.orders was dropped".into(),
        };
        let failure = crate::model::ChangeFailure::first(
            Some(token.clone()),
            Some(ClusterTime::new(1_700_000_000, 3)),
            "shop.orders",
            "insert",
            r#"{"_id":7}"#,
            "animal 7 has no valid \"tags\"",
            crate::model::FailureCause::Handler,
            chrono::DateTime::from_timestamp_millis(1_700_000_000_500).unwrap_or_default(),
        );
        let watch = WatchTarget {
            db: "shop".into(),
            coll: "orders".into(),
            pipeline: "[{\"$match\": {}}]".into(),
            ..Default::default()
        };
        let set_resume = ResumeChange::Set {
            token: None,
            at: Some(ClusterTime::new(1_700_000_000, 1)),
        };
        // Shaped as Microsoft documents Cosmos DB's tokens; its time recorded beside it.
        let cosmos_token = ResumeToken::from_document(doc! {
            "_data": bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: b"{\"V\":2,\"Rid\":\"PxUaALn0SKE=\"}".to_vec(),
            },
            "_kind": 1,
        })
        .with_recorded_time(chrono::DateTime::from_timestamp_millis(1_700_000_000_250));
        let filtered = [
            ("commit", tenure.commit(&token, Duration::from_secs(30))),
            (
                "commit (an Azure Cosmos DB token, its time recorded)",
                tenure.commit(&cosmos_token, Duration::from_secs(30)),
            ),
            ("renew", tenure.renew(Duration::from_secs(30))),
            ("release", tenure.release()),
            (
                "record invalidation",
                tenure.record_invalidation(&invalidation),
            ),
            (
                "commit past the failing change",
                tenure.commit_past_failure(&token, Duration::from_secs(30)),
            ),
            ("record failure", tenure.record_failure(&failure)),
            (
                "operator: release, keep resume point",
                operator(None, ResumeChange::Keep),
            ),
            (
                "operator: name a holder, set resume point",
                operator(Some("ops"), set_resume),
            ),
            (
                "operator on a seed lease: hold, token removed (never null)",
                OperatorChange {
                    kind: LockKind::Update,
                    protocol: crate::model::LeaseProtocol::Seed,
                    ..operator_change(
                        Some("ops"),
                        ResumeChange::Set {
                            token: None,
                            at: None,
                        },
                    )
                }
                .write(),
            ),
        ];
        let mut table = String::new();
        for (name, write) in &filtered {
            let (filter, pipeline) = render_filtered(write).unwrap_or_default();
            table += &format!(
                "## {name}\nfilter {}\nupdate {}\n\n",
                json(&[filter]),
                json(&pipeline)
            );
        }
        for (name, writes) in [
            ("acquire (update listener)", acquire(LockKind::Update, None)),
            (
                "acquire (bulk, with watch target)",
                acquire(LockKind::Bulk, Some(watch)),
            ),
        ] {
            let (filter, pipeline) = render_alternatives(&writes);
            table += &format!(
                "## {name}\nfilter {}\nupdate {}\n\n",
                json(&[filter]),
                json(&pipeline)
            );
        }
        insta::assert_snapshot!(table);
    }

    #[test]
    fn the_version_bump_adds_an_int32_one_so_the_stored_type_is_kept() {
        let (_, pipeline) =
            render_filtered(&operator(None, ResumeChange::Keep)).unwrap_or_default();
        let bump = pipeline
            .first()
            .and_then(|stage| stage.get_document("$set").ok())
            .and_then(|set| set.get_document("version").ok())
            .and_then(|version| version.get_array("$add").ok())
            .and_then(|add| add.get(1).cloned());
        assert_eq!(
            bump,
            Some(Bson::Int32(1)),
            "int32 + int32 stays int32 on the server; int64 + int32 stays int64"
        );
    }

    #[test]
    fn an_insert_only_requirement_cannot_become_a_filter() {
        let [_, take] = acquire(LockKind::Update, None);
        assert!(
            render_filtered(&take).is_err(),
            "expiry needs $$NOW, which a plain query cannot compare against"
        );
    }
}
