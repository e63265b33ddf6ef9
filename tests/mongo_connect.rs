//! Connecting: reachability is verified, and every failure is classified and
//! reported without the password.

mod support;

use std::time::{Duration, Instant};

use bson::doc;
use streamward::store::mongo::{MongoSettings, MongoStore};
use streamward::store::StoreError;
use support::wire::{Action, WireServer};

fn quick(uri: String) -> MongoSettings {
    let mut settings = MongoSettings::new(uri);
    settings.server_selection_timeout = Duration::from_secs(2);
    settings.operation_timeout = Duration::from_secs(2);
    settings
}

#[test]
fn defaults_follow_the_design() {
    let settings = MongoSettings::new("mongodb://h");
    assert_eq!(settings.leases.to_string(), "streamward.leases");
    assert_eq!(settings.audit().to_string(), "streamward.audit");
    assert_eq!(settings.server_selection_timeout, Duration::from_secs(5));
}

#[tokio::test]
async fn connect_pings_the_server() {
    let server = WireServer::start().await;
    let store = MongoStore::connect(quick(server.uri())).await.unwrap();
    assert_eq!(
        server.commands_stripped("ping"),
        vec![doc! { "ping": 1, "$db": "admin" }]
    );
    assert_eq!(store.redacted_uri(), server.uri());
}

#[tokio::test]
async fn nothing_listening_is_unreachable_within_seconds() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let error = MongoStore::connect(quick(format!("mongodb://app:hunter2@127.0.0.1:{port}/")))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Unreachable(_)), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(!error.to_string().contains("hunter2"), "{error}");
}

#[tokio::test]
async fn a_server_that_never_answers_is_unreachable_within_seconds() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts connections and never says a word.
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let started = Instant::now();
    let error = MongoStore::connect(quick(format!("mongodb://127.0.0.1:{port}/")))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Unreachable(_)), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn malformed_uris_are_invalid_arguments_showing_the_expected_form() {
    for uri in [
        "postgres://app:hunter2@db/",
        "mongodb://app:hunter2@db:notaport/",
        "mongodb://app:hunter2@/",
        "mongodb://app:hunter2@db/?replicaSet=rs0&w=0&journal=maybe",
    ] {
        let error = MongoStore::connect(quick(uri.into())).await.unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, StoreError::InvalidArgument(_)),
            "{uri}: {error:?}"
        );
        assert!(text.contains("mongodb://[user:password@]host"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}

#[tokio::test]
async fn the_driver_never_quotes_part_of_a_malformed_secret() {
    // Each secret holds an unencoded reserved character or is no KEY:value entry, so
    // the driver reads part of it as a host, an option or an entry and names it.
    for uri in [
        "mongodb://app:SECRETA?SECRETB@127.0.0.1:1/",
        "mongodb://127.0.0.1:1/?authMechanism=SCRAM-SHA-256&authMechanismProperties=SECRETC",
        "mongodb://127.0.0.1:1/?authMechanismProperties=SERVICE_NAME:SECRETD&SECRETE",
    ] {
        let error = MongoStore::connect(quick(uri.into())).await.unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, StoreError::InvalidArgument(_)),
            "{uri}: {error:?}"
        );
        assert!(!text.contains("SECRET"), "{text}");
        assert!(text.contains("mongodb://[user:password@]host"), "{text}");
    }
}

#[tokio::test]
async fn authentication_failure_is_reported_without_the_password() {
    let server = WireServer::start().await;
    let uri = server.uri_with_credentials("app", "hunter2");
    server.on("saslStart", |_| {
        Action::error(18, "AuthenticationFailed", "Authentication failed.")
    });
    let error = MongoStore::connect(quick(uri)).await.unwrap_err();
    assert!(matches!(error, StoreError::Authentication(_)), "{error:?}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    let start = server.commands("saslStart");
    assert!(!start.is_empty(), "the driver tried SCRAM");
    assert_eq!(start[0].get_str("mechanism").unwrap(), "SCRAM-SHA-256");
}

#[tokio::test]
async fn a_password_that_is_also_a_word_of_the_message_leaves_the_message_intact() {
    let server = WireServer::start().await;
    // The password is "failed": only URIs are masked, never words that match it.
    let uri = server.uri_with_credentials("app", "failed");
    server.on("saslStart", |_| {
        Action::error(18, "AuthenticationFailed", "Authentication failed.")
    });
    let error = MongoStore::connect(quick(uri)).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, StoreError::Authentication(_)), "{error:?}");
    assert!(text.contains("Authentication failed."), "{text}");
    assert!(!text.contains("***"), "{text}");
}

#[tokio::test]
async fn unauthorized_ping_is_not_permitted() {
    let server = WireServer::start().await;
    server.script(
        "ping",
        [Action::error(13, "Unauthorized", "not authorized on admin")],
    );
    let error = MongoStore::connect(quick(server.uri())).await.unwrap_err();
    assert!(
        matches!(error, StoreError::NotPermitted { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_hang_up_during_the_ping_is_unreachable() {
    let server = WireServer::start().await;
    server.script("ping", [Action::HangUp]);
    let error = MongoStore::connect(quick(server.uri())).await.unwrap_err();
    assert!(matches!(error, StoreError::Unreachable(_)), "{error:?}");
}

#[tokio::test]
async fn a_server_older_than_5_0_is_refused_naming_found_and_needed() {
    let server = WireServer::start().await;
    // MongoDB 4.4: the driver talks to it, but $getField/$setField do not exist yet.
    server.set_max_wire_version(9);
    server.on("buildInfo", |_| {
        Action::ok(doc! { "version": "4.4.29", "versionArray": [4, 4, 29, 0] })
    });
    let error = MongoStore::connect(quick(server.uri())).await.unwrap_err();
    assert!(
        matches!(error, StoreError::UnsupportedServer { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with("MongoDB 4.4.29 (wire version 9) is too old: streamward needs MongoDB 5.0 (wire version 13) or newer"),
        "{text}"
    );
    assert_eq!(server.commands("buildInfo").len(), 1);
}

#[tokio::test]
async fn a_server_the_driver_refuses_reads_the_same_and_quickly() {
    let server = WireServer::start().await;
    server.set_max_wire_version(8); // MongoDB 4.2
    let started = Instant::now();
    let error = MongoStore::connect(quick(server.uri())).await.unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("MongoDB 4.2 (wire version 8) is too old"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(server.commands("ping").is_empty(), "nothing was sent to it");
}

#[tokio::test]
async fn a_5_0_server_is_accepted_without_asking_for_its_build() {
    let server = WireServer::start().await;
    server.set_max_wire_version(13);
    MongoStore::connect(quick(server.uri())).await.unwrap();
    assert!(server.commands("buildInfo").is_empty());
}
