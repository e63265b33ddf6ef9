//! One observer of the cluster: what every view of it reads, read one way. A
//! [`ClusterSnapshot`] is the leases in their order, what the cluster is and its oplog
//! window, the server's clock and the capped collections' windows, with each lease's time
//! to loss predicted from it; `streamward leases` (one-shot, `--watch`, `--check`), the
//! exporter and `demo --plain` read one per refresh. The console's data tasks read the
//! same parts on schedules of their own (the leases from a change stream, the window on a
//! timer) through [`ClusterProbe`], which also measures what the header and the exporter
//! show beside them: the members and the write rate.

mod probe;
mod snapshot;

pub use probe::{ClusterProbe, MemberRow, WriteRate, OPS_COUNT_LIMIT};
pub use snapshot::{ClusterSnapshot, ObserveError};
