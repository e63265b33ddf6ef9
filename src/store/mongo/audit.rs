//! `AuditLog` on MongoDB: the `audit` collection next to the leases. Every write is
//! majority-acknowledged and safe to send twice: the insert by its `_id`, a step by its
//! text, the finish by the state it sets.

use std::future::IntoFuture;

use bson::{doc, oid::ObjectId, Bson, Document};
use chrono::Utc;
use futures_util::TryStreamExt;

use super::codec::{
    audit_from_document, audit_step_document, audit_to_document, lease_to_document, read_each,
};
use super::errors::{bounded, is_duplicate_key, with_one_retry, CallError};
use super::MongoStore;
use crate::model::{AuditRecord, AuditState, AuditStep, Lease};
use crate::store::{AuditFinish, AuditIntent, AuditLog, Listing, StoreError, StoreResult};

impl MongoStore {
    fn audit_error(&self, error: CallError, action: &str) -> StoreError {
        error.into_store_hinted(action, &self.operator_hint())
    }

    /// The record `id` as stored now, for deciding whether a write that matched nothing
    /// had already been made (a retry) or was refused.
    async fn stored_audit(&self, oid: ObjectId, action: &str) -> StoreResult<Option<AuditRecord>> {
        let audit = self.audit();
        let found = with_one_retry(self.timeout(), action, || {
            audit.find_one(doc! { "_id": oid }).into_future()
        })
        .await
        .map_err(|e| self.audit_error(e, action))?;
        found.as_ref().map(audit_from_document).transpose()
    }

    /// One conditional update of a pending record, majority, retried once. Matching
    /// nothing is success only if the stored record shows the update made already
    /// (`done`: a retry after a lost reply); otherwise the record is not pending. A
    /// reply lost or not confirmed by a majority is read back the same way.
    async fn update_pending(
        &self,
        oid: ObjectId,
        id: &str,
        filter: Document,
        update: Document,
        action: &str,
        done: impl Fn(&AuditRecord) -> bool,
    ) -> StoreResult<()> {
        let audit = self.audit();
        let updated = with_one_retry(self.write_timeout(), action, || {
            audit
                .update_one(filter.clone(), update.clone())
                .write_concern(self.majority())
                .into_future()
        })
        .await
        .map_err(|e| self.audit_error(e, action));
        match updated {
            Ok(updated) if updated.matched_count == 1 => return Ok(()),
            Ok(_) => {}
            // Applied on the primary, perhaps: the record says whether it was.
            Err(error) if error.write_may_have_applied() => {
                return match self.stored_audit(oid, action).await {
                    Ok(Some(record)) if done(&record) => Ok(()),
                    _ => Err(error),
                };
            }
            Err(error) => return Err(error),
        }
        match self.stored_audit(oid, action).await? {
            Some(record) if done(&record) => Ok(()),
            other => Err(Self::not_pending(id, other.as_ref())),
        }
    }

    fn not_pending(id: &str, found: Option<&AuditRecord>) -> StoreError {
        StoreError::AuditNotPending {
            id: id.into(),
            found: found.map(|r| r.state),
        }
    }
}

fn record_id(id: &str) -> StoreResult<ObjectId> {
    // Records this program writes have ObjectId ids; anything else names none of them.
    ObjectId::parse_str(id).map_err(|_| StoreError::AuditNotPending {
        id: id.into(),
        found: None,
    })
}

fn lease_bson(lease: Option<&Lease>) -> Bson {
    lease.map_or(Bson::Null, |l| Bson::Document(lease_to_document(l)))
}

impl AuditLog for MongoStore {
    /// `insert`, majority, retried once. A duplicate-key error is success only when the
    /// record with this `_id` is ours (the retry found its first attempt): a unique index
    /// elsewhere refuses the record, and then it does not exist. A write-concern error
    /// says the record is on the primary but not confirmed, so the action must not go on.
    async fn begin_audit(&self, intent: &AuditIntent) -> StoreResult<String> {
        let id = ObjectId::new();
        let record = intent.pending_record(id.to_hex(), Utc::now());
        let record_doc = audit_to_document(&record, Bson::ObjectId(id));
        let audit = self.audit();
        let action = format!(
            "record the intent of {} on lease {} before changing it",
            intent.context.action, intent.resource
        );
        let inserted = with_one_retry(self.write_timeout(), &action, || {
            audit
                .insert_one(record_doc.clone())
                .write_concern(self.majority())
                .into_future()
        })
        .await;
        match inserted {
            Ok(_) => Ok(record.id),
            Err(CallError::Driver(e)) if is_duplicate_key(&e) => {
                let stored = bounded(self.timeout(), &action, async {
                    audit.find_one(doc! { "_id": id }).await
                })
                .await
                .map_err(|e| self.audit_error(e, &action))?;
                if stored.as_ref() == Some(&record_doc) {
                    Ok(record.id)
                } else {
                    Err(StoreError::Command {
                        code: 11000,
                        message: format!(
                            "{action}: the audit collection refused the record as a duplicate \
                             (a unique index other than _id?), so it was not written: {e}"
                        ),
                    })
                }
            }
            Err(e) => match self.audit_error(e, &action) {
                StoreError::WriteConcern(detail) => Err(StoreError::WriteConcern(format!(
                    "audit record {} is on the primary but not confirmed by a majority \
                     (it may be rolled back): {detail}",
                    record.id
                ))),
                other => Err(other),
            },
        }
    }

    /// `updateOne {_id, state: pending, steps.what ≠ what}` pushing the step, majority.
    async fn audit_step(
        &self,
        id: &str,
        what: &str,
        after: Option<&Lease>,
        intends: Option<&Lease>,
    ) -> StoreResult<()> {
        let oid = record_id(id)?;
        let step = AuditStep {
            at: Utc::now(),
            what: what.into(),
        };
        let mut set = doc! {};
        if after.is_some() {
            set.insert("after", lease_bson(after));
        }
        if intends.is_some() {
            set.insert("intended", lease_bson(intends));
        }
        let mut update = doc! { "$push": { "steps": audit_step_document(&step) } };
        if !set.is_empty() {
            update.insert("$set", set);
        }
        let filter = doc! {
            "_id": oid,
            "state": AuditState::Pending.as_str(),
            "steps.what": { "$ne": what },
        };
        let action = format!("record a step of audit record {id}");
        self.update_pending(oid, id, filter, update, &action, |r| {
            r.state == AuditState::Pending && r.steps.iter().any(|s| s.what == what)
        })
        .await
    }

    /// `updateOne {_id, state: pending}` setting state, after and outcome, majority.
    async fn finish_audit(&self, id: &str, finish: &AuditFinish) -> StoreResult<()> {
        let oid = record_id(id)?;
        let filter = doc! { "_id": oid, "state": AuditState::Pending.as_str() };
        let update = doc! { "$set": {
            "state": finish.state.as_str(),
            "after": lease_bson(finish.after.as_ref()),
            "outcome": &finish.outcome,
            "finishedAt": super::codec::date(Utc::now()),
        }};
        let action = format!("finalize audit record {id} as {}", finish.state);
        self.update_pending(oid, id, filter, update, &action, |r| {
            r.state == finish.state && r.outcome == finish.outcome
        })
        .await
    }

    async fn audit_log(&self, limit: usize) -> StoreResult<Listing<AuditRecord>> {
        let action = "read the audit log";
        let audit = self.audit();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let documents: Vec<Document> = with_one_retry(self.timeout(), action, || async {
            audit
                .find(doc! {})
                .sort(doc! { "at": -1, "_id": -1 })
                .limit(limit)
                .await?
                .try_collect()
                .await
        })
        .await
        .map_err(|e| e.into_store(action))?;
        Ok(read_each(&documents, audit_from_document))
    }

    async fn audit_record(&self, id: &str) -> StoreResult<Option<AuditRecord>> {
        let Ok(oid) = ObjectId::parse_str(id) else {
            return Ok(None);
        };
        self.stored_audit(oid, "read an audit record").await
    }
}
