//! The sandbox's collections as a catalog knows them: documents, UUID and indexes
//! (the commands that change them are in `ddl.rs`).

use std::collections::BTreeMap;

use bson::Document;

/// One plain collection.
#[derive(Debug, Clone)]
pub struct Collection {
    /// By `_id` ([`super::state::id_key`]).
    pub documents: BTreeMap<String, Document>,
    /// Made when the collection is created; a rename keeps it, as MongoDB's does.
    pub uuid: [u8; 16],
    /// Name and key pattern of each index, `_id_` first.
    pub(super) indexes: Vec<(String, Document)>,
}

pub(super) const ID_INDEX: &str = "_id_";

impl Collection {
    pub(super) fn new(uuid: [u8; 16]) -> Self {
        Self {
            documents: BTreeMap::new(),
            uuid,
            indexes: vec![(ID_INDEX.to_string(), bson::doc! {"_id": 1})],
        }
    }

    pub(super) fn index(&self, name: &str) -> Option<&Document> {
        self.indexes.iter().find(|(n, _)| n == name).map(|(_, k)| k)
    }

    /// How an index `name` on `keys` meets the existing ones, if it does.
    pub(super) fn conflict(&self, name: &str, keys: &Document) -> Option<Conflict> {
        let (existing, existing_keys) =
            self.indexes.iter().find(|(n, k)| n == name || k == keys)?;
        Some(match (existing == name, existing_keys == keys) {
            (true, true) => Conflict::Same,
            (true, false) => Conflict::SameName,
            (false, _) => Conflict::SameKeys(existing.clone()),
        })
    }
}

/// An index asked for against one that exists.
pub(super) enum Conflict {
    /// The same name and keys: nothing to do.
    Same,
    /// The same name, other keys.
    SameName,
    /// The same keys under this other name.
    SameKeys(String),
}
