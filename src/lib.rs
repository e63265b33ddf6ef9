//! streamward: a lease-fenced MongoDB change-stream listener engine and the
//! operations console for it. See `docs/architecture.md`.

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "console")]
pub mod console;
#[cfg(feature = "contract")]
pub mod contract;
#[cfg(feature = "console")]
pub mod demo;
pub mod engine;
#[cfg(feature = "metrics")]
pub mod metrics;
pub mod model;
pub mod observe;
pub mod ops;
pub mod store;
