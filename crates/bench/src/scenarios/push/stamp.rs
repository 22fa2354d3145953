//! The bench's messages: a payload stamped with the time it was due
//! (the seed's timeHandler puts the send time in the first bytes), the
//! request texts publishers and subscribers send, and reading the stamp
//! back out of whatever form a server delivered (a Socket.IO event or a
//! `/ws` JSON message). Pure: bytes in, values out.

use std::sync::OnceLock;
use std::time::Instant;

/// Microseconds since the bench's first call: the clock publishers stamp
/// with and subscribers read (one process, so one monotonic clock).
pub fn now_us() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// Smallest `--msg-bytes`: the stamp `t<20 digits>:` must fit.
pub const MIN_MSG_BYTES: usize = 24;

/// The name of topic `i` (`topic.<i>`; `.`-separated as hub topics are).
pub fn topic(i: usize) -> String {
    format!("topic.{i}")
}

/// A payload of exactly `len` bytes (at least [`MIN_MSG_BYTES`]):
/// `t<due_us>:` then filler. It starts with a letter so that neither
/// server takes it for a JSON number: both deliver it as a JSON string.
pub fn payload(due_us: u64, len: usize) -> String {
    let mut s = format!("t{due_us}:");
    let len = len.max(MIN_MSG_BYTES);
    while s.len() < len {
        s.push('x');
    }
    s
}

/// The Socket.IO `publish` event (Engine.IO message, namespace `/`, no
/// ack asked): `42["publish","<topic>","<payload>"]`.
pub fn socketio_publish(topic: &str, payload: &str) -> String {
    format!("42[\"publish\",\"{topic}\",\"{payload}\"]")
}

/// The Socket.IO `subscribe` event with ack id 0.
pub fn socketio_subscribe(topics: &[String]) -> String {
    format!("420[\"subscribe\",{}]", json_list(topics))
}

/// The `/ws` publish request.
pub fn ws_publish(topic: &str, payload: &str) -> String {
    format!("{{\"op\":\"publish\",\"topic\":\"{topic}\",\"payload\":\"{payload}\"}}")
}

/// The `/ws` subscribe request (id 1).
pub fn ws_subscribe(topics: &[String]) -> String {
    format!(
        "{{\"op\":\"subscribe\",\"id\":1,\"patterns\":{}}}",
        json_list(topics)
    )
}

fn json_list(topics: &[String]) -> String {
    serde_json::to_string(topics).expect("strings serialise")
}

/// The stamp inside a delivered message: the digits after the first `"t`
/// that is followed by a digit (topics are `topic.<n>`, so the first such
/// place is the payload's start).
pub fn read_stamp(text: &[u8]) -> Option<u64> {
    let mut i = 0;
    while i + 2 < text.len() {
        if text[i] == b'"' && text[i + 1] == b't' && text[i + 2].is_ascii_digit() {
            let mut v: u64 = 0;
            for &c in &text[i + 2..] {
                if c == b':' {
                    return Some(v);
                }
                if !c.is_ascii_digit() {
                    return None;
                }
                v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            }
            return None;
        }
        i += 1;
    }
    None
}

/// What one application message from a server is, for a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// A topic message (Socket.IO event / `/ws` `message`).
    Message,
    /// The answer to our subscribe request; `refused` when it refused any
    /// topic.
    SubscribeAck {
        /// Some topic was refused.
        refused: bool,
    },
    /// Anything else (CONNECT, errors, …).
    Other,
}

/// Classifies a Socket.IO packet (the Engine.IO message without its `4`).
pub fn classify_socketio(p: &[u8]) -> Delivered {
    match p.first() {
        Some(b'2') => Delivered::Message,
        Some(b'3') if p.starts_with(b"30[") => Delivered::SubscribeAck {
            refused: !contains(p, b"\"refused\":[]"),
        },
        _ => Delivered::Other,
    }
}

/// Classifies a `/ws` JSON frame.
pub fn classify_ws(p: &[u8]) -> Delivered {
    if p.starts_with(b"{\"op\":\"message\"") {
        Delivered::Message
    } else if contains(p, b"\"op\":\"subscribed\"") {
        Delivered::SubscribeAck {
            refused: !contains(p, b"\"refused\":[]"),
        }
    } else {
        Delivered::Other
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_survives_every_delivered_form() {
        let p = payload(123_456, 64);
        assert_eq!(p.len(), 64);
        let sio = format!("2[\"topic.7\",\"{p}\"]");
        assert_eq!(read_stamp(sio.as_bytes()), Some(123_456));
        assert_eq!(classify_socketio(sio.as_bytes()), Delivered::Message);
        let ws = format!("{{\"op\":\"message\",\"topic\":\"topic.7\",\"payload\":\"{p}\"}}");
        assert_eq!(read_stamp(ws.as_bytes()), Some(123_456));
        assert_eq!(classify_ws(ws.as_bytes()), Delivered::Message);
        assert_eq!(read_stamp(b"2[\"topic.7\",\"tx\"]"), None);
        assert_eq!(read_stamp(b"2[\"topic.7\",\"t99"), None);
    }

    #[test]
    fn subscribe_acks_are_told_apart_from_messages() {
        assert_eq!(
            classify_socketio(br#"30[{"accepted":["a"],"refused":[]}]"#),
            Delivered::SubscribeAck { refused: false }
        );
        assert_eq!(
            classify_ws(br#"{"accepted":[],"id":1,"op":"subscribed","refused":[{"pattern":"a","reason":"x"}]}"#),
            Delivered::SubscribeAck { refused: true }
        );
        assert_eq!(classify_socketio(br#"0{"sid":"x"}"#), Delivered::Other);
        let s = socketio_subscribe(&["topic.1".into(), "topic.2".into()]);
        assert_eq!(s, r#"420["subscribe",["topic.1","topic.2"]]"#);
    }
}
