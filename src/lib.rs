//! streamward: a lease-fenced MongoDB change-stream listener engine and the
//! operations console for it. See `docs/architecture.md`.

pub mod cli;
pub mod console;
pub mod demo;
pub mod engine;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod store;
