//! [`Backbone`]: where a clustered hub sends the messages of cluster-wide
//! topics instead of straight to its local subscribers.
//!
//! With a backbone installed ([`crate::Hub::set_backbone`]), a publish on a
//! topic the backbone [`carries`](Backbone::carries) is handed to it rather
//! than fanned out locally; every node of the cluster (this one included)
//! reads it back and fans it out to its own subscribers with
//! [`crate::Hub::deliver_from_backbone`]. So a node delivers its own
//! messages from the backbone too, once, in the backbone's order. Routes to
//! sinks are untouched: a message reaches its sinks once, on the node where
//! it was published. `$sys.` topics never go to the backbone.
//!
//! Not for: sinks. Subscriber delivery stays best-effort — the backbone
//! takes part in no acknowledgement group — but its bound is backpressure:
//! a full backbone makes the publish wait, as a full sink does.

use crate::sink::SinkFuture;
use crate::SharedMessage;

/// Carries cluster-wide topics to every node's subscribers.
pub trait Backbone: Send + Sync + std::fmt::Debug + 'static {
    /// True when subscribers of `topic` are served through the backbone
    /// (never asked for `$sys.` topics).
    fn carries(&self, topic: &str) -> bool;

    /// Takes `msg` at once if there is room; hands it back otherwise.
    #[allow(clippy::result_large_err)] // the Err is the message handed back
    fn try_send(&self, msg: SharedMessage) -> Result<(), SharedMessage>;

    /// Takes `msg`, waiting while the backbone has no room.
    fn send(&self, msg: SharedMessage) -> SinkFuture<'_>;
}
