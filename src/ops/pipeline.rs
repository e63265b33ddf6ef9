//! The attached rebuild: an aggregation pipeline ending in `$merge`, named in the config
//! file and run through the official driver.

use std::time::Duration;

use bson::{Bson, Document};
use tokio_util::sync::CancellationToken;

use super::rebuild::{Progress, RebuildDefinition, RebuildFailure, RebuildReport};
use crate::store::mongo::MongoStore;
use crate::store::Namespace;

/// `[rebuilds.NAME] resource = "…", db = "…", collection = "…", pipeline = '[…]'`.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineRebuild {
    pub source: Namespace,
    pub pipeline: Vec<Document>,
    /// Upper bound of the whole run (`maxTimeMS` and a client timeout).
    pub limit: Duration,
}

impl PipelineRebuild {
    pub const DEFAULT_LIMIT: Duration = Duration::from_secs(3600);

    /// Parses the pipeline from extended JSON: an array of stages whose last is `$merge`
    /// (or `$out`).
    pub fn parse(source: Namespace, pipeline: &str, limit: Duration) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_str(pipeline).map_err(|e| format!("pipeline is not JSON: {e}"))?;
        let Ok(Bson::Array(stages)) = Bson::try_from(value) else {
            return Err("pipeline must be an extended JSON array of stages".into());
        };
        let stages = stages
            .into_iter()
            .enumerate()
            .map(|(i, stage)| match stage {
                Bson::Document(d) if d.len() == 1 => Ok(d),
                _ => Err(format!("pipeline stage {i} is not a one-key document")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ends_in_write = stages
            .last()
            .is_some_and(|s| s.contains_key("$merge") || s.contains_key("$out"));
        if !ends_in_write {
            return Err("the pipeline's last stage must be $merge (or $out)".into());
        }
        Ok(Self {
            source,
            pipeline: stages,
            limit,
        })
    }
}

impl RebuildDefinition<MongoStore> for PipelineRebuild {
    fn describe(&self) -> String {
        let target = self
            .pipeline
            .last()
            .and_then(|s| s.get("$merge").or_else(|| s.get("$out")))
            .map(|t| match t {
                Bson::String(coll) => coll.clone(),
                Bson::Document(d) => match d.get("into") {
                    Some(Bson::String(coll)) => coll.clone(),
                    Some(Bson::Document(into)) => format!(
                        "{}.{}",
                        into.get_str("db").unwrap_or("?"),
                        into.get_str("coll").unwrap_or("?")
                    ),
                    _ => "?".into(),
                },
                _ => "?".into(),
            })
            .unwrap_or_default();
        format!(
            "a {}-stage aggregation pipeline on {} merging into {target}",
            self.pipeline.len(),
            self.source
        )
    }

    async fn run(
        &self,
        store: &MongoStore,
        progress: &Progress,
        cancel: &CancellationToken,
    ) -> Result<RebuildReport, RebuildFailure> {
        progress.set_total(1);
        progress.stage(format!("aggregate on {}", self.source));
        // One command: cancelling stops waiting for it; the server stops at maxTimeMS.
        let ran = tokio::select! {
            () = cancel.cancelled() => return Err(RebuildFailure::Cancelled),
            ran = store.run_merge_pipeline(&self.source, self.pipeline.clone(), self.limit) => ran,
        };
        ran.map_err(|e| RebuildFailure::Failed(e.to_string()))?;
        progress.advance(1);
        Ok(RebuildReport {
            summary: format!("ran the pipeline on {}", self.source),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_extended_json_and_requires_a_merge() {
        let ns = Namespace::new("shop", "orders");
        let rebuild = PipelineRebuild::parse(
            ns.clone(),
            r#"[{"$match": {"at": {"$gte": {"$date": "2026-01-01T00:00:00Z"}}}},
                {"$group": {"_id": "$status", "n": {"$sum": 1}}},
                {"$merge": {"into": "order_counts", "whenMatched": "replace"}}]"#,
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(rebuild.pipeline.len(), 3);
        assert!(matches!(
            rebuild.pipeline[0]
                .get_document("$match")
                .unwrap()
                .get_document("at")
                .unwrap()
                .get("$gte"),
            Some(Bson::DateTime(_))
        ));
        assert!(rebuild.describe().contains("merging into order_counts"));
        assert!(
            PipelineRebuild::parse(ns.clone(), r#"[{"$match": {}}]"#, Duration::ZERO)
                .unwrap_err()
                .contains("$merge")
        );
        assert!(PipelineRebuild::parse(ns.clone(), "{}", Duration::ZERO).is_err());
        assert!(PipelineRebuild::parse(ns, "[1]", Duration::ZERO).is_err());
    }
}
