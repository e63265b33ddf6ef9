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
        m.id.as_deref().is_some_and(|id| {
            id == resource
                || Partition::parse_lease_id(id)
                    .is_some_and(|(r, p)| r == resource && p.count() != partition.count())
        })
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
