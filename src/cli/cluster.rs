//! `streamward leases` and `streamward oplog`: what the cluster says, as a table or JSON.

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::lease_table::{render_columns, render_invalidations, render_leases, LeaseRow};
use super::settings::{OutputFormat, Settings};
use crate::model::lease_field as F;
use crate::model::text::{escape_control, short_duration};
use crate::model::{ClusterTime, HealthThresholds, Lease, LeaseHealth, OplogWindow};
use crate::ops::describe;
use crate::store::mongo::{MemberState, MongoStore, ReplicaMember};
use crate::store::{ChangeFeed, LeaseStore, StoreError};

pub(super) async fn connect(settings: &Settings) -> anyhow::Result<MongoStore> {
    let mongo = settings.mongo()?;
    let shown = crate::store::mongo::redact_uri(&mongo.uri);
    MongoStore::connect(mongo)
        .await
        .with_context(|| format!("connecting to {shown}"))
}

/// The oplog window, or `None` with a note on stderr when it may not be read.
async fn window_if_permitted(store: &MongoStore) -> anyhow::Result<Option<OplogWindow>> {
    match store.oplog_window().await {
        Ok(window) => Ok(Some(window)),
        Err(e @ StoreError::NotPermitted { .. }) => {
            eprintln!("note: {e}; lag, headroom and history status are not shown");
            Ok(None)
        }
        Err(e) => Err(e).context("reading the oplog window"),
    }
}

pub async fn leases(settings: &Settings) -> anyhow::Result<()> {
    let store = connect(settings).await?;
    let listing = store
        .list()
        .await
        .with_context(|| format!("listing leases in {}", settings.leases))?;
    let leases = listing.items;
    let window = window_if_permitted(&store).await?;
    let now = store
        .server_now()
        .await
        .context("reading the server's clock")?;
    let thresholds = settings.thresholds;
    match settings.output {
        OutputFormat::Table => {
            super::guarded::warn_malformed("lease document", &listing.malformed);
            if leases.is_empty() && listing.malformed.is_empty() {
                println!("no leases in {}", settings.leases);
                return Ok(());
            }
            let rows: Vec<LeaseRow> = leases
                .iter()
                .map(|l| LeaseRow::new(l, window.as_ref(), now, &thresholds))
                .collect();
            print!("{}", render_leases(&rows));
            print!("{}", render_invalidations(&leases));
        }
        OutputFormat::Json => {
            let items: Vec<Value> = leases
                .iter()
                .map(|l| lease_json(l, window.as_ref(), now, &thresholds))
                .chain(listing.malformed.iter().map(describe::malformed_json))
                .collect();
            println!("{}", serde_json::to_string_pretty(&items)?);
        }
    }
    Ok(())
}

fn time_json(time: Option<ClusterTime>) -> Value {
    match time {
        Some(t) => json!({
            "t": t.secs,
            "i": t.inc,
            "iso": t.to_datetime().map(|d| d.to_rfc3339()),
        }),
        None => Value::Null,
    }
}

fn lease_json(
    lease: &Lease,
    window: Option<&OplogWindow>,
    now: DateTime<Utc>,
    thresholds: &HealthThresholds,
) -> Value {
    let health = LeaseHealth::assess(lease, window, now, thresholds);
    json!({
        "resource": lease.resource,
        (F::KIND): lease.kind.as_str(),
        "holder": lease.holder,
        "liveHolder": lease.live_holder(now),
        (F::VERSION): lease.version,
        (F::EXPIRES_AT): lease.expires_at.map(|d| d.to_rfc3339()),
        (F::ACQUIRED_AT): lease.acquired_at.map(|d| d.to_rfc3339()),
        (F::COMMITTED_AT): lease.committed_at.map(|d| d.to_rfc3339()),
        (F::RESUME_TOKEN): lease.resume_token.as_ref().and_then(|t| t.data_hex().map(str::to_string)),
        (F::RESUME_AT): time_json(lease.resume_at),
        "tokenTime": time_json(health.token_time),
        "lagSecs": health.lag.map(|d| d.as_secs()),
        "headroomSecs": health.headroom.map(|d| d.as_secs()),
        "headroomShare": health.headroom_share,
        "status": health.status.label(),
        (F::INVALIDATED): lease.invalidated.as_ref().map(|i| json!({
            "at": time_json(i.at),
            "reason": i.reason,
        })),
        (F::NOTE): lease.note,
    })
}

pub async fn oplog(settings: &Settings) -> anyhow::Result<()> {
    let store = connect(settings).await?;
    let window = store
        .oplog_window()
        .await
        .context("reading the oplog window")?;
    let cluster_time = store
        .cluster_time()
        .await
        .context("reading the cluster time")?;
    let members = match store.members().await {
        Ok(members) => members,
        Err(e @ StoreError::NotPermitted { .. }) => {
            eprintln!("note: {e}; replica set members are not shown");
            Vec::new()
        }
        Err(e) => return Err(e).context("reading the replica set status"),
    };
    match settings.output {
        OutputFormat::Table => print!("{}", render_oplog(&window, cluster_time, &members)),
        OutputFormat::Json => {
            let value = json!({
                "first": time_json(Some(window.first)),
                "last": time_json(Some(window.last)),
                "lengthSecs": window.length().as_secs(),
                "clusterTime": time_json(Some(cluster_time)),
                "members": members.iter().map(|m| json!({
                    "name": m.name,
                    "state": member_state(&m.state),
                    "healthy": m.healthy,
                    "optime": time_json(m.optime),
                    "lagSecs": m.lag.map(|d| d.as_secs()),
                })).collect::<Vec<_>>(),
            });
            println!("{}", serde_json::to_string_pretty(&value)?);
        }
    }
    Ok(())
}

fn member_state(state: &MemberState) -> String {
    escape_control(state.as_str())
}

pub fn render_oplog(
    window: &OplogWindow,
    cluster_time: ClusterTime,
    members: &[ReplicaMember],
) -> String {
    let mut out = format!(
        "oplog window  {}\nfirst         {}\nlast          {}\ncluster time  {}\n",
        short_duration(window.length()),
        window.first,
        window.last,
        cluster_time
    );
    if !members.is_empty() {
        let rows: Vec<[String; 4]> = members
            .iter()
            .map(|m| {
                [
                    escape_control(&m.name),
                    member_state(&m.state),
                    if m.healthy { "yes" } else { "no" }.to_string(),
                    m.lag.map_or_else(|| "-".into(), short_duration),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&render_columns(
            ["MEMBER", "STATE", "HEALTHY", "LAG"],
            &rows,
        ));
    }
    out
}
