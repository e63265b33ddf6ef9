//! The ports the engine, operator actions and console need from a database, and
//! their implementations: `sandbox` (in-process) and `mongo` (the official driver).

mod audit;
mod capabilities;
mod capped;
mod capped_loss;
mod capped_reading;
mod checkpoints;
mod documents;
mod error;
mod event_details;
mod event_layout;
mod feed;
mod increments;
mod leases;
mod listing;
mod membership;
#[cfg(feature = "mongo")]
pub mod mongo;
mod namespace;
mod oplog_figures;
mod raw_event;
#[cfg(feature = "sandbox")]
pub mod sandbox;
mod skipped;
mod skipped_entry;
mod tenure;
mod time_to_loss;

pub use audit::{AuditContext, AuditFinish, AuditIntent, AuditLog};
pub(crate) use capabilities::no_capped_feed;
pub use capabilities::{Capabilities, NotOffered, NO_CHECKPOINTS};
pub use capped::{CappedFeed, CappedStats, CappedWindow, EntryBytes, APPEND_SKEW};
pub use capped_reading::{capped_namespaces, read_capped_windows, CappedReading};
pub use checkpoints::{CheckpointStore, CHECKPOINTS_KEPT};
pub use documents::{
    DocumentStore, WriteFence, WriteOutcome, LEASE_FENCE_FIELD, SOURCE_VERSION_FIELD,
};
pub use error::{InvalidationCause, StoreError, StoreResult};
pub use event_details::{EventDetails, TransactionId, TruncatedArray, UpdateDescription};
pub use feed::{
    ChangeBatch, ChangeEvent, ChangeFeed, ChangeStream, FeedOptions, OperationType, PostImage,
    PreImage, StartPoint,
};
pub use increments::{
    check_token, counted_since, Counter, FoldOutcome, IncrementStore, PendingDocument,
    PendingIncrement,
};
pub use leases::{
    AcquireOutcome, AcquireRequest, LeaseChange, LeaseScope, LeaseStore, LeaseWatch,
    OperatorChange, OperatorStore, ResumeChange, SwapOutcome, TenureWrite,
};
pub use listing::{Listing, MalformedDocument};
pub use membership::{MemberScope, MembershipStore};
pub use namespace::Namespace;
pub use oplog_figures::{LossReading, OplogFigures, OplogPart, HISTORY_COUNT_LIMIT};
pub use raw_event::RawEvent;
pub use skipped::{SkippedChange, SkippedLog};
pub use skipped_entry::skipped_entry;
pub use tenure::Tenure;
pub use time_to_loss::read_time_to_loss;

/// What a listener needs from one database: its leases, a change feed, and what
/// stepping over a failing change by its own policy writes (the skipped change and its
/// audit record). Capped collections to tail and checkpoints to record are
/// [`Capabilities`] a store may offer. Handlers bring their own document access
/// ([`DocumentStore`] or anything else).
pub trait Store:
    LeaseStore + ChangeFeed + SkippedLog + AuditLog + Capabilities + Clone + 'static
{
}
impl<T> Store for T where
    T: LeaseStore + ChangeFeed + SkippedLog + AuditLog + Capabilities + Clone + 'static
{
}

/// What guarded actions and the console need: a listener's ports and the operator's
/// ([`OperatorStore`]).
pub trait OpsStore: Store + OperatorStore {}
impl<T: Store + OperatorStore> OpsStore for T {}
