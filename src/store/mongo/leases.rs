//! `LeaseStore` on MongoDB: one command per method (docs/protocol.md §3), rendered from
//! the [`crate::model::LeaseWrite`] each method describes.

use std::future::IntoFuture;
use std::time::Duration;

use bson::{doc, Document};
use chrono::{DateTime, Utc};
use mongodb::options::ReturnDocument;

use super::codec::{lease_from_document, read_each, required_date};
use super::errors::{bounded, is_duplicate_key, with_one_retry, CallError};
use super::lease_hub::MongoLeaseWatch;
use super::lease_write::{render_alternatives, render_filtered};
use super::MongoStore;
use crate::model::lease_field as field;
use crate::model::{ClusterTime, Invalidation, Lease, LeaseWrite};
use crate::store::{
    AcquireOutcome, AcquireRequest, Capabilities, LeaseScope, LeaseStore, Listing, OperatorChange,
    OperatorStore, SkippedChange, SkippedLog, StoreError, StoreResult, SwapOutcome, Tenure,
    TenureWrite,
};

/// The filter and pipeline of `acquire`: refresh, else take, chosen in the pipeline.
pub(super) fn acquire_command(request: &AcquireRequest) -> (Document, Vec<Document>) {
    render_alternatives(&request.writes())
}

/// The filter and pipeline of a write on an existing lease.
fn filtered_command(write: &LeaseWrite) -> StoreResult<(Document, Vec<Document>)> {
    render_filtered(write).map_err(StoreError::InvalidArgument)
}

impl MongoStore {
    pub(super) fn lease_hint(&self) -> String {
        format!(
            "readWrite on the {} database (the streamwardListener role in docs/permissions.md)",
            self.settings.leases.db
        )
    }

    fn lease_error(&self, error: CallError, action: &str) -> StoreError {
        error.into_store_hinted(action, &self.lease_hint())
    }

    pub(super) fn operator_hint(&self) -> String {
        format!(
            "readWrite on the {} database (the streamwardOperator role in docs/permissions.md)",
            self.settings.leases.db
        )
    }

    /// The operator compare-and-swap: `findAndModify {_id, version}` returning the old
    /// document, then a read of the new one (at the new version) in the same session,
    /// whose `operationTime` is the write's cluster time.
    async fn swap(&self, change: &OperatorChange, what: &str) -> StoreResult<SwapOutcome> {
        let action = format!("{what} on lease {}", change.resource);
        let hint = self.operator_hint();
        let fail = |e: CallError| e.into_store_hinted(&action, &hint);
        let mut session = bounded(self.timeout(), &action, async {
            self.client.start_session().await
        })
        .await
        .map_err(fail)?;
        let leases = self.leases();
        let (filter, pipeline) = filtered_command(&change.write())?;
        // Not retried here: a lost reply is the caller's to resolve, and it does
        // (`ops::execute` sends the swap once more and tells applied from changed by
        // the lease the second one finds).
        let before = bounded(self.write_timeout(), &action, async {
            leases
                .find_one_and_update(filter, pipeline)
                .return_document(ReturnDocument::Before)
                .write_concern(self.majority())
                .session(&mut session)
                .await
        })
        .await
        .map_err(fail)?;
        let Some(before) = before else {
            let operation_time = session.operation_time().map(ClusterTime::from);
            return Ok(SwapOutcome::Changed {
                current: self.get(&change.resource).await?,
                operation_time,
            });
        };
        let before = lease_from_document(&before)?;
        // A replica set or a router always sends it; Azure Cosmos DB may not, and the
        // write is applied all the same.
        let operation_time = session.operation_time().map(ClusterTime::from);
        if operation_time.is_none() && !self.no_oplog {
            return Err(StoreError::Malformed {
                what: "findAndModify reply".into(),
                detail: "no operationTime (is this a replica set?); the swap was applied".into(),
            });
        }
        // The read is causally after the write (same session), but a standby may have
        // taken a released lease in between: only a document still at our version is
        // what this write left. Otherwise it is the old one with the change applied at
        // the write's cluster time (the server's `$$NOW` to the second).
        let read_back = bounded(self.timeout(), &action, async {
            leases
                .find_one(doc! {
                    field::RESOURCE: &change.resource,
                    field::VERSION: change.expected_version + 1,
                })
                .session(&mut session)
                .await
        })
        .await
        .map_err(fail)?;
        let after = match read_back {
            Some(after) => lease_from_document(&after)?,
            None => change.applied_to(
                &before,
                operation_time
                    .and_then(|t| t.to_datetime())
                    .unwrap_or_else(Utc::now),
            ),
        };
        Ok(SwapOutcome::Applied {
            before,
            after,
            operation_time,
        })
    }

    /// updateOne filtered on the tenure, majority; matched 0 is a lost lock.
    async fn tenure_update(&self, write: &LeaseWrite, action: &str) -> StoreResult<TenureWrite> {
        let leases = self.leases();
        let (filter, pipeline) = filtered_command(write)?;
        let result = with_one_retry(self.write_timeout(), action, || {
            leases
                .update_one(filter.clone(), pipeline.clone())
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.lease_error(e, action))?;
        Ok(if result.matched_count == 0 {
            TenureWrite::LostLock
        } else {
            TenureWrite::Done
        })
    }
}

impl LeaseStore for MongoStore {
    type Watch = MongoLeaseWatch;

    async fn acquire(&self, request: &AcquireRequest) -> StoreResult<AcquireOutcome> {
        let action = format!("acquire lease {}", request.resource);
        let leases = self.leases();
        let (filter, pipeline) = acquire_command(request);
        // Retrying is safe: after a first attempt that was applied, the lease is mine, so
        // the pipeline keeps the version and only refreshes.
        let reply = with_one_retry(self.write_timeout(), &action, || {
            leases
                .find_one_and_update(filter.clone(), pipeline.clone())
                .upsert(request.may_insert())
                .return_document(ReturnDocument::After)
                .write_concern(self.majority())
                .into_future()
        })
        .await;
        match reply {
            Ok(Some(document)) => {
                let lease = lease_from_document(&document)?;
                // An eligible write leaves holder = me and kind = the request's. The
                // holder alone is not enough: an update request from the holder of a
                // bulk lease is refused, and the document it returns still names it.
                if lease.holder.as_deref() == Some(request.listener.as_str())
                    && lease.kind == request.kind
                {
                    Ok(AcquireOutcome::Acquired(lease))
                } else {
                    Ok(AcquireOutcome::not_acquired(Some(&lease)))
                }
            }
            Ok(None) => match request.seen_version {
                Some(seen_version) => Ok(AcquireOutcome::Vanished { seen_version }),
                None => Err(StoreError::Malformed {
                    what: "findAndModify reply".into(),
                    detail: format!("{action}: an upsert returned no document"),
                }),
            },
            Err(CallError::Driver(e)) if is_duplicate_key(&e) => Ok(AcquireOutcome::HeldByOther),
            Err(e) => Err(self.lease_error(e, &action)),
        }
    }

    async fn commit(
        &self,
        tenure: &Tenure,
        token: &crate::model::ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        let action = format!("commit lease {}", tenure.resource);
        self.tenure_update(&tenure.commit(token, lease), &action)
            .await
    }

    async fn commit_past_failure(
        &self,
        tenure: &Tenure,
        token: &crate::model::ResumeToken,
        lease: Duration,
    ) -> StoreResult<TenureWrite> {
        let action = format!("commit lease {} past its failing change", tenure.resource);
        self.tenure_update(&tenure.commit_past_failure(token, lease), &action)
            .await
    }

    async fn record_failure(
        &self,
        tenure: &Tenure,
        failure: &crate::model::ChangeFailure,
    ) -> StoreResult<TenureWrite> {
        let action = format!(
            "record on lease {} the change its listener failed on",
            tenure.resource
        );
        self.tenure_update(&tenure.record_failure(failure), &action)
            .await
    }

    async fn renew(&self, tenure: &Tenure, lease: Duration) -> StoreResult<TenureWrite> {
        let action = format!("renew lease {}", tenure.resource);
        self.tenure_update(&tenure.renew(lease), &action).await
    }

    async fn record_invalidation(
        &self,
        tenure: &Tenure,
        invalidation: &Invalidation,
    ) -> StoreResult<TenureWrite> {
        let action = format!(
            "record on lease {} that its stream was closed",
            tenure.resource
        );
        self.tenure_update(&tenure.record_invalidation(invalidation), &action)
            .await
    }

    async fn release(&self, tenure: &Tenure) -> StoreResult<TenureWrite> {
        let action = format!("release lease {}", tenure.resource);
        self.tenure_update(&tenure.release(), &action).await
    }

    async fn get(&self, resource: &str) -> StoreResult<Option<Lease>> {
        let action = format!("read lease {resource}");
        let leases = self.leases();
        let found = with_one_retry(self.timeout(), &action, || {
            leases
                .find_one(doc! { field::RESOURCE: resource })
                .into_future()
        })
        .await
        .map_err(|e| self.lease_error(e, &action))?;
        found.as_ref().map(lease_from_document).transpose()
    }

    async fn list(&self) -> StoreResult<Listing<Lease>> {
        let action = "list leases";
        let documents = self
            .read_all(self.leases(), action)
            .await
            .map_err(|e| self.lease_error(e, action))?;
        Ok(read_each(&documents, lease_from_document))
    }

    /// A watch on the store's one shared stream on the lease collection ([`super::lease_hub`]).
    async fn watch(&self, scope: LeaseScope) -> StoreResult<MongoLeaseWatch> {
        self.lease_hub.watch(self, scope).await
    }

    async fn server_now(&self) -> StoreResult<DateTime<Utc>> {
        let action = "read the server clock";
        let admin = self.client.database("admin");
        let reply = with_one_retry(self.timeout(), action, || {
            admin.run_command(doc! { "hello": 1 }).into_future()
        })
        .await
        .map_err(|e| e.into_store(action))?;
        required_date("hello reply", &reply, "localTime")
    }
}

impl OperatorStore for MongoStore {
    async fn operator_swap(&self, change: &OperatorChange) -> StoreResult<SwapOutcome> {
        self.swap(change, &change.note).await
    }

    async fn count_changes(
        &self,
        on: &crate::model::WatchedCollection,
        from: ClusterTime,
        to: ClusterTime,
        limit: u64,
    ) -> StoreResult<u64> {
        self.count_oplog_changes(on, from, to, limit).await
    }

    async fn token_at(&self, at: ClusterTime) -> StoreResult<crate::model::ResumeToken> {
        self.high_water_token(at).await
    }
}

impl SkippedLog for MongoStore {
    async fn keep_skipped(&self, skipped: &SkippedChange) -> StoreResult<()> {
        self.write_skipped(skipped).await
    }

    async fn skipped_changes(
        &self,
        resource: &str,
        limit: usize,
    ) -> StoreResult<Vec<SkippedChange>> {
        self.read_skipped(resource, limit).await
    }
}

impl Capabilities for MongoStore {
    type Capped = Self;
    type Checkpoints = Self;

    fn capped_feed(&self) -> Option<&Self> {
        Some(self)
    }

    fn checkpoint_store(&self) -> Option<&Self> {
        Some(self)
    }
}
