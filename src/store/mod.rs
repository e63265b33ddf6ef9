//! The ports the engine, operator actions and console need from a database, and
//! their implementations: `sandbox` (in-process) and `mongo` (the official driver).

mod documents;
mod error;
mod feed;
mod leases;
pub mod mongo;
mod namespace;
pub mod sandbox;

pub use documents::{
    DocumentStore, WriteFence, WriteOutcome, LEASE_FENCE_FIELD, SOURCE_VERSION_FIELD,
};
pub use error::{StoreError, StoreResult};
pub use feed::{
    ChangeBatch, ChangeEvent, ChangeFeed, ChangeStream, FeedOptions, InvalidationCause,
    OperationType, StartPoint,
};
pub use leases::{
    AcquireOutcome, AcquireRequest, AuditContext, AuditEntry, LeaseChange, LeaseScope, LeaseStore,
    LeaseWatch, OperatorChange, OperatorOutcome, ResumeChange, SwapOutcome, Tenure, TenureWrite,
};
pub use namespace::Namespace;

/// Everything a listener needs from one database.
pub trait Store: LeaseStore + ChangeFeed + DocumentStore + Clone + 'static {}
impl<T: LeaseStore + ChangeFeed + DocumentStore + Clone + 'static> Store for T {}
