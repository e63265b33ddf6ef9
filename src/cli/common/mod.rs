//! What several commands share and none owns: connecting to the cluster, and the
//! signals that end a long-running command.

pub(super) mod connect;
pub(super) mod signals;
