//! One Engine.IO session's shared state: its outbox (packets waiting for a
//! transport to write them), which transport carries it, and whether a poll
//! or a websocket is attached. The session task fills the outbox; a pending
//! polling GET drains it, and once a websocket is attached the session task
//! takes the socket's writing half ([`EngineSession::take_ws_writer`]) and
//! writes the outbox itself, so a delivery costs one task wake-up, not two.
//!
//! No lock here is held across an `.await`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ws::{Utf8Bytes, WebSocket};
use base64::Engine as _;
use bytes::Bytes;
use futures::stream::SplitSink;
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
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
pub type WsWriter = SplitSink<WebSocket, axum::extract::ws::Message>;

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
    /// Packets queued since the session opened.
    enqueued: u64,
    /// Packets handed to polling answers since the session opened.
    polled_out: u64,
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
    /// Packets the client has shown it received (the first N queued): a new
    /// GET vouches for every earlier answer, a pong for what preceded its
    /// ping. Connection state recovery forgets what is confirmed.
    confirmed: AtomicU64,
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
                enqueued: 0,
                polled_out: 0,
                ws_writer: None,
                arrivals: ArrivalGap::default(),
            }),
            writable: Notify::new(),
            drained: Notify::new(),
            writer_ready: Notify::new(),
            inbound: tx,
            closed: CancellationToken::new(),
            confirmed: AtomicU64::new(0),
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
        st.enqueued += (st.outbox.len() - before) as u64;
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

    /// Packets queued since the session opened.
    pub fn enqueued(&self) -> u64 {
        self.state.lock().enqueued
    }

    /// How many of the first packets queued the client has shown it
    /// received.
    pub fn confirmed(&self) -> u64 {
        self.confirmed.load(Ordering::Relaxed)
    }

    /// The client has received the first `packets` packets queued.
    pub fn confirm(&self, packets: u64) {
        self.confirmed.fetch_max(packets, Ordering::Relaxed);
    }

    /// A new polling GET: the client has processed every earlier answer.
    pub fn confirm_polled(&self) {
        let n = self.state.lock().polled_out;
        self.confirm(n);
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
            return PollAnswer::Payload(b"1".to_vec());
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
        st.polled_out += n as u64;
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
    /// now on writes the outbox itself. Gives it back if the session ended.
    pub fn attach_ws_writer(&self, w: WsWriter) -> Result<(), WsWriter> {
        let mut st = self.state.lock();
        if st.closed {
            return Err(w);
        }
        st.ws_writer = Some(w);
        drop(st);
        self.writer_ready.notify_one();
        Ok(())
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
    fn a_new_poll_confirms_what_earlier_polls_carried() {
        let (s, _rx) = EngineSession::new("x".into(), Transport::Polling);
        s.send_text(Bytes::from_static(b"4a"));
        s.send_text(Bytes::from_static(b"4b"));
        assert_eq!((s.enqueued(), s.confirmed()), (2, 0));
        s.confirm_polled();
        assert_eq!(s.confirmed(), 0, "nothing was answered yet");
        assert!(matches!(s.poll(100), PollAnswer::Payload(_)));
        s.send_text(Bytes::from_static(b"4c"));
        s.confirm_polled();
        assert_eq!(
            s.confirmed(),
            2,
            "the answer held two packets; the third is unseen"
        );
        s.confirm(1);
        assert_eq!(s.confirmed(), 2, "confirmation never goes back");
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
