//! Connecting to the cluster the settings name.

use crate::cli::common::exit::Unreachable;
use crate::cli::common::settings::Settings;
use crate::store::mongo::MongoStore;
use crate::store::StoreError;

/// Connects to the cluster of `settings`. An unreachable one is one sentence with the
/// redacted address ([`Unreachable`]); the driver's account of it goes to the log.
pub(in crate::cli) async fn connect(settings: &Settings) -> anyhow::Result<MongoStore> {
    let mongo = settings.mongo()?;
    let shown = mongo.uri.redacted();
    match MongoStore::connect(mongo).await {
        Ok(store) => Ok(store),
        Err(StoreError::Unreachable(detail)) => {
            tracing::warn!(cluster = %shown, %detail, "cannot reach the cluster");
            Err(Unreachable {
                address: shown,
                within: humantime::format_duration(settings.connect_timeout).to_string(),
                why: StoreError::unreachable_reason(&detail).into(),
            }
            .into())
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("connecting to {shown}"))),
    }
}

/// What a failed [`crate::observe::ClusterSnapshot::read`] was doing, for its context:
/// `leases`, the exporter.
pub(in crate::cli) fn reading_the_cluster(settings: &Settings) -> String {
    format!("reading the cluster (leases in {})", settings.leases)
}
