//! One observer of the cluster: what every view of it reads, read one way. A
//! [`ClusterSnapshot`] is the leases in their order, what the cluster is and its oplog
//! window, the server's clock and the capped collections' windows, with each lease's time
//! to loss predicted from it; `streamward leases` (one-shot, `--watch`, `--check`), the
//! exporter and `demo --plain` read one per refresh. The console's leases come from a
//! change stream instead, and its timer reads the rest of a snapshot the same way
//! ([`HistoryReading`]); [`ClusterProbe`] also measures what the header and the
//! exporter show beside them: the members and the write rate.

mod probe;
mod snapshot;

pub use probe::{ClusterProbe, MemberRow, WriteRate, OPS_COUNT_LIMIT};
pub use snapshot::{ClusterSnapshot, HistoryReading, ObserveError, WindowSource};
