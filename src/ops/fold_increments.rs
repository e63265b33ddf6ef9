//! The cleanup of the two-step increment (docs/increments.md): pending tokens left by
//! increments whose writers gave up between their two steps are added to the counter
//! and cleared, one conditional update per document, audited intent first.

use std::fmt;

use bson::Bson;
use thiserror::Error;

use crate::model::AuditState;
use crate::store::{
    AuditContext, AuditFinish, AuditIntent, AuditLog, Counter, FoldOutcome, IncrementStore,
    Namespace, PendingDocument, StoreError, StoreResult,
};

/// What a fold would do, as read: every document with pending increments.
#[derive(Debug, Clone, PartialEq)]
pub struct FoldPlan {
    pub ns: Namespace,
    pub counter: Counter,
    pub documents: Vec<PendingDocument>,
}

impl FoldPlan {
    pub fn tokens(&self) -> usize {
        self.documents.iter().map(|d| d.pending.len()).sum()
    }

    /// What the fold adds over all documents.
    pub fn total(&self) -> i128 {
        self.documents.iter().map(|d| i128::from(d.total)).sum()
    }
}

/// Reads the pending increments of `ns` (reads only). `Malformed`, naming the
/// document, when a pending field has another shape than this program writes or a
/// document's pending amounts overflow: the fold then writes nothing.
pub async fn plan_fold<S: IncrementStore>(
    store: &S,
    ns: &Namespace,
    counter: &Counter,
) -> StoreResult<FoldPlan> {
    Ok(FoldPlan {
        ns: ns.clone(),
        counter: counter.clone(),
        documents: store.pending_increments(ns, counter).await?,
    })
}

/// One document the fold wrote to, or meant to.
#[derive(Debug, Clone, PartialEq)]
pub struct FoldedDocument {
    pub id: Bson,
    pub tokens: usize,
    pub total: i64,
    pub outcome: FoldOutcome,
}

/// What a fold did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FoldReport {
    pub documents: Vec<FoldedDocument>,
    /// `None` when there was nothing to fold (nothing written, no record).
    pub audit_id: Option<String>,
}

impl FoldReport {
    fn with(&self, outcome: FoldOutcome) -> impl Iterator<Item = &FoldedDocument> {
        self.documents.iter().filter(move |d| d.outcome == outcome)
    }

    /// Documents, tokens and amount this fold added to counters.
    pub fn folded(&self) -> (usize, usize, i128) {
        self.with(FoldOutcome::Folded)
            .fold((0, 0, 0), |(d, t, n), f| {
                (d + 1, t + f.tokens, n + i128::from(f.total))
            })
    }

    /// Whether this fold added to any counter: what its audit record (`applied` or
    /// not) and `written` say. Documents found counted already were not written.
    pub fn wrote(&self) -> bool {
        self.with(FoldOutcome::Folded).next().is_some()
    }

    /// How the audit record of a fold that went through is finalized.
    fn finished_state(&self) -> AuditState {
        if self.wrote() {
            AuditState::Applied
        } else {
            AuditState::NotApplied
        }
    }

    pub fn already_counted(&self) -> usize {
        self.with(FoldOutcome::AlreadyCounted).count()
    }

    pub fn changed(&self) -> usize {
        self.with(FoldOutcome::Changed).count()
    }
}

impl fmt::Display for FoldReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (documents, tokens, total) = self.folded();
        if documents == 0 {
            f.write_str("nothing folded")?;
        } else {
            write!(
                f,
                "folded {tokens} pending increments (total {total:+}) into {documents} documents"
            )?;
        }
        let counted = self.already_counted();
        if counted > 0 {
            write!(f, "; {counted} documents' tokens were found counted already (a lost reply of this fold, or their writers)")?;
        }
        let changed = self.changed();
        if changed > 0 {
            write!(f, "; {changed} documents changed since they were read and were left as they are (run the fold again)")?;
        }
        Ok(())
    }
}

/// Why a fold did not finish.
#[derive(Debug, Error)]
pub enum FoldError {
    #[error("the fold of {ns} was not started: its audit record could not be written, and nothing is folded without one; nothing was written")]
    NotStarted {
        ns: Namespace,
        #[source]
        cause: StoreError,
    },
    /// A step failed; what was done before is in `report` and the audit record.
    #[error("the fold of {ns} stopped: {report}; {what}; {audit}. Run it again: it reads what is still pending, and each fold is conditional on what it read, so nothing is counted twice")]
    Stopped {
        ns: Namespace,
        report: FoldReport,
        /// What failed, in words.
        what: String,
        /// Where the audit record stands.
        audit: String,
        #[source]
        cause: StoreError,
    },
    #[error("the fold of {ns} is done ({report}), but its audit record {audit_id} could not be finalized and stays pending")]
    AuditUnfinished {
        ns: Namespace,
        report: FoldReport,
        audit_id: String,
        #[source]
        cause: StoreError,
    },
}

fn step_text(plan: &FoldPlan, document: &PendingDocument) -> String {
    format!(
        "fold {} pending increments (total {:+}) of {} into {} _id {}",
        document.pending.len(),
        document.total,
        plan.counter.field(),
        plan.ns,
        document.id
    )
}

/// Why folding one document stopped the fold: what failed, in words, and the cause.
type Stop = (String, StoreError);

/// One document: its step recorded, then its conditional update.
async fn fold_one<S: IncrementStore + AuditLog>(
    store: &S,
    plan: &FoldPlan,
    audit_id: &str,
    document: &PendingDocument,
) -> Result<FoldedDocument, Stop> {
    let id = &document.id;
    store
        .audit_step(audit_id, &step_text(plan, document), None, None)
        .await
        .map_err(|cause| {
            let what = format!(
                "its step for _id {id} could not be recorded, so that document was not written"
            );
            (what, cause)
        })?;
    let outcome = store
        .fold_pending(&plan.ns, &plan.counter, document)
        .await
        .map_err(|cause| {
            let what = if cause.write_may_have_applied() {
                format!("whether _id {id} was folded is unknown (its reply was lost)")
            } else {
                format!("_id {id} was not folded")
            };
            (what, cause)
        })?;
    Ok(FoldedDocument {
        id: id.clone(),
        tokens: document.pending.len(),
        total: document.total,
        outcome,
    })
}

/// Finalizes the record of a fold that stopped part way (`failed` when it wrote, or
/// may have; else `not applied`) and says why it stopped.
async fn stopped<S: AuditLog>(
    store: &S,
    plan: &FoldPlan,
    audit_id: &str,
    report: FoldReport,
    (what, cause): Stop,
) -> FoldError {
    let state = if report.wrote() || cause.write_may_have_applied() {
        AuditState::Failed
    } else {
        AuditState::NotApplied
    };
    let finish = AuditFinish {
        state,
        after: None,
        outcome: format!("{}: {report}; {what}: {cause}", state.as_str()),
    };
    let audit = super::audited::finish(store, audit_id, finish).await;
    FoldError::Stopped {
        ns: plan.ns.clone(),
        report,
        what,
        audit,
        cause,
    }
}

/// Folds `plan`: a pending audit record first, then per document a step naming what
/// it folds and one update conditional on the pending field still being as read, then
/// the record finalized with what happened. Nothing to fold writes nothing. Run it only
/// where no writer of the counter remains (docs/increments.md).
pub async fn fold_pending_increments<S: IncrementStore + AuditLog>(
    store: &S,
    plan: &FoldPlan,
    context: AuditContext,
) -> Result<FoldReport, FoldError> {
    let mut report = FoldReport::default();
    if plan.documents.is_empty() {
        return Ok(report);
    }
    let intent = AuditIntent {
        resource: plan.ns.to_string(),
        context,
        before: None,
        intended: None,
    };
    let audit_id = store
        .begin_audit(&intent)
        .await
        .map_err(|cause| FoldError::NotStarted {
            ns: plan.ns.clone(),
            cause,
        })?;
    report.audit_id = Some(audit_id.clone());
    for document in &plan.documents {
        match fold_one(store, plan, &audit_id, document).await {
            Ok(folded) => report.documents.push(folded),
            Err(stop) => return Err(stopped(store, plan, &audit_id, report, stop).await),
        }
    }
    let state = report.finished_state();
    let finish = AuditFinish {
        state,
        after: None,
        outcome: format!("{}: {report}", state.as_str()),
    };
    match store.finish_audit(&audit_id, &finish).await {
        Ok(()) => Ok(report),
        Err(cause) => Err(FoldError::AuditUnfinished {
            ns: plan.ns.clone(),
            report,
            audit_id,
            cause,
        }),
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;
    use crate::engine::increment_once;
    use crate::store::sandbox::{Clock, SandboxConfig, SandboxStore};
    use crate::store::DocumentStore;

    fn ns() -> Namespace {
        Namespace::new("shop", "counts")
    }

    fn context() -> AuditContext {
        AuditContext {
            operator: "ann".into(),
            action: crate::model::FOLD_INCREMENTS_ACTION.into(),
            reason: None,
        }
    }

    #[tokio::test]
    async fn interrupted_increments_are_folded_once_and_recorded() {
        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let counter = Counter::new("n").unwrap();
        for (id, token, amount) in [(1, "a", 2), (1, "b", 3), (2, "c", -1)] {
            store
                .add_pending_increment(&ns(), &Bson::Int32(id), &counter, token, amount)
                .await
                .unwrap();
        }
        increment_once(&store, &ns(), &Bson::Int32(3), &counter, "d", 7)
            .await
            .unwrap();
        let plan = plan_fold(&store, &ns(), &counter).await.unwrap();
        assert_eq!(
            (plan.documents.len(), plan.tokens(), plan.total()),
            (2, 3, 4)
        );
        let report = fold_pending_increments(&store, &plan, context())
            .await
            .unwrap();
        assert_eq!(report.folded(), (2, 3, 4));
        let n = |d: bson::Document| d.get("n").cloned();
        let doc = |id| {
            let store = store.clone();
            async move {
                store
                    .find_one(&ns(), &Bson::Int32(id))
                    .await
                    .unwrap()
                    .unwrap()
            }
        };
        assert_eq!(n(doc(1).await), Some(Bson::Int64(5)));
        assert_eq!(n(doc(2).await), Some(Bson::Int64(-1)));
        assert_eq!(n(doc(3).await), Some(Bson::Int64(7)));
        // The writer of "a" comes back after all: its token is remembered as applied.
        let late = increment_once(&store, &ns(), &Bson::Int32(1), &counter, "a", 2).await;
        assert_eq!(late.unwrap(), crate::engine::Increment::AlreadyCounted);
        assert_eq!(n(doc(1).await), Some(Bson::Int64(5)));
        // Folding again finds nothing and writes nothing.
        let again = plan_fold(&store, &ns(), &counter).await.unwrap();
        assert!(again.documents.is_empty());
        let records = store.audit_log(10).await.unwrap().items;
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].state, AuditState::Applied);
        assert_eq!(records[0].steps.len(), 2);
        assert!(records[0]
            .outcome
            .contains("folded 3 pending increments (total +4) into 2 documents"));
    }

    #[tokio::test]
    async fn a_document_counted_since_it_was_read_is_reported_as_counted() {
        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let counter = Counter::new("n").unwrap();
        let id = Bson::Int32(1);
        store
            .add_pending_increment(&ns(), &id, &counter, "a", 2)
            .await
            .unwrap();
        let plan = plan_fold(&store, &ns(), &counter).await.unwrap();
        // A writer takes its second step between the read and the fold: its token is
        // counted, as MongoDB's adapter reads it back.
        store
            .apply_pending_increment(&ns(), &id, &counter, "a")
            .await
            .unwrap();
        let report = fold_pending_increments(&store, &plan, context())
            .await
            .unwrap();
        assert_eq!((report.already_counted(), report.changed()), (1, 0));
        let stored = store.find_one(&ns(), &id).await.unwrap().unwrap();
        assert_eq!(stored.get("n"), Some(&Bson::Int64(2)));
        // It wrote nothing: not applied, and the record says why.
        assert!(!report.wrote());
        let records = store.audit_log(10).await.unwrap().items;
        assert_eq!(records[0].state, AuditState::NotApplied);
        assert!(
            records[0].outcome.starts_with(
                "not applied: nothing folded; 1 documents' tokens were found counted already"
            ),
            "{}",
            records[0].outcome
        );
    }

    #[tokio::test]
    async fn a_document_changed_since_it_was_read_is_left_alone() {
        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let counter = Counter::new("n").unwrap();
        let id = Bson::Int32(1);
        store
            .add_pending_increment(&ns(), &id, &counter, "a", 2)
            .await
            .unwrap();
        let plan = plan_fold(&store, &ns(), &counter).await.unwrap();
        // Another writer takes its first step between the read and the fold.
        store
            .add_pending_increment(&ns(), &id, &counter, "b", 3)
            .await
            .unwrap();
        let report = fold_pending_increments(&store, &plan, context())
            .await
            .unwrap();
        assert_eq!(report.changed(), 1);
        let stored = store.find_one(&ns(), &id).await.unwrap().unwrap();
        assert_eq!(stored.get("n"), None);
        assert_eq!(stored.get_array("n_pending").map(Vec::len), Ok(2));
        let records = store.audit_log(10).await.unwrap().items;
        assert_eq!(records[0].state, AuditState::NotApplied);
    }

    #[tokio::test]
    async fn a_malformed_pending_field_stops_the_plan_before_any_write() {
        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let counter = Counter::new("n").unwrap();
        store
            .put(
                &ns(),
                doc! {"_id": 1, "n_pending": [{"t": "a", "n": 1_i64}]},
            )
            .await
            .unwrap();
        store
            .put(
                &ns(),
                doc! {"_id": 2, "n_pending": [{"t": "b", "n": "one"}]},
            )
            .await
            .unwrap();
        let before = store.find_all(&ns()).await.unwrap();
        let refused = plan_fold(&store, &ns(), &counter).await;
        assert!(
            matches!(refused, Err(StoreError::Malformed { .. })),
            "{refused:?}"
        );
        // No audit record, and every document as it was.
        assert_eq!(store.calls().operator_writes(), 0);
        assert_eq!(store.find_all(&ns()).await.unwrap(), before);
        assert!(store.audit_log(10).await.unwrap().items.is_empty());
    }

    #[tokio::test]
    async fn a_counter_that_cannot_be_added_to_stops_the_fold_and_says_so() {
        let store = SandboxStore::new(SandboxConfig::default(), Clock::System);
        let counter = Counter::new("n").unwrap();
        store
            .put(
                &ns(),
                doc! {"_id": 1, "n": 1, "n_pending": [{"t": "a", "n": 1_i64}]},
            )
            .await
            .unwrap();
        store
            .put(
                &ns(),
                doc! {"_id": 2, "n": "x", "n_pending": [{"t": "b", "n": 1_i64}]},
            )
            .await
            .unwrap();
        let plan = plan_fold(&store, &ns(), &counter).await.unwrap();
        let error = fold_pending_increments(&store, &plan, context())
            .await
            .unwrap_err();
        let FoldError::Stopped { report, .. } = &error else {
            panic!("{error}");
        };
        assert_eq!(report.folded(), (1, 1, 1));
        assert!(
            error.to_string().contains("_id 2 was not folded"),
            "{error}"
        );
        let records = store.audit_log(10).await.unwrap().items;
        assert_eq!(records[0].state, AuditState::Failed);
    }
}
