//! One file per command (the six lease actions share `actions.rs`: one pipeline of
//! gather, plan and execute), each with its clap arguments and what it runs.

pub mod actions;
pub mod audit;
pub mod checkpoints;
pub mod console;
pub mod demo;
pub mod exporter;
pub mod increments;
pub mod lease_transfer;
pub mod leases;
pub mod oplog;
pub mod processes;
pub mod rebuild;
