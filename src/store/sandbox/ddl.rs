//! The data definition commands on the sandbox's collections, each logged as MongoDB
//! 6.0 logs it: an entry of its own that a change stream with expanded events hands on
//! (`create`, `createIndexes`, `dropIndexes`, `modify`), and that `drop` and `rename`
//! end a stream with. Codes and events checked against a real 6.0.5 by the contract
//! suite.

use bson::Document;
use chrono::{DateTime, Utc};

use super::catalog::{Collection, Conflict, ID_INDEX};
use super::state::State;
use crate::store::{ChangeEvent, Namespace, OperationType, StoreError};

fn command_error(code: i32, message: String) -> StoreError {
    StoreError::Command { code, message }
}

fn not_found(ns: &Namespace, what: &str) -> StoreError {
    command_error(26, format!("{what} on {ns}: ns does not exist"))
}

/// A command's entry in the log: what it is, on which collection, and the name a
/// rename gives it.
struct Command<'a> {
    operation: &'a str,
    ns: Namespace,
    to: Option<Namespace>,
    uuid: Option<[u8; 16]>,
}

impl State {
    /// Logs a command as the oplog holds it: an entry with a cluster time of its own,
    /// in the open transaction if any (as an implicit create inside one is), that a
    /// stream without expanded events passes over, or ends at when it is a drop or
    /// rename of its collection.
    fn log_command(&mut self, command: Command<'_>, now: DateTime<Utc>) {
        let (time, token, transaction) = self.next_change(now);
        self.log.append_entry(
            time,
            ChangeEvent {
                token,
                cluster_time: Some(time),
                operation: OperationType::Other(command.operation.to_string()),
                ns: command.ns,
                document_key: Document::new(),
                full_document: None,
                details: crate::store::EventDetails {
                    wall_time: Some(now),
                    collection_uuid: command.uuid,
                    transaction,
                    ..Default::default()
                },
            },
            command.to,
        );
    }

    /// A UUID of its own for each collection the sandbox creates.
    fn make_uuid(&mut self) -> [u8; 16] {
        self.collections_created += 1;
        let mut uuid = *b"sandbox:\0\0\0\0\0\0\0\0";
        uuid[8..].copy_from_slice(&self.collections_created.to_be_bytes());
        uuid
    }

    fn create(&mut self, ns: &Namespace, now: DateTime<Utc>) {
        let uuid = self.make_uuid();
        self.log_command(
            Command {
                operation: "create",
                ns: ns.clone(),
                to: None,
                uuid: Some(uuid),
            },
            now,
        );
        self.collections.insert(ns.clone(), Collection::new(uuid));
    }

    /// Creates `ns` if it does not exist, as the first write into it or the first
    /// index on it does: a `create` entry before the write's own.
    pub fn ensure_collection(&mut self, ns: &Namespace, now: DateTime<Utc>) {
        if !self.collections.contains_key(ns) {
            self.create(ns, now);
        }
    }

    /// `create`: 48 (NamespaceExists) when `ns` exists, a capped one included.
    pub fn create_collection(
        &mut self,
        ns: &Namespace,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if self.collections.contains_key(ns) || self.capped.holds(ns) {
            return Err(command_error(
                48,
                format!("Collection {ns} already exists."),
            ));
        }
        self.create(ns, now);
        Ok(())
    }

    /// `createIndexes` of one index, creating the collection first if needed. The
    /// same name with the same keys again is no change and logs nothing; the same name
    /// with other keys is 86 (IndexKeySpecsConflict), the same keys under another name
    /// 85 (IndexOptionsConflict), no keys 67 (CannotCreateIndex).
    pub fn create_index(
        &mut self,
        ns: &Namespace,
        name: &str,
        keys: Document,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Err(command_error(
                67,
                format!("index {name} on {ns}: Index keys cannot be empty."),
            ));
        }
        if let Some(collection) = self.collections.get(ns) {
            match collection.conflict(name, &keys) {
                Some(Conflict::Same) => return Ok(()),
                Some(Conflict::SameName) => {
                    let detail = "an existing index has the same name and other keys";
                    return Err(command_error(86, format!("index {name} on {ns}: {detail}")));
                }
                Some(Conflict::SameKeys(other)) => {
                    let detail = format!("Index already exists with a different name: {other}");
                    return Err(command_error(85, format!("index {name} on {ns}: {detail}")));
                }
                None => {}
            }
        }
        self.ensure_collection(ns, now);
        let uuid = self.collections.get_mut(ns).map(|collection| {
            collection.indexes.push((name.to_string(), keys));
            collection.uuid
        });
        self.log_command(
            Command {
                operation: "createIndexes",
                ns: ns.clone(),
                to: None,
                uuid,
            },
            now,
        );
        Ok(())
    }

    /// `dropIndexes` of one index by name: 26 without the collection, 27 (IndexNotFound)
    /// without the index, 72 (InvalidOptions) for `_id_`.
    pub fn drop_index(
        &mut self,
        ns: &Namespace,
        name: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let collection = self
            .collections
            .get_mut(ns)
            .ok_or_else(|| not_found(ns, "dropIndexes"))?;
        if name == ID_INDEX {
            return Err(command_error(
                72,
                format!("dropIndexes on {ns}: cannot drop _id index"),
            ));
        }
        let before = collection.indexes.len();
        collection.indexes.retain(|(n, _)| n != name);
        if collection.indexes.len() == before {
            return Err(command_error(
                27,
                format!("index not found with name [{name}] on {ns}"),
            ));
        }
        let uuid = Some(collection.uuid);
        self.log_command(
            Command {
                operation: "dropIndexes",
                ns: ns.clone(),
                to: None,
                uuid,
            },
            now,
        );
        Ok(())
    }

    /// `collMod` hiding an index from the query planner: a `modify` entry, also when
    /// it already was hidden (MongoDB logs every collMod). The sandbox plans no
    /// queries, so it keeps no such flag: a hidden index changes nothing else there.
    /// 26 without the collection, 27 without the index, 2 (BadValue) for `_id_`.
    pub fn hide_index(
        &mut self,
        ns: &Namespace,
        name: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let collection = self
            .collections
            .get(ns)
            .ok_or_else(|| not_found(ns, "collMod"))?;
        if name == ID_INDEX {
            return Err(command_error(
                2,
                format!("collMod on {ns}: can't hide _id index"),
            ));
        }
        if collection.index(name).is_none() {
            return Err(command_error(
                27,
                format!("cannot find index {name} for ns {ns}"),
            ));
        }
        let uuid = Some(collection.uuid);
        self.log_command(
            Command {
                operation: "modify",
                ns: ns.clone(),
                to: None,
                uuid,
            },
            now,
        );
        Ok(())
    }

    /// Drops a collection: a `drop` entry, unless it does not exist (a real server logs
    /// nothing then either).
    pub fn drop_collection(&mut self, ns: &Namespace, now: DateTime<Utc>) {
        if let Some(dropped) = self.collections.remove(ns) {
            let uuid = Some(dropped.uuid);
            self.log_command(
                Command {
                    operation: "drop",
                    ns: ns.clone(),
                    to: None,
                    uuid,
                },
                now,
            );
        }
    }

    /// Renames a collection within its database: one `rename` entry, also when it
    /// replaces `to` (`drop_target`), as a real server logs it; the collection keeps
    /// its UUID. Errors carry the real server's codes: 26 without a source, 48 when
    /// `to` exists and may not be dropped.
    pub fn rename_collection(
        &mut self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let Some(collection) = self.collections.remove(from) else {
            return Err(command_error(
                26,
                format!("rename {from} to {to}: source namespace {from} does not exist"),
            ));
        };
        if self.collections.contains_key(to) && !drop_target {
            self.collections.insert(from.clone(), collection);
            return Err(command_error(
                48,
                format!("rename {from} to {to}: target namespace exists"),
            ));
        }
        let uuid = Some(collection.uuid);
        self.collections.insert(to.clone(), collection);
        self.log_command(
            Command {
                operation: "rename",
                ns: from.clone(),
                to: Some(to.clone()),
                uuid,
            },
            now,
        );
        Ok(())
    }

    /// Drops every collection of `db` (a `drop` entry each, by name), then a
    /// `dropDatabase` entry; nothing for a database without collections.
    pub fn drop_database(&mut self, db: &str, now: DateTime<Utc>) {
        let mut names: Vec<Namespace> = self
            .collections
            .keys()
            .filter(|ns| ns.db == db)
            .cloned()
            .collect();
        if names.is_empty() {
            return;
        }
        names.sort();
        for ns in &names {
            self.drop_collection(ns, now);
        }
        self.log_command(
            Command {
                operation: "dropDatabase",
                ns: Namespace::new(db, ""),
                to: None,
                uuid: None,
            },
            now,
        );
    }
}

/// Data definition the sandbox's own way, for tests and simulations (on a real server
/// an application runs these commands itself). Each logs what MongoDB logs, and fails
/// as MongoDB fails, with its code as `StoreError::Command`.
impl super::SandboxStore {
    /// `create` of a plain collection.
    pub fn create_collection(&self, ns: &Namespace) -> crate::store::StoreResult<()> {
        self.ddl(|state, now| state.create_collection(ns, now))
    }

    /// `createIndexes` of one index named `name` on `keys` (`{field: 1}`).
    pub fn create_index(
        &self,
        ns: &Namespace,
        name: &str,
        keys: Document,
    ) -> crate::store::StoreResult<()> {
        self.ddl(|state, now| state.create_index(ns, name, keys, now))
    }

    /// `dropIndexes` of the index named `name`.
    pub fn drop_index(&self, ns: &Namespace, name: &str) -> crate::store::StoreResult<()> {
        self.ddl(|state, now| state.drop_index(ns, name, now))
    }

    /// `collMod` with `index: {name, hidden: true}`.
    pub fn hide_index(&self, ns: &Namespace, name: &str) -> crate::store::StoreResult<()> {
        self.ddl(|state, now| state.hide_index(ns, name, now))
    }

    fn ddl(
        &self,
        command: impl FnOnce(&mut State, DateTime<Utc>) -> Result<(), StoreError>,
    ) -> crate::store::StoreResult<()> {
        super::count(&self.inner.calls.documents);
        let now = self.inner.clock.now();
        let mut state = self.lock();
        command(&mut state, now)?;
        self.publish_after(state);
        Ok(())
    }
}
