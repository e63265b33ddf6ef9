//! What the checks need from the store under test besides its ports.

use std::future::Future;

use bson::Document;

use crate::model::ClusterTime;
use crate::store::Namespace;

/// The store under test, and what a check cannot do through its ports. A check takes a
/// fresh harness: leases, audit records and documents of one check must not be seen
/// by another (a store of its own, or a database of its own on a shared server).
pub trait Harness: Send + Sync + 'static {
    /// The store under test. Each check asks of it the ports it checks (its bounds),
    /// so the store needs only those of the groups it runs.
    type Store: Send + Sync + 'static;

    /// The store under test; the same one for the whole check.
    fn store(&self) -> &Self::Store;

    /// A collection of this check's own, named `coll` (in a database no other check
    /// uses, on a shared server). Called with a few names per check, each of which
    /// must give the same namespace every time.
    fn ns(&self, coll: &str) -> Namespace;

    /// Sets the stored lease `resource`'s `version` by hand, as an operator's
    /// `updateOne` outside streamward would, creating the lease expired and unheld
    /// (`listenerId: null`) when it is missing. Used by [`super::leases`] to place a
    /// lease at the largest version.
    fn set_version_by_hand(&self, resource: &str, version: i64) -> impl Future<Output = ()> + Send;
}

/// A harness that can run data definition commands, as an application would, for the
/// [`super::expanded`] checks.
pub trait DataDefinition: Harness {
    /// Runs `command` on `ns`; `Err` is the error code the store answers it with (the
    /// checks expect MongoDB's: 48 for a collection that exists, 26 for one missing, …).
    fn ddl(&self, ns: &Namespace, command: Ddl) -> impl Future<Output = Result<(), i32>> + Send;
}

/// A harness whose history rolls over within a test, for the [`super::history`]
/// checks: a store with a small change log, or a replica set with a small oplog.
pub trait RollingHistory: Harness {
    /// Writes elsewhere until every history entry at or before `time` has fallen off
    /// (the oplog, or the store's change log, rolled over past it); panics when it does
    /// not within a bounded number of writes.
    fn roll_history_past(&self, time: ClusterTime) -> impl Future<Output = ()> + Send;
}

/// A data definition command on a collection, as an application runs it.
#[derive(Debug, Clone)]
pub enum Ddl {
    /// `create`.
    Create,
    /// `createIndexes` of one index: its name and keys.
    CreateIndex(&'static str, Document),
    /// `dropIndexes` of one index, by name.
    DropIndex(&'static str),
    /// `collMod` with `index: {name, hidden: true}`.
    HideIndex(&'static str),
}
