//! The write side of a `[wire]` connection: takes the replies the reader
//! queued in [`Outbound`] and the messages waiting in the connection's hub
//! subscriber, and writes everything pending with one `write_all` per
//! wake-up.
//!
//! Every write has a deadline (`timed_write.rs`): a client that reads
//! nothing for the listener's idle timeout is closed (counted as
//! `write_timeout`), and once the reader has ended (end of stream, a fatal
//! error, the idle timeout) what is left — the last replies, the ERROR — gets
//! only a short best-effort bound, so a client that does not read cannot
//! hold the connection, its slot and its hub subscriber open.
//!
//! The subscriber is created at the first SUBSCRIBE: a connection that only
//! publishes or echoes never holds a hub queue. Buffers start empty and a
//! buffer that grew for a burst is released once written, so a quiet
//! connection holds no write memory.

use bytes::BytesMut;
use tidegate_hub::{EncodedForm, ListenerMetrics, Subscriber, SubscriberOptions};
use tidegate_listener::ConnWriter;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::codec;
use crate::connection::ConnectionContext;
use crate::frame::{ErrorCode, FrameType};
use crate::outbound::{Control, Outbound};
use crate::timed_write::{bounded, write_timed, StallLimit, WriteFailed};

/// A write buffer with more capacity than this is released after its
/// bytes are written, so a burst does not pin memory on a quiet connection.
const KEEP_WRITE_CAPACITY: usize = 16 * 1024;
/// Likewise for the vectors of taken messages and subscription changes,
/// in elements.
const KEEP_BATCH_CAPACITY: usize = 64;

/// Writes replies and subscriber messages until the connection closes.
/// `limit` bounds each write: `limit.open` without progress while the
/// connection is open, a short bound once `limit.closing` (the reader has
/// ended) is cancelled.
pub(crate) async fn run(
    mut wr: ConnWriter,
    out: &Outbound,
    ctx: &ConnectionContext,
    metrics: &ListenerMetrics,
    cancel: &CancellationToken,
    shutdown: &CancellationToken,
    limit: StallLimit<'_>,
) {
    let batch = ctx.config.write_batch.max(1);
    let mut buf = BytesMut::new();
    let mut msgs = Vec::new();
    let mut control = Vec::new();
    let mut sub: Option<Subscriber> = None;
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    loop {
        let mut closing = out.take(&mut buf, &mut control);
        for c in control.drain(..) {
            match c {
                Control::Subscribe(p) => {
                    let s = sub.get_or_insert_with(|| {
                        ctx.hub.subscriber(SubscriberOptions {
                            capacity: ctx.config.subscriber_capacity,
                            overflow: ctx.config.overflow,
                        })
                    });
                    // Validated by the reader; a failure here cannot happen.
                    let _ = s.subscribe(&p);
                }
                Control::Unsubscribe(p) => {
                    if let Some(s) = sub.as_mut() {
                        s.unsubscribe(&p);
                    }
                }
            }
        }
        if let Some(s) = &sub {
            let room = batch.saturating_sub(msgs.len());
            // Grow once, here, rather than step by step under the queue's
            // lock, which publishers to this subscriber wait on.
            msgs.reserve(s.len().min(room));
            if let Err(e) = s.try_recv_many(&mut msgs, room) {
                if msgs.is_empty() {
                    metrics.error("slow_consumer");
                    codec::encode_error(ErrorCode::SlowConsumer, &e.to_string(), &mut buf);
                    closing = true;
                }
            }
        }
        if !msgs.is_empty() {
            metrics.frames_out(msgs.len() as u64);
        }
        for m in msgs.drain(..) {
            // Encoded once per message, whichever of its subscribers' writers
            // gets there first; the others copy the shared bytes.
            let frame = m.encoded(EncodedForm::WireMessage, |m| {
                let mut one = BytesMut::new();
                codec::encode_message(FrameType::Message, m, &mut one).map(|()| one.freeze())
            });
            match frame {
                Ok(bytes) => buf.extend_from_slice(&bytes),
                Err(e) => {
                    metrics.error("unencodable_message");
                    tracing::debug!("wire: message on {} not deliverable: {e}", m.topic);
                }
            }
        }
        if msgs.capacity() > KEEP_BATCH_CAPACITY {
            msgs = Vec::new();
        }
        if control.capacity() > KEEP_BATCH_CAPACITY {
            control = Vec::new();
        }
        if !buf.is_empty() {
            let this_write = if closing {
                StallLimit::closing_now(limit.open)
            } else {
                limit
            };
            if let Err(e) = write_timed(&mut wr, &buf, this_write).await {
                let reader_ended = limit.closing.is_some_and(|t| t.is_cancelled());
                if matches!(e, WriteFailed::Stalled(_)) && !closing && !reader_ended {
                    // A reason of its own: the reader counted any other.
                    metrics.error("write_timeout");
                }
                tracing::debug!("wire: closing connection: write failed: {e}");
                break;
            }
            buf.clear();
            if buf.capacity() > KEEP_WRITE_CAPACITY {
                buf = BytesMut::new();
            }
        }
        if closing {
            break;
        }
        tokio::select! {
            biased;
            _ = out.notified() => {}
            _ = &mut cancelled => {
                if shutdown.is_cancelled() {
                    out.close_with(|b| {
                        codec::encode_error(ErrorCode::ShuttingDown, "the server is shutting down", b)
                    });
                } else {
                    out.close();
                }
            }
            _ = recv_some(sub.as_ref(), &mut msgs, batch) => {}
        }
    }
    cancel.cancel();
    // A TLS close_notify into a full socket must not hold the connection.
    let _ = bounded(StallLimit::closing_limit(limit.open), wr.shutdown()).await;
}

/// Waits for subscriber messages; forever when there is no subscriber yet.
async fn recv_some(
    sub: Option<&Subscriber>,
    msgs: &mut Vec<tidegate_hub::SharedMessage>,
    batch: usize,
) {
    match sub {
        // An error (overflow) is picked up by the next `try_recv_many`.
        Some(s) => {
            let _ = s.recv_many(msgs, batch).await;
        }
        None => std::future::pending().await,
    }
}
