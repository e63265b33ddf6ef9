//! The change event as the server sent it, for a handler that reads what the typed
//! fields do not carry (a field a newer server adds, `lsid.uid`, a kind's own fields).
//! The server's buffer is moved into the event, not copied; an event no server sent
//! is laid out only when a handler asks (`event_layout.rs`).

use std::sync::Arc;

use bson::{RawDocument, RawDocumentBuf};

/// The bytes a server sent for an event, shared by its clones; nothing for an event
/// no server sent (the sandbox's, a capped collection's entry).
#[derive(Clone, Default)]
pub struct RawEvent(Option<Arc<RawDocumentBuf>>);

impl RawEvent {
    #[cfg(feature = "mongo")]
    pub(crate) fn sent(raw: RawDocumentBuf) -> Self {
        Self(Some(Arc::new(raw)))
    }

    /// The server's bytes, where a server sent the event.
    pub fn as_sent(&self) -> Option<&RawDocument> {
        self.0.as_deref().map(|raw| &**raw)
    }
}

/// The bytes are not printed: the typed fields beside them say what they hold.
impl std::fmt::Debug for RawEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.as_sent() {
            Some(raw) => write!(f, "RawEvent(sent, {} bytes)", raw.as_bytes().len()),
            None => f.write_str("RawEvent(not sent)"),
        }
    }
}
