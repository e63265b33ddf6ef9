//! What a listener reads, by its configured source: a change stream, or a capped
//! collection's entries by a tailable cursor. Both hand over batches of events with
//! their tokens; the rest of the listener does not tell them apart.

use crate::model::{ClusterTime, Partition, SourceKind};
use crate::store::{
    no_capped_feed, Capabilities, CappedFeed, ChangeBatch, ChangeFeed, ChangeStream, FeedOptions,
    Namespace, StartPoint, Store, StoreError, StoreResult,
};

pub(super) enum SourceStream<S: Store> {
    Changes(<S as ChangeFeed>::Stream),
    Entries(<<S as Capabilities>::Capped as CappedFeed>::Tail),
}

impl<S: Store> ChangeStream for SourceStream<S> {
    async fn next_batch(&mut self) -> StoreResult<ChangeBatch> {
        match self {
            SourceStream::Changes(stream) => stream.next_batch().await,
            SourceStream::Entries(tail) => tail.next_batch().await,
        }
    }
}

pub(super) async fn open<S: Store>(
    store: &S,
    source: SourceKind,
    ns: &Namespace,
    partition: Option<Partition>,
    start: StartPoint,
    options: FeedOptions,
) -> StoreResult<SourceStream<S>> {
    Ok(match (source, partition) {
        (SourceKind::ChangeStream, partition) => {
            SourceStream::Changes(store.open_partition(ns, partition, start, options).await?)
        }
        (SourceKind::Capped, None) => {
            let Some(feed) = store.capped_feed() else {
                return Err(StoreError::InvalidArgument(no_capped_feed(ns)));
            };
            SourceStream::Entries(feed.tail(ns, start, options).await?)
        }
        (SourceKind::Capped, Some(partition)) => {
            return Err(StoreError::InvalidArgument(capped_partition(ns, partition)))
        }
    })
}

/// Where a capped source with no resume point starts: at its oldest entry, i.e. every
/// `_id` from the epoch on (the collection holds nothing older than its oldest).
pub(super) const CAPPED_OLDEST: StartPoint = StartPoint::At(ClusterTime::new(0, 0));

/// Why a capped source is not partitioned: its position is one `_id` (the last entry
/// read), so partitions of it could not each keep their own place.
pub(super) fn capped_partition(ns: &Namespace, partition: Partition) -> String {
    format!(
        "partition {partition} of the capped collection {ns}: a capped source resumes from \
         one position (the last entry's _id) and is read whole; only change-stream \
         sources are partitioned"
    )
}
