//! Internal requests to peer nodes: `GET` and `PUT` of a stamped
//! [`Record`] on [`INTERNAL_PATH`], signed ([`crate::auth`]), over one
//! pooled keep-alive HTTP/1.1 client (hyper-util's) shared by every
//! request of this process. Timeouts are the caller's (the coordinator
//! bounds the whole fan-out).
//!
//! With batching on (`[kv] replica_batching`, the default), [`ReplicaClient::put`]
//! and [`ReplicaClient::get`] do not send a request each: they queue the
//! operation for its peer, and one task per peer ([`crate::batch_sender`])
//! sends whatever has queued as one signed `PUT` [`BATCH_PATH`]
//! ([`crate::batch`]) on connections of its own. Nothing waits on a timer
//! for a batch to fill: a lone write leaves at once, and writes that arrive
//! while batches are in flight leave together in the next — one HTTP
//! exchange (and one fsync on the replica under `sync = "always"`) for many
//! keys. The per-peer queue is bounded; a full queue makes callers wait.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};

use crate::auth;
use crate::batch::{BatchOp, BatchReply};
use crate::batch_sender::{self, Peer, Queued};
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
/// Path of the internal batch endpoint ([`crate::batch`]).
pub const BATCH_PATH: &str = "/v0/internal/batch";
/// Operations queued per peer before callers wait.
const PEER_QUEUE: usize = 8192;
/// Default longest wait for a batch's answer ([`ReplicaClient::with_batch_timeout`]).
pub const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_secs(3);

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
    /// Per-peer batch queues; `None` when batching is off.
    batchers: Option<Arc<Mutex<PeerQueues>>>,
    /// Longest wait for a batch's answer.
    batch_timeout: Duration,
}

/// Each peer's batch queue, by URL.
type PeerQueues = HashMap<String, mpsc::Sender<Queued>>;

impl ReplicaClient {
    /// A client signing with `secret`.
    pub fn new(secret: Bytes) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(MAX_IDLE_PER_PEER)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build(connector);
        ReplicaClient {
            http,
            secret,
            batchers: None,
            batch_timeout: DEFAULT_BATCH_TIMEOUT,
        }
    }

    /// The same client with per-peer batching of `put` and `get` on or off.
    pub fn with_batching(mut self, on: bool) -> Self {
        self.batchers = on.then(Default::default);
        self
    }

    /// Whether `put` and `get` go through per-peer batches, each bounded
    /// by the batch timeout.
    pub fn batching(&self) -> bool {
        self.batchers.is_some()
    }

    /// The same client failing a batch that has had no answer after
    /// `timeout` (every operation in it fails; its slot is free again).
    pub fn with_batch_timeout(mut self, timeout: Duration) -> Self {
        self.batch_timeout = timeout;
        self
    }

    /// The queue of `node`, its sending task started on first use.
    fn queue(&self, node: &str) -> Option<mpsc::Sender<Queued>> {
        let batchers = self.batchers.as_ref()?;
        let mut map = batchers.lock();
        if let Some(tx) = map.get(node) {
            return Some(tx.clone());
        }
        let (tx, rx) = mpsc::channel(PEER_QUEUE);
        let authority = node
            .parse::<hyper::Uri>()
            .ok()
            .and_then(|u| u.authority().map(|a| a.to_string()))
            .unwrap_or_else(|| node.trim_start_matches("http://").to_owned());
        let peer = Peer {
            url: node.to_owned(),
            authority,
            secret: self.secret.clone(),
            timeout: self.batch_timeout,
        };
        tokio::spawn(batch_sender::run(peer, rx));
        map.insert(node.to_owned(), tx.clone());
        Some(tx)
    }

    /// Queues `op` for `node`'s next batch and awaits its reply.
    async fn batched(
        &self,
        tx: mpsc::Sender<Queued>,
        node: &str,
        op: BatchOp,
    ) -> Result<BatchReply, ReplicaError> {
        let size = crate::batch::OP_OVERHEAD_BYTES
            + match &op {
                BatchOp::Get(k) => k.len(),
                BatchOp::Put(k, r) => k.len() + r.value.len(),
            };
        let (done, answer) = oneshot::channel();
        let gone = || ReplicaError::Transport {
            node: node.to_owned(),
            message: "the batch sender stopped".into(),
        };
        tx.send(Queued { op, size, done })
            .await
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
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
        let sig = auth::sign(&self.secret, node, method.as_str(), path, time, &body);
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
        self.send_path(node, method, &path, body).await
    }

    /// One signed request for `path` (with its query); the whole answer.
    async fn send_path(
        &self,
        node: &str,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ReplicaError> {
        let resp = self.signed(node, method, path, body).await?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_RECORD_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| ReplicaError::Transport {
                node: node.to_owned(),
                message: e.to_string(),
            })?
            .to_bytes();
        Ok((status, body))
    }

    /// Writes `record` for `key` on `node`.
    pub async fn put(&self, node: &str, key: &[u8], record: &Record) -> Result<(), ReplicaError> {
        if let Some(tx) = self.queue(node) {
            let op = BatchOp::Put(Bytes::copy_from_slice(key), record.clone());
            return match self.batched(tx, node, op).await? {
                BatchReply::Applied | BatchReply::NotNewer => Ok(()),
                _ => Err(ReplicaError::Status {
                    node: node.to_owned(),
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                }),
            };
        }
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
        if let Some(tx) = self.queue(node) {
            let op = BatchOp::Get(Bytes::copy_from_slice(key));
            return match self.batched(tx, node, op).await? {
                BatchReply::Found(r) => Ok(Some(r)),
                BatchReply::Absent => Ok(None),
                _ => Err(ReplicaError::Status {
                    node: node.to_owned(),
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                }),
            };
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    /// A peer that accepts connections and never answers (a stopped
    /// process, a partition that drops packets).
    async fn silent_peer() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.push(c);
            }
        });
        (url, held)
    }

    #[tokio::test]
    async fn a_batch_a_peer_never_answers_fails_after_the_timeout_and_frees_its_slot() {
        let (peer, held) = silent_peer().await;
        let client = ReplicaClient::new(Bytes::from_static(b"secret"))
            .with_batching(true)
            .with_batch_timeout(Duration::from_millis(200));
        let record = Record::value(1, Bytes::from_static(b"v"));
        // More writes than slots, one after another: each must fail on its
        // batch's own timeout, none wait behind a batch that never ends.
        for i in 0..(batch_sender::BATCHES_IN_FLIGHT + 2) {
            let key = format!("k{i}");
            let started = std::time::Instant::now();
            let r = tokio::time::timeout(
                Duration::from_secs(2),
                client.put(&peer, key.as_bytes(), &record),
            )
            .await
            .expect("the put ends within the batch timeout");
            assert!(r.is_err(), "write {i}");
            assert!(started.elapsed() < Duration::from_secs(1), "write {i}");
        }
        held.abort();
    }

    /// A peer that answers the first batch on each connection and closes
    /// the connection, unanswered, when a second request arrives on it —
    /// the race of a keep-alive connection closed by its server just as a
    /// request leaves. Returns its URL and how many requests it answered.
    async fn one_answer_per_connection_peer() -> (
        String,
        Arc<std::sync::atomic::AtomicUsize>,
        tokio::task::JoinHandle<()>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = answered.clone();
        let held = tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    // One whole request: headers, then Content-Length bytes.
                    let (head_end, len) = loop {
                        let n = c.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..i]).to_lowercase();
                            let len = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .map(|v| v.trim().parse::<usize>().unwrap())
                                .unwrap_or(0);
                            break (i + 4, len);
                        }
                    };
                    while buf.len() < head_end + len {
                        let n = c.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let body = Bytes::copy_from_slice(&buf[head_end..head_end + len]);
                    let ops = crate::batch::decode_ops(body).unwrap();
                    let replies =
                        crate::batch::encode_replies(&vec![BatchReply::Applied; ops.len()]);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                        replies.len()
                    );
                    c.write_all(head.as_bytes()).await.unwrap();
                    c.write_all(&replies).await.unwrap();
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    // The next request on this connection is never answered.
                    let _ = c.read(&mut chunk).await;
                });
            }
        });
        (url, answered, held)
    }

    #[tokio::test]
    async fn a_batch_on_a_connection_the_peer_closed_is_sent_again_on_a_fresh_one() {
        let (peer, answered, held) = one_answer_per_connection_peer().await;
        let client = ReplicaClient::new(Bytes::from_static(b"secret"))
            .with_batching(true)
            .with_batch_timeout(Duration::from_secs(2));
        let record = Record::value(1, Bytes::from_static(b"v"));
        for i in 0..6 {
            let key = format!("k{i}");
            client
                .put(&peer, key.as_bytes(), &record)
                .await
                .unwrap_or_else(|e| panic!("write {i}: {e}"));
        }
        assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 6);
        held.abort();
    }
}
