//! [`discover`]: `GET /nifi-api/site-to-site`, the first thing a client does.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};

use super::http::HttpConn;
use super::ClientError;

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
    let mut conn = HttpConn::open(addr, timeout).await?;
    let (status, _, body) = conn
        .request(Method::GET, "/nifi-api/site-to-site", &[], Bytes::new())
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
