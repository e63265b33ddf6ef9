use bson::Timestamp;

use super::*;

#[test]
fn an_oplog_edge_is_its_entry_ts_or_why_the_window_is_unknown() {
    let entry = doc! { "ts": Timestamp { time: 100, increment: 2 } };
    assert_eq!(
        edge_time(Some(&entry), "last"),
        Ok(ClusterTime::new(100, 2))
    );
    let none = edge_time(None, "startable (op != \"n\")").unwrap_err();
    assert!(
        none.contains("shows this user no startable") && none.contains("Atlas shared tier"),
        "{none}"
    );
    let wrong = edge_time(Some(&doc! { "ts": "yesterday" }), "last").unwrap_err();
    assert!(
        wrong.contains("last entry cannot be read") && wrong.contains("ts"),
        "{wrong}"
    );
    let missing = edge_time(Some(&doc! {}), "last").unwrap_err();
    assert!(missing.contains("missing"), "{missing}");
}

/// A server's refusal (other than a missing privilege) or an unreadable reply
/// leaves the window unknown; a missing privilege keeps naming its role, and a
/// failed connection stays a failure.
#[test]
fn an_oplog_read_the_server_answers_otherwise_leaves_the_window_unknown() {
    let atlas = StoreError::Command {
        code: 8000,
        message: "user is not allowed to do action [find] on [local.oplog.rs]".into(),
    };
    assert!(
        matches!(window_read_error(atlas), StoreError::OplogUnknown(why) if why.contains("8000"))
    );
    let garbled = StoreError::Malformed {
        what: "server reply".into(),
        detail: "missing field `cursor`".into(),
    };
    assert!(matches!(
        window_read_error(garbled),
        StoreError::OplogUnknown(why) if why.contains("cursor")
    ));
    let refused = StoreError::NotPermitted {
        action: "read the oplog".into(),
        detail: "not authorized".into(),
        hint: OPLOG_HINT.into(),
    };
    assert!(matches!(
        window_read_error(refused),
        StoreError::NotPermitted { .. }
    ));
    let lost = StoreError::Network("reset".into());
    assert!(matches!(window_read_error(lost), StoreError::Network(_)));
    // A failover or a slow read is the read's failure, not an unknowable window.
    for code in [10107, 189, 11602, 50] {
        let transient = StoreError::Command {
            code,
            message: "not now".into(),
        };
        assert!(
            matches!(window_read_error(transient), StoreError::Command { code: c, .. } if c == code),
            "{code}"
        );
    }
}
