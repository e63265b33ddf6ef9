//! A listener's own policy for a change it can never process
//! ([`super::ListenerConfig::skip_after`], off by default): after that many attempts
//! the holder steps over it itself, as `streamward skip` would, intent first: an audit
//! record naming the listener as the operator, the change kept in the skipped
//! collection under its id, then a commit, fenced on its tenure, that resumes right
//! after the change and removes the failure.

use std::time::Duration;

use crate::model::{AuditState, ChangeFailure};
use crate::store::{
    AuditContext, AuditFinish, AuditIntent, SkippedChange, Store, Tenure, TenureWrite,
};

/// Why a change was not stepped over.
#[derive(Debug, Clone, PartialEq)]
pub enum NotSteppedOver {
    /// The lease is no longer this tenure's.
    LostLock(String),
    Failed(String),
}

/// Steps over `failure`'s change; `Err` says why not (nothing moved then, unless the
/// commit's reply was lost: its record is left pending, to be judged by the lease).
pub async fn step_over<S: Store>(
    store: &S,
    tenure: &Tenure,
    failure: &ChangeFailure,
    lease: Duration,
    skip_after: u32,
) -> Result<String, NotSteppedOver> {
    let Some(token) = failure.token.clone() else {
        return Err(NotSteppedOver::Failed(
            "the server did not name the change, so it cannot be stepped over".into(),
        ));
    };
    let read = |e: crate::store::StoreError| NotSteppedOver::Failed(e.to_string());
    let now = store.server_now().await.map_err(read)?;
    let before = store
        .get(&tenure.resource)
        .await
        .map_err(read)?
        .filter(|l| {
            l.version == tenure.version && l.holder.as_deref() == Some(tenure.listener.as_str())
        })
        .ok_or_else(|| NotSteppedOver::LostLock("the lease moved on".into()))?;
    let commit = tenure.commit_past_failure(&token, lease);
    let intent = AuditIntent {
        resource: tenure.resource.clone(),
        context: AuditContext {
            operator: tenure.listener.clone(),
            action: "skip".into(),
            reason: Some(format!(
                "the listener's policy: skip_after = {skip_after}, and {} attempts failed on \
                 this change",
                failure.attempts
            )),
        },
        before: Some(before.clone()),
        intended: commit.apply(Some(&before), now),
    };
    let audit_id = store.begin_audit(&intent).await.map_err(read)?;
    let finish = |state: AuditState, outcome: String| AuditFinish {
        state,
        after: None,
        outcome,
    };
    let skipped = SkippedChange {
        audit_id: audit_id.clone(),
        resource: tenure.resource.clone(),
        operator: tenure.listener.clone(),
        at: now,
        token: token.clone(),
        failure: Some(failure.clone()),
        entry: None,
        entry_missing: None,
    };
    let kept = store.keep_skipped(&skipped.with_entry(store).await).await;
    if let Err(e) = kept {
        let outcome = format!("not applied: the skipped change could not be kept: {e}");
        let _ = store
            .finish_audit(&audit_id, &finish(AuditState::NotApplied, outcome))
            .await;
        return Err(NotSteppedOver::Failed(format!(
            "keeping the change failed: {e}"
        )));
    }
    match store.commit_past_failure(tenure, &token, lease).await {
        Ok(TenureWrite::Done) => {
            let after = store.get(&tenure.resource).await.ok().flatten();
            let done = AuditFinish {
                after,
                ..finish(AuditState::Applied, "applied".into())
            };
            if let Err(e) = store.finish_audit(&audit_id, &done).await {
                tracing::warn!(audit_id, error = %e, "the skip was applied, but its audit record stays pending");
            }
            Ok(audit_id)
        }
        Ok(TenureWrite::LostLock) => {
            let outcome = "not applied: the lease moved on".to_string();
            let _ = store
                .finish_audit(&audit_id, &finish(AuditState::NotApplied, outcome))
                .await;
            Err(NotSteppedOver::LostLock("the lease moved on".into()))
        }
        Err(e) if e.write_may_have_applied() => {
            let what = format!("the skip's commit reply was lost: {e}");
            let _ = store.audit_step(&audit_id, &what, None, None).await;
            Err(NotSteppedOver::Failed(what))
        }
        Err(e) => {
            let outcome = format!("not applied: {e}");
            let _ = store
                .finish_audit(&audit_id, &finish(AuditState::NotApplied, outcome))
                .await;
            Err(NotSteppedOver::Failed(e.to_string()))
        }
    }
}
