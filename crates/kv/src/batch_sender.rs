//! The sending task of one peer: it takes whatever operations have queued
//! for the peer (up to the batch limits) as one signed `PUT`
//! [`BATCH_PATH`] ([`crate::batch`]) as soon as one of
//! [`BATCHES_IN_FLIGHT`] slots is free, and hands each caller its reply
//! (or the batch's error).
//!
//! The task owns its HTTP/1.1 connections to the peer (hyper's
//! `client::conn`) and drives them itself: every batch in flight, every
//! connection's I/O and the queue are polled by this one task. Before, a
//! batch was a task of its own sent through hyper-util's pooled client,
//! whose connections are tasks of their own too: three tasks woke each
//! other (often across worker threads) for every exchange. Here a batch's
//! request, its response and the next batch are wake-ups of one task.
//!
//! A connection is reused batch after batch. One that fails while reused
//! (the peer closed it while idle, say) is replaced and the batch sent once
//! more on a fresh one: every batch operation is idempotent (a stamped
//! last-write-wins write applied twice stores once; a read is a read).
//! A batch unanswered after the batch timeout fails and frees its slot, so
//! a peer that stopped answering without closing its connections (SIGSTOP,
//! a partition) does not hold the queue after it is back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::auth;
use crate::batch::{self, BatchOp, BatchReply, MAX_BATCH_OPS};
use crate::client::{ReplicaError, BATCH_PATH, MAX_RECORD_RESPONSE_BYTES};

/// Batches in flight per peer; operations arriving meanwhile form the next.
/// Two rather than four: fewer, larger batches cost less CPU per write
/// (3 nodes, ack 2/3, closed loop: +6 % PUT/s at 7 % less CPU per request,
/// BENCHMARKS.md, kv), and a second slot still lets a batch leave while a
/// slow one is answered.
pub const BATCHES_IN_FLIGHT: usize = 2;
/// A batch takes no more operations once its body reaches this many bytes
/// (it also stops at [`MAX_BATCH_OPS`]); the last one may take it past,
/// by at most one operation ([`crate::INTERNAL_BODY_ALLOWANCE`]).
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// An operation waiting in a peer's queue, and where its answer goes.
pub(crate) struct Queued {
    /// The operation.
    pub op: BatchOp,
    /// Its bytes in the batch body (key, value and framing), for the
    /// batch size limit.
    pub size: usize,
    /// Where its reply goes.
    pub done: oneshot::Sender<Result<BatchReply, ReplicaError>>,
}

/// The peer a sending task talks to, and how.
pub(crate) struct Peer {
    /// The peer's URL (`http://host:port`), as in `[kv] nodes`.
    pub url: String,
    /// Its `host:port`, connected to and sent as `Host`.
    pub authority: String,
    /// The cluster secret requests are signed with.
    pub secret: Bytes,
    /// Longest wait for a batch's answer, connecting included.
    pub timeout: Duration,
}

/// The sending half of one connection; its driver runs in the task's
/// `drivers`.
type Link = http1::SendRequest<Full<Bytes>>;

/// A batch's end: its callers, its answer, and the connection it used
/// (with that connection's driver when it was opened for this batch), to
/// be reused.
struct Sent {
    dones: Vec<oneshot::Sender<Result<BatchReply, ReplicaError>>>,
    answer: Result<Vec<BatchReply>, ReplicaError>,
    link: Option<Link>,
    driver: Option<BoxFuture<'static, ()>>,
}

/// Sends `rx`'s operations to `peer` in batches until every sender of the
/// queue is gone and the batches in flight are answered.
pub(crate) async fn run(peer: Peer, mut rx: mpsc::Receiver<Queued>) {
    let peer = Arc::new(peer);
    let mut idle: Vec<Link> = Vec::new();
    let mut drivers: FuturesUnordered<BoxFuture<'static, ()>> = FuturesUnordered::new();
    let mut in_flight: FuturesUnordered<BoxFuture<'static, Sent>> = FuturesUnordered::new();
    let mut open = true;
    while open || !in_flight.is_empty() {
        tokio::select! {
            biased;
            Some(sent) = in_flight.next(), if !in_flight.is_empty() => {
                idle.extend(sent.link);
                drivers.extend(sent.driver);
                deliver(&peer.url, sent.dones, sent.answer);
            }
            // A connection ended (closed by the peer, or failed); its
            // sending half reports closed and is dropped when next taken.
            Some(()) = drivers.next(), if !drivers.is_empty() => {}
            first = rx.recv(), if open && in_flight.len() < BATCHES_IN_FLIGHT => {
                let Some(first) = first else {
                    open = false;
                    continue;
                };
                let (ops, dones) = gather(first, &mut rx).await;
                idle.retain(|l| !l.is_closed());
                in_flight.push(send(peer.clone(), idle.pop(), ops, dones).boxed());
            }
        }
    }
}

/// `first` and whatever else has queued, up to the batch limits.
async fn gather(
    first: Queued,
    rx: &mut mpsc::Receiver<Queued>,
) -> (
    Vec<BatchOp>,
    Vec<oneshot::Sender<Result<BatchReply, ReplicaError>>>,
) {
    let mut bytes = first.size;
    let mut queued = vec![first];
    // When the queue runs dry, step back once before sending: the task that
    // queued `first` woke this one into its worker's next slot, ahead of the
    // other requests that are ready in the same tick, and whose writes would
    // otherwise each make a batch of their own.
    let mut yielded = false;
    while queued.len() < MAX_BATCH_OPS && bytes < MAX_BATCH_BYTES {
        match rx.try_recv() {
            Ok(q) => {
                bytes += q.size;
                queued.push(q);
            }
            Err(_) if !yielded => {
                yielded = true;
                tokio::task::yield_now().await;
            }
            Err(_) => break,
        }
    }
    queued.into_iter().map(|q| (q.op, q.done)).unzip()
}

/// Hands each caller its reply, or the batch's error.
fn deliver(
    node: &str,
    dones: Vec<oneshot::Sender<Result<BatchReply, ReplicaError>>>,
    answer: Result<Vec<BatchReply>, ReplicaError>,
) {
    match answer {
        Ok(replies) => {
            for (done, reply) in dones.into_iter().zip(replies) {
                let _ = done.send(Ok(reply));
            }
        }
        Err(e) => {
            let message = e.to_string();
            for done in dones {
                let _ = done.send(Err(ReplicaError::Transport {
                    node: node.to_owned(),
                    message: message.clone(),
                }));
            }
        }
    }
}

/// One batch: on `reused` when given (once more on a fresh connection if
/// that one fails), else on a fresh connection, all within the timeout.
async fn send(
    peer: Arc<Peer>,
    reused: Option<Link>,
    ops: Vec<BatchOp>,
    dones: Vec<oneshot::Sender<Result<BatchReply, ReplicaError>>>,
) -> Sent {
    let body = batch::encode_ops(&ops);
    let attempt = async {
        if let Some(mut link) = reused {
            if let Ok(answer) = exchange(&peer, &mut link, body.clone()).await {
                return (answer_of(&peer.url, answer, ops.len()), Some(link), None);
            }
        }
        let (mut link, driver) = match connect(&peer).await {
            Ok(c) => c,
            Err(e) => return (Err(e), None, None),
        };
        let mut driver = driver;
        // The fresh connection's driver is polled here until the answer is
        // in; then it joins the task's drivers with the connection.
        let answer = tokio::select! {
            answer = exchange(&peer, &mut link, body) => answer,
            () = &mut driver => Err(transport(&peer.url, "connection closed".into())),
        };
        match answer {
            Ok(a) => (answer_of(&peer.url, a, ops.len()), Some(link), Some(driver)),
            Err(e) => (Err(e), None, None),
        }
    };
    let (answer, link, driver) = match tokio::time::timeout(peer.timeout, attempt).await {
        Ok(done) => done,
        Err(_) => (
            Err(transport(
                &peer.url,
                format!("no answer to a batch in {} ms", peer.timeout.as_millis()),
            )),
            None,
            None,
        ),
    };
    Sent {
        dones,
        answer,
        link,
        driver,
    }
}

/// A peer's answer to a batch of `count` operations, checked.
fn answer_of(
    node: &str,
    (status, body): (StatusCode, Bytes),
    count: usize,
) -> Result<Vec<BatchReply>, ReplicaError> {
    if status != StatusCode::OK {
        return Err(ReplicaError::Status {
            node: node.to_owned(),
            status,
        });
    }
    let replies = batch::decode_replies(body)
        .map_err(|e| transport(node, format!("bad batch reply: {e}")))?;
    if replies.len() != count {
        return Err(transport(
            node,
            format!("{} replies to {count} operations", replies.len()),
        ));
    }
    Ok(replies)
}

fn transport(node: &str, message: String) -> ReplicaError {
    ReplicaError::Transport {
        node: node.to_owned(),
        message,
    }
}

/// Opens a connection to `peer`: its sending half and its driver.
async fn connect(peer: &Peer) -> Result<(Link, BoxFuture<'static, ()>), ReplicaError> {
    let stream = TcpStream::connect(&peer.authority)
        .await
        .map_err(|e| transport(&peer.url, e.to_string()))?;
    stream
        .set_nodelay(true)
        .map_err(|e| transport(&peer.url, e.to_string()))?;
    let (link, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| transport(&peer.url, e.to_string()))?;
    let url = peer.url.clone();
    let driver = async move {
        if let Err(e) = conn.await {
            tracing::debug!(peer = %url, error = %e, "kv: replica connection ended");
        }
    };
    Ok((link, driver.boxed()))
}

/// One signed batch request on `link`: the status and the whole body.
async fn exchange(
    peer: &Peer,
    link: &mut Link,
    body: Bytes,
) -> Result<(StatusCode, Bytes), ReplicaError> {
    let fail = |e: hyper::Error| transport(&peer.url, e.to_string());
    link.ready().await.map_err(fail)?;
    let time = crate::engine::now_ns() / 1_000_000;
    let sig = auth::sign(&peer.secret, &peer.url, "PUT", BATCH_PATH, time, &body);
    let req = Request::builder()
        .method(Method::PUT)
        .uri(BATCH_PATH)
        .header(hyper::header::HOST, &peer.authority)
        .header(auth::TIME_HEADER, time)
        .header(auth::SIGNATURE_HEADER, sig)
        .body(Full::new(body))
        .map_err(|e| transport(&peer.url, e.to_string()))?;
    let resp = link.send_request(req).await.map_err(fail)?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_RECORD_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| transport(&peer.url, e.to_string()))?
        .to_bytes();
    Ok((status, body))
}
