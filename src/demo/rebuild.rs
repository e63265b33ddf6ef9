//! The pet aggregates' rebuild as an in-process rebuild definition: every tag document
//! recomputed from the animals, one document per step, with progress, cancellation
//! and (for tests and demos) an injected failure.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::pets::{read_animals_in, rebuilt_documents, PET_RESOURCE, TAGS};
use super::DemoNamespaces;
use crate::ops::{Progress, RebuildDefinition, RebuildFailure, RebuildReport, RebuildTarget};
use crate::store::DocumentStore;

/// The rebuild's name on the command line and in the console.
pub const PET_REBUILD: &str = "pet-aggregates";

#[derive(Debug, Clone, Default)]
pub struct PetRebuild {
    /// A pause after each document written, so a demo (or a test) can watch it work.
    pub step_delay: Duration,
    /// Fail after writing this many tag documents (failure injection).
    pub fail_after: Option<usize>,
    /// Where the animals and the aggregate live.
    pub namespaces: DemoNamespaces,
}

impl PetRebuild {
    /// The rebuild of the default layout, as plans name it.
    pub fn target() -> RebuildTarget {
        Self::default().target_of()
    }

    /// This rebuild as plans name it.
    pub fn target_of(&self) -> RebuildTarget {
        RebuildTarget {
            name: PET_REBUILD.into(),
            resource: PET_RESOURCE.into(),
            description: self.description(),
        }
    }

    fn description(&self) -> String {
        format!(
            "the in-process pet rebuild: every tag document of {} recomputed from {}",
            self.namespaces.aggregates, self.namespaces.animals
        )
    }
}

impl<S: DocumentStore> RebuildDefinition<S> for PetRebuild {
    fn describe(&self) -> String {
        self.description()
    }

    async fn run(
        &self,
        store: &S,
        progress: &Progress,
        cancel: &CancellationToken,
    ) -> Result<RebuildReport, RebuildFailure> {
        let failed = |e: crate::store::StoreError| RebuildFailure::Failed(e.to_string());
        progress.stage("reading animals");
        let animals = read_animals_in(store, &self.namespaces.animals)
            .await
            .map_err(failed)?;
        let documents = rebuilt_documents(&animals);
        // One unit per tag document, and one for removing documents of no tag.
        progress.set_total(documents.len() as u64 + 1);
        for (written, document) in documents.iter().enumerate() {
            if cancel.is_cancelled() {
                return Err(RebuildFailure::Cancelled);
            }
            if self.fail_after == Some(written) {
                return Err(RebuildFailure::Failed(format!(
                    "injected failure after {written} of {} tag documents",
                    documents.len()
                )));
            }
            progress.stage(format!(
                "writing tag {}",
                document.get_str("_id").unwrap_or("?")
            ));
            store
                .put(&self.namespaces.aggregates, document.clone())
                .await
                .map_err(failed)?;
            progress.advance(1);
            if !self.step_delay.is_zero() {
                tokio::select! {
                    () = cancel.cancelled() => return Err(RebuildFailure::Cancelled),
                    () = tokio::time::sleep(self.step_delay) => {}
                }
            }
        }
        progress.stage("removing documents of no tag");
        let strays = store
            .find_all(&self.namespaces.aggregates)
            .await
            .map_err(failed)?
            .iter()
            .any(|d| !d.get_str("_id").is_ok_and(|id| TAGS.contains(&id)));
        if strays {
            store
                .replace_all(&self.namespaces.aggregates, documents.clone())
                .await
                .map_err(failed)?;
        }
        progress.advance(1);
        Ok(RebuildReport {
            summary: format!(
                "{} tag documents from {} animals",
                documents.len(),
                animals.len()
            ),
        })
    }
}
