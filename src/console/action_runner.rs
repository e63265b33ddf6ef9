//! The task that carries out the console's guarded actions: it reads the facts and
//! plans (reads only), and executes a plan only when the operator confirmed it. The
//! UI hands it commands without waiting and hears back through the data channel.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::data::{DataEvent, PlanFailure};
use crate::ops::{
    self, describe, ActionKind, ActionRequest, GatherOptions, Plan, Progress, RebuildDefinition,
    RebuildTarget,
};
use crate::store::OpsStore;

#[derive(Debug, Clone, PartialEq)]
pub enum ActionCommand {
    Plan(ActionRequest),
    /// Execute a confirmed plan; `reason` (typed in the dialog) goes to its audit
    /// record after the runner's own reason.
    Execute {
        plan: Box<Plan>,
        reason: Option<String>,
    },
    CancelRebuild,
}

/// What the runner needs besides the store.
pub struct ActionRunner<S, D> {
    pub store: S,
    /// Operator, count limit and leases (never read-only: in read-only mode no runner exists).
    pub options: GatherOptions,
    /// The rebuilds defined here.
    pub rebuilds: Vec<(RebuildTarget, Arc<D>)>,
    /// Recorded as the reason of every action taken from the console, followed by
    /// what the operator typed into the dialog's reason field.
    pub reason: String,
}

impl<S, D> ActionRunner<S, D>
where
    S: OpsStore,
    D: RebuildDefinition<S> + 'static,
{
    /// (resource, name) of each rebuild, for the console state.
    pub fn rebuild_names(&self) -> Vec<(String, String)> {
        self.rebuilds
            .iter()
            .map(|(t, _)| (t.resource.clone(), t.name.clone()))
            .collect()
    }

    /// Runs until the console drops its sender. A rebuild still running then is
    /// cancelled and awaited, so its audited STUCK BULK path runs before the process
    /// ends; the task's output is that rebuild's last word, for the operator's terminal.
    pub fn spawn(
        self,
        mut commands: mpsc::Receiver<ActionCommand>,
        events: mpsc::Sender<DataEvent>,
    ) -> JoinHandle<Option<String>> {
        tokio::spawn(async move {
            let mut running: Option<RunningRebuild> = None;
            while let Some(command) = commands.recv().await {
                let reply = match command {
                    ActionCommand::Plan(request) => {
                        Some(DataEvent::Planned(self.plan(&request).await))
                    }
                    ActionCommand::Execute { plan, .. }
                        if plan.action == ActionKind::Rebuild
                            && running.as_ref().is_some_and(|r| !r.task.is_finished()) =>
                    {
                        Some(DataEvent::ActionDone {
                            action: ActionKind::Rebuild,
                            result: Err(
                                "a rebuild is already running here: one at a time; nothing was written"
                                    .into(),
                            ),
                        })
                    }
                    ActionCommand::Execute { plan, reason } if plan.action == ActionKind::Rebuild => {
                        let reason = self.reason_with(reason);
                        running = Some(self.start_rebuild(*plan, reason, events.clone()));
                        None
                    }
                    ActionCommand::Execute { plan, reason } => {
                        let done = ops::execute(&self.store, &plan, Some(self.reason_with(reason)))
                            .await
                            .map(|done| describe::executed_text(&done).trim_end().to_string())
                            .map_err(|e| format!("{} failed: {e}", plan.action));
                        Some(DataEvent::ActionDone {
                            action: plan.action,
                            result: done,
                        })
                    }
                    ActionCommand::CancelRebuild => {
                        if let Some(rebuild) = &running {
                            rebuild.cancel.cancel();
                        }
                        None
                    }
                };
                if let Some(reply) = reply {
                    if events.send(reply).await.is_err() {
                        break;
                    }
                }
            }
            let rebuild = running.filter(|r| !r.task.is_finished())?;
            rebuild.cancel.cancel();
            match rebuild.task.await {
                Ok(Ok(done)) => Some(done),
                Ok(Err(failed)) => Some(failed),
                Err(panicked) => Some(format!("the rebuild task ended abnormally: {panicked}")),
            }
        })
    }

    /// The audit reason: the runner's own ("from the console"), then the operator's.
    fn reason_with(&self, typed: Option<String>) -> String {
        match typed.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            Some(typed) => format!("{}: {typed}", self.reason),
            None => self.reason.clone(),
        }
    }

    async fn plan(&self, request: &ActionRequest) -> Result<Box<Plan>, PlanFailure> {
        let mut options = self.options.clone();
        if let ActionRequest::Rebuild { name } = request {
            options.rebuild = self
                .rebuilds
                .iter()
                .find(|(t, _)| t.name == *name)
                .map(|(t, _)| t.clone());
        }
        let facts = ops::gather(&self.store, request, &options)
            .await
            .map_err(|e| PlanFailure {
                request: request.clone(),
                message: format!("cannot plan {}: {e}", request.kind()),
            })?;
        Ok(Box::new(ops::plan(request, &facts)))
    }

    /// Runs the rebuild on its own task, forwarding progress; its token cancels it.
    fn start_rebuild(
        &self,
        plan: Plan,
        reason: String,
        events: mpsc::Sender<DataEvent>,
    ) -> RunningRebuild {
        let cancel = CancellationToken::new();
        let definition = match &plan.request {
            ActionRequest::Rebuild { name } => self
                .rebuilds
                .iter()
                .find(|(t, _)| t.name == *name)
                .map(|(_, d)| (name.clone(), d.clone())),
            _ => None,
        };
        let store = self.store.clone();
        let token = cancel.clone();
        let task = tokio::spawn(async move {
            let Some((name, definition)) = definition else {
                let done = Err(format!(
                    "no rebuild named in this {} plan is defined here; nothing was written",
                    plan.action
                ));
                let _ = events
                    .send(DataEvent::ActionDone {
                        action: ActionKind::Rebuild,
                        result: done.clone(),
                    })
                    .await;
                return done;
            };
            let (progress, mut updates) = Progress::channel();
            let forward_events = events.clone();
            let forward = tokio::spawn(async move {
                while updates.changed().await.is_ok() {
                    let update = updates.borrow_and_update().clone();
                    if forward_events
                        .send(DataEvent::RebuildProgress(update))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
            let result = ops::rebuild(
                &store,
                &plan,
                definition.as_ref(),
                &progress,
                &token,
                Some(reason),
            )
            .await;
            drop(progress);
            let _ = forward.await;
            let done = result
                .map(|outcome| {
                    format!(
                        "{} — {}",
                        describe::executed_text(&outcome.executed).trim_end(),
                        outcome.report.summary
                    )
                })
                .map_err(|e| format!("rebuild {name}: {e}"));
            let _ = events
                .send(DataEvent::ActionDone {
                    action: ActionKind::Rebuild,
                    result: done.clone(),
                })
                .await;
            done
        });
        RunningRebuild { cancel, task }
    }
}

/// A rebuild on its own task; the task's output is its outcome as shown to the operator.
struct RunningRebuild {
    cancel: CancellationToken,
    task: JoinHandle<Result<String, String>>,
}
