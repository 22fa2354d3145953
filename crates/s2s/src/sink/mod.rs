//! `[sinks.s2s]`: routed hub messages delivered to an Apache NiFi input port
//! over Site-to-Site (RAW or HTTP, optionally TLS with a client
//! certificate), acknowledged to their sources only once NiFi confirmed
//! the transaction.
//!
//! - [`config`]: the section, URL parsing and validation;
//! - [`peers`]: discovery, the peer list, the choice of node by queued
//!   FlowFile counts;
//! - [`batch`]: message → FlowFile, and the collector that cuts the queue
//!   into transactions;
//! - [`deliver`]: the workers that run transactions and retry them;
//! - [`outbound`]: [`S2sSink`], the hub's [`tidegate_hub::Sink`];
//! - [`metrics`]: the sink's counters, `tidegate_s2s_sink_*` in `/metrics`;
//! - [`probe`](mod@probe): what `tidegate config --probe` asks NiFi.
//!
//! Not here: the Site-to-Site client itself ([`crate::client`]), which the
//! load generator and the tests use too.

pub mod batch;
pub mod config;
pub mod deliver;
pub mod metrics;
pub mod outbound;
pub mod peers;
pub mod probe;

pub use batch::TOPIC_ATTRIBUTE;
pub use config::{NifiUrl, S2sSinkConfig, SinkConfigError, SinkTls, Transport};
pub use metrics::SinkMetrics;
pub use outbound::{S2sSink, S2sSinkError, SINK_NAME};
pub use probe::probe;
