//! Connection settings, and connecting with a reachability check.

use std::time::Duration;

use bson::doc;
use mongodb::options::ClientOptions;
use mongodb::{Client, Database};

use super::errors::{bounded, classify_with_hint, CallError};
use super::redact::{redact_message, secret_is_malformed, ConnectionString};
use super::version;
use crate::model::StreamProfile;
use crate::store::{Namespace, StoreError};

/// The form a connection string must have, shown when one is rejected.
const EXPECTED_URI_FORM: &str =
    "mongodb://[user:password@]host[:port][,host…]/[?options] or mongodb+srv://[user:password@]host/[?options]";

/// Said instead of the driver's reason when a secret in the URI is malformed.
const MALFORMED_SECRET: &str = "the password or a secret option is malformed (a reserved \
     character such as ? & @ not percent-encoded, or an authMechanismProperties entry that \
     is not KEY:value); the driver's reason is not shown as it would quote part of the secret";

/// How to reach the cluster and where the leases live. Its `Debug` shows the URI
/// redacted.
#[derive(Debug, Clone, PartialEq)]
pub struct MongoSettings {
    pub uri: ConnectionString,
    /// The lease collection; the audit collection is `audit` in the same database.
    pub leases: Namespace,
    /// How long to look for a suitable server before reporting it unreachable.
    pub server_selection_timeout: Duration,
    /// Upper bound of one driver call (client side; also the write concern `wtimeout`).
    pub operation_timeout: Duration,
    /// Which kind of change streams the cluster offers. `None` (the default): told by
    /// the host names, Azure Cosmos DB's request-unit accounts (`*.cosmos.azure.com`)
    /// get [`StreamProfile::CosmosDb`] and everything else MongoDB's
    /// ([`StreamProfile::detect`]). A configured profile wins.
    pub profile: Option<StreamProfile>,
}

impl MongoSettings {
    pub const DEFAULT_SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

    pub fn new(uri: impl Into<ConnectionString>) -> Self {
        Self {
            uri: uri.into(),
            leases: Namespace::new("streamward", "leases"),
            server_selection_timeout: Self::DEFAULT_SERVER_SELECTION_TIMEOUT,
            operation_timeout: Self::DEFAULT_OPERATION_TIMEOUT,
            profile: None,
        }
    }

    pub fn audit(&self) -> Namespace {
        Namespace::new(self.leases.db.clone(), "audit")
    }

    /// Where the processes of a fleet announce themselves: beside the leases.
    pub fn processes(&self) -> Namespace {
        Namespace::new(self.leases.db.clone(), "processes")
    }

    /// Where the resources' checkpoints are kept: beside the leases.
    pub fn checkpoints(&self) -> Namespace {
        Namespace::new(self.leases.db.clone(), "checkpoints")
    }
}

impl Default for MongoSettings {
    fn default() -> Self {
        Self::new("mongodb://localhost:27017")
    }
}

/// What [`open_client`] connected to.
pub struct Opened {
    pub client: Client,
    /// The options the client was built with (SRV records resolved into `hosts`).
    pub options: ClientOptions,
    /// `hello` answered as a mongos router does (`msg: "isdbgrid"`).
    pub router: bool,
    /// The server takes `$changeStreamSplitLargeEvent` ([`version::splits_large_events`]).
    pub splits_large_events: bool,
}

/// Builds the client, then proves the cluster answers (`ping` on `admin`). `tweak`
/// sees the driver options last, after the URI and this adapter's own settings.
pub async fn open_client(
    settings: &MongoSettings,
    tweak: impl FnOnce(&mut ClientOptions),
) -> Result<Opened, StoreError> {
    let uri = settings.uri.expose();
    if !(uri.starts_with("mongodb://") || uri.starts_with("mongodb+srv://")) {
        return Err(StoreError::InvalidArgument(format!(
            "connection string {} must start with mongodb:// or mongodb+srv://; expected {EXPECTED_URI_FORM}",
            settings.uri.redacted()
        )));
    }
    let parse = ClientOptions::parse(uri);
    let mut options = match bounded(settings.server_selection_timeout, "parse the URI", async {
        parse.await
    })
    .await
    {
        Ok(options) => options,
        Err(CallError::Driver(e)) => {
            let message = if secret_is_malformed(uri) {
                // The driver's message may name the part of the secret it misread.
                MALFORMED_SECRET.to_string()
            } else {
                redact_message(&match &*e.kind {
                    mongodb::error::ErrorKind::InvalidArgument { message, .. } => message.clone(),
                    _ => e.to_string(),
                })
            };
            return Err(match classify_with_hint(&e, "parse the URI", "") {
                StoreError::Unreachable(_) => StoreError::Unreachable(message),
                _ => StoreError::InvalidArgument(format!(
                    "connection string {} is not valid: {message}; expected {EXPECTED_URI_FORM}",
                    settings.uri.redacted()
                )),
            });
        }
        Err(CallError::TimedOut(m)) => return Err(StoreError::Unreachable(redact_message(&m))),
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
    let client = Client::with_options(options.clone()).map_err(|e| {
        StoreError::InvalidArgument(format!(
            "cannot use connection string {}: {}; expected {EXPECTED_URI_FORM}",
            settings.uri.redacted(),
            redact_message(&e.to_string())
        ))
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
            return Err(redact_error(e.into_store_with_hint(
                "connect",
                "a user with at least the streamwardReader role of docs/permissions.md",
            )));
        }
    }
    let server = check_version(&admin, settings.operation_timeout)
        .await
        .map_err(redact_error)?;
    Ok(Opened {
        client,
        options,
        router: server.router,
        splits_large_events: server.splits_large_events,
    })
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

/// What `hello` (and, where it must, `buildInfo`) told of the server.
struct ServerFacts {
    router: bool,
    splits_large_events: bool,
}

/// Refuses a server older than the adapter's commands need: `hello.maxWireVersion`
/// decides; `buildInfo.version` names it in the message. `buildInfo` is read only
/// when the wire version cannot tell: a server too old, or a 6.0 whose patch decides
/// whether change streams can split large events.
async fn check_version(admin: &Database, limit: Duration) -> Result<ServerFacts, StoreError> {
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
    let router = hello.get_str("msg") == Ok("isdbgrid");
    let needs_build = wire < version::MIN_WIRE_VERSION || version::patch_decides_splitting(wire);
    let named = if needs_build {
        let build = bounded(limit, "read the server's version (buildInfo)", async {
            admin.run_command(doc! {"buildInfo": 1}).await
        })
        .await;
        if let Err(e) = &build {
            tracing::debug!(error = ?e, "buildInfo could not be read; the server's patch release stays unknown");
        }
        build.ok().and_then(|b| {
            b.get_str("version")
                .ok()
                .map(crate::model::text::escape_control)
        })
    } else {
        None
    };
    version::check(wire, named.as_deref())?;
    Ok(ServerFacts {
        router,
        splits_large_events: version::splits_large_events(wire, named.as_deref()),
    })
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

/// Masks the connection strings a driver message may carry (see [`redact_message`]);
/// the rest of the text is kept as the driver wrote it.
fn redact_error(error: StoreError) -> StoreError {
    let s = |t: String| redact_message(&t);
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
