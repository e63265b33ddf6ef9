//! Connection settings, connecting with a reachability check, and URI redaction.

use std::time::Duration;

use bson::doc;
use mongodb::options::ClientOptions;
use mongodb::{Client, Database};

use super::errors::{bounded, classify_with_hint, CallError};
use super::version;
use crate::store::{Namespace, StoreError};

/// The form a connection string must have, shown when one is rejected.
const EXPECTED_URI_FORM: &str =
    "mongodb://[user:password@]host[:port][,host…]/[?options] or mongodb+srv://[user:password@]host/[?options]";

/// How to reach the cluster and where the leases live.
#[derive(Debug, Clone, PartialEq)]
pub struct MongoSettings {
    pub uri: String,
    /// The lease collection; the audit collection is `audit` in the same database.
    pub leases: Namespace,
    /// How long to look for a suitable server before reporting it unreachable.
    pub server_selection_timeout: Duration,
    /// Upper bound of one driver call (client side; also the write concern `wtimeout`).
    pub operation_timeout: Duration,
}

impl MongoSettings {
    pub const DEFAULT_SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            leases: Namespace::new("streamward", "leases"),
            server_selection_timeout: Self::DEFAULT_SERVER_SELECTION_TIMEOUT,
            operation_timeout: Self::DEFAULT_OPERATION_TIMEOUT,
        }
    }

    pub fn audit(&self) -> Namespace {
        Namespace::new(self.leases.db.clone(), "audit")
    }
}

impl Default for MongoSettings {
    fn default() -> Self {
        Self::new("mongodb://localhost:27017")
    }
}

/// Builds the client, then proves the cluster answers (`ping` on `admin`). `tweak`
/// sees the driver options last, after the URI and this adapter's own settings.
pub async fn open_client(
    settings: &MongoSettings,
    tweak: impl FnOnce(&mut ClientOptions),
) -> Result<Client, StoreError> {
    let secret = password_of(&settings.uri);
    let scrub = |text: String| scrub_secret(text, secret.as_deref());
    if !(settings.uri.starts_with("mongodb://") || settings.uri.starts_with("mongodb+srv://")) {
        return Err(StoreError::InvalidArgument(format!(
            "connection string {} must start with mongodb:// or mongodb+srv://; expected {EXPECTED_URI_FORM}",
            redact_uri(&settings.uri)
        )));
    }
    let parse = ClientOptions::parse(&settings.uri);
    let mut options = match bounded(settings.server_selection_timeout, "parse the URI", async {
        parse.await
    })
    .await
    {
        Ok(options) => options,
        Err(CallError::Driver(e)) => {
            let message = scrub(match &*e.kind {
                mongodb::error::ErrorKind::InvalidArgument { message, .. } => message.clone(),
                _ => e.to_string(),
            });
            return Err(match classify_with_hint(&e, "parse the URI", "") {
                StoreError::Unreachable(_) => StoreError::Unreachable(message),
                _ => StoreError::InvalidArgument(format!(
                    "connection string {} is not valid: {message}; expected {EXPECTED_URI_FORM}",
                    redact_uri(&settings.uri)
                )),
            });
        }
        Err(CallError::TimedOut(m)) => return Err(StoreError::Unreachable(scrub(m))),
    };
    options.server_selection_timeout = Some(settings.server_selection_timeout);
    options.connect_timeout = Some(settings.server_selection_timeout);
    // We own the single retry (see errors.rs): the driver must not add its own.
    options.retry_writes = Some(false);
    options.retry_reads = Some(false);
    if options.app_name.is_none() {
        options.app_name = Some("streamward".into());
    }
    tweak(&mut options);
    let client = Client::with_options(options).map_err(|e| {
        StoreError::InvalidArgument(scrub(format!(
            "cannot use connection string {}: {e}; expected {EXPECTED_URI_FORM}",
            redact_uri(&settings.uri)
        )))
    })?;
    let admin = client.database("admin");
    let ping = admin.run_command(doc! {"ping": 1});
    let limit = settings.server_selection_timeout + settings.operation_timeout;
    match bounded(limit, "connect", async { ping.await }).await {
        Ok(_) => {}
        Err(e) => {
            if let Some(too_old) = match &e {
                CallError::Driver(driver) => refused_as_too_old(driver),
                CallError::TimedOut(_) => None,
            } {
                return Err(too_old);
            }
            return Err(scrub_error(
                e.into_store_with_hint(
                    "connect",
                    "a user with at least the streamwardReader role of docs/permissions.md",
                ),
                secret.as_deref(),
            ));
        }
    }
    check_version(&admin, settings.operation_timeout)
        .await
        .map_err(|e| scrub_error(e, secret.as_deref()))?;
    Ok(client)
}

/// The driver refuses servers before 4.4 during server selection, with a message.
fn refused_as_too_old(error: &mongodb::error::Error) -> Option<StoreError> {
    match &*error.kind {
        mongodb::error::ErrorKind::ServerSelection { message, .. } => {
            version::from_driver_refusal(message)
        }
        _ => None,
    }
}

/// Refuses a server older than the adapter's commands need: `hello.maxWireVersion`
/// decides; `buildInfo.version` (read only then) names it in the message.
async fn check_version(admin: &Database, limit: Duration) -> Result<(), StoreError> {
    let action = "read the server's version (hello)";
    let hello = bounded(limit, action, async {
        admin.run_command(doc! {"hello": 1}).await
    })
    .await
    .map_err(|e| e.into_store(action))?;
    let wire = match hello.get("maxWireVersion") {
        Some(value) => super::codec::integer("hello reply", value, "maxWireVersion")?,
        None => {
            return Err(StoreError::Malformed {
                what: "hello reply".into(),
                detail: "field maxWireVersion: missing".into(),
            })
        }
    };
    let wire = i32::try_from(wire).unwrap_or(i32::MAX);
    if wire >= version::MIN_WIRE_VERSION {
        return Ok(());
    }
    let build = bounded(limit, "read the server's version (buildInfo)", async {
        admin.run_command(doc! {"buildInfo": 1}).await
    })
    .await
    .ok();
    let named = build
        .as_ref()
        .and_then(|b| b.get_str("version").ok())
        .map(crate::model::text::escape_control);
    version::check(wire, named.as_deref())
}

impl CallError {
    fn into_store_with_hint(self, action: &str, hint: &str) -> StoreError {
        match self.into_store_hinted(action, hint) {
            // No server within the selection timeout, a socket dropped during the
            // handshake, or no reply in time: either way nothing answers.
            StoreError::Network(m) => StoreError::Unreachable(m),
            other => other,
        }
    }
}

/// Replaces every occurrence of the password in an error's text.
fn scrub_error(error: StoreError, secret: Option<&str>) -> StoreError {
    let s = |t: String| scrub_secret(t, secret);
    match error {
        StoreError::Unreachable(m) => StoreError::Unreachable(s(m)),
        StoreError::Network(m) => StoreError::Network(s(m)),
        StoreError::Authentication(m) => StoreError::Authentication(s(m)),
        StoreError::InvalidArgument(m) => StoreError::InvalidArgument(s(m)),
        StoreError::Command { code, message } => StoreError::Command {
            code,
            message: s(message),
        },
        StoreError::NotPermitted {
            action,
            detail,
            hint,
        } => StoreError::NotPermitted {
            action,
            detail: s(detail),
            hint,
        },
        other => other,
    }
}

fn scrub_secret(text: String, secret: Option<&str>) -> String {
    match secret {
        Some(secret) if !secret.is_empty() => {
            let mut text = text.replace(secret, "***");
            let decoded = percent_decode(secret);
            if !decoded.is_empty() && decoded != secret {
                text = text.replace(&decoded, "***");
            }
            text
        }
        _ => text,
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the password sits in `uri`: the byte range between the `:` after the user
/// name and the `@` that starts the host list.
fn password_span(uri: &str) -> Option<(usize, usize)> {
    let start = uri.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = &uri[start..];
    // The userinfo ends at the last '@' that is followed by something shaped like a
    // host list. Choosing the last such '@' can only hide too much, never too little.
    let at = rest
        .char_indices()
        .rev()
        .filter(|(_, c)| *c == '@')
        .map(|(i, _)| i)
        .find(|i| looks_like_hosts(&rest[i + 1..]))
        .or_else(|| rest.rfind('@'))?;
    let colon = rest[..at].find(':')?;
    Some((start + colon + 1, start + at))
}

fn looks_like_hosts(text: &str) -> bool {
    let hosts = text.split(['/', '?']).next().unwrap_or_default();
    !hosts.is_empty()
        && hosts
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_:,[]%".contains(c))
}

fn password_of(uri: &str) -> Option<String> {
    password_span(uri)
        .map(|(from, to)| uri[from..to].to_string())
        .filter(|p| !p.is_empty())
}

/// `uri` with any password replaced by `***`; safe to print and log. Strings that
/// are not URIs are treated the same way (`user:secret@host` → `user:***@host`).
pub fn redact_uri(uri: &str) -> String {
    match password_span(uri) {
        Some((from, to)) => format!("{}***{}", &uri[..from], &uri[to..]),
        None => uri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_plain_passwords() {
        assert_eq!(
            redact_uri("mongodb://app:s3cret@db1:27017,db2/admin?replicaSet=rs0"),
            "mongodb://app:***@db1:27017,db2/admin?replicaSet=rs0"
        );
        assert_eq!(
            redact_uri("mongodb+srv://app:p%40ss@cluster0.example.net/"),
            "mongodb+srv://app:***@cluster0.example.net/"
        );
    }

    #[test]
    fn leaves_uris_without_password_alone() {
        for uri in [
            "mongodb://localhost:27017",
            "mongodb://user@host/",
            "mongodb://host/?authMechanism=MONGODB-X509",
            "",
            "not a uri",
        ] {
            assert_eq!(redact_uri(uri), uri);
        }
    }

    #[test]
    fn at_signs_inside_the_password_are_hidden_too() {
        let redacted = redact_uri("mongodb://app:p@ss@w0rd@db1:27017/?w=majority");
        assert_eq!(redacted, "mongodb://app:***@db1:27017/?w=majority");
        assert_eq!(
            redact_uri("mongodb://app:a/b@c@db1/"),
            "mongodb://app:***@db1/"
        );
    }

    #[test]
    fn at_signs_in_options_never_reveal_the_password() {
        let redacted = redact_uri("mongodb://app:topsecret@db1/?appName=me@home");
        assert!(!redacted.contains("topsecret"), "{redacted}");
    }

    #[test]
    fn unparsable_strings_are_redacted_conservatively() {
        assert_eq!(redact_uri("app:hunter2@db"), "app:***@db");
        assert!(!redact_uri("mongodb://:hunter2@").contains("hunter2"));
        assert!(!redact_uri("mongodb://u:hunter2@@@").contains("hunter2"));
        assert!(!redact_uri("u:hunter2@/").contains("hunter2"));
    }

    #[test]
    fn scrubbing_hides_raw_and_decoded_password() {
        let text = scrub_secret("failed for p%40ss and p@ss".into(), Some("p%40ss"));
        assert_eq!(text, "failed for *** and ***");
    }
}
