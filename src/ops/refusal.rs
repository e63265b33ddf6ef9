//! Why a plan may not be executed. What a refusal means for a process's exit code is
//! the command line's business (`cli::exit`).

use std::fmt;

/// Why a plan may not be executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    ReadOnly,
    UnknownResource,
    UnknownAuditRecord,
    /// `rewind --to-checkpoint N` names a checkpoint the resource does not have.
    UnknownCheckpoint,
    NoRebuildDefinition,
    /// The target is not in the oplog window.
    OutsideWindow,
    /// A rewind that would move forward over changes still in the oplog.
    WouldSkip,
    /// `reset --to now` without `--accept-skip`.
    SkipNotAccepted,
    /// The lease is bulk: only abort-bulk or the rebuild may change it.
    BulkHeld,
    NotBulk,
    RebuildRunning,
    /// The audit record has no prior resume point to restore.
    NothingToRestore,
    /// The audit record is of an action that did not change the lease (or, pending,
    /// cannot be shown to have).
    NotApplied,
    UndecodableToken,
    /// A position of the other kind of source: an entry's `_id` for a change stream, a
    /// change stream's token for a capped collection.
    WrongSource,
    ConflictingOptions,
    /// The oplog window cannot be read, so the target cannot be checked.
    NoOplogAccess,
    /// The deployment cannot do this action at all (a rebuild on Azure Cosmos DB).
    NotOnThisDeployment,
    /// An import of leases exported from another cluster: its tokens mean nothing here.
    OtherCluster,
    /// The fencing version is at its largest value: an action could only wrap it around.
    VersionExhausted,
    /// `skip` without a change to step over: the lease records no failing change (or
    /// one the server did not name) and no `--to-token` names one.
    NothingToSkip,
    /// `skip` of a change the lease already resumes after, or of more than one change
    /// (with `--whole-transaction`: of a change not of the transaction).
    NotOneChange,
    /// `skip --whole-transaction` of a change that is not part of a multi-document
    /// transaction.
    NotATransaction,
    /// `skip --whole-transaction` whose transaction cannot be told: an oplog entry of it
    /// is gone, or the change stream and the oplog disagree.
    TransactionUnknown,
    /// The lease is written by another implementation of the lease algorithm (a seed
    /// lease) and the action could not leave its listener working there.
    SeedLease,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub reason: String,
}

impl Refusal {
    pub(crate) fn new(kind: RefusalKind, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}
