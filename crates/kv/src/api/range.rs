//! `GET /v0/entities`: the local node's live entries in a key range,
//! streamed as one HTTP chunk `key\nvalue` per entry, sorted.
//!
//! No thread waits for the client. A task per stream walks a snapshot of
//! the engine in *pieces*: each piece is read on tokio's blocking pool (at
//! most [`PIECE_BYTES`] of entries, at least one entry, then the thread is
//! given back) and handed to the response body through a one-piece
//! channel. The task reads the next piece only once the body has taken the
//! previous one, so a stream holds at most two pieces (one being sent, one
//! waiting) besides hyper's buffer: memory stays constant whatever the
//! range, and the snapshot's iterator travels with the pieces, so the
//! output is one sorted, consistent listing.
//!
//! Two limits keep slow or stalled readers from holding the node:
//!
//! - **Send timeout** ([`RangeLimits::send_timeout`]): when the body has
//!   not taken the previous piece within it (the client stopped reading),
//!   the stream gives up: the snapshot and the stream's slot are let go,
//!   and the body ends with an error instead of the last chunk, so hyper
//!   closes the connection as soon as it gets to the body again — a client
//!   never mistakes a cut listing for a complete one. (hyper does not look
//!   at the body while the socket is full; a client that never reads again
//!   keeps only its socket, until it closes it or `[http] idle_timeout_ms`
//!   closes it.)
//! - **Stream slots** ([`RangeLimits::max_streams`]): beyond them a range
//!   request is answered 503 at once.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::engine::Engine;
use crate::error::KvError;

/// Default for [`RangeLimits::max_streams`].
pub const DEFAULT_MAX_RANGE_STREAMS: usize = 64;
/// Default for [`RangeLimits::send_timeout`]: 60 s, the default of
/// `[http] request_timeout_ms` (how long a whole ordinary request may take).
pub const DEFAULT_RANGE_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of entries (keys and values) read per blocking step; a piece
/// holds at least one entry, whatever its size.
pub const PIECE_BYTES: usize = 64 * 1024;

/// The limits of `/v0/entities` streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeLimits {
    /// Range streams open at once; one more is answered 503.
    pub max_streams: usize,
    /// Longest time a stream waits for its client to take the previous
    /// piece ([`PIECE_BYTES`]) before it is cut off.
    pub send_timeout: Duration,
}

impl Default for RangeLimits {
    fn default() -> Self {
        RangeLimits {
            max_streams: DEFAULT_MAX_RANGE_STREAMS,
            send_timeout: DEFAULT_RANGE_SEND_TIMEOUT,
        }
    }
}

/// Why a range body ended early (hyper then closes the connection).
#[derive(Debug, Error)]
pub enum RangeError {
    /// Reading the engine failed.
    #[error("range read failed: {0}")]
    Storage(#[from] KvError),
    /// The walk stopped before its end: the client did not take a piece
    /// within the send timeout (or the process is stopping).
    #[error("range stream cut off before its end (client not reading)")]
    CutOff,
}

/// Entries read in one blocking step; `last` when the range is exhausted.
struct Piece {
    entries: Vec<Bytes>,
    last: bool,
}

type Walk = Box<dyn Iterator<Item = Result<(Bytes, Bytes), KvError>> + Send>;

/// Where a stream is: its bounds before the first piece, then the
/// snapshot's iterator, handed to each blocking step and back.
enum Cursor {
    Unopened(Vec<u8>, Option<Vec<u8>>),
    Open(Walk),
}

impl Cursor {
    fn open(self, engine: &Engine) -> Walk {
        match self {
            Cursor::Unopened(start, end) => Box::new(engine.range(&start, end.as_deref())),
            Cursor::Open(walk) => walk,
        }
    }
}

/// The open range streams of one router: the slots and the timeout.
#[derive(Clone)]
pub(crate) struct RangeStreams {
    slots: Arc<Semaphore>,
    limits: RangeLimits,
}

impl RangeStreams {
    pub(crate) fn new(limits: RangeLimits) -> Self {
        RangeStreams {
            slots: Arc::new(Semaphore::new(limits.max_streams)),
            limits,
        }
    }

    /// The streamed answer for `start <= key < end`, or 503 when every
    /// slot is taken.
    pub(crate) fn open(
        &self,
        engine: Arc<Engine>,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
    ) -> Response {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            tracing::debug!(
                max = self.limits.max_streams,
                "kv: range stream refused, every slot taken"
            );
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "too many /v0/entities streams open (at most {}); try again later\n",
                    self.limits.max_streams
                ),
            )
                .into_response();
        };
        let (tx, rx) = mpsc::channel::<Result<Piece, KvError>>(1);
        tokio::spawn(walk(engine, start, end, tx, self.limits.send_timeout, slot));
        (StatusCode::OK, Body::from_stream(entries(rx))).into_response()
    }
}

/// Reads the range piece by piece, each once the body took the previous
/// one; gives up (dropping the snapshot and `_slot`) when the body does not
/// within `send_timeout`, or when it is gone.
async fn walk(
    engine: Arc<Engine>,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    tx: mpsc::Sender<Result<Piece, KvError>>,
    send_timeout: Duration,
    _slot: OwnedSemaphorePermit,
) {
    let mut cursor = Cursor::Unopened(start, end);
    loop {
        let room = match tokio::time::timeout(send_timeout, tx.reserve()).await {
            Ok(Ok(room)) => room,
            Ok(Err(_)) => return, // the client went away
            Err(_) => {
                tracing::debug!(
                    timeout_ms = send_timeout.as_millis() as u64,
                    "kv: range stream cut off, its client took nothing within the send timeout"
                );
                return;
            }
        };
        let engine = engine.clone();
        let step = tokio::task::spawn_blocking(move || {
            let mut walk = cursor.open(&engine);
            let piece = fill(&mut walk);
            (walk, piece)
        })
        .await;
        let Ok((walk, piece)) = step else {
            return; // the runtime is stopping: the body ends cut off
        };
        cursor = Cursor::Open(walk);
        let done = !matches!(piece, Ok(Piece { last: false, .. }));
        room.send(piece);
        if done {
            return;
        }
    }
}

/// The next piece of `walk`: entries up to [`PIECE_BYTES`] (at least one).
fn fill(walk: &mut Walk) -> Result<Piece, KvError> {
    let (mut entries, mut bytes) = (Vec::new(), 0);
    while bytes < PIECE_BYTES {
        let Some(entry) = walk.next() else {
            return Ok(Piece {
                entries,
                last: true,
            });
        };
        let (k, v) = entry?;
        let mut b = BytesMut::with_capacity(k.len() + 1 + v.len());
        b.put_slice(&k);
        b.put_u8(b'\n');
        b.put_slice(&v);
        bytes += b.len();
        entries.push(b.freeze());
    }
    Ok(Piece {
        entries,
        last: false,
    })
}

/// The response body: the pieces' entries one chunk each, ending cleanly
/// only after the last piece, with an error otherwise.
fn entries(
    rx: mpsc::Receiver<Result<Piece, KvError>>,
) -> impl futures::Stream<Item = Result<Bytes, RangeError>> + Send {
    let state = Some((rx, Vec::new().into_iter(), false));
    futures::stream::unfold(state, |state| async move {
        let (mut rx, mut pending, mut last) = state?;
        loop {
            if let Some(entry) = pending.next() {
                return Some((Ok(entry), Some((rx, pending, last))));
            }
            if last {
                return None;
            }
            match rx.recv().await {
                Some(Ok(piece)) => {
                    pending = piece.entries.into_iter();
                    last = piece.last;
                }
                Some(Err(e)) => {
                    tracing::error!(error = %e, "kv: range read failed");
                    return Some((Err(RangeError::Storage(e)), None));
                }
                None => return Some((Err(RangeError::CutOff), None)),
            }
        }
    })
}
