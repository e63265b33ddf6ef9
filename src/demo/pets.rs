//! The demo's pet application: animals, and per tag the count of animals at
//! each location, maintained incrementally and rebuildable from scratch.

use std::collections::BTreeMap;

use bson::{doc, Bson, Document};

use super::{DemoNamespaces, FencedMemberWrites};
use crate::engine::{Handler, HandlerError};
use crate::model::Fence;
use crate::store::{ChangeEvent, DocumentStore, Namespace, StoreResult, WriteOutcome};

pub const LOCATIONS: [&str; 3] = ["house", "backyard", "frontyard"];
/// The tag vocabulary the aggregate counts. Other tags on an animal are not aggregated:
/// with a fixed vocabulary every change can rewrite every tag's membership, so a tag
/// the animal lost is cleared without reading the animal's previous state.
pub const TAGS: [&str; 6] = ["fluffy", "loud", "sleepy", "hungry", "striped", "tiny"];
/// The lease resource of the incremental aggregate listener.
pub const PET_RESOURCE: &str = "pet-aggregates";
/// The same aggregate kept by a partitioned resource (docs/protocol.md, "Partitions"):
/// [`CENSUS_PARTITIONS`] partition leases (`pet-census#0/2`, `pet-census#1/2`), each
/// held by one of the demo's listeners, the others standing by. The per-member source
/// versions make the two partitions' writes to one tag document commute.
pub const CENSUS_RESOURCE: &str = "pet-census";
pub const CENSUS_PARTITIONS: u32 = 2;

/// `demo.animals`, where the default layout keeps the animals.
pub fn animals_ns() -> Namespace {
    DemoNamespaces::default().animals
}

/// `demo.tag_locations`, where the default layout keeps the aggregate.
pub fn aggregates_ns() -> Namespace {
    DemoNamespaces::default().aggregates
}

/// Per tag, per location, how many animals: the aggregate's meaning.
pub type TagCounts = BTreeMap<String, BTreeMap<String, i64>>;

/// One animal as the handler reads it from a change's full document.
#[derive(Debug, Clone, PartialEq)]
pub struct Animal {
    pub id: String,
    pub location: String,
    pub tags: Vec<String>,
    pub version: i64,
}

impl Animal {
    pub fn from_document(document: &Document) -> Result<Self, String> {
        let id = document
            .get_str("_id")
            .map_err(|_| "animal without a string _id".to_string())?;
        let field = |name: &str| format!("animal {id} has no valid {name:?}");
        Ok(Self {
            id: id.to_string(),
            location: document
                .get_str("location")
                .map_err(|_| field("location"))?
                .to_string(),
            tags: document
                .get_array("tags")
                .map_err(|_| field("tags"))?
                .iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect(),
            version: document.get_i64("v").map_err(|_| field("v"))?,
        })
    }

    pub fn to_document(&self, name: &str) -> Document {
        doc! {
            "_id": &self.id,
            "name": name,
            "location": &self.location,
            "tags": &self.tags,
            "v": self.version,
        }
    }
}

/// The incremental handler: each animal's membership in each tag document is
/// fenced by the animal's version, so replays never double count.
#[derive(Clone)]
pub struct PetAggregates<S> {
    store: S,
    aggregates: Namespace,
}

impl<S: DocumentStore + FencedMemberWrites + Clone + 'static> PetAggregates<S> {
    /// Maintains `demo.tag_locations`.
    pub fn new(store: S) -> Self {
        Self::writing_to(store, aggregates_ns())
    }

    /// Maintains the tag documents in `aggregates`.
    pub fn writing_to(store: S, aggregates: Namespace) -> Self {
        Self { store, aggregates }
    }

    /// Applies one change; returns how many tag documents it changed (0 for a replay).
    pub async fn apply(&self, event: &ChangeEvent) -> Result<usize, HandlerError> {
        let key = event.document_key.get_str("_id").map_err(|_| {
            HandlerError::Failed(format!(
                "change after token {} has no string _id",
                event.token
            ))
        })?;
        // Ids are never reused, so a delete is the animal's last version.
        let (version, location, tags) = match &event.full_document {
            Some(document) => {
                let animal = Animal::from_document(document).map_err(HandlerError::Failed)?;
                (animal.version, Some(animal.location), animal.tags)
            }
            None => (i64::MAX, None, Vec::new()),
        };
        let mut changed = 0;
        for tag in TAGS {
            let value = location
                .as_deref()
                .filter(|_| tags.iter().any(|t| t == tag));
            let outcome = self
                .store
                .fenced_member_upsert(&self.aggregates, tag, key, version, value)
                .await?;
            if outcome == WriteOutcome::Applied {
                changed += 1;
            }
        }
        Ok(changed)
    }
}

impl<S: DocumentStore + FencedMemberWrites + Clone + 'static> Handler for PetAggregates<S> {
    async fn handle(&mut self, events: &[ChangeEvent], _fence: &Fence) -> Result<(), HandlerError> {
        for event in events {
            self.apply(event).await?;
        }
        Ok(())
    }
}

/// The from-scratch rebuild: every tag document recomputed from the animals.
/// Returns the number of animals read.
pub async fn rebuild(store: &impl DocumentStore) -> StoreResult<usize> {
    rebuild_in(store, &DemoNamespaces::default()).await
}

/// [`rebuild`] on the collections of `ns`.
pub async fn rebuild_in(store: &impl DocumentStore, ns: &DemoNamespaces) -> StoreResult<usize> {
    let animals = read_animals_in(store, &ns.animals).await?;
    store
        .replace_all(&ns.aggregates, rebuilt_documents(&animals))
        .await?;
    Ok(animals.len())
}

/// The tag documents a rebuild writes: per tag, every animal as a member (with its
/// version, and its location when it has the tag) and the counts per location.
pub fn rebuilt_documents(animals: &[Animal]) -> Vec<Document> {
    TAGS.iter()
        .map(|tag| {
            let mut members = Document::new();
            let mut counts = Document::new();
            for animal in animals {
                let value = animal
                    .tags
                    .iter()
                    .any(|t| t == tag)
                    .then_some(animal.location.as_str());
                members.insert(
                    animal.id.as_str(),
                    doc! {"v": animal.version, "value": value},
                );
                if let Some(location) = value {
                    let current = counts.get_i64(location).unwrap_or(0);
                    counts.insert(location, current + 1);
                }
            }
            doc! {"_id": *tag, "members": members, "counts": counts}
        })
        .collect()
}

pub async fn read_animals(store: &impl DocumentStore) -> StoreResult<Vec<Animal>> {
    read_animals_in(store, &animals_ns()).await
}

/// Every animal of `animals` (documents that are not animals are left out).
pub async fn read_animals_in(
    store: &impl DocumentStore,
    animals: &Namespace,
) -> StoreResult<Vec<Animal>> {
    Ok(store
        .find_all(animals)
        .await?
        .iter()
        .filter_map(|d| Animal::from_document(d).ok())
        .collect())
}

/// What the aggregate should say, computed directly from the animals.
pub fn expected_counts(animals: &[Animal]) -> TagCounts {
    let mut counts = TagCounts::new();
    for animal in animals {
        for tag in animal.tags.iter().filter(|t| TAGS.contains(&t.as_str())) {
            *counts
                .entry(tag.clone())
                .or_default()
                .entry(animal.location.clone())
                .or_default() += 1;
        }
    }
    counts
}

/// What the aggregate documents say (zero counts left out).
pub async fn stored_counts(store: &impl DocumentStore) -> StoreResult<TagCounts> {
    stored_counts_in(store, &aggregates_ns()).await
}

/// What the tag documents of `aggregates` say (zero counts left out).
pub async fn stored_counts_in(
    store: &impl DocumentStore,
    aggregates: &Namespace,
) -> StoreResult<TagCounts> {
    let mut counts = TagCounts::new();
    for document in store.find_all(aggregates).await? {
        let Ok(tag) = document.get_str("_id") else {
            continue;
        };
        let Ok(by_location) = document.get_document("counts") else {
            continue;
        };
        for (location, count) in by_location {
            let n = match count {
                Bson::Int64(n) => *n,
                Bson::Int32(n) => i64::from(*n),
                _ => 0,
            };
            if n != 0 {
                counts
                    .entry(tag.to_string())
                    .or_default()
                    .insert(location.clone(), n);
            }
        }
    }
    Ok(counts)
}
