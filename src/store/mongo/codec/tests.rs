use super::*;
use crate::model::{AuditState, LeaseProtocol, LockKind};
use chrono::TimeZone;

fn full_lease() -> Lease {
    let at = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
    Lease {
        resource: "shop.orders".into(),
        holder: Some("worker-1".into()),
        expires_at: Some(at),
        version: 7,
        resume_token: Some(ResumeToken::from_document(doc! {"_data": "8263E5"})),
        kind: LockKind::Bulk,
        resume_at: Some(ClusterTime::new(100, 2)),
        acquired_at: Some(at),
        renewed_at: Some(at),
        committed_at: None,
        watch: Some(WatchTarget {
            db: "shop".into(),
            coll: "orders".into(),
            pipeline: "[]".into(),
            source: SourceKind::Capped,
        }),
        note: Some("takeover by ops".into()),
        invalidated: Some(Invalidation {
            at: Some(ClusterTime::new(100, 3)),
            reason: "shop.orders was dropped".into(),
        }),
        failure: Some(ChangeFailure {
            token: None,
            at: Some(ClusterTime::new(99, 1)),
            namespace: "shop.orders".into(),
            operation: "update".into(),
            document_key: r#"{"_id":7}"#.into(),
            error: "BSONObj size: 24117673 (0x17001A9) is invalid".into(),
            cause: FailureCause::TooLarge {
                size: Some(24_117_673),
                limit: Some(16_793_600),
            },
            attempts: 4,
            first_at: at,
            last_at: at + chrono::TimeDelta::seconds(9),
        }),
        protocol: LeaseProtocol::Streamward,
    }
}

#[test]
fn a_handler_failure_round_trips_and_an_unknown_cause_is_named() {
    let mut lease = full_lease();
    let failure = lease.failure.as_mut().unwrap();
    failure.cause = FailureCause::Handler;
    failure.token = Some(ResumeToken::from_document(doc! {"_data": "8263E6"}));
    let document = lease_to_document(&lease);
    let stored = document.get_document(F::FAILURE).unwrap();
    assert!(!stored.contains_key("size"), "{stored}");
    assert_eq!(lease_from_document(&document).unwrap(), lease);

    let mut odd = document.clone();
    odd.get_document_mut(F::FAILURE)
        .unwrap()
        .insert("cause", "cosmic ray");
    let error = lease_from_document(&odd).unwrap_err().to_string();
    assert!(
        error.contains("failure.cause") && error.contains("cosmic ray"),
        "{error}"
    );
    let mut negative = document;
    negative
        .get_document_mut(F::FAILURE)
        .unwrap()
        .insert("attempts", -1_i64);
    let error = lease_from_document(&negative).unwrap_err().to_string();
    assert!(error.contains("failure.attempts"), "{error}");
}

#[test]
fn lease_round_trips() {
    let lease = full_lease();
    let document = lease_to_document(&lease);
    assert_eq!(document.get_i64("version").unwrap(), 7);
    assert_eq!(lease_from_document(&document).unwrap(), lease);
}

#[test]
fn a_watch_without_a_source_is_a_change_stream_and_an_unknown_source_is_named() {
    let plain = doc! {"_id": "r", "watch": {"db": "a", "coll": "b", "pipeline": ""}};
    let lease = lease_from_document(&plain).unwrap();
    assert_eq!(lease.watch.unwrap().source, SourceKind::ChangeStream);
    let stream = WatchTarget::default();
    assert!(!watch_to_document(&stream).contains_key("source"));
    let odd = doc! {"_id": "r", "watch": {"db": "a", "coll": "b", "source": "queue"}};
    match lease_from_document(&odd) {
        Err(StoreError::Malformed { detail, .. }) => {
            assert!(
                detail.contains("watch.source") && detail.contains("queue"),
                "{detail}"
            )
        }
        other => panic!("expected malformed, got {other:?}"),
    }
}

#[test]
fn a_token_time_is_stored_beside_its_token_and_read_back_with_it() {
    let at = Utc.with_ymd_and_hms(2024, 5, 1, 11, 59, 30).unwrap();
    let mut lease = full_lease();
    lease.resume_token = Some(
        ResumeToken::from_document(doc! {
            "_data": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"{}".to_vec() },
            "_kind": 1,
        })
        .with_recorded_time(Some(at)),
    );
    let document = lease_to_document(&lease);
    assert_eq!(document.get_datetime("tokenTime").unwrap().to_chrono(), at);
    assert_eq!(lease_from_document(&document).unwrap(), lease);
    // Without a token, a stored time means nothing and is not read.
    let orphan = doc! {"_id": "r", "tokenTime": BsonDateTime::from_chrono(at)};
    assert_eq!(lease_from_document(&orphan).unwrap().resume_token, None);
    // The field has one type.
    let wrong = doc! {"_id": "r", "resumeToken": {"_data": "x"}, "tokenTime": "noon"};
    match lease_from_document(&wrong) {
        Err(StoreError::Malformed { detail, .. }) => {
            assert!(detail.contains("tokenTime"), "{detail}")
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    // MongoDB's tokens carry their own time: no field.
    assert!(!lease_to_document(&full_lease()).contains_key("tokenTime"));
}

#[test]
fn the_invalidation_is_stored_under_its_own_field() {
    let document = lease_to_document(&full_lease());
    assert_eq!(
        document.get_document("invalidated").unwrap(),
        &doc! {"at": bson::Timestamp { time: 100, increment: 3 }, "reason": "shop.orders was dropped"}
    );
    let mut clear = full_lease();
    clear.invalidated = None;
    assert!(!lease_to_document(&clear).contains_key("invalidated"));
    let null = lease_from_document(&doc! {"_id": "r", "invalidated": null}).unwrap();
    assert_eq!(null.invalidated, None, "null reads as not invalidated");
}

#[test]
fn a_document_with_none_of_streamwards_own_fields_reads_as_a_seed_lease() {
    let seed =
        doc! {"_id": "r", "listenerId": "s1", "version": 3_i32, "resumeToken": {"_data": "82"}};
    assert_eq!(
        lease_from_document(&seed).unwrap().protocol,
        LeaseProtocol::Seed
    );
    let mut after_action = seed.clone();
    after_action.insert("note", "hold 5m by ann");
    after_action.insert("kind", "update");
    after_action.insert("acquiredAt", Bson::Null);
    assert_eq!(
        lease_from_document(&after_action).unwrap().protocol,
        LeaseProtocol::Seed,
        "note, kind and a null date do not make it streamward's"
    );
    assert_eq!(
        lease_from_document(&lease_to_document(&full_lease()))
            .unwrap()
            .protocol,
        LeaseProtocol::Streamward
    );
    let mut seed_lease = lease_from_document(&seed).unwrap();
    seed_lease.holder = None;
    assert_eq!(
        lease_from_document(&lease_to_document(&seed_lease))
            .unwrap()
            .protocol,
        LeaseProtocol::Seed,
        "an audit record's copy of a seed lease reads back as one"
    );
}

#[test]
fn legacy_documents_read_with_defaults() {
    let lease = lease_from_document(&doc! {"_id": "r", "listenerId": null, "version": 3}).unwrap();
    assert_eq!(lease.version, 3);
    assert_eq!(lease.kind, LockKind::Update);
    assert_eq!(lease.holder, None);
}

#[test]
fn wrong_shapes_name_the_field() {
    for (document, field) in [
        (doc! {"_id": 5}, "_id"),
        (doc! {"_id": "r", "version": "x"}, "version"),
        (doc! {"_id": "r", "expiresAt": "tomorrow"}, "expiresAt"),
        (doc! {"_id": "r", "kind": "BULK"}, "kind"),
        (doc! {"_id": "r", "resumeAt": 5}, "resumeAt"),
        (doc! {"_id": "r", "resumeToken": "abc"}, "resumeToken"),
        (doc! {"_id": "r", "watch": {"db": 1}}, "db"),
        (doc! {"_id": "r", "invalidated": "yes"}, "invalidated"),
        (doc! {"_id": "r", "invalidated": {"at": "then"}}, "at"),
        (doc! {"_id": "r", "invalidated": {"reason": 5}}, "reason"),
    ] {
        match lease_from_document(&document) {
            Err(StoreError::Malformed { detail, .. }) => {
                assert!(detail.contains(field), "{detail} should name {field}")
            }
            other => panic!("{document}: expected Malformed, got {other:?}"),
        }
    }
}

#[test]
fn drops_and_renames_of_the_watched_collection_close_its_stream() {
    let watched = Namespace::new("shop", "orders");
    let ts = bson::Timestamp {
        time: 1_795_442_561,
        increment: 4,
    };
    // Shaped as a real 6.0.5 sends them (tests/mongo_live_invalidate.rs).
    let event = |op: &str, ns: Document, to: Option<Document>| {
        let mut d = doc! {
            "_id": {"_data": "826B044781000000042B022C0100296E5A10047ABF04"},
            "operationType": op, "clusterTime": ts, "ns": ns,
        };
        if let Some(to) = to {
            d.insert("to", to);
        }
        d
    };
    let at = ClusterTime::from(ts);
    let orders = doc! {"db": "shop", "coll": "orders"};
    let old = doc! {"db": "shop", "coll": "orders_old"};
    let tmp = doc! {"db": "shop", "coll": "tmp.agg_out.1"};
    let cases = [
        (
            event("drop", orders.clone(), None),
            InvalidationCause::Dropped(watched.clone()),
        ),
        (
            event("rename", orders.clone(), Some(old.clone())),
            InvalidationCause::Renamed {
                from: watched.clone(),
                to: Namespace::new("shop", "orders_old"),
            },
        ),
        (
            event("rename", tmp, Some(orders.clone())),
            InvalidationCause::Replaced {
                from: Namespace::new("shop", "tmp.agg_out.1"),
                to: watched.clone(),
            },
        ),
        (
            event("dropDatabase", doc! {"db": "shop"}, None),
            InvalidationCause::DatabaseDropped("shop".into()),
        ),
    ];
    for (document, cause) in cases {
        assert_eq!(
            stream_event(&watched, raw(document), StreamProfile::MongoDb).unwrap(),
            StreamEvent::Closing { cause, at }
        );
    }
    let mut invalidate = event("invalidate", doc! {}, None);
    invalidate.remove("ns");
    assert_eq!(
        stream_event(&watched, raw(invalidate), StreamProfile::MongoDb).unwrap(),
        StreamEvent::Invalidate { at }
    );
    // Another collection's drop says nothing about this stream.
    let other = event("drop", doc! {"db": "shop", "coll": "pets"}, None);
    assert!(matches!(
        stream_event(&watched, raw(other), StreamProfile::MongoDb).unwrap(),
        StreamEvent::Change(_)
    ));
    let no_time = doc! {"_id": {"_data": "82"}, "operationType": "invalidate"};
    assert!(matches!(
        stream_event(&watched, raw(no_time), StreamProfile::MongoDb),
        Err(StoreError::Malformed { .. })
    ));
}

#[test]
fn audit_round_trips() {
    let record = AuditRecord {
        id: "665f1c2b9d1e8a0012345678".into(),
        operator: "ann@host".into(),
        at: Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap(),
        action: "takeover".into(),
        resource: "shop.orders".into(),
        state: AuditState::Pending,
        before: Some(full_lease()),
        intended: Some(full_lease()),
        after: None,
        steps: vec![AuditStep {
            at: Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 1).unwrap(),
            what: "bulk swap applied".into(),
        }],
        reason: Some("stuck".into()),
        outcome: "pending".into(),
        finished_at: None,
    };
    let oid = bson::oid::ObjectId::parse_str(&record.id).unwrap();
    let document = audit_to_document(&record, Bson::ObjectId(oid));
    assert_eq!(audit_from_document(&document).unwrap(), record);
}

fn raw(document: Document) -> bson::RawDocumentBuf {
    bson::RawDocumentBuf::from_document(&document).unwrap()
}

/// An update and a transaction's insert shaped exactly as a real MongoDB 6.0.5 sent
/// them (`$set` of a new sub-document, `$unset`; two inserts in one transaction).
#[test]
fn a_change_event_carries_what_the_server_sent_beyond_its_core() {
    let update = raw(doc! {
        "_id": { "_data": "826B0B438F000000032B022C0100296E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B020004" },
        "operationType": "update",
        "clusterTime": bson::Timestamp { time: 1_795_900_303, increment: 3 },
        "wallTime": BsonDateTime::from_millis(1_795_900_303_924),
        "fullDocument": { "_id": 1, "a": 5, "arr": [1], "n": { "x": 1 } },
        "ns": { "db": "evshape", "coll": "t" },
        "documentKey": { "_id": 1 },
        "updateDescription": { "updatedFields": { "a": 5, "n": { "x": 1 } }, "removedFields": ["b"], "truncatedArrays": [] },
    });
    let parsed = change_event_from_raw(update).unwrap();
    let description = parsed
        .details
        .update_description
        .as_ref()
        .expect("described");
    assert_eq!(
        description.updated_fields().unwrap(),
        doc! { "a": 5, "n": { "x": 1 } }
    );
    assert_eq!(description.removed_fields().unwrap(), ["b"]);
    assert_eq!(
        parsed.details.wall_time.map(|t| t.to_rfc3339()),
        Some("2026-11-28T21:11:43.924+00:00".to_string())
    );
    assert_eq!(parsed.details.transaction, None);
    assert_eq!(
        parsed.collection_uuid().map(hex::encode),
        Some("691862c8afd844bb9128bb07b54b2a6a".to_string()),
        "from the token, without collectionUUID"
    );

    let session = bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: vec![
            8, 0x6A, 0x8B, 0xFC, 6, 0xCC, 0x42, 0xB5, 0x85, 0x4F, 0x6A, 2, 0x1E, 0xF6, 0x0D, 0x7D,
        ],
    };
    let in_transaction = raw(doc! {
        "txnNumber": 3_i64,
        "lsid": { "id": session.clone(), "uid": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0xE3; 32] } },
        "_id": { "_data": "826B0B438F000000052B022C01002B026E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B060004" },
        "operationType": "insert",
        "clusterTime": bson::Timestamp { time: 1_795_900_303, increment: 5 },
        "wallTime": BsonDateTime::from_millis(1_795_900_303_930),
        "fullDocument": { "_id": 3 },
        "ns": { "db": "evshape", "coll": "t" },
        "documentKey": { "_id": 3 },
    });
    let parsed = change_event_from_raw(in_transaction).unwrap();
    assert_eq!(
        parsed.details.transaction,
        Some(crate::store::TransactionId {
            session: session.bytes,
            txn_number: 3
        })
    );
    assert_eq!(
        parsed.token.txn_op_index(),
        Some(1),
        "the second of its transaction"
    );
    assert_eq!(parsed.details.update_description, None);

    // A field of the wrong type is named.
    let garbled = raw(doc! {
        "_id": { "_data": "82" },
        "operationType": "insert",
        "clusterTime": bson::Timestamp { time: 1, increment: 1 },
        "txnNumber": "three",
    });
    let error = change_event_from_raw(garbled).unwrap_err().to_string();
    assert!(error.contains("txnNumber"), "{error}");
}

#[test]
fn a_change_event_reads_what_handlers_get() {
    let event = raw(doc! {
        "_id": { "_data": "8263E5B9D2000000012B042C0100296E5A1004" },
        "operationType": "update",
        "clusterTime": bson::Timestamp { time: 0x63E5_B9D2, increment: 1 },
        "wallTime": BsonDateTime::from_millis(1),
        "collectionUUID": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![0; 16] },
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": "o1" },
        "updateDescription": { "updatedFields": { "status": "paid" }, "removedFields": [] },
        "fullDocument": { "_id": "o1", "status": "paid" },
    });
    let parsed = change_event_from_raw(event).unwrap();
    assert_eq!(
        parsed,
        ChangeEvent {
            token: ResumeToken::from_document(
                doc! { "_data": "8263E5B9D2000000012B042C0100296E5A1004" }
            ),
            cluster_time: Some(ClusterTime::new(0x63E5_B9D2, 1)),
            operation: OperationType::Update,
            ns: Namespace::new("shop", "orders"),
            document_key: doc! { "_id": "o1" },
            full_document: Some(doc! { "_id": "o1", "status": "paid" }),
            details: crate::store::EventDetails {
                update_description: Some(crate::store::UpdateDescription::from_raw(raw(
                    doc! { "updatedFields": { "status": "paid" }, "removedFields": [] }
                ))),
                full_document_before_change: None,
                transaction: None,
                wall_time: BsonDateTime::from_millis(1).to_chrono().into(),
                collection_uuid: Some([0; 16]),
                raw: Default::default(),
            },
        }
    );
    // A delete has no post-image; a null one is the same.
    let delete = raw(doc! {
        "_id": { "_data": "82" },
        "operationType": "delete",
        "clusterTime": bson::Timestamp { time: 1, increment: 2 },
        "documentKey": { "_id": 7 },
        "fullDocument": null,
    });
    let parsed = change_event_from_raw(delete).unwrap();
    assert_eq!(parsed.full_document, None);
    assert_eq!(parsed.ns, Namespace::new("", ""));
    assert_eq!(parsed.operation, OperationType::Delete);
}

#[test]
fn a_cosmos_event_is_an_upsert_with_no_cluster_time_and_only_under_its_profile() {
    // Shaped as Microsoft documents Cosmos DB's change events (custom-commands,
    // "Parallelizing change streams"): `_id`, `fullDocument`, `ns`, `documentKey`.
    let token = doc! {
        "_data": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"{\"V\":2}".to_vec() },
        "_kind": 1,
    };
    let event = raw(doc! {
        "_id": token.clone(),
        "fullDocument": { "_id": "o1", "status": "paid" },
        "ns": { "db": "shop", "coll": "orders" },
        "documentKey": { "_id": "o1" },
    });
    let watched = Namespace::new("shop", "orders");
    let StreamEvent::Change(parsed) =
        stream_event(&watched, event.clone(), StreamProfile::CosmosDb).unwrap()
    else {
        panic!("a Cosmos DB event is a change");
    };
    assert_eq!(
        parsed.raw().unwrap().as_bytes(),
        event.as_bytes(),
        "the server's own bytes"
    );
    assert_eq!(
        parsed,
        ChangeEvent {
            token: ResumeToken::from_document(token),
            cluster_time: None,
            operation: OperationType::Upsert,
            ns: watched.clone(),
            document_key: doc! { "_id": "o1" },
            full_document: Some(doc! { "_id": "o1", "status": "paid" }),
            details: Default::default(),
        }
    );
    // MongoDB's profile stays strict: such an event is malformed there.
    assert!(matches!(
        stream_event(&watched, event, StreamProfile::MongoDb),
        Err(StoreError::Malformed { detail, .. }) if detail.contains("operationType")
    ));
    // The token is still required, and wrong types are still named.
    assert!(matches!(
        cosmos_change_from_raw(raw(doc! { "fullDocument": {} })),
        Err(StoreError::Malformed { detail, .. }) if detail.contains("_id")
    ));
    assert!(matches!(
        cosmos_change_from_raw(raw(doc! { "_id": {"_data": "x"}, "fullDocument": 5 })),
        Err(StoreError::Malformed { detail, .. }) if detail.contains("fullDocument")
    ));
    // What Cosmos DB does send beyond the documented fields is read, not guessed.
    let with_type = raw(doc! { "_id": {"_data": "x"}, "operationType": "insert" });
    assert_eq!(
        cosmos_change_from_raw(with_type).unwrap().operation,
        OperationType::Insert
    );
}

/// A kind no server sends today, carrying fields no server sends today: decoded as
/// `Other(name)`, never an error, and the handler is handed the server's bytes
/// themselves (moved into the event, not copied), the unknown fields included.
#[test]
fn an_unknown_kind_is_other_and_its_raw_event_is_every_byte_the_server_sent() {
    let sent = raw(doc! {
        "_id": { "_data": "826B0B438F000000072B022C0100296E5A1004691862C8AFD844BB9128BB07B54B2A6A461E5F6964002B080004" },
        "operationType": "reshardBlock",
        "clusterTime": bson::Timestamp { time: 1_795_900_303, increment: 7 },
        "wallTime": BsonDateTime::from_millis(1_795_900_303_940),
        "ns": { "db": "evshape", "coll": "t" },
        "operationDescription": { "donor": "shard-a", "blocks": [1, 2] },
        "epoch": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![7; 12] },
    });
    let bytes = sent.as_bytes().to_vec();
    let buffer = sent.as_bytes().as_ptr();
    let watched = Namespace::new("evshape", "t");
    let StreamEvent::Change(event) = stream_event(&watched, sent, StreamProfile::MongoDb).unwrap()
    else {
        panic!("a kind of its own is a change for the handler");
    };
    assert_eq!(event.operation, OperationType::Other("reshardBlock".into()));
    assert_eq!(event.ns, watched);
    let handed = event.raw().unwrap();
    assert!(matches!(handed, std::borrow::Cow::Borrowed(_)));
    assert_eq!(handed.as_bytes(), bytes);
    assert_eq!(handed.as_bytes().as_ptr(), buffer, "not a copy");
    let description = handed.get_document("operationDescription").unwrap();
    assert_eq!(description.get_str("donor").unwrap(), "shard-a");
    let clone = event.clone();
    assert_eq!(
        clone.raw().unwrap().as_bytes().as_ptr(),
        buffer,
        "clones share the bytes"
    );

    // A field a newer server adds to a kind this program knows is kept as well.
    let insert = raw(doc! {
        "_id": { "_data": "82" },
        "operationType": "insert",
        "clusterTime": bson::Timestamp { time: 1, increment: 2 },
        "documentKey": { "_id": 1 },
        "fullDocument": { "_id": 1 },
        "shardKeyVersion": 9_i64,
    });
    let event = change_event_from_raw(insert.clone()).unwrap();
    assert_eq!(event.operation, OperationType::Insert);
    assert_eq!(event.raw().unwrap().as_bytes(), insert.as_bytes());
    assert_eq!(event.raw().unwrap().get_i64("shardKeyVersion").unwrap(), 9);
}

/// Events laid out field for field as MongoDB 6.0.5 sent them (the order seen in
/// pymongo's raw documents on `scripts/mongo-replset.sh`; `lsid` without the `uid`
/// the typed fields do not carry): an event no server sent, laid out from the
/// fields read from each, is those same bytes, so a handler reads the sandbox's raw
/// event as it reads a server's. tests/event_details_live.rs checks it on the server.
#[test]
fn an_event_laid_out_from_its_fields_is_the_bytes_mongodb_sends() {
    let token = doc! { "_data": "826B0B79920000001E2B022C0100296E5A100432650C6CC9144F46873D82BBF2440D4B461E5F6964002B0C0004" };
    let at = bson::Timestamp {
        time: 1_795_914_130,
        increment: 30,
    };
    let wall = BsonDateTime::from_millis(1_795_914_130_716);
    let ns = doc! { "db": "probe_raw", "coll": "t" };
    let uuid = bson::Binary {
        subtype: bson::spec::BinarySubtype::Uuid,
        bytes: vec![0x32; 16],
    };
    let sent = [
        doc! { "_id": token.clone(), "operationType": "insert", "clusterTime": at, "wallTime": wall,
        "fullDocument": { "_id": 6, "a": 1 }, "ns": ns.clone(), "documentKey": { "_id": 6 } },
        doc! { "_id": token.clone(), "operationType": "update", "clusterTime": at, "wallTime": wall,
        "ns": ns.clone(), "documentKey": { "_id": 6 },
        "updateDescription": { "updatedFields": { "a": 2 }, "removedFields": [], "truncatedArrays": [] } },
        doc! { "_id": token.clone(), "operationType": "update", "clusterTime": at, "collectionUUID": uuid.clone(),
        "wallTime": wall, "fullDocument": { "_id": 6, "a": 2 }, "ns": ns.clone(), "documentKey": { "_id": 6 },
        "updateDescription": { "updatedFields": { "a": 2 }, "removedFields": [], "truncatedArrays": [] },
        "fullDocumentBeforeChange": { "_id": 6, "a": 1 } },
        doc! { "_id": token.clone(), "operationType": "replace", "clusterTime": at, "wallTime": wall,
        "fullDocument": { "_id": 6, "a": 3 }, "ns": ns.clone(), "documentKey": { "_id": 6 },
        "fullDocumentBeforeChange": { "_id": 6, "a": 2 } },
        doc! { "_id": token.clone(), "operationType": "delete", "clusterTime": at, "wallTime": wall,
        "ns": ns.clone(), "documentKey": { "_id": 6 } },
        doc! { "txnNumber": 1_i64, "lsid": { "id": uuid.clone() }, "_id": token.clone(),
        "operationType": "insert", "clusterTime": at, "wallTime": wall, "fullDocument": { "_id": 2 },
        "ns": ns.clone(), "documentKey": { "_id": 2 } },
    ];
    for document in sent {
        let sent = raw(document);
        let mut event = change_event_from_raw(sent.clone()).unwrap();
        event.details.raw = Default::default();
        let laid_out = event.raw().unwrap();
        assert!(matches!(laid_out, std::borrow::Cow::Owned(_)));
        assert_eq!(
            laid_out.to_raw_document_buf(),
            sent,
            "{:?}",
            Document::try_from(&*laid_out)
        );
    }
}

/// The raw event of an event the server split is the whole event put back
/// together, under its last fragment's token.
#[test]
fn a_split_events_raw_event_is_the_whole() {
    let mut fragments = super::super::split_event::Fragments::default();
    let first = raw(doc! {
        "_id": { "_data": "A1" }, "splitEvent": { "fragment": 1, "of": 2 },
        "operationType": "insert", "clusterTime": bson::Timestamp { time: 5, increment: 1 },
        "documentKey": { "_id": 7 },
    });
    let last = raw(doc! {
        "_id": { "_data": "A2" }, "splitEvent": { "fragment": 2, "of": 2 },
        "fullDocument": { "_id": 7, "big": "x" },
    });
    assert_eq!(fragments.take(first).unwrap(), None);
    let whole = fragments.take(last).unwrap().expect("the last fragment");
    let event = change_event_from_raw(whole).unwrap();
    assert_eq!(
        Document::try_from(&*event.raw().unwrap()).unwrap(),
        doc! {
            "_id": { "_data": "A2" },
            "operationType": "insert",
            "clusterTime": bson::Timestamp { time: 5, increment: 1 },
            "documentKey": { "_id": 7 },
            "fullDocument": { "_id": 7, "big": "x" },
        }
    );
}

#[test]
fn a_malformed_change_event_names_its_field() {
    let base = doc! {
        "_id": { "_data": "82" },
        "operationType": "insert",
        "clusterTime": bson::Timestamp { time: 1, increment: 2 },
    };
    let detail = |patch: Document| {
        let mut event = base.clone();
        event.extend(patch);
        match change_event_from_raw(raw(event)) {
            Err(StoreError::Malformed { detail, .. }) => detail,
            other => panic!("expected Malformed, got {other:?}"),
        }
    };
    assert!(detail(doc! { "clusterTime": "yesterday" }).contains("clusterTime"));
    assert!(detail(doc! { "operationType": 3 }).contains("operationType"));
    assert!(detail(doc! { "_id": "token" }).contains("_id"));
    assert!(detail(doc! { "ns": { "db": 1 } }).contains("ns"));
    assert!(detail(doc! { "fullDocument": [1] }).contains("fullDocument"));
    let mut no_time = base.clone();
    no_time.remove("clusterTime");
    assert!(matches!(
        change_event_from_raw(raw(no_time)),
        Err(StoreError::Malformed { detail, .. }) if detail.contains("clusterTime: missing")
    ));
}
