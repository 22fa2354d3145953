//! Internal requests to peer nodes: `GET` and `PUT` of a stamped
//! [`Record`] on [`INTERNAL_PATH`], signed ([`crate::auth`]), over one
//! pooled keep-alive HTTP/1.1 client (hyper-util's) shared by every
//! request of this process. Timeouts are the caller's (the coordinator
//! bounds the whole fan-out).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use thiserror::Error;

use crate::auth;
use crate::record::{Record, RecordError};

/// Path of the internal, replica-local entity endpoint. Requests there are
/// answered from the receiving node's own data and never forwarded.
pub const INTERNAL_PATH: &str = "/v0/internal/entity";
/// Largest internal response read (a record: header plus value).
pub const MAX_RECORD_RESPONSE_BYTES: usize = 512 * 1024 * 1024;
/// Idle pooled connections kept per peer.
const MAX_IDLE_PER_PEER: usize = 256;
/// How long an idle pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// An internal request failed.
#[derive(Debug, Error)]
pub enum ReplicaError {
    /// Connecting or talking to the peer failed.
    #[error("request to {node}: {message}")]
    Transport {
        /// The peer.
        node: String,
        /// What happened.
        message: String,
    },
    /// The peer answered with an unexpected status.
    #[error("{node} answered {status}")]
    Status {
        /// The peer.
        node: String,
        /// Its status.
        status: StatusCode,
    },
    /// The peer's record is malformed.
    #[error("{node} sent a malformed record: {source}")]
    Record {
        /// The peer.
        node: String,
        /// What is wrong.
        source: RecordError,
    },
}

/// The pooled client used for every internal request.
#[derive(Clone)]
pub struct ReplicaClient {
    http: Client<HttpConnector, Full<Bytes>>,
    secret: Bytes,
}

impl ReplicaClient {
    /// A client signing with `secret`.
    pub fn new(secret: Bytes) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(MAX_IDLE_PER_PEER)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector);
        ReplicaClient { http, secret }
    }

    /// Sends a signed internal request for `path` (with its query) to
    /// `node` and returns the response with its body unread — anti-entropy
    /// streams it ([`crate::anti_entropy`]).
    pub async fn signed(
        &self,
        node: &str,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ReplicaError> {
        let time = crate::engine::now_ns() / 1_000_000;
        let sig = auth::sign(&self.secret, method.as_str(), path, time, &body);
        let transport = |message: String| ReplicaError::Transport {
            node: node.to_owned(),
            message,
        };
        let req = Request::builder()
            .method(method)
            .uri(format!("{node}{path}"))
            .header(auth::TIME_HEADER, time)
            .header(auth::SIGNATURE_HEADER, sig)
            .body(Full::new(body))
            .map_err(|e| transport(e.to_string()))?;
        self.http
            .request(req)
            .await
            .map_err(|e| transport(e.to_string()))
    }

    async fn send(
        &self,
        node: &str,
        method: Method,
        key: &[u8],
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ReplicaError> {
        let path = format!("{INTERNAL_PATH}?id={}", percent_encode(key));
        let time = crate::engine::now_ns() / 1_000_000;
        let sig = auth::sign(&self.secret, method.as_str(), &path, time, &body);
        let transport = |message: String| ReplicaError::Transport {
            node: node.to_owned(),
            message,
        };
        let req = Request::builder()
            .method(method)
            .uri(format!("{node}{path}"))
            .header(auth::TIME_HEADER, time)
            .header(auth::SIGNATURE_HEADER, sig)
            .body(Full::new(body))
            .map_err(|e| transport(e.to_string()))?;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| transport(e.to_string()))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_RECORD_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| transport(e.to_string()))?
            .to_bytes();
        Ok((status, body))
    }

    /// Writes `record` for `key` on `node`.
    pub async fn put(&self, node: &str, key: &[u8], record: &Record) -> Result<(), ReplicaError> {
        match self.send(node, Method::PUT, key, record.encode()).await? {
            (StatusCode::CREATED, _) => Ok(()),
            (status, _) => Err(ReplicaError::Status {
                node: node.to_owned(),
                status,
            }),
        }
    }

    /// Reads `node`'s own version of `key`.
    pub async fn get(&self, node: &str, key: &[u8]) -> Result<Option<Record>, ReplicaError> {
        match self.send(node, Method::GET, key, Bytes::new()).await? {
            (StatusCode::OK, body) => {
                Record::decode(body)
                    .map(Some)
                    .map_err(|source| ReplicaError::Record {
                        node: node.to_owned(),
                        source,
                    })
            }
            (StatusCode::NOT_FOUND, _) => Ok(None),
            (status, _) => Err(ReplicaError::Status {
                node: node.to_owned(),
                status,
            }),
        }
    }
}

/// Percent-encodes every byte but the URL-unreserved ones.
pub fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
