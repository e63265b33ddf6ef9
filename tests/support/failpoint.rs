//! Faults on a real three-member replica set, for `tests/failover_live.rs`: elections
//! (`replSetStepDown`, `replSetStepUp`), a majority that cannot be reached (members
//! stopped with SIGSTOP, continued on drop), and the server's `failCommand` fail point
//! (members run with `enableTestCommands=1`, as `scripts/mongo-replset.sh` starts them).
//!
//! Not a module of `support/mod.rs`, so it is compiled only into the test crates that
//! includes it (`#[path = "support/failpoint.rs"] mod failpoint;`).
#![allow(dead_code)]

use std::future::IntoFuture;
use std::process::Command;
use std::time::Duration;

use bson::{doc, Bson, Document};
use mongodb::options::ClientOptions;
use mongodb::Client;

/// Where the failover suite finds its three-member replica set (set by `scripts/test.sh`).
pub const RS3_URI_VAR: &str = "STREAMWARD_TEST_URI_RS3";

/// How long one administrative command may take before the member counts as not answering.
const ADMIN_CALL: Duration = Duration::from_secs(5);

/// The members of a replica set, each reachable on its own (direct connection), in the
/// order the URI names them. `scripts/mongo-replset.sh` gives the first member priority 2.
pub struct ReplicaSet {
    pub uri: String,
    pub hosts: Vec<String>,
    members: Vec<Client>,
    /// Each member's process id, read (`serverStatus.pid`) while all of them answered.
    pids: Vec<u32>,
}

/// The hosts of a `mongodb://h1,h2,h3/?…` URI.
pub fn hosts_of(uri: &str) -> Vec<String> {
    let rest = uri.strip_prefix("mongodb://").expect("a mongodb:// URI");
    let hosts = rest.split(['/', '?']).next().unwrap_or_default();
    let hosts = hosts.rsplit('@').next().unwrap_or_default();
    hosts.split(',').map(str::to_string).collect()
}

/// `uri` with `appName` set, so a fail point can pick this client's commands alone.
pub fn with_app_name(uri: &str, app: &str) -> String {
    let separator = if uri.contains('?') { '&' } else { '?' };
    let base = if uri.contains('?') || uri.ends_with('/') {
        uri.to_string()
    } else {
        format!("{uri}/")
    };
    format!("{base}{separator}appName={app}")
}

async fn admin_call<T>(what: &str, call: impl IntoFuture<Output = mongodb::error::Result<T>>) -> T {
    match tokio::time::timeout(ADMIN_CALL, call).await {
        Ok(Ok(value)) => value,
        Ok(Err(e)) => panic!("{what}: {e}"),
        Err(_) => panic!("{what}: no reply within {ADMIN_CALL:?}"),
    }
}

impl ReplicaSet {
    /// Connects to every member directly and reads its process id. Panics unless
    /// every member answers.
    pub async fn connect(uri: &str) -> ReplicaSet {
        let hosts = hosts_of(uri);
        let mut members = Vec::new();
        let mut pids = Vec::new();
        for host in &hosts {
            let mut options = ClientOptions::parse(format!(
                "mongodb://{host}/?directConnection=true&appName=sw-failover-admin"
            ))
            .await
            .expect("a member's URI");
            options.server_selection_timeout = Some(Duration::from_secs(3));
            options.connect_timeout = Some(Duration::from_secs(3));
            options.retry_reads = Some(false);
            options.retry_writes = Some(false);
            let client = Client::with_options(options).expect("a member's client");
            let status = admin_call(
                &format!("serverStatus on {host}"),
                client
                    .database("admin")
                    .run_command(doc! { "serverStatus": 1, "repl": 0, "metrics": 0 }),
            )
            .await;
            let pid = match status.get("pid") {
                Some(Bson::Int64(p)) => *p as u32,
                Some(Bson::Int32(p)) => *p as u32,
                other => panic!("serverStatus on {host} has no pid: {other:?}"),
            };
            members.push(client);
            pids.push(pid);
        }
        ReplicaSet {
            uri: uri.to_string(),
            hosts,
            members,
            pids,
        }
    }

    pub fn member(&self, index: usize) -> &Client {
        &self.members[index]
    }

    /// Runs `command` on `admin` of one member.
    pub async fn admin(&self, index: usize, command: Document) -> mongodb::error::Result<Document> {
        let what = format!("{command} on {}", self.hosts[index]);
        match tokio::time::timeout(
            ADMIN_CALL,
            self.members[index].database("admin").run_command(command),
        )
        .await
        {
            Ok(reply) => reply,
            Err(_) => panic!("{what}: no reply within {ADMIN_CALL:?}"),
        }
    }

    /// Which member says it is the writable primary now, asking each (a stopped
    /// member counts as not primary).
    pub async fn primary(&self) -> Option<usize> {
        for (index, member) in self.members.iter().enumerate() {
            let hello = tokio::time::timeout(
                Duration::from_secs(1),
                member.database("admin").run_command(doc! { "hello": 1 }),
            )
            .await;
            if let Ok(Ok(hello)) = hello {
                if hello.get_bool("isWritablePrimary").unwrap_or(false) {
                    return Some(index);
                }
            }
        }
        None
    }

    /// Waits until some member is the writable primary.
    pub async fn wait_for_primary(&self, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(primary) = self.primary().await {
                return primary;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no primary within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `replSetStepDown` on the primary `index`: it stays ineligible for `secs` seconds,
    /// and waits up to 10 s for a secondary to catch up. Returns the server's reply.
    pub async fn step_down(&self, index: usize, secs: i64) -> mongodb::error::Result<Document> {
        self.admin(
            index,
            doc! { "replSetStepDown": secs, "secondaryCatchUpPeriodSecs": 10_i64 },
        )
        .await
    }

    /// Puts the set back where every test starts: every member running, no fail point
    /// on, the first member primary (it may be frozen after a step-down, or another
    /// member may have won an election) and every member caught up with it.
    pub async fn restore(&self) {
        self.continue_all();
        for index in 0..self.members.len() {
            let _ = self
                .admin(
                    index,
                    doc! { "configureFailPoint": "failCommand", "mode": "off" },
                )
                .await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if self.primary().await == Some(0) && self.all_caught_up().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the first member did not become primary again within 60 s"
            );
            if self.primary().await != Some(0) {
                // Frozen after a step-down: make it eligible, then ask it to stand.
                let _ = self.admin(0, doc! { "replSetFreeze": 0 }).await;
                let _ = self.admin(0, doc! { "replSetStepUp": 1 }).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// A write acknowledged by every member (w: 3) into a probe collection.
    async fn all_caught_up(&self) -> bool {
        let members = self.members.len() as u32;
        let probe = self.members[0]
            .database("sw_failover_probe")
            .collection::<Document>("probe");
        let write = probe
            .update_one(doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } })
            .upsert(true)
            .write_concern(
                mongodb::options::WriteConcern::builder()
                    .w(mongodb::options::Acknowledgment::Nodes(members))
                    .w_timeout(Duration::from_secs(2))
                    .build(),
            );
        matches!(
            tokio::time::timeout(Duration::from_secs(3), write).await,
            Ok(Ok(_))
        )
    }

    /// Stops the members `indexes` with SIGSTOP: they keep their sockets open and answer
    /// nothing, as behind a partition. Continued (SIGCONT) when the guard is dropped.
    pub fn stop(&self, indexes: &[usize]) -> Stopped {
        let pids: Vec<u32> = indexes.iter().map(|&i| self.pids[i]).collect();
        Stopped::new(pids)
    }

    pub fn pids(&self, indexes: &[usize]) -> Vec<u32> {
        indexes.iter().map(|&i| self.pids[i]).collect()
    }

    fn continue_all(&self) {
        signal("-CONT", &self.pids);
    }

    /// Turns `failCommand` on at member `index` (the primary, for writes) with `data`,
    /// for the next `times` commands that match it. Returns the fail point, to be turned
    /// off (which also says how often it fired).
    pub async fn fail_command(&self, index: usize, times: i64, data: Document) -> FailPoint {
        let reply = self
            .admin(
                index,
                doc! {
                    "configureFailPoint": "failCommand",
                    "mode": { "times": times },
                    "data": data.clone(),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("configureFailPoint failCommand {data}: {e}"));
        FailPoint {
            member: index,
            data,
            entered_before: count_of(&reply),
        }
    }
}

fn count_of(reply: &Document) -> i64 {
    match reply.get("count") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        _ => 0,
    }
}

fn signal(which: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let status = Command::new("kill")
        .arg(which)
        .args(pids.iter().map(u32::to_string))
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pids:?} failed");
}

/// Members stopped with SIGSTOP; continued when dropped (also when a test panics).
pub struct Stopped {
    pids: Vec<u32>,
}

impl Stopped {
    pub fn new(pids: Vec<u32>) -> Stopped {
        signal("-STOP", &pids);
        Stopped { pids }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal("-CONT", &self.pids);
    }
}

/// A `failCommand` fail point that was turned on.
pub struct FailPoint {
    pub member: usize,
    pub data: Document,
    entered_before: i64,
}

impl FailPoint {
    /// Turns it off; returns how many commands it failed.
    pub async fn off(self, set: &ReplicaSet) -> i64 {
        let reply = set
            .admin(
                self.member,
                doc! { "configureFailPoint": "failCommand", "mode": "off" },
            )
            .await
            .expect("turn failCommand off");
        count_of(&reply) - self.entered_before
    }
}
