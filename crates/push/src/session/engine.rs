//! One Engine.IO session's shared state: its outbox (packets waiting for a
//! transport to write them), which transport carries it, and whether a poll
//! or a websocket is attached. The session task fills the outbox; a pending
//! polling GET drains it, and once a websocket is attached the session task
//! takes the socket's writing half ([`EngineSession::take_ws_writer`]) and
//! writes the outbox itself, so a delivery costs one task wake-up, not two.
//!
//! No lock here is held across an `.await`.

use std::collections::VecDeque;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Utf8Bytes, WebSocket};
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::SplitSink;
use futures::SinkExt;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::engineio::handshake::Transport;
use crate::engineio::packet::EioPacket;
use crate::engineio::payload::encode_payload;
use crate::session::flush::ArrivalGap;

/// Packets the outbox holds before the session task stops taking messages
/// from its hub queue (which then applies its overflow policy).
pub const OUTBOX_SOFT_LIMIT: usize = 1024;
/// Packets beyond which the client is not reading at all and the session is
/// closed (replies to its own requests pile up).
pub const OUTBOX_HARD_LIMIT: usize = 8 * OUTBOX_SOFT_LIMIT;
/// Client packets waiting for the session task; a full queue stops reading.
pub const INBOUND_QUEUE: usize = 64;

/// A client packet on its way to the session task, boxed: the channel
/// allocates its first block of slots with the session, and a slot of a
/// pointer instead of a whole packet saves about 1 KiB per idle session
/// (client packets are rare next to deliveries).
pub type Inbound = Box<EioPacket>;

/// The writing half of a session's websocket.
pub type WsSink = SplitSink<WebSocket, axum::extract::ws::Message>;

/// A session's websocket writing half as the session task holds it, with
/// the promise to tell the socket's reader whether the closing frame went
/// out ([`WsWriter::close`]). The reader waits for the client's close in
/// return only then: a client that never got ours has nothing to answer.
#[derive(Debug)]
pub struct WsWriter {
    sink: WsSink,
    /// Whether the close frame was written; dropped unsent (the writer
    /// dropped without [`WsWriter::close`]), it tells the reader "no".
    close_sent: oneshot::Sender<bool>,
}

impl WsWriter {
    /// The socket's writing half, for the outbox.
    pub fn sink(&mut self) -> &mut WsSink {
        &mut self.sink
    }

    /// Writes the close frame (`frame`: its code and reason, if any) within
    /// `wait`, and tells the socket's reader whether it went out; true if
    /// it did. A client that reads nothing, or a socket that failed, is
    /// not waited for longer.
    pub async fn close(mut self, frame: Option<CloseFrame>, wait: Duration) -> bool {
        let write = self.sink.send(axum::extract::ws::Message::Close(frame));
        let sent = matches!(tokio::time::timeout(wait, write).await, Ok(Ok(())));
        // The reader may be gone already (the client closed first).
        let _ = self.close_sent.send(sent);
        sent
    }
}

/// A packet waiting to be written, already encoded.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A whole Engine.IO text packet (`4…`, `2`, `6`, …).
    Text(Bytes),
    /// A binary message; `base64` is its polling form when already known.
    Binary {
        /// The bytes (a websocket binary frame).
        raw: Bytes,
        /// `b`+base64, if the sender had it cached.
        base64: Option<Bytes>,
    },
}

impl Outgoing {
    fn polling_bytes(&self) -> Bytes {
        match self {
            Outgoing::Text(t) => t.clone(),
            Outgoing::Binary {
                base64: Some(b), ..
            } => b.clone(),
            Outgoing::Binary { raw, base64: None } => {
                let mut s = String::from("b");
                base64::engine::general_purpose::STANDARD.encode_string(raw, &mut s);
                Bytes::from(s)
            }
        }
    }

    /// The websocket message for this packet.
    pub fn ws_message(&self) -> axum::extract::ws::Message {
        use axum::extract::ws::Message;
        match self {
            Outgoing::Text(t) => Utf8Bytes::try_from(t.clone())
                .map(Message::Text)
                .unwrap_or_else(|_| Message::Binary(t.clone())),
            Outgoing::Binary { raw, .. } => Message::Binary(raw.clone()),
        }
    }
}

#[derive(Debug)]
struct State {
    outbox: VecDeque<Outgoing>,
    transport: Transport,
    upgrading: bool,
    poll_pending: bool,
    post_pending: bool,
    ws_attached: bool,
    closed: bool,
    /// The client ended the session (its close packet `1`): a pending GET
    /// is released with a noop, as in the reference server, rather than
    /// told to close.
    closed_by_client: bool,
    /// The client's close packet was handed to the session task, which
    /// may not have read it yet: from then on only the GET racing the
    /// close finds the session (the reference forgets it at once).
    close_received: bool,
    /// When the client must have answered the last ping (`None` while no
    /// ping is unanswered): past it the session is over, whether or not
    /// its task has noticed yet.
    pong_deadline: Option<tokio::time::Instant>,
    /// A websocket's writing half, until the session task takes it.
    ws_writer: Option<WsWriter>,
    /// When packets are queued while polling: a long-poll answer is held
    /// only in a session whose packets come close together
    /// (`busy_write_delay_ms`; a websocket's session task tracks its own).
    arrivals: ArrivalGap,
}

/// What a polling GET gets.
#[derive(Debug, PartialEq, Eq)]
pub enum PollAnswer {
    /// A payload to send (packets, or `6` during an upgrade, or `1`).
    Payload(Vec<u8>),
    /// Nothing yet: wait and ask again.
    Wait,
    /// The websocket took the session over while this GET waited (its
    /// client sent `5` right behind its probe): answered as polling after
    /// the upgrade is, 400.
    Upgraded,
}

/// Why a registered session is answered as an unknown one
/// ([`EngineSession::forgotten`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgotten {
    /// The client missed its pong deadline: the session is over, whether
    /// or not its task has noticed yet (a timer fires up to a tick late).
    PongOverdue,
    /// The client sent its close packet (read by the session task or still
    /// queued for it): the reference server forgets a session at once.
    ClosedByClient,
}

/// One Engine.IO session.
#[derive(Debug)]
pub struct EngineSession {
    /// Its id.
    pub sid: String,
    state: Mutex<State>,
    /// Wakes the writing transport (pending GET or websocket writer).
    writable: Notify,
    /// Wakes the session task when the outbox drained.
    drained: Notify,
    /// Wakes the session task when a websocket writer was attached.
    writer_ready: Notify,
    inbound: mpsc::Sender<Inbound>,
    closed: CancellationToken,
}

impl EngineSession {
    /// A session on `transport`, and the receiver of its client packets.
    pub fn new(sid: String, transport: Transport) -> (Self, mpsc::Receiver<Inbound>) {
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
        let s = EngineSession {
            sid,
            state: Mutex::new(State {
                outbox: VecDeque::new(),
                transport,
                upgrading: false,
                poll_pending: false,
                post_pending: false,
                ws_attached: transport == Transport::WebSocket,
                closed: false,
                closed_by_client: false,
                close_received: false,
                pong_deadline: None,
                ws_writer: None,
                arrivals: ArrivalGap::default(),
            }),
            writable: Notify::new(),
            drained: Notify::new(),
            writer_ready: Notify::new(),
            inbound: tx,
            closed: CancellationToken::new(),
        };
        (s, rx)
    }

    /// Queues packets for the client. Returns false (and closes the
    /// session) when the client has left more than [`OUTBOX_HARD_LIMIT`]
    /// unread.
    pub fn send(&self, packets: impl IntoIterator<Item = Outgoing>) -> bool {
        let mut st = self.state.lock();
        if st.closed {
            return false;
        }
        let before = st.outbox.len();
        st.outbox.extend(packets);
        if st.transport == Transport::Polling && st.outbox.len() > before {
            st.arrivals.note(tokio::time::Instant::now());
        }
        let over = st.outbox.len() > OUTBOX_HARD_LIMIT;
        drop(st);
        if over {
            self.close();
            return false;
        }
        self.writable.notify_one();
        true
    }

    /// Queues one text packet.
    pub fn send_text(&self, text: impl Into<Bytes>) -> bool {
        self.send([Outgoing::Text(text.into())])
    }

    /// Packets waiting in the outbox.
    pub fn outbox_len(&self) -> usize {
        self.state.lock().outbox.len()
    }

    /// Resolves when a transport drained the outbox since the last call.
    pub async fn drained(&self) {
        self.drained.notified().await
    }

    /// Resolves when there may be something to write.
    pub async fn writable(&self) {
        self.writable.notified().await
    }

    /// The transport carrying the session now.
    pub fn transport(&self) -> Transport {
        self.state.lock().transport
    }

    /// Ends the session: transports stop, the task exits.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.closed.cancel();
        self.writable.notify_one();
    }

    /// Sets (or clears) the deadline for the client's pong.
    pub fn set_pong_deadline(&self, deadline: Option<tokio::time::Instant>) {
        self.state.lock().pong_deadline = deadline;
    }

    /// Whether a ping is unanswered: its pong has not arrived (it counts
    /// on arrival, before the session task reads it).
    pub fn pong_pending(&self) -> bool {
        self.state.lock().pong_deadline.is_some()
    }

    /// Whether a request must be answered as for an unknown session
    /// although the session is still registered, and why. A `polling_get`
    /// still finds a session its client closed: it may have raced the
    /// close, and gets its noop.
    pub fn forgotten(&self, polling_get: bool) -> Option<Forgotten> {
        let st = self.state.lock();
        if st
            .pong_deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d)
        {
            return Some(Forgotten::PongOverdue);
        }
        if !polling_get && (st.close_received || st.closed_by_client) {
            return Some(Forgotten::ClosedByClient);
        }
        None
    }

    /// Whether the client ended the session with its close packet.
    pub fn is_closed_by_client(&self) -> bool {
        self.state.lock().closed_by_client
    }

    /// Ends the session because the client sent its close packet: a
    /// pending GET then answers `6` (noop), not `1`.
    pub fn close_by_client(&self) {
        self.state.lock().closed_by_client = true;
        self.close();
    }

    /// Whether the session ended.
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Resolves when the session ends.
    pub async fn closed(&self) {
        self.closed.cancelled().await
    }

    /// Hands a client packet to the session task (waits while its queue is
    /// full). False if the session is gone.
    pub async fn receive(&self, p: EioPacket) -> bool {
        if matches!(p, EioPacket::Pong(_)) {
            // Answered on arrival: a request in the moment before the task
            // reads this pong must not find the session overdue.
            self.set_pong_deadline(None);
        }
        if matches!(p, EioPacket::Close) {
            self.state.lock().close_received = true;
        }
        self.inbound.send(Box::new(p)).await.is_ok()
    }

    /// Marks a polling GET as pending; false if one already is (the spec's
    /// "second concurrent GET": the caller answers 400 and closes).
    pub fn begin_poll(&self) -> bool {
        let mut st = self.state.lock();
        !std::mem::replace(&mut st.poll_pending, true)
    }

    /// The pending GET ended (answered or its client went away).
    pub fn end_poll(&self) {
        self.state.lock().poll_pending = false;
    }

    /// Marks a POST as in progress; false if one already is.
    pub fn begin_post(&self) -> bool {
        let mut st = self.state.lock();
        !std::mem::replace(&mut st.post_pending, true)
    }

    /// The POST ended.
    pub fn end_post(&self) {
        self.state.lock().post_pending = false;
    }

    /// What the pending GET answers now, within `max_payload`.
    pub fn poll(&self, max_payload: usize) -> PollAnswer {
        let mut st = self.state.lock();
        if st.closed {
            // The client that closed knows; anyone else is told to close.
            let answer = if st.closed_by_client { b"6" } else { b"1" };
            return PollAnswer::Payload(answer.to_vec());
        }
        if st.transport == Transport::WebSocket {
            return PollAnswer::Upgraded;
        }
        if st.outbox.is_empty() {
            // During an upgrade the pending GET is released with a noop so
            // the client can switch transports.
            return if st.upgrading {
                PollAnswer::Payload(b"6".to_vec())
            } else {
                PollAnswer::Wait
            };
        }
        // Only what can fit is looked at (the outbox may hold a thousand
        // packets, the body takes what maxPayload allows).
        let mut size = 0usize;
        let mut parts: Vec<Bytes> = Vec::new();
        for o in st.outbox.iter() {
            let b = o.polling_bytes();
            size += b.len() + 1;
            parts.push(b);
            if size > max_payload {
                break;
            }
        }
        let (body, n) = encode_payload(parts.iter().map(|b| &b[..]), max_payload);
        st.outbox.drain(..n);
        drop(st);
        self.drained.notify_one();
        PollAnswer::Payload(body)
    }

    /// While polling: how long before the newest queued packets the
    /// previous ones were queued (None before the second).
    pub fn send_gap(&self) -> Option<Duration> {
        self.state.lock().arrivals.gap()
    }

    /// Takes everything queued, for a websocket writer.
    pub fn take_all(&self, into: &mut Vec<Outgoing>) {
        into.extend(self.state.lock().outbox.drain(..));
        self.drained.notify_one();
    }

    /// Hands the websocket's writing half to the session task, which from
    /// now on writes the outbox itself and, at the end, the close frame.
    /// Returns where the task says whether that close frame went out (an
    /// error: it did not), or gives the sink back if the session ended.
    pub fn attach_ws_writer(&self, sink: WsSink) -> Result<oneshot::Receiver<bool>, WsSink> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(sink);
        }
        let (close_sent, told) = oneshot::channel();
        st.ws_writer = Some(WsWriter { sink, close_sent });
        drop(st);
        self.writer_ready.notify_one();
        Ok(told)
    }

    /// The websocket writer attached since the last call, if any.
    pub fn take_ws_writer(&self) -> Option<WsWriter> {
        self.state.lock().ws_writer.take()
    }

    /// Resolves when a websocket writer may have been attached.
    pub async fn writer_ready(&self) {
        self.writer_ready.notified().await
    }

    /// Whether polling requests are still allowed (not upgraded).
    pub fn is_polling(&self) -> bool {
        self.state.lock().transport == Transport::Polling
    }

    /// Attaches a websocket for an upgrade; false if one is attached or the
    /// session already runs on websocket.
    pub fn attach_ws(&self) -> bool {
        let mut st = self.state.lock();
        if st.ws_attached || st.transport == Transport::WebSocket || st.closed {
            return false;
        }
        st.ws_attached = true;
        true
    }

    /// The probe succeeded: release the pending GET with a noop.
    pub fn start_upgrade(&self) {
        self.state.lock().upgrading = true;
        self.writable.notify_one();
    }

    /// Whether the probe was answered and the client's `5` is awaited.
    pub fn is_upgrading(&self) -> bool {
        self.state.lock().upgrading
    }

    /// The client sent `5`: the websocket carries the session from now on.
    pub fn finish_upgrade(&self) {
        let mut st = self.state.lock();
        st.upgrading = false;
        st.transport = Transport::WebSocket;
        drop(st);
        self.writable.notify_one();
    }

    /// The upgrade failed: the session stays on polling.
    pub fn abort_upgrade(&self) {
        let mut st = self.state.lock();
        st.upgrading = false;
        st.ws_attached = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_takes_what_fits_and_the_rest_waits() {
        let (s, _rx) = EngineSession::new("x".into(), Transport::Polling);
        assert_eq!(s.poll(100), PollAnswer::Wait);
        s.send([
            Outgoing::Text(Bytes::from_static(b"4aaaa")),
            Outgoing::Text(Bytes::from_static(b"4bbbb")),
            Outgoing::Binary {
                raw: Bytes::from_static(&[1]),
                base64: None,
            },
        ]);
        assert_eq!(s.poll(11), PollAnswer::Payload(b"4aaaa\x1e4bbbb".to_vec()));
        assert_eq!(s.poll(11), PollAnswer::Payload(b"bAQ==".to_vec()));
        s.start_upgrade();
        assert_eq!(s.poll(11), PollAnswer::Payload(b"6".to_vec()));
        s.close();
        assert_eq!(s.poll(11), PollAnswer::Payload(b"1".to_vec()));
    }

    #[test]
    fn one_poll_and_one_post_at_a_time() {
        let (s, _rx) = EngineSession::new("x".into(), Transport::Polling);
        assert!(s.begin_poll());
        assert!(!s.begin_poll());
        s.end_poll();
        assert!(s.begin_poll());
        assert!(s.begin_post());
        assert!(!s.begin_post());
    }

    #[test]
    fn a_client_that_never_reads_is_closed_at_the_hard_limit() {
        let (s, _rx) = EngineSession::new("x".into(), Transport::Polling);
        for _ in 0..OUTBOX_HARD_LIMIT {
            assert!(s.send_text(Bytes::from_static(b"2")));
        }
        assert!(!s.send_text(Bytes::from_static(b"2")));
        assert!(s.is_closed());
    }
}
