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
//! The backbone is also the cluster's history: every delivered message
//! carries its position in it ([`ATTR_PARTITION`], [`ATTR_POSITION`]), and a
//! client that lost its node can ask any other node to [`Backbone::replay`]
//! what it missed from its last positions. Several messages may share one
//! backbone record ([`bundle`]), so a position is the record's offset and
//! the message's index in it, folded into one number
//! ([`bundle::position`]).
//!
//! Not for: sinks. Subscriber delivery stays best-effort — the backbone
//! takes part in no acknowledgement group — but its bound is backpressure:
//! a full backbone makes the publish wait, as a full sink does.

pub mod bundle;
pub mod heartbeat;
pub mod record;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use crate::sink::SinkFuture;
use crate::topic::Pattern;
use crate::{Message, SharedMessage};

/// Attribute a message delivered from the backbone carries: the partition
/// of its backbone record.
pub const ATTR_PARTITION: &str = "cluster.partition";
/// Attribute a message delivered from the backbone carries: its position
/// in its partition, `record offset × 1024 + index in the record`
/// ([`bundle::position`]).
pub const ATTR_POSITION: &str = "cluster.position";

/// Where a client is in the history: per backbone partition, the next
/// position ([`bundle::position`]) it has not received.
pub type Positions = BTreeMap<i32, i64>;

/// The backbone topic the nodes tell each other about recoverable push
/// sessions on (what a session subscribed to, so another node can recover
/// it). Under `$sys.`, so no client may publish on it and no leading
/// wildcard matches it; a node hands what it reads there to the handler
/// installed with [`crate::Hub::on_cluster_sessions`], never to
/// subscribers.
pub const SESSIONS_TOPIC: &str = "$sys.cluster.sessions";

/// What a [`Backbone::replay`] found.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    /// The messages after the asked positions, up to `ends`, matching the
    /// patterns; in order within each partition (so per hub topic).
    pub messages: Vec<Message>,
    /// The end of each partition when the replay started: messages at or
    /// after it come live.
    pub ends: Positions,
}

/// A boxed future of the history calls.
pub type HistoryFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// The backbone partition and position of a message delivered from it.
pub fn position(msg: &Message) -> Option<(i32, i64)> {
    let p = msg.attribute(ATTR_PARTITION)?.parse().ok()?;
    let o = msg.attribute(ATTR_POSITION)?.parse().ok()?;
    Some((p, o))
}

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

    /// The end of every partition now: where a new subscriber starts.
    fn positions(&self) -> HistoryFuture<'_, Positions>;

    /// How far this node has delivered each partition: the next position
    /// it will fan out (a subscription made now receives nothing before
    /// it). Known without asking the broker; empty until the node reads.
    fn delivered(&self) -> Positions;

    /// The messages matching `patterns` from `from` to the end of every
    /// partition now (a partition not in `from` is not replayed), at most
    /// `max` read; an error naming why when more would be needed or the
    /// history no longer holds `from`.
    fn replay(
        &self,
        from: Positions,
        patterns: Vec<Pattern>,
        max: usize,
    ) -> HistoryFuture<'_, Replay>;
}
