//! What a connection's reader hands its writer: encoded replies (ECHO, PONG,
//! ERROR) in one bounded byte buffer, subscription changes, and the request
//! to close once everything is flushed.
//!
//! The reader appends under a short lock and never waits on the socket; the
//! writer takes everything pending in one swap, so all the replies of a
//! wake-up leave in one write. Subscription changes travel with the replies
//! and are applied before those replies are written, so a PONG that follows a
//! SUBSCRIBE proves the subscription is live (the client's barrier).

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Subscription changes a drained mailbox keeps room for.
const KEEP_CONTROL_CAPACITY: usize = 64;

/// A subscription change, applied by the writer (which owns the subscriber).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Control {
    /// Subscribe to a validated pattern.
    Subscribe(String),
    /// Remove a subscription.
    Unsubscribe(String),
}

/// The bound was reached: the client is not reading its replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

#[derive(Debug, Default)]
struct Pending {
    bytes: BytesMut,
    control: Vec<Control>,
    control_bytes: usize,
    closing: bool,
}

/// The reader → writer mailbox of one connection.
#[derive(Debug)]
pub(crate) struct Outbound {
    pending: Mutex<Pending>,
    notify: Notify,
    limit: usize,
}

impl Outbound {
    /// A mailbox holding at most `limit` bytes of replies and control.
    pub(crate) fn new(limit: usize) -> Self {
        Outbound {
            pending: Mutex::new(Pending::default()),
            notify: Notify::new(),
            limit,
        }
    }

    /// Appends one reply encoded by `encode`. Ignored once closing.
    pub(crate) fn push(&self, encode: impl FnOnce(&mut BytesMut)) -> Result<(), Overflow> {
        let mut p = self.pending.lock();
        if p.closing {
            return Ok(());
        }
        if p.bytes.len() + p.control_bytes >= self.limit {
            return Err(Overflow);
        }
        encode(&mut p.bytes);
        drop(p);
        self.notify.notify_one();
        Ok(())
    }

    /// Queues a subscription change. Ignored once closing.
    pub(crate) fn control(&self, c: Control) -> Result<(), Overflow> {
        let mut p = self.pending.lock();
        if p.closing {
            return Ok(());
        }
        let size = match &c {
            Control::Subscribe(s) | Control::Unsubscribe(s) => s.len() + 16,
        };
        if p.bytes.len() + p.control_bytes + size > self.limit {
            return Err(Overflow);
        }
        p.control_bytes += size;
        p.control.push(c);
        drop(p);
        self.notify.notify_one();
        Ok(())
    }

    /// Appends a last frame (an ERROR), ignoring the bound, and asks the
    /// writer to flush and close. Later pushes are ignored.
    pub(crate) fn close_with(&self, encode: impl FnOnce(&mut BytesMut)) {
        let mut p = self.pending.lock();
        if !p.closing {
            encode(&mut p.bytes);
            p.closing = true;
        }
        drop(p);
        self.notify.notify_one();
    }

    /// Asks the writer to flush what is pending and close.
    pub(crate) fn close(&self) {
        self.close_with(|_| {});
    }

    /// Moves everything pending into `bytes` and `control` (appending);
    /// returns whether the connection is closing.
    pub(crate) fn take(&self, bytes: &mut BytesMut, control: &mut Vec<Control>) -> bool {
        let mut p = self.pending.lock();
        if bytes.is_empty() {
            std::mem::swap(bytes, &mut p.bytes);
        } else {
            bytes.extend_from_slice(&p.bytes);
            p.bytes.clear();
        }
        control.append(&mut p.control);
        if p.control.capacity() > KEEP_CONTROL_CAPACITY {
            // A burst of subscription changes does not pin its vector.
            p.control = Vec::new();
        }
        p.control_bytes = 0;
        p.closing
    }

    /// Waits until something is pushed (a push made before the call counts).
    pub(crate) async fn notified(&self) {
        self.notify.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    #[test]
    fn replies_and_control_are_taken_together_in_order() {
        let o = Outbound::new(1024);
        o.control(Control::Subscribe("a".into())).unwrap();
        o.push(|b| b.put_slice(b"xy")).unwrap();
        let (mut bytes, mut control) = (BytesMut::new(), Vec::new());
        assert!(!o.take(&mut bytes, &mut control));
        assert_eq!(&bytes[..], b"xy");
        assert_eq!(control, vec![Control::Subscribe("a".into())]);
    }

    #[test]
    fn the_bound_refuses_further_replies() {
        let o = Outbound::new(4);
        o.push(|b| b.put_slice(b"1234")).unwrap();
        assert_eq!(o.push(|b| b.put_slice(b"5")), Err(Overflow));
    }

    #[test]
    fn after_close_only_the_last_frame_is_kept() {
        let o = Outbound::new(4);
        o.close_with(|b| b.put_slice(b"bye"));
        o.push(|b| b.put_slice(b"late")).unwrap();
        let (mut bytes, mut control) = (BytesMut::new(), Vec::new());
        assert!(o.take(&mut bytes, &mut control));
        assert_eq!(&bytes[..], b"bye");
    }
}
