//! Site-to-Site over HTTP, served under `/nifi-api/` on the `[http]`
//! listener: discovery (`discovery`) and the HTTP transport
//! (`transport`) with its transaction table (`transactions`), swept of
//! expired transactions on a timer (`sweeper`).

mod discovery;
mod negotiate;
mod sweeper;
mod transactions;
mod transport;

use std::sync::Arc;

use axum::routing::{get, post};

use crate::ports::S2sPorts;

pub use transactions::HttpTransactions;

/// Header carrying the transport protocol version.
pub const PROTOCOL_VERSION_HEADER: &str = "x-nifi-site-to-site-protocol-version";
/// Header carrying the transaction TTL in seconds.
pub const TTL_HEADER: &str = "x-nifi-site-to-site-server-transaction-ttl";
/// Handshake header: packets are compressed.
pub const USE_COMPRESSION_HEADER: &str = "x-nifi-site-to-site-use-compression";
/// Handshake header: most FlowFiles per output transaction.
pub const BATCH_COUNT_HEADER: &str = "x-nifi-site-to-site-batch-count";
/// Handshake header: how long the client waits for an answer, milliseconds.
pub const REQUEST_EXPIRATION_HEADER: &str = "x-nifi-site-to-site-request-expiration";
/// Response header naming what `Location` points to.
pub const LOCATION_INTENT_HEADER: &str = "x-location-uri-intent";
/// The only `x-location-uri-intent` value: `Location` is the transaction.
pub const LOCATION_INTENT_TRANSACTION: &str = "transaction-url";

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct HttpState {
    pub(crate) ports: S2sPorts,
    pub(crate) transactions: Arc<HttpTransactions>,
    pub(crate) http_port: u16,
    pub(crate) http_secure: bool,
    pub(crate) raw_port: Option<u16>,
    /// Stops the sweep of `transactions` when the router is dropped.
    _sweeper: sweeper::Sweeper,
}

/// Routes under `/nifi-api/` serving `ports` (share them with
/// [`crate::S2sServer::with_ports`]). `http_port` is the `[http]`
/// listener's port (advertised as `remoteSiteHttpListeningPort` and in the
/// peer list), `http_secure` whether that listener has TLS (the peer list's
/// `secure`, from which a client picks `https`), `raw_port` the RAW
/// listener's port if enabled.
///
/// Spawns the periodic sweep that rolls back expired transactions (and gives
/// back their in-flight budget) without waiting for a request; it ends when
/// the router and every clone of it are dropped, that is with the server
/// that serves it. Must be called inside a tokio runtime.
pub fn router_with_ports(
    ports: S2sPorts,
    http_port: u16,
    http_secure: bool,
    raw_port: Option<u16>,
) -> axum::Router {
    let transactions = Arc::new(HttpTransactions::new(
        ports.config(),
        ports.metrics().clone(),
    ));
    let state = Arc::new(HttpState {
        _sweeper: sweeper::spawn(transactions.clone()),
        ports,
        transactions,
        http_port,
        http_secure,
        raw_port,
    });
    let tx = "/nifi-api/data-transfer/{kind}/{port}/transactions";
    axum::Router::new()
        .route("/nifi-api/site-to-site", get(discovery::site_to_site))
        .route("/nifi-api/controller", get(discovery::site_to_site))
        .route("/nifi-api/site-to-site/peers", get(discovery::peers))
        .route(tx, post(transport::create))
        .route(
            &format!("{tx}/{{tx}}"),
            axum::routing::put(transport::extend).delete(transport::finish),
        )
        .route(
            &format!("{tx}/{{tx}}/flow-files"),
            post(transport::receive_flow_files).get(transport::send_flow_files),
        )
        .with_state(state)
}
