//! What a listener of one partition does differently (docs/protocol.md,
//! "Partitions"): what it refuses, and where a partition lease with no resume point
//! of its own starts when the resource was split another way before.

use super::ListenerConfig;
use crate::model::{inherited_start, ClusterTime, Partition, SourceKind, StreamProfile};
use crate::store::{LeaseStore, StoreResult};

/// A partitioned configuration this store can never serve, or one whose lease id is
/// not its partition's (set `partition` through [`ListenerConfig::partitioned`]).
pub(super) fn refusal(config: &ListenerConfig, profile: StreamProfile) -> Option<String> {
    let partition = config.partition?;
    if Partition::parse_lease_id(&config.resource).map(|(_, p)| p) != Some(partition) {
        return Some(format!(
            "{} is configured as partition {partition}, but that is not a partition's lease id \
             (resource#index/count): build the configuration with ListenerConfig::partitioned",
            config.resource
        ));
    }
    if config.source == SourceKind::Capped {
        return Some(super::source::capped_partition(&config.watch, partition));
    }
    if profile == StreamProfile::CosmosDb {
        return Some(format!(
            "{} is a partition, which Azure Cosmos DB cannot serve: its change streams take \
             only the pipeline it requires (docs/cosmos.md), not a $match on \
             $toHashedIndexKey of the document key. Run one listener for the resource",
            config.resource
        ));
    }
    None
}

/// Where this partition's lease starts when it has no resume point: the oldest
/// committed point of the resource's earlier split (`Some`), or bootstrap as a new
/// resource does (`None`: there was none, or one of its leases never committed).
/// Starting at that time repeats what the more advanced of the earlier partitions had
/// already handled: duplicates that the handler's source-version fence absorbs.
pub(super) async fn inherited<S: LeaseStore>(
    store: &S,
    config: &ListenerConfig,
) -> StoreResult<Option<ClusterTime>> {
    let Some((resource, partition)) = config
        .partition
        .and_then(|_| Partition::parse_lease_id(&config.resource))
    else {
        return Ok(None);
    };
    let listing = store.list().await?;
    // A lease of the earlier split that cannot be read: its point is unknown, so
    // nothing is known to be done.
    let unreadable = listing.malformed.iter().find(|m| {
        m.id.as_deref()
            .is_some_and(|id| partition.is_earlier_split(resource, id))
    });
    if let Some(unreadable) = unreadable {
        tracing::warn!(lease = %config.resource, %unreadable, "a lease of the earlier split is malformed: starting as a new resource");
        return Ok(None);
    }
    let Some(found) = inherited_start(resource, partition, &listing.items) else {
        return Ok(None);
    };
    match found.at {
        Some(at) => {
            tracing::info!(lease = %config.resource, from = ?found.from, %at, "a new partition starts at the oldest committed point of the earlier split")
        }
        None => {
            tracing::info!(lease = %config.resource, from = ?found.from, "one lease of the earlier split never committed: the new partition starts as a new resource")
        }
    }
    Ok(found.at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Namespace;

    fn config(partition: Partition) -> ListenerConfig {
        ListenerConfig::new("r", "l", Namespace::new("shop", "orders")).partitioned(partition)
    }

    #[test]
    fn a_partition_is_refused_where_it_cannot_be_served() {
        let p = Partition::new(1, 3).unwrap();
        assert_eq!(refusal(&config(p), StreamProfile::MongoDb), None);
        let unpartitioned = ListenerConfig::new("r", "l", Namespace::new("shop", "orders"));
        assert_eq!(refusal(&unpartitioned, StreamProfile::CosmosDb), None);

        let cosmos = refusal(&config(p), StreamProfile::CosmosDb).unwrap();
        assert!(
            cosmos.contains("r#1/3") && cosmos.contains("Cosmos DB"),
            "{cosmos}"
        );

        let mut capped = config(p);
        capped.source = SourceKind::Capped;
        let capped = refusal(&capped, StreamProfile::MongoDb).unwrap();
        assert!(
            capped.contains("capped") && capped.contains("1/3"),
            "{capped}"
        );

        // A lease id that is not the partition's own: another partition's, or none.
        for resource in ["r", "r#0/3", "r#1/2"] {
            let mut wrong = config(p);
            wrong.resource = resource.into();
            let why = refusal(&wrong, StreamProfile::MongoDb).unwrap();
            assert!(
                why.contains("ListenerConfig::partitioned"),
                "{resource}: {why}"
            );
        }
    }

    #[test]
    fn the_lease_records_what_the_partition_reads() {
        let p = Partition::new(2, 4).unwrap();
        let config = config(p);
        assert_eq!(config.resource, "r#2/4");
        let watch = config.watch_target();
        assert_eq!(watch.pipeline, p.pipeline_text());
        assert!(
            watch.pipeline.contains("$toHashedIndexKey"),
            "{}",
            watch.pipeline
        );
        let plain = ListenerConfig::new("r", "l", Namespace::new("shop", "orders"));
        assert_eq!(plain.watch_target().pipeline, "");
    }
}
