//! A "black pipe" MongoDB peer: a tokio TCP server that speaks OP_MSG well enough
//! for the real driver to handshake, run commands and iterate cursors, scripted per
//! test and recording every command it receives. It can hang up mid-command, stall,
//! return errors and send malformed replies. No driver internals are mocked.
// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

pub mod cosmos;
mod protocol;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document, Timestamp};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the server does with one command.
#[derive(Debug, Clone)]
pub enum Action {
    /// Reply with this body (`ok: 1`, `operationTime` and `$clusterTime` are added when missing).
    Reply(Document),
    /// `{ok: 0, code, codeName, errmsg, errorLabels}`.
    Error {
        code: i32,
        name: String,
        message: String,
        labels: Vec<String>,
    },
    /// Close the connection without replying (as if the network died after the
    /// server applied the command).
    HangUp,
    /// Wait, then do the inner action.
    Stall(Duration, Box<Action>),
    /// Send these bytes as the whole reply message (a malformed reply).
    RawReply(Vec<u8>),
    /// Reply with a well-framed OP_MSG whose section holds these (invalid) BSON bytes.
    BadBson(Vec<u8>),
    /// Send the command to the real server behind this one and relay its reply (see
    /// [`WireServer::become_mongos_over`]).
    Forward(Document),
}

impl Action {
    pub fn ok(body: Document) -> Self {
        Action::Reply(body)
    }

    pub fn error(code: i32, name: &str, message: &str) -> Self {
        Action::Error {
            code,
            name: name.into(),
            message: message.into(),
            labels: vec![],
        }
    }

    pub fn error_with_labels(code: i32, name: &str, message: &str, labels: &[&str]) -> Self {
        Action::Error {
            code,
            name: name.into(),
            message: message.into(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
        }
    }
}

type Handler = Arc<dyn Fn(&Document) -> Action + Send + Sync>;

/// One command as received (document sequences merged in as arrays).
#[derive(Debug, Clone)]
pub struct Received {
    pub connection: u64,
    pub name: String,
    pub body: Document,
}

struct State {
    port: u16,
    set_name: String,
    received: Mutex<Vec<Received>>,
    queues: Mutex<HashMap<String, VecDeque<Action>>>,
    handlers: Mutex<HashMap<String, Handler>>,
    local_time: Mutex<Option<bson::DateTime>>,
    operation_time: Mutex<Timestamp>,
    sasl_mechanisms: Mutex<Option<Vec<String>>>,
    connections: AtomicU64,
    request_ids: AtomicI32,
    /// What the handshake (and `hello`) reports; 21 is MongoDB 7.0.
    max_wire_version: AtomicI32,
    /// Answers the handshake as a `mongos` router does.
    mongos: std::sync::atomic::AtomicBool,
    /// A real server every unscripted command is forwarded to.
    upstream: Mutex<Option<String>>,
    /// Reshapes every reply, the handshake's too, after `decorate` (cosmos.rs).
    reply_shape: Mutex<Option<fn(&mut Document)>>,
}

/// A running black-pipe server on 127.0.0.1.
pub struct WireServer {
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for WireServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const HANDSHAKE: [&str; 3] = ["isMaster", "ismaster", "hello"];

impl WireServer {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State {
            port,
            set_name: "rs0".into(),
            received: Mutex::default(),
            queues: Mutex::default(),
            handlers: Mutex::default(),
            local_time: Mutex::new(None),
            operation_time: Mutex::new(Timestamp {
                time: 1_700_000_000,
                increment: 1,
            }),
            sasl_mechanisms: Mutex::new(None),
            connections: AtomicU64::new(0),
            request_ids: AtomicI32::new(1),
            max_wire_version: AtomicI32::new(21),
            mongos: std::sync::atomic::AtomicBool::new(false),
            upstream: Mutex::new(None),
            reply_shape: Mutex::new(None),
        });
        let accept_state = state.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let id = accept_state.connections.fetch_add(1, Ordering::SeqCst);
                connections.spawn(serve(stream, id, accept_state.clone()));
            }
        });
        let server = WireServer { state, task };
        server.on("ping", |_| Action::Reply(doc! {}));
        server.on("endSessions", |_| Action::Reply(doc! {}));
        server.on("killCursors", |cmd| {
            Action::Reply(
                doc! { "cursorsKilled": cmd.get_array("cursors").cloned().unwrap_or_default() },
            )
        });
        server
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.state.port)
    }

    /// A URI for the driver: this server as the primary of replica set `rs0`.
    pub fn uri(&self) -> String {
        format!("mongodb://{}/?replicaSet=rs0", self.address())
    }

    /// A URI with credentials (the server asks for SCRAM-SHA-256).
    pub fn uri_with_credentials(&self, user: &str, password: &str) -> String {
        *self.state.sasl_mechanisms.lock().unwrap() = Some(vec!["SCRAM-SHA-256".into()]);
        format!(
            "mongodb://{user}:{password}@{}/?replicaSet=rs0&authSource=admin",
            self.address()
        )
    }

    /// Queues actions for the next commands named `name`, in order; after they are
    /// used up the handler (or the default `{ok: 1}`) answers.
    pub fn script(&self, name: &str, actions: impl IntoIterator<Item = Action>) {
        self.state
            .queues
            .lock()
            .unwrap()
            .entry(name.into())
            .or_default()
            .extend(actions);
    }

    /// Answers every command named `name` (once its script is used up).
    pub fn on(&self, name: &str, handler: impl Fn(&Document) -> Action + Send + Sync + 'static) {
        self.state
            .handlers
            .lock()
            .unwrap()
            .insert(name.into(), Arc::new(handler));
    }

    /// Reports `wire` as `maxWireVersion` in the handshake and to `hello`, as a server
    /// of that release would (6.0 is 17, 5.0 is 13, 4.4 is 9).
    pub fn set_max_wire_version(&self, wire: i32) {
        self.state.max_wire_version.store(wire, Ordering::SeqCst);
    }

    /// From now on a `mongos`: the handshake says `msg: "isdbgrid"` and names no
    /// replica set (the reply's shape from the MongoDB manual's `hello` page: a router
    /// answers `isWritablePrimary: true`, `msg`, and no `setName`, `hosts` or `primary`),
    /// reading `local` is refused with code 20, as a real router does, and `listShards`
    /// as to a user without the clusterMonitor role. Connect with
    /// [`WireServer::uri_direct`]. Any other `find` answers `documents`.
    pub fn become_mongos(&self, documents: Vec<Document>) {
        self.state.mongos.store(true, Ordering::SeqCst);
        // A router has no replica-set status of its own (shared/reference: "through
        // mongos … replSetGetStatus does not exist").
        self.on("replSetGetStatus", |_| {
            Action::error(59, "CommandNotFound", "no such command: 'replSetGetStatus'")
        });
        // As to a user without clusterMonitor: the shards cannot be listed.
        self.on("listShards", |_| {
            Action::error(
                13,
                "Unauthorized",
                "not authorized on admin to execute command { listShards: 1 }",
            )
        });
        self.on("find", move |cmd| {
            let db = cmd.get_str("$db").unwrap_or_default();
            if db == "local" {
                return Action::error(
                    20,
                    "IllegalOperation",
                    "Can't use 'local' database through mongos",
                );
            }
            let ns = format!("{db}.{}", cmd.get_str("find").unwrap_or_default());
            Action::ok(
                doc! { "cursor": { "id": 0_i64, "ns": ns, "firstBatch": documents.clone() } },
            )
        });
    }

    /// A `mongos` in front of real replica sets: the handshake as
    /// [`WireServer::become_mongos`], `listShards` answers `shards` (`(_id, host)` pairs,
    /// `host` as `set/host:port`, the shape the MongoDB manual gives), commands on `local`
    /// are refused with code 20 and `replSetGetStatus` does not exist, as on a router;
    /// every other command is sent to the real server at `upstream` (one connection to
    /// it per client connection) and its reply relayed unchanged, so leases, audit,
    /// change streams and cursors behave as the real server makes them. The router
    /// reports 6.0's wire version (17), the release of the real servers here.
    pub fn become_mongos_over(&self, upstream: &str, shards: &[(&str, &str)]) {
        self.state.mongos.store(true, Ordering::SeqCst);
        self.set_max_wire_version(17);
        *self.state.upstream.lock().unwrap() = Some(upstream.to_string());
        // The real server answers these too (its clock, its cursors, its sessions).
        for name in ["ping", "killCursors", "endSessions"] {
            self.state.handlers.lock().unwrap().remove(name);
        }
        self.on("replSetGetStatus", |_| {
            Action::error(59, "CommandNotFound", "no such command: 'replSetGetStatus'")
        });
        let listed: Vec<Document> = shards
            .iter()
            .map(|(id, host)| doc! { "_id": *id, "host": *host, "state": 1 })
            .collect();
        self.on("listShards", move |_| {
            Action::ok(doc! { "shards": listed.clone() })
        });
    }

    /// A URI that names no replica set (for a `mongos`).
    pub fn uri_direct(&self) -> String {
        format!("mongodb://{}/", self.address())
    }

    pub fn set_local_time(&self, at: bson::DateTime) {
        *self.state.local_time.lock().unwrap() = Some(at);
    }

    pub fn set_operation_time(&self, ts: Timestamp) {
        *self.state.operation_time.lock().unwrap() = ts;
    }

    /// Every non-handshake command received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// The bodies of every command named `name`, in order.
    pub fn commands(&self, name: &str) -> Vec<Document> {
        self.received()
            .into_iter()
            .filter(|r| r.name == name)
            .map(|r| r.body)
            .collect()
    }

    /// Like [`commands`] with the driver's session and routing fields removed, so a
    /// test can compare whole command documents.
    pub fn commands_stripped(&self, name: &str) -> Vec<Document> {
        self.commands(name).into_iter().map(strip_meta).collect()
    }
}

/// Removes fields the driver adds to every command (`lsid`, `$clusterTime`,
/// `txnNumber`, `$readPreference`, `readConcern.afterClusterTime`).
fn strip_meta(mut body: Document) -> Document {
    for key in ["lsid", "$clusterTime", "txnNumber", "$readPreference"] {
        body.remove(key);
    }
    if let Ok(rc) = body.get_document_mut("readConcern") {
        rc.remove("afterClusterTime");
        if rc.is_empty() {
            body.remove("readConcern");
        }
    }
    body
}

fn command_name(body: &Document) -> String {
    body.keys().next().cloned().unwrap_or_default()
}

async fn serve(mut stream: TcpStream, connection: u64, state: Arc<State>) {
    let mut upstream: Option<TcpStream> = None;
    loop {
        let request = match protocol::read_message(&mut stream).await {
            Ok(Some(request)) => request,
            _ => return,
        };
        let name = command_name(&request.body);
        let action = if HANDSHAKE.contains(&name.as_str()) {
            Action::Reply(handshake_reply(&state, connection, &request.body))
        } else {
            state.received.lock().unwrap().push(Received {
                connection,
                name: name.clone(),
                body: request.body.clone(),
            });
            next_action(&state, &name, &request.body)
        };
        if request.more_to_come {
            continue;
        }
        if !perform(
            &mut stream,
            &mut upstream,
            &state,
            request.request_id,
            action,
        )
        .await
        {
            return;
        }
    }
}

fn next_action(state: &State, name: &str, body: &Document) -> Action {
    if let Some(action) = state
        .queues
        .lock()
        .unwrap()
        .get_mut(name)
        .and_then(|q| q.pop_front())
    {
        return action;
    }
    let handler = state.handlers.lock().unwrap().get(name).cloned();
    match handler {
        Some(handler) => handler(body),
        None if state.upstream.lock().unwrap().is_some() => {
            if body.get_str("$db") == Ok("local") {
                Action::error(
                    20,
                    "IllegalOperation",
                    "Can't use 'local' database through mongos",
                )
            } else {
                Action::Forward(body.clone())
            }
        }
        None => Action::Reply(doc! {}),
    }
}

/// Sends `body` to the real server and reads its reply; `None` when the real server
/// could not be reached or hung up (the client then sees its connection close).
async fn forward(
    state: &State,
    upstream: &mut Option<TcpStream>,
    body: &Document,
) -> Option<Document> {
    if upstream.is_none() {
        let address = state.upstream.lock().unwrap().clone()?;
        *upstream = Some(TcpStream::connect(address).await.ok()?);
    }
    let connection = upstream.as_mut()?;
    let id = state.request_ids.fetch_add(1, Ordering::SeqCst);
    let bytes = protocol::encode(id, 0, body)?;
    let reply = match connection.write_all(&bytes).await {
        Ok(()) => protocol::read_message(connection).await.ok().flatten(),
        Err(_) => None,
    };
    if reply.is_none() {
        *upstream = None;
    }
    reply.map(|r| r.body)
}

/// Carries out an action; false when the connection must close.
async fn perform(
    stream: &mut TcpStream,
    upstream: &mut Option<TcpStream>,
    state: &State,
    response_to: i32,
    action: Action,
) -> bool {
    let mut action = action;
    loop {
        match action {
            Action::Forward(body) => match forward(state, upstream, &body).await {
                Some(reply) => return send(stream, state, response_to, &reply).await,
                None => {
                    let _ = stream.shutdown().await;
                    return false;
                }
            },
            Action::Stall(delay, inner) => {
                tokio::time::sleep(delay).await;
                action = *inner;
            }
            Action::HangUp => {
                let _ = stream.shutdown().await;
                return false;
            }
            Action::RawReply(bytes) => {
                return stream.write_all(&bytes).await.is_ok();
            }
            Action::BadBson(bytes) => {
                let id = state.request_ids.fetch_add(1, Ordering::SeqCst);
                let message = protocol::encode_raw(id, response_to, &bytes);
                return stream.write_all(&message).await.is_ok();
            }
            Action::Reply(body) => {
                let body = decorate(state, body);
                return send(stream, state, response_to, &body).await;
            }
            Action::Error {
                code,
                name,
                message,
                labels,
            } => {
                let mut body =
                    doc! { "ok": 0.0, "errmsg": message, "code": code, "codeName": name };
                if !labels.is_empty() {
                    body.insert("errorLabels", labels);
                }
                let body = decorate(state, body);
                return send(stream, state, response_to, &body).await;
            }
        }
    }
}

async fn send(stream: &mut TcpStream, state: &State, response_to: i32, body: &Document) -> bool {
    let id = state.request_ids.fetch_add(1, Ordering::SeqCst);
    match protocol::encode(id, response_to, body) {
        Some(bytes) => stream.write_all(&bytes).await.is_ok(),
        None => false,
    }
}

/// Adds `ok: 1`, `operationTime` and `$clusterTime` where the script left them out.
fn decorate(state: &State, mut body: Document) -> Document {
    if !body.contains_key("ok") {
        body.insert("ok", 1.0);
    }
    let ts = *state.operation_time.lock().unwrap();
    if !body.contains_key("operationTime") {
        body.insert("operationTime", ts);
    }
    if !body.contains_key("$clusterTime") {
        body.insert(
            "$clusterTime",
            doc! {
                "clusterTime": ts,
                "signature": {
                    "hash": Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: vec![0; 20] }),
                    "keyId": 0_i64,
                },
            },
        );
    }
    if let Some(shape) = *state.reply_shape.lock().unwrap() {
        shape(&mut body);
    }
    body
}

fn handshake_reply(state: &State, connection: u64, request: &Document) -> Document {
    let me = format!("127.0.0.1:{}", state.port);
    let local_time = state
        .local_time
        .lock()
        .unwrap()
        .unwrap_or_else(bson::DateTime::now);
    let mut reply = doc! {
        "helloOk": true,
        "ismaster": true,
        "isWritablePrimary": true,
        "secondary": false,
        "setName": &state.set_name,
        "setVersion": 1,
        "electionId": bson::oid::ObjectId::parse_str("7fffffff0000000000000001").unwrap(),
        "hosts": [&me],
        "primary": &me,
        "me": &me,
        "maxBsonObjectSize": 16_777_216,
        "maxMessageSizeBytes": 48_000_000,
        "maxWriteBatchSize": 100_000,
        "localTime": local_time,
        "logicalSessionTimeoutMinutes": 30,
        "connectionId": connection as i64,
        "minWireVersion": 0,
        "maxWireVersion": state.max_wire_version.load(Ordering::SeqCst),
        "readOnly": false,
        "ok": 1.0,
    };
    if state.mongos.load(Ordering::SeqCst) {
        for key in [
            "setName",
            "setVersion",
            "electionId",
            "hosts",
            "primary",
            "me",
            "secondary",
        ] {
            reply.remove(key);
        }
        reply.insert("msg", "isdbgrid");
    }
    if request.contains_key("saslSupportedMechs") {
        if let Some(mechanisms) = state.sasl_mechanisms.lock().unwrap().clone() {
            reply.insert("saslSupportedMechs", mechanisms);
        }
    }
    decorate(state, reply)
}
