//! An Azure Cosmos DB for MongoDB peer (request-unit account), shaped after Microsoft's
//! documentation of change streams in Azure Cosmos DB for MongoDB and of its custom
//! commands, and after what real accounts are reported to answer. It holds its
//! collections and a change feed, applies the adapter's commands to them (filters and
//! pipeline updates through `support::mini_mongo`), and answers change streams only as
//! Cosmos DB does. Where neither Microsoft nor a report says what Cosmos DB answers,
//! the comment says so and what this peer does instead.
//!
//! - Handshake: a replica set named `globaldb` (the `replicaSet=globaldb` of Cosmos DB
//!   connection strings), wire version 17 (a 6.0 server-version account). Replies carry
//!   no `operationTime` and no `$clusterTime`: tools reading `operationTime` from a
//!   Cosmos DB reply report it missing (rwynn/monstache#454, "key \"operationTime\" was
//!   not found").
//! - `aggregate` with `$changeStream` is refused unless `fullDocument` is
//!   `"updateLookup"` and the pipeline is the `$match` on `operationType` (`$in`
//!   exactly insert, update and replace, as documented), alone or `$and`-combined
//!   with a filter of the caller's (the shape of Microsoft's single-shard example), then
//!   the `$project` of `_id`, `fullDocument`, `ns` and `documentKey`: "The $match
//!   stage, $project stage, and fullDocument option are required". The refusal is
//!   what real accounts answer a stream without them, code 2 BadValue "Change stream
//!   must be followed by a match and then a project stage" (rwynn/monstache#454,
//!   #624). `startAtOperationTime` is refused as well: Microsoft documents it for the
//!   `GetChangeStreamTokens` command only, never for a change stream, and what a real
//!   account answers is not documented (this peer: BadValue).
//! - Events are `{_id, fullDocument, ns, documentKey}` and nothing else: "The
//!   `operationType` and `updateDescription` properties are not yet supported in the
//!   output document". Deletes are not in the feed ("the delete operation or other
//!   events are not yet supported"). `fullDocument` is looked up when the page is read.
//! - Every event of a page carries the same token, `{_data: BinData(0, <JSON
//!   continuation>), _kind: 1}`, which resumes after the whole page (custom commands
//!   page, "Parallelizing change streams": "Each document returned includes a resume
//!   token (they're all the same for each page)"; the JSON's shape is the one in
//!   Microsoft's sample token). `resumeAfter` continues after the token's position.
//!   No `postBatchResumeToken` (undocumented for Cosmos DB).
//! - A change stream on a collection that does not exist, or was dropped, is answered
//!   NamespaceNotFound (code 26), on `aggregate` and on `getMore` ("Error handling").
//! - The `local` database does not exist on Cosmos DB; what an account answers a read
//!   of it is not documented: this peer refuses it (115 CommandNotSupported) and counts
//!   the attempt, so a test can assert none was made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::{doc, spec::BinarySubtype, Binary, Bson, DateTime, Document};

use super::super::mini_mongo::{apply_pipeline, apply_update, matches};
use super::{Action, WireServer};

/// The operations the documented `$match` names.
const OPERATIONS: [&str; 3] = ["insert", "update", "replace"];
/// What real accounts answer a change stream without the required stages.
const STAGES_REQUIRED: &str = "Change stream must be followed by a match and then a project stage";

/// One change in the feed: which document of which collection, at which position.
#[derive(Debug, Clone)]
struct Change {
    ns: String,
    id: Bson,
    lsn: u64,
}

/// An open change stream.
#[derive(Debug, Clone)]
struct Cursor {
    ns: String,
    /// The last position scanned: the page after it comes next.
    lsn: u64,
    /// The caller's own filter, `$and`-combined with the operation match.
    filter: Option<Document>,
}

#[derive(Debug, Default)]
struct Data {
    /// Documents per namespace (`db.coll`), in insertion order.
    collections: HashMap<String, Vec<Document>>,
    feed: Vec<Change>,
    cursors: HashMap<i64, Cursor>,
    next_cursor: i64,
    /// Documents per page; `None`: the `batchSize` the reader asked for.
    page_size: Option<usize>,
    /// Why each refused command was refused.
    refusals: Vec<String>,
    /// Commands on the `local` database.
    local_commands: usize,
    /// The `$changeStream` options of every stream opened.
    opened: Vec<Document>,
    /// The tokens of every page handed out, in order.
    pages: Vec<Document>,
}

/// The test's handle on a Cosmos DB peer: writes to its collections (each one change in
/// its feed), deletes (none), and what it saw.
#[derive(Clone)]
pub struct Cosmos {
    data: Arc<Mutex<Data>>,
}

impl WireServer {
    /// From now on an Azure Cosmos DB for MongoDB account (see the module's account of
    /// each behaviour). Connect with [`WireServer::cosmos_uri`].
    pub fn become_cosmos(&self) -> Cosmos {
        *self.state.reply_shape.lock().unwrap() = Some(cosmos_reply);
        self.set_max_wire_version(17);
        let cosmos = Cosmos {
            data: Arc::new(Mutex::new(Data {
                next_cursor: 7_000,
                ..Data::default()
            })),
        };
        let c = cosmos.clone();
        self.on("aggregate", move |cmd| c.aggregate(cmd));
        let c = cosmos.clone();
        self.on("getMore", move |cmd| c.get_more(cmd));
        let c = cosmos.clone();
        self.on("find", move |cmd| c.find(cmd));
        let c = cosmos.clone();
        self.on("findAndModify", move |cmd| c.find_and_modify(cmd));
        let c = cosmos.clone();
        self.on("update", move |cmd| c.update(cmd));
        let c = cosmos.clone();
        self.on("insert", move |cmd| c.insert(cmd));
        cosmos
    }

    /// A URI as Cosmos DB's connection strings name the replica set.
    pub fn cosmos_uri(&self) -> String {
        format!("mongodb://{}/?replicaSet=globaldb", self.address())
    }
}

/// Every reply: the replica set is `globaldb`, and no cluster time is gossiped.
fn cosmos_reply(body: &mut Document) {
    if body.contains_key("maxWireVersion") && body.contains_key("setName") {
        body.insert("setName", "globaldb");
    }
    body.remove("operationTime");
    body.remove("$clusterTime");
}

fn namespace(cmd: &Document, collection_field: &str) -> String {
    format!(
        "{}.{}",
        cmd.get_str("$db").unwrap_or_default(),
        cmd.get_str(collection_field).unwrap_or_default()
    )
}

fn is_local(cmd: &Document) -> bool {
    cmd.get_str("$db") == Ok("local")
}

fn bad_value(message: &str) -> Action {
    Action::error(2, "BadValue", message)
}

/// A Cosmos DB continuation token for feed position `lsn`, shaped as Microsoft's
/// sample (`{"V":2,"Rid":…,"Continuation":[{"FeedRange":…,"State":{"type":
/// "continuation","value":"\"<lsn>\""}}]}` in a generic binary `_data`, `_kind: 1`).
fn token(lsn: u64) -> Document {
    let continuation = serde_json::json!({
        "V": 2,
        "Rid": "PxUaALn0SKE=",
        "Continuation": [{
            "FeedRange": {
                "type": "Effective Partition Key Range",
                "value": { "min": "", "max": "FF" },
            },
            "State": { "type": "continuation", "value": format!("\"{lsn}\"") },
        }],
    });
    doc! {
        "_data": Binary { subtype: BinarySubtype::Generic, bytes: continuation.to_string().into_bytes() },
        "_kind": 1,
    }
}

/// The feed position a token of this peer resumes after.
fn position_of(token: &Document) -> Option<u64> {
    let Some(Bson::Binary(Binary { bytes, .. })) = token.get("_data") else {
        return None;
    };
    let json: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let value = json["Continuation"][0]["State"]["value"].as_str()?;
    value.trim_matches('"').parse().ok()
}

/// The caller's own filter when `pipeline` (after `$changeStream`) is the shape Cosmos
/// DB requires, else why not.
fn required_shape(pipeline: &[Bson]) -> Result<Option<Document>, String> {
    // A stage is a document with exactly one key, its name.
    let stage = |i: usize, name: &str| {
        let stage = pipeline.get(i).and_then(Bson::as_document)?;
        (stage.len() == 1).then(|| stage.get_document(name).ok())?
    };
    if pipeline.len() != 3 {
        return Err(format!(
            "{} stages after $changeStream",
            pipeline.len().saturating_sub(1)
        ));
    }
    let (Some(matched), Some(project)) = (stage(1, "$match"), stage(2, "$project")) else {
        return Err("the stages are not $match then $project".into());
    };
    let one = |v: &Bson| matches!(v, Bson::Int32(1) | Bson::Int64(1) | Bson::Boolean(true));
    let mut projected: Vec<&str> = project.keys().map(String::as_str).collect();
    projected.sort_unstable();
    if projected != ["_id", "documentKey", "fullDocument", "ns"] || !project.values().all(one) {
        return Err(format!("$project is {project}"));
    }
    let is_operations = |d: &Document| {
        d.len() == 1
            && d.get_document("operationType")
                .ok()
                .filter(|op| op.len() == 1)
                .and_then(|op| op.get_array("$in").ok())
                .is_some_and(|names| {
                    let mut names: Vec<&str> = names.iter().filter_map(Bson::as_str).collect();
                    let mut documented = OPERATIONS.to_vec();
                    names.sort_unstable();
                    documented.sort_unstable();
                    names == documented
                })
    };
    if is_operations(matched) {
        return Ok(None);
    }
    let branches: Vec<&Document> = matched
        .get_array("$and")
        .ok()
        .filter(|_| matched.len() == 1)
        .map(|b| b.iter().filter_map(Bson::as_document).collect())
        .unwrap_or_default();
    match branches.as_slice() {
        [a, b] if is_operations(b) => Ok(Some((*a).clone())),
        [a, b] if is_operations(a) => Ok(Some((*b).clone())),
        _ => Err(format!("$match is {matched}")),
    }
}

impl Cosmos {
    /// Inserts or replaces `document` (by `_id`) in `ns` (`db.coll`): one change.
    pub fn write(&self, ns: &str, document: Document) {
        self.write_all(ns, vec![document]);
    }

    /// Writes several documents at once: a reader meets all of them in the same read.
    pub fn write_all(&self, ns: &str, documents: Vec<Document>) {
        let mut data = self.data.lock().unwrap();
        for document in documents {
            data.store(ns, document);
        }
    }

    /// Creates the collection `ns`, empty, if it does not exist (no change).
    pub fn create(&self, ns: &str) {
        self.data
            .lock()
            .unwrap()
            .collections
            .entry(ns.into())
            .or_default();
    }

    /// Deletes a document: gone from the collection, and nothing in the feed (Cosmos DB
    /// change streams carry no deletes).
    pub fn delete(&self, ns: &str, id: impl Into<Bson>) {
        let id = id.into();
        if let Some(documents) = self.data.lock().unwrap().collections.get_mut(ns) {
            documents.retain(|d| d.get("_id") != Some(&id));
        }
    }

    /// Drops the collection: its streams are answered NamespaceNotFound from now on.
    pub fn drop_collection(&self, ns: &str) {
        self.data.lock().unwrap().collections.remove(ns);
    }

    /// Pages of `size` changes at most, whatever `batchSize` the reader asks for.
    pub fn set_page_size(&self, size: usize) {
        self.data.lock().unwrap().page_size = Some(size.max(1));
    }

    pub fn document(&self, ns: &str, id: impl Into<Bson>) -> Option<Document> {
        let id = id.into();
        self.data
            .lock()
            .unwrap()
            .collections
            .get(ns)
            .and_then(|documents| documents.iter().find(|d| d.get("_id") == Some(&id)))
            .cloned()
    }

    /// Why each refused command was refused, in order.
    pub fn refusals(&self) -> Vec<String> {
        self.data.lock().unwrap().refusals.clone()
    }

    /// How many commands named the `local` database.
    pub fn local_commands(&self) -> usize {
        self.data.lock().unwrap().local_commands
    }

    /// The `$changeStream` options of every stream opened, in order.
    pub fn streams_opened(&self) -> Vec<Document> {
        self.data.lock().unwrap().opened.clone()
    }

    /// The token of every non-empty page handed out, in order.
    pub fn pages(&self) -> Vec<Document> {
        self.data.lock().unwrap().pages.clone()
    }

    fn refuse(&self, why: String, action: Action) -> Action {
        self.data.lock().unwrap().refusals.push(why);
        action
    }

    fn local(&self) -> Action {
        let mut data = self.data.lock().unwrap();
        data.local_commands += 1;
        data.refusals.push("a command on the local database".into());
        Action::error(
            115,
            "CommandNotSupported",
            "the local database is not available on this account",
        )
    }

    fn aggregate(&self, cmd: &Document) -> Action {
        if is_local(cmd) {
            return self.local();
        }
        let ns = namespace(cmd, "aggregate");
        let pipeline = cmd.get_array("pipeline").cloned().unwrap_or_default();
        let Some(options) = pipeline
            .first()
            .and_then(Bson::as_document)
            .and_then(|d| d.get_document("$changeStream").ok())
            .cloned()
        else {
            return self.refuse(
                format!("aggregate on {ns} is not a change stream"),
                Action::error(
                    115,
                    "CommandNotSupported",
                    "this peer answers change streams only",
                ),
            );
        };
        if options.get_str("fullDocument") != Ok("updateLookup") {
            return self.refuse(
                format!("change stream on {ns} without fullDocument: updateLookup: {options}"),
                bad_value(STAGES_REQUIRED),
            );
        }
        if options.contains_key("startAtOperationTime") {
            return self.refuse(
                format!("change stream on {ns} with startAtOperationTime"),
                bad_value("startAtOperationTime is not supported for change streams"),
            );
        }
        let filter = match required_shape(&pipeline) {
            Ok(filter) => filter,
            Err(why) => {
                return self.refuse(
                    format!("change stream on {ns}: {why}"),
                    bad_value(STAGES_REQUIRED),
                )
            }
        };
        let mut data = self.data.lock().unwrap();
        if !data.collections.contains_key(&ns) {
            data.refusals
                .push(format!("change stream on {ns}, which does not exist"));
            return Action::error(26, "NamespaceNotFound", &format!("ns {ns} not found"));
        }
        let lsn = match options.get_document("resumeAfter") {
            Ok(token) => match position_of(token) {
                Some(lsn) => lsn,
                None => {
                    data.refusals.push(format!(
                        "resumeAfter with a token not of this account: {token}"
                    ));
                    return bad_value("the resume token is not valid");
                }
            },
            // Now: after everything in the feed so far.
            Err(_) => data.feed.last().map_or(0, |c| c.lsn),
        };
        data.opened.push(options);
        let id = data.next_cursor;
        data.next_cursor += 1;
        data.cursors.insert(
            id,
            Cursor {
                ns: ns.clone(),
                lsn,
                filter,
            },
        );
        Action::ok(doc! { "cursor": { "id": id, "ns": ns, "firstBatch": [] } })
    }

    fn get_more(&self, cmd: &Document) -> Action {
        let id = cmd.get_i64("getMore").unwrap_or_default();
        let ns = namespace(cmd, "collection");
        let asked = match cmd.get("batchSize") {
            Some(Bson::Int32(n)) => usize::try_from(*n).unwrap_or(1),
            Some(Bson::Int64(n)) => usize::try_from(*n).unwrap_or(1),
            _ => 100,
        };
        let wait = match cmd.get("maxTimeMS") {
            Some(Bson::Int32(ms)) => u64::try_from(*ms).unwrap_or(0),
            Some(Bson::Int64(ms)) => u64::try_from(*ms).unwrap_or(0),
            _ => 1000,
        };
        let mut data = self.data.lock().unwrap();
        let Some(mut cursor) = data.cursors.get(&id).cloned() else {
            return Action::error(43, "CursorNotFound", &format!("cursor id {id} not found"));
        };
        if !data.collections.contains_key(&cursor.ns) {
            data.refusals
                .push(format!("getMore on {}, which no longer exists", cursor.ns));
            return Action::error(
                26,
                "NamespaceNotFound",
                &format!("ns {} not found", cursor.ns),
            );
        }
        let size = data.page_size.unwrap_or(asked.max(1));
        let now = DateTime::now();
        let mut events = Vec::new();
        let mut scanned = cursor.lsn;
        for change in data.feed.iter().filter(|c| c.lsn > cursor.lsn) {
            if events.len() == size {
                break;
            }
            scanned = change.lsn;
            if change.ns != cursor.ns {
                continue;
            }
            let (db, coll) = change.ns.split_once('.').unwrap_or((&change.ns, ""));
            let full = data.collections.get(&change.ns).and_then(|documents| {
                documents
                    .iter()
                    .find(|d| d.get("_id") == Some(&change.id))
                    .cloned()
            });
            let event = doc! {
                "fullDocument": full.map_or(Bson::Null, Bson::Document),
                "ns": { "db": db, "coll": coll },
                "documentKey": { "_id": change.id.clone() },
            };
            if cursor
                .filter
                .as_ref()
                .is_some_and(|f| !matches(f, Some(&event), now))
            {
                continue;
            }
            events.push(event);
        }
        cursor.lsn = scanned;
        data.cursors.insert(id, cursor);
        if events.is_empty() {
            // Nothing new: the server waits out the read's await time, then answers empty.
            return Action::Stall(
                Duration::from_millis(wait.clamp(10, 1000)),
                Box::new(Action::ok(
                    doc! { "cursor": { "id": id, "ns": ns, "nextBatch": [] } },
                )),
            );
        }
        let page = token(scanned);
        data.pages.push(page.clone());
        let events: Vec<Bson> = events
            .into_iter()
            .map(|event| {
                let mut with_id = doc! { "_id": page.clone() };
                with_id.extend(event);
                Bson::Document(with_id)
            })
            .collect();
        Action::ok(doc! { "cursor": { "id": id, "ns": ns, "nextBatch": events } })
    }

    fn find(&self, cmd: &Document) -> Action {
        if is_local(cmd) {
            return self.local();
        }
        let ns = namespace(cmd, "find");
        let filter = cmd.get_document("filter").cloned().unwrap_or_default();
        let now = DateTime::now();
        let data = self.data.lock().unwrap();
        let mut found: Vec<Document> = data
            .collections
            .get(&ns)
            .map(|documents| {
                documents
                    .iter()
                    .filter(|d| matches(&filter, Some(d), now))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if cmd
            .get_document("sort")
            .is_ok_and(|s| s.contains_key("_id"))
        {
            found.sort_by_key(|d| d.get("_id").map(ToString::to_string));
        }
        if let Some(limit) = cmd
            .get("limit")
            .and_then(Bson::as_i64)
            .or_else(|| cmd.get("limit").and_then(Bson::as_i32).map(i64::from))
        {
            found.truncate(
                usize::try_from(limit.unsigned_abs())
                    .unwrap_or(usize::MAX)
                    .max(1),
            );
        }
        Action::ok(doc! { "cursor": { "id": 0_i64, "ns": ns, "firstBatch": found } })
    }

    fn find_and_modify(&self, cmd: &Document) -> Action {
        if is_local(cmd) {
            return self.local();
        }
        let ns = namespace(cmd, "findAndModify");
        let filter = cmd.get_document("query").cloned().unwrap_or_default();
        let now = DateTime::now();
        let mut data = self.data.lock().unwrap();
        let existing = data.find_one(&ns, &filter, now);
        let before = match &existing {
            Some(document) => Some(document.clone()),
            None if cmd.get_bool("upsert").unwrap_or(false) => {
                if let Some(id) = filter.get("_id") {
                    if data
                        .find_one(&ns, &doc! { "_id": id.clone() }, now)
                        .is_some()
                    {
                        return Action::error(
                            11000,
                            "DuplicateKey",
                            &format!("E11000 duplicate key error collection: {ns}"),
                        );
                    }
                }
                None
            }
            None => {
                return Action::ok(
                    doc! { "value": Bson::Null, "lastErrorObject": { "n": 0, "updatedExisting": false } },
                )
            }
        };
        let base = before
            .clone()
            .unwrap_or_else(|| doc! { "_id": filter.get("_id").cloned().unwrap_or(Bson::Null) });
        let after = match cmd.get("update") {
            Some(Bson::Array(pipeline)) => apply_pipeline(pipeline, &base, now),
            Some(Bson::Document(update)) => apply_update(update, &base),
            _ => return bad_value("findAndModify without an update"),
        };
        data.store(&ns, after.clone());
        let returned = if cmd.get_bool("new").unwrap_or(false) {
            Bson::Document(after)
        } else {
            before.clone().map_or(Bson::Null, Bson::Document)
        };
        Action::ok(doc! {
            "value": returned,
            "lastErrorObject": { "n": 1, "updatedExisting": before.is_some() },
        })
    }

    fn update(&self, cmd: &Document) -> Action {
        if is_local(cmd) {
            return self.local();
        }
        let ns = namespace(cmd, "update");
        let now = DateTime::now();
        let mut data = self.data.lock().unwrap();
        let mut n = 0;
        let mut upserted = Vec::new();
        for (index, statement) in cmd
            .get_array("updates")
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(Bson::as_document)
            .enumerate()
        {
            let filter = statement.get_document("q").cloned().unwrap_or_default();
            let base = match data.find_one(&ns, &filter, now) {
                Some(document) => document,
                None if statement.get_bool("upsert").unwrap_or(false) => {
                    let id = filter.get("_id").cloned().unwrap_or(Bson::Null);
                    upserted.push(doc! { "index": index as i32, "_id": id.clone() });
                    doc! { "_id": id }
                }
                None => continue,
            };
            let after = match statement.get("u") {
                Some(Bson::Array(pipeline)) => apply_pipeline(pipeline, &base, now),
                Some(Bson::Document(update)) => apply_update(update, &base),
                _ => return bad_value("update without u"),
            };
            data.store(&ns, after);
            n += 1;
        }
        let mut reply = doc! { "n": n, "nModified": n - upserted.len() as i32 };
        if !upserted.is_empty() {
            reply.insert("upserted", upserted);
        }
        Action::ok(reply)
    }

    fn insert(&self, cmd: &Document) -> Action {
        if is_local(cmd) {
            return self.local();
        }
        let ns = namespace(cmd, "insert");
        let mut data = self.data.lock().unwrap();
        let documents: Vec<Document> = cmd
            .get_array("documents")
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|d| d.as_document().cloned())
            .collect();
        let n = documents.len() as i32;
        for document in documents {
            data.store(&ns, document);
        }
        Action::ok(doc! { "n": n })
    }
}

impl Data {
    fn find_one(&self, ns: &str, filter: &Document, now: DateTime) -> Option<Document> {
        self.collections
            .get(ns)?
            .iter()
            .find(|d| matches(filter, Some(d), now))
            .cloned()
    }

    /// Inserts or replaces `document` by `_id` in `ns`: one change in the feed.
    fn store(&mut self, ns: &str, document: Document) {
        let id = document.get("_id").cloned().unwrap_or(Bson::Null);
        let documents = self.collections.entry(ns.into()).or_default();
        match documents.iter_mut().find(|d| d.get("_id") == Some(&id)) {
            Some(existing) => *existing = document,
            None => documents.push(document),
        }
        let lsn = self.feed.last().map_or(0, |c| c.lsn) + 1;
        self.feed.push(Change {
            ns: ns.into(),
            id,
            lsn,
        });
    }
}
