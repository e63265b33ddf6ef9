// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

pub mod files;
pub mod http;
pub mod live;
pub mod mini_mongo;
pub mod sandbox;
pub mod wait;
pub mod wire;

use std::time::Duration;

use bson::{doc, Document};
use streamward::store::mongo::{MongoSettings, MongoStore};

/// The adapter on `server` with short timeouts: two seconds to find it, two per call.
pub fn quick_settings(server: &wire::WireServer) -> MongoSettings {
    let mut settings = MongoSettings::new(server.uri());
    settings.server_selection_timeout = Duration::from_secs(2);
    settings.operation_timeout = Duration::from_secs(2);
    settings
}

pub async fn connected(server: &wire::WireServer) -> MongoStore {
    MongoStore::connect(quick_settings(server))
        .await
        .expect("connect")
}

/// The write concern the adapter sends with `quick_settings`.
pub fn majority() -> Document {
    doc! { "w": "majority", "wtimeout": 2000 }
}

/// A command as pretty relaxed extended JSON, for snapshots that pin what is sent.
pub fn command_json(command: &Document) -> String {
    let value = bson::Bson::Document(command.clone()).into_relaxed_extjson();
    serde_json::to_string_pretty(&value).unwrap_or_else(|e| format!("unprintable: {e}"))
}
