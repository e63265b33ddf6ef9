//! What an application plugs into a listener.

use std::future::Future;

use thiserror::Error;

use crate::model::Fence;
use crate::store::{ChangeEvent, StoreError};

#[derive(Debug, Error)]
pub enum HandlerError {
    /// A fenced write was refused because a newer holder has written: the lock is lost.
    #[error("fenced out: {0}")]
    Fenced(String),
    /// The database failed one of the handler's own reads or writes: no fault of the
    /// changes, so the tenure starts over and they are handed again.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The handler cannot process a change: the listener finds which one and records
    /// it on the lease (docs/explanation/listener.md §13a).
    #[error("handler failed: {0}")]
    Failed(String),
}

/// Handles the changes of one batch, in order. Writes to shared state must carry
/// the fence (see `engine::fenced`); nothing is committed until this returns `Ok`.
pub trait Handler: Send + 'static {
    fn handle(
        &mut self,
        events: &[ChangeEvent],
        fence: &Fence,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;
}

/// A handler that does nothing: for benchmarks and for watching the protocol alone.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoopHandler;

impl Handler for NoopHandler {
    async fn handle(
        &mut self,
        _events: &[ChangeEvent],
        _fence: &Fence,
    ) -> Result<(), HandlerError> {
        Ok(())
    }
}
