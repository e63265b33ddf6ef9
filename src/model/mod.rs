//! Pure types and arithmetic: no I/O, no async.

mod audit;
mod balance;
mod checkpoint;
mod cluster_time;
mod entry_id;
mod failure;
mod health;
mod lease;
mod lease_write;
mod membership;
mod oplog_window;
mod partition;
mod pending;
mod process_view;
mod profile;
mod resume_token;
mod source;
mod source_kind;
pub mod text;
mod time_to_loss;
mod topology;

pub use audit::{
    vanished_leases, AuditRecord, AuditState, AuditStep, PendingJudgment, PendingVerdict,
    VanishedLease, FOLD_INCREMENTS_ACTION,
};
pub use balance::{fair_shares, BalancePlan, Capacity, Handover, Holding, LeaseHolding, Runner};
pub use checkpoint::Checkpoint;
pub use cluster_time::ClusterTime;
pub use entry_id::{entry_time, first_id_of, object_id_at};
pub use failure::{
    failure_backoff, ChangeFailure, FailureCause, MissingImage, TooLargeChange, UnreadableChange,
    FAILURE_BACKOFF_MAX, FAILURE_ERROR_MAX_CHARS, FAILURE_KEY_MAX_CHARS,
};
pub use health::{
    token_time_cell, unclaimed_explanation, HealthEvidence, HealthThresholds, LeaseHealth,
    LeaseStatus, Risk, WatchedCollection,
};
pub use lease::{Fence, Invalidation, Lease, LeaseProtocol, LockKind, ResumePoint, WatchTarget};
pub use lease_write::field as lease_field;
pub use lease_write::{FieldSet, LeaseWrite, Moment, Requirement};
pub use membership::{member_field, Announcement, Member, MemberListener};
pub use oplog_window::OplogWindow;
pub use partition::{
    hashed_index_key, inherited_start, lease_group, lease_order, Inherited, Partition,
    PartitionError, UnhashableKey, MAX_PARTITIONS,
};
pub use pending::Pending;
pub use process_view::ProcessView;
pub use profile::{StreamProfile, UnknownProfile};
pub use resume_token::{entry_token, token_entry};
pub use resume_token::{DecodedToken, ResumeToken, TokenDecodeError, TokenKind, TokenVersion};
pub use source::{capped_collection, EntrySpan, EntryStart, SourceWindows};
pub use source_kind::SourceKind;
pub use time_to_loss::{
    predict as predict_time_to_loss, truncation_chunk, window_average_fill, CappedSample,
    HistoryBefore, LossInput, LossInputs, LossTime, LossTracker, Missing, NotReady, OplogRates,
    OplogStats, Rate, TimeToLoss, TrailingRate, DEFAULT_CHECKPOINT_INTERVAL, LOSS_RATE_SPAN,
    LOSS_WARNING_WITHIN, MAX_ENTRY_BYTES,
};
pub use topology::{
    Deployment, MemberLag, OplogAccess, ShardOplog, ShardWindows, Topology, QUIET_SHARD_AFTER,
};
