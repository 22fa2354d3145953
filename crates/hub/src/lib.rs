//! The Tidegate hub core: the one door every source publishes through and every
//! session or sink receives from.
//!
//! Nothing in this crate knows a network protocol. A source turns bytes into
//! [`Message`]s and calls [`Hub::publish`]; subscribers ([`Subscriber`]) get
//! bounded queues of shared messages; routed sinks ([`Sink`]) acknowledge
//! durability back through an [`AckGroup`].

#![warn(missing_docs)]

pub mod ack;
pub mod backbone;
pub mod budget;
mod bus;
pub mod config;
pub mod encoded;
pub mod history;
pub mod hub;
pub mod latency;
pub mod message;
pub mod metrics;
pub mod publisher;
pub mod routes;
pub mod sink;
mod start_trie;
pub mod subscriber;
pub mod topic;
mod trie;

pub use ack::{AckGroup, AckToken, DeliveryError};
pub use backbone::Backbone;
pub use budget::{BodyBytes, BudgetPermit, InflightBudget, UpgradedBytes};
pub use config::{OverflowPolicy, RouteConfig};
pub use encoded::{EncodedForm, EncodedForms};
pub use history::{History, HistoryLimits, NotKept};
pub use hub::{ClusterSessionsHandler, Hub, PublishError};
pub use latency::{LatencyHistogram, LatencySnapshot};
pub use message::{Attributes, Message, SharedMessage};
pub use metrics::{ConnectionGuard, HubMetrics, ListenerMetrics};
pub use publisher::TopicPublisher;
pub use routes::RouteTable;
pub use sink::{NullSink, Sink, SinkCounters, SinkFuture, SinkHealth};
pub use subscriber::{RecvError, Subscriber, SubscriberOptions};
pub use topic::{Pattern, TopicError};
