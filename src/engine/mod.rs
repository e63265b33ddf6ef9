//! The listener runtime: one `Listener` per process and resource, many processes per resource.

mod commits;
mod config;
mod failing;
pub mod fenced;
mod fleet;
mod handler;
mod increment;
mod listener;
mod observer;
mod partitioned;
mod source;
mod standby;
mod status;
mod step_over;
mod supervisor;
mod transaction_cut;

pub use config::{Bootstrap, CommitPolicy, ListenerConfig};
pub use fleet::{Fleet, FleetConfig, FleetSeat};
pub use handler::{Handler, HandlerError, NoopHandler};
pub use increment::{event_token, increment_once, Increment};
pub use listener::{Listener, ListenerExit};
pub use observer::ListenerObserver;
pub use status::{LastChange, ListenerSnapshot, ListenerState, RateMeter};
pub use supervisor::ListenerHandle;
