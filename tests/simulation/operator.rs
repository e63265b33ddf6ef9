//! The operator: every action goes the way the command line takes it, through
//! `ops::gather`, `ops::plan` and `ops::execute` (or `ops::rebuild`), on a store
//! handle of its own with its own faults.

use std::sync::Arc;
use std::time::Duration;

use streamward::demo::rebuild::{PetRebuild, PET_REBUILD};
use streamward::model::ClusterTime;
use streamward::ops::{
    self, ActionRequest, GatherOptions, OpsError, Plan, Progress, RebuildDefinition,
    RebuildFailure, RebuildReport,
};
use streamward::store::sandbox::SandboxStore;
use streamward::store::ResumeChange;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::faults::{Cluster, FaultyStore};
use crate::trace::{Obs, Trace};

pub const OPERATOR: &str = "sim-operator";

/// How an action ended, as the operator learns it.
#[derive(Debug, Clone, PartialEq)]
pub enum Acted {
    Applied,
    /// Planning refused it; nothing was written.
    Refused,
    /// The lease moved on since the plan; nothing was written.
    Changed,
    /// The swap's reply was lost: it may or may not have applied.
    Unknown,
    /// It applied; its audit record could not be finalized and stays pending.
    AuditUnfinished,
    /// Reading the facts or writing failed; nothing was written.
    Failed,
}

/// A rebuild definition with a store handle of its own: the pet rebuild, slowed
/// down and sometimes failing, run while the operator holds the bulk lease.
struct SimRebuild {
    inner: PetRebuild,
    store: FaultyStore,
}

impl RebuildDefinition<FaultyStore> for SimRebuild {
    fn describe(&self) -> String {
        <PetRebuild as RebuildDefinition<FaultyStore>>::describe(&self.inner)
    }

    async fn run(
        &self,
        _store: &FaultyStore,
        progress: &Progress,
        cancel: &CancellationToken,
    ) -> Result<RebuildReport, RebuildFailure> {
        self.inner.run(&self.store, progress, cancel).await
    }
}

pub struct Operator {
    sandbox: SandboxStore,
    cluster: Arc<Cluster>,
    store: FaultyStore,
    trace: Trace,
    actor: Arc<str>,
    seed: u64,
    /// Audit records of applied actions, for undo.
    pub audits: Vec<String>,
    running: Option<JoinHandle<()>>,
    rebuilds: u64,
}

impl Operator {
    pub fn new(sandbox: &SandboxStore, cluster: &Arc<Cluster>, seed: u64) -> Self {
        let store = FaultyStore::new(sandbox.clone(), cluster, "operator", seed);
        Self {
            sandbox: sandbox.clone(),
            cluster: cluster.clone(),
            actor: store.actor().clone(),
            store,
            trace: cluster.trace.clone(),
            seed,
            audits: Vec::new(),
            running: None,
            rebuilds: 0,
        }
    }

    fn note(&self, text: String) {
        self.trace.push(&self.actor, Obs::Operator(text));
    }

    fn options() -> GatherOptions {
        let mut options = GatherOptions::new(OPERATOR);
        options.rebuild = Some(PetRebuild::target());
        options
    }

    async fn planned(&self, request: &ActionRequest) -> Result<Plan, String> {
        let facts = ops::gather(&self.store, request, &Self::options())
            .await
            .map_err(|e| e.to_string())?;
        Ok(ops::plan(request, &facts))
    }

    /// Plans and executes a takeover, rewind, reset, abort-bulk or undo. Returns the
    /// plan (when there was one) and how it ended.
    pub async fn act(&mut self, request: ActionRequest) -> (Option<Plan>, Acted) {
        match self.plan(&request).await {
            Ok(plan) => {
                let acted = self.execute(&plan).await;
                (Some(plan), acted)
            }
            Err((plan, acted)) => (plan, acted),
        }
    }

    /// Reads the facts and plans; `Err` when there is nothing to execute.
    pub async fn plan(&mut self, request: &ActionRequest) -> Result<Plan, (Option<Plan>, Acted)> {
        let plan = match self.planned(request).await {
            Ok(plan) => plan,
            Err(error) => {
                self.note(format!("{request:?}: could not read the facts: {error}"));
                return Err((None, Acted::Failed));
            }
        };
        if let Some(refusal) = &plan.refusal {
            self.note(format!("{request:?}: refused: {refusal:?}"));
            return Err((Some(plan), Acted::Refused));
        }
        Ok(plan)
    }

    /// Executes a plan that was not refused.
    pub async fn execute(&mut self, plan: &Plan) -> Acted {
        match ops::execute(&self.store, plan, Some("simulation".into())).await {
            Ok(done) => {
                self.note(format!(
                    "{}: applied v{} -> v{} ({}), audit {}",
                    done.action,
                    done.before.version,
                    done.after.version,
                    plan.change.as_ref().map(|c| c.note.as_str()).unwrap_or(""),
                    done.audit_id
                ));
                self.audits.push(done.audit_id);
                Acted::Applied
            }
            Err(error) => {
                self.note(format!("{:?}: {error}", plan.request));
                match error {
                    OpsError::Changed { .. } => Acted::Changed,
                    OpsError::OutcomeUnknown { .. } => Acted::Unknown,
                    OpsError::AuditUnfinished { .. } => Acted::AuditUnfinished,
                    _ => Acted::Failed,
                }
            }
        }
    }

    pub fn rebuild_running(&self) -> bool {
        self.running.as_ref().is_some_and(|r| !r.is_finished())
    }

    /// Plans a rebuild and runs it in the background: the definition writes a tag
    /// document every `step` (an odd number of milliseconds, so it never wakes in
    /// the same tick as the bulk lease's renewal, every ten seconds), and fails
    /// after `fail_after` documents if given.
    pub async fn start_rebuild(&mut self, step: Duration, fail_after: Option<usize>) -> bool {
        if self.rebuild_running() {
            return false;
        }
        let Some((store, plan, definition)) = self.prepare_rebuild(step, fail_after).await else {
            return false;
        };
        let trace = self.trace.clone();
        let actor = store.actor().clone();
        self.running = Some(tokio::spawn(async move {
            let ended = run_rebuild(&store, &plan, &definition).await;
            trace.push(&actor, Obs::Operator(ended));
        }));
        true
    }

    /// A rebuild run to its end now (quiescence: faults are off); whether it applied.
    pub async fn rebuild_now(&mut self) -> bool {
        self.finish_rebuild().await;
        let Some((store, plan, definition)) = self.prepare_rebuild(Duration::ZERO, None).await
        else {
            return false;
        };
        let ended = run_rebuild(&store, &plan, &definition).await;
        let applied = ended.starts_with("rebuild applied");
        self.trace.push(store.actor(), Obs::Operator(ended));
        applied
    }

    /// Waits for the rebuild running in the background, if any.
    pub async fn finish_rebuild(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.await;
        }
    }

    async fn prepare_rebuild(
        &mut self,
        step: Duration,
        fail_after: Option<usize>,
    ) -> Option<(FaultyStore, Plan, SimRebuild)> {
        self.rebuilds += 1;
        let name = format!("rebuild#{}", self.rebuilds);
        // The rebuild's own handle: faults, but no latency, so its renewals tick on time.
        let store = FaultyStore::new(
            self.sandbox.clone(),
            &self.cluster,
            &name,
            self.seed ^ (self.rebuilds << 20),
        )
        .untimed();
        let request = ActionRequest::Rebuild {
            name: PET_REBUILD.into(),
        };
        let facts = match ops::gather(&store, &request, &Self::options()).await {
            Ok(facts) => facts,
            Err(error) => {
                self.note(format!("rebuild: could not read the facts: {error}"));
                return None;
            }
        };
        let plan = ops::plan(&request, &facts);
        if let Some(refusal) = &plan.refusal {
            self.note(format!("rebuild: refused: {refusal:?}"));
            return None;
        }
        let definition = SimRebuild {
            inner: PetRebuild {
                step_delay: step,
                fail_after,
                ..PetRebuild::default()
            },
            store: store.clone(),
        };
        Some((store, plan, definition))
    }
}

async fn run_rebuild(store: &FaultyStore, plan: &Plan, definition: &SimRebuild) -> String {
    let (progress, _watch) = Progress::channel();
    let cancel = CancellationToken::new();
    match ops::rebuild(
        store,
        plan,
        definition,
        &progress,
        &cancel,
        Some("simulation".into()),
    )
    .await
    {
        Ok(done) => format!(
            "rebuild applied v{} -> v{}, replay from {}: {}",
            done.executed.before.version, done.executed.after.version, done.t0, done.report.summary
        ),
        Err(error) => format!("rebuild ended: {error}"),
    }
}

/// Where a plan moves the resume point to, if it sets one.
pub fn resume_at(plan: &Plan) -> Option<Option<ClusterTime>> {
    match plan.change.as_ref().map(|c| &c.resume) {
        Some(ResumeChange::Set { at, .. }) => Some(*at),
        _ => None,
    }
}
