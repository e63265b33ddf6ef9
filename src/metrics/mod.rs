//! Prometheus metrics (docs/metrics.md lists every series): the cluster view of
//! `streamward exporter` ([`cluster`]), the listener engine's own series ([`engine`]),
//! and the HTTP endpoint that serves a registry in the text exposition format
//! ([`serve`]). Series are built with the `prometheus` crate; nothing here writes the
//! exposition format by hand.

pub mod cluster;
pub mod engine;
pub mod serve;

use prometheus::{Encoder, Registry, TextEncoder};
use thiserror::Error;

pub use cluster::{ClusterMetrics, ClusterSample};
pub use engine::EngineMetrics;

#[derive(Debug, Error)]
pub enum MetricsError {
    /// A series could not be made or registered (a name already taken in the registry
    /// it was registered into, or an invalid name).
    #[error("metrics: {0}")]
    Registry(#[from] prometheus::Error),
    /// The address to serve on could not be bound.
    #[error("cannot listen on {address}: {reason}")]
    Listen { address: String, reason: String },
}

/// Every series of `registry`, in the Prometheus text format (version 0.0.4).
pub fn encode(registry: &Registry) -> Result<String, MetricsError> {
    let mut buffer = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut buffer)?;
    Ok(String::from_utf8_lossy(&buffer).into_owned())
}
