//! What several commands share and none owns: the options and settings, connecting to
//! the cluster, output and exit codes, the limits on what is accepted, the lease table,
//! and the signals that end a long-running command.

pub mod connect;
pub mod exit;
pub mod json;
pub mod lease_json;
pub mod lease_table;
pub mod limits;
pub mod output;
pub mod settings;
pub mod signals;
