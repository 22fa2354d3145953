//! [`discover`]: `GET /nifi-api/site-to-site`, the first thing a client
//! does, and [`http_peers`]: `GET /nifi-api/site-to-site/peers`, the HTTP
//! transport's peer list.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};

use super::http_conn::{media, HttpConn};
use super::ClientError;
use crate::codec::PeerInfo;
use crate::tls::ClientTls;

/// What discovery told the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// RAW port, if the server has one.
    pub raw_port: Option<u16>,
    /// HTTP port.
    pub http_port: Option<u16>,
    /// True when RAW needs TLS with a client certificate.
    pub secure: bool,
    /// Input ports as (name, id).
    pub input_ports: Vec<(String, String)>,
    /// Output ports as (name, id).
    pub output_ports: Vec<(String, String)>,
}

impl Discovery {
    /// The identifier of input port `name`.
    pub fn input_id(&self, name: &str) -> Option<&str> {
        self.input_ports
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| id.as_str())
    }

    /// The identifier of output port `name`.
    pub fn output_id(&self, name: &str) -> Option<&str> {
        self.output_ports
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| id.as_str())
    }
}

fn ports(v: &serde_json::Value) -> Vec<(String, String)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    Some((p["name"].as_str()?.to_owned(), p["id"].as_str()?.to_owned()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Asks the `[http]` listener at `addr` for the site-to-site details.
pub async fn discover(addr: SocketAddr, timeout: Duration) -> Result<Discovery, ClientError> {
    discover_with(addr, None, timeout).await
}

/// Like [`discover`], over TLS when `tls` is given.
pub async fn discover_with(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    timeout: Duration,
) -> Result<Discovery, ClientError> {
    let mut conn = HttpConn::open(addr, tls, timeout).await?;
    let (status, _, body) = conn
        .request(
            Method::GET,
            "/nifi-api/site-to-site",
            media::JSON,
            &[],
            Bytes::new(),
        )
        .await?;
    if status != StatusCode::OK {
        return Err(ClientError::Http(format!("discovery answered {status}")));
    }
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ClientError::Http(format!("discovery body: {e}")))?;
    let c = &v["controller"];
    Ok(Discovery {
        raw_port: c["remoteSiteListeningPort"].as_u64().map(|p| p as u16),
        http_port: c["remoteSiteHttpListeningPort"].as_u64().map(|p| p as u16),
        secure: c["siteToSiteSecure"].as_bool().unwrap_or(false),
        input_ports: ports(&c["inputPorts"]),
        output_ports: ports(&c["outputPorts"]),
    })
}

/// Most peers read from a peer list answer.
const MAX_HTTP_PEERS: usize = 10_000;

/// The HTTP transport's peers (`port` is each peer's HTTP port), with their
/// queued FlowFile counts.
pub async fn http_peers(
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    timeout: Duration,
) -> Result<Vec<PeerInfo>, ClientError> {
    let mut conn = HttpConn::open(addr, tls, timeout).await?;
    let (status, _, body) = conn
        .request(
            Method::GET,
            "/nifi-api/site-to-site/peers",
            media::JSON,
            &[],
            Bytes::new(),
        )
        .await?;
    if status != StatusCode::OK {
        return Err(ClientError::Http(format!("peers answered {status}")));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| ClientError::Http(format!("peers body: {e}")))?;
    let peers = v["peers"]
        .as_array()
        .map(|a| {
            a.iter()
                .take(MAX_HTTP_PEERS)
                .filter_map(|p| {
                    Some(PeerInfo {
                        host: p["hostname"].as_str()?.to_owned(),
                        port: i32::try_from(p["port"].as_i64()?).ok()?,
                        secure: p["secure"].as_bool().unwrap_or(false),
                        flow_file_count: p["flowFileCount"]
                            .as_i64()
                            .and_then(|c| i32::try_from(c).ok())
                            .unwrap_or(0),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(peers)
}
