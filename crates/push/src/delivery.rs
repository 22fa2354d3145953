//! How a hub message looks on each push transport, encoded once per
//! message and form (the bytes are cached on the message and shared by
//! every session of that form).
//!
//! A payload that is valid JSON is embedded as JSON; valid UTF-8 otherwise
//! becomes a JSON string; anything else travels as binary (a Socket.IO
//! attachment, a `/ws` binary frame).

use bytes::Bytes;
use serde::de::IgnoredAny;
use tidegate_hub::{EncodedForm, Message};

use crate::engineio::packet::base64_form;

/// What a payload is, for embedding it in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind<'a> {
    /// Valid JSON text, embedded as is.
    Json(&'a str),
    /// UTF-8 text that is not JSON, embedded as a JSON string.
    Text(&'a str),
    /// Binary, sent as an attachment or a binary frame.
    Binary,
}

/// Classifies a payload.
pub fn payload_kind(payload: &[u8]) -> PayloadKind<'_> {
    match std::str::from_utf8(payload) {
        Ok(s) if serde_json::from_str::<IgnoredAny>(s).is_ok() => PayloadKind::Json(s),
        Ok(s) => PayloadKind::Text(s),
        Err(_) => PayloadKind::Binary,
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// The Engine.IO text of a Socket.IO EVENT named after the message's topic,
/// on namespace `nsp`: `42["topic",payload]` (`4` + `2/nsp,[…]` off the main
/// namespace), or `451-["topic",{"_placeholder":true,"num":0}]` for binary.
pub fn socketio_event(msg: &Message, nsp: &str) -> Bytes {
    let kind = payload_kind(&msg.payload);
    let mut s = String::with_capacity(msg.payload.len() + msg.topic.len() + 32);
    s.push('4');
    s.push(if kind == PayloadKind::Binary {
        '5'
    } else {
        '2'
    });
    if kind == PayloadKind::Binary {
        s.push_str("1-");
    }
    if nsp != "/" {
        s.push_str(nsp);
        s.push(',');
    }
    s.push('[');
    s.push_str(&json_string(&msg.topic));
    s.push(',');
    match kind {
        PayloadKind::Json(j) => s.push_str(j),
        PayloadKind::Text(t) => s.push_str(&json_string(t)),
        PayloadKind::Binary => s.push_str(r#"{"_placeholder":true,"num":0}"#),
    }
    s.push(']');
    Bytes::from(s)
}

/// The cached Socket.IO event of namespace `/`, or a fresh one for others.
pub fn cached_socketio_event(msg: &Message, nsp: &str) -> Bytes {
    if nsp == "/" {
        msg.encoded::<()>(EncodedForm::SocketIoEvent, |m| Ok(socketio_event(m, "/")))
            .unwrap_or_default()
    } else {
        socketio_event(msg, nsp)
    }
}

/// Whether an encoded Socket.IO event ([`socketio_event`]) announces a
/// binary attachment (`451-…`). Delivery asks this of the cached bytes
/// instead of classifying the payload again, a JSON parse per session.
pub fn is_binary_event(event: &[u8]) -> bool {
    event.starts_with(b"45")
}

/// Whether an encoded `/ws` message ([`ws_message`]) is followed by a
/// binary frame. Unambiguous: a JSON or text payload ends the object with
/// its own closing `}` or `"` before ours.
pub fn is_binary_ws_message(message: &[u8]) -> bool {
    message.ends_with(br#","binary":true}"#)
}

/// The cached `b`+base64 form of the payload (polling attachments).
pub fn cached_base64(msg: &Message) -> Bytes {
    msg.encoded::<()>(EncodedForm::EngineIoBase64, |m| Ok(base64_form(&m.payload)))
        .unwrap_or_default()
}

/// `event` (a whole Socket.IO EVENT text, `…]`) with `offset` as its last
/// argument (`…,"17"]`), the form connection state recovery sends: the
/// client keeps the last string argument of each event as its offset.
pub fn socketio_event_with_offset(event: &[u8], offset: u64) -> Bytes {
    append_before_last(event, format_args!(",\"{offset}\""))
}

/// [`socketio_event_with_offset`] with a cluster offset (`seq;p:pos,…`,
/// digits and `;:,` only, so nothing to escape): made per session, the
/// positions being the session's own.
pub fn socketio_event_with_offset_text(event: &[u8], offset: &str) -> Bytes {
    append_before_last(event, format_args!(",\"{offset}\""))
}

/// A `/ws` JSON message (`{…}`) with `"offset":N` added.
pub fn ws_message_with_offset(message: &[u8], offset: u64) -> Bytes {
    append_before_last(message, format_args!(",\"offset\":{offset}"))
}

/// The Socket.IO event of `msg` on namespace `nsp` carrying its history
/// sequence ([`Message::seq`], 0 without one) as offset: cached on the
/// message for namespace `/` (the offset is the same in every session),
/// made afresh for others.
pub fn cached_socketio_event_with_offset(msg: &Message, nsp: &str) -> Bytes {
    let offset = msg.seq().unwrap_or(0);
    if nsp == "/" {
        msg.encoded::<()>(EncodedForm::SocketIoEventWithOffset, |m| {
            Ok(socketio_event_with_offset(
                &cached_socketio_event(m, "/"),
                offset,
            ))
        })
        .unwrap_or_default()
    } else {
        socketio_event_with_offset(&socketio_event(msg, nsp), offset)
    }
}

/// The cached `/ws` JSON message with `"offset"`: its history sequence
/// ([`Message::seq`], 0 without one).
pub fn cached_ws_message_with_offset(msg: &Message) -> Bytes {
    let offset = msg.seq().unwrap_or(0);
    msg.encoded::<()>(EncodedForm::PushJsonWithOffset, |m| {
        Ok(ws_message_with_offset(&cached_ws_message(m), offset))
    })
    .unwrap_or_default()
}

/// `text` with `extra` inserted before its last byte (the closing `]` or
/// `}`): one copy, the shared encoding stays untouched.
fn append_before_last(text: &[u8], extra: std::fmt::Arguments<'_>) -> Bytes {
    use std::io::Write as _;
    let Some((last, head)) = text.split_last() else {
        return Bytes::new();
    };
    let mut v = Vec::with_capacity(text.len() + 24);
    v.extend_from_slice(head);
    let _ = v.write_fmt(extra);
    v.push(*last);
    Bytes::from(v)
}

/// The `/ws` JSON `message`: `{"op":"message","topic":…,"payload":…}`, or
/// `{"op":"message","topic":…,"binary":true}` followed by a binary frame.
/// A message delivered from the cluster backbone also says where it sits
/// in the cluster's history, `"pos":[partition,position]` (after the topic),
/// which a client gives back to recover on another node.
pub fn ws_message(msg: &Message) -> Bytes {
    let mut s = String::with_capacity(msg.payload.len() + msg.topic.len() + 48);
    s.push_str(r#"{"op":"message","topic":"#);
    s.push_str(&json_string(&msg.topic));
    if let Some((p, o)) = tidegate_hub::backbone::position(msg) {
        use std::fmt::Write as _;
        let _ = write!(s, r#","pos":[{p},{o}]"#);
    }
    match payload_kind(&msg.payload) {
        PayloadKind::Json(j) => {
            s.push_str(r#","payload":"#);
            s.push_str(j);
        }
        PayloadKind::Text(t) => {
            s.push_str(r#","payload":"#);
            s.push_str(&json_string(t));
        }
        PayloadKind::Binary => s.push_str(r#","binary":true"#),
    }
    s.push('}');
    Bytes::from(s)
}

/// The cached `/ws` JSON message.
pub fn cached_ws_message(msg: &Message) -> Bytes {
    msg.encoded::<()>(EncodedForm::PushJson, |m| Ok(ws_message(m)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_embedded_by_kind() {
        let m = Message::new("a.b", &b"{\"x\":1}"[..]);
        assert_eq!(&socketio_event(&m, "/")[..], br#"42["a.b",{"x":1}]"#);
        assert_eq!(&socketio_event(&m, "/n")[..], br#"42/n,["a.b",{"x":1}]"#);
        let m = Message::new("a.b", &b"hi \"there\""[..]);
        assert_eq!(&socketio_event(&m, "/")[..], br#"42["a.b","hi \"there\""]"#);
        assert_eq!(
            &ws_message(&m)[..],
            br#"{"op":"message","topic":"a.b","payload":"hi \"there\""}"#
        );
        let m = Message::new("a.b", &[0xff, 0][..]);
        assert_eq!(
            &socketio_event(&m, "/")[..],
            br#"451-["a.b",{"_placeholder":true,"num":0}]"#
        );
        assert_eq!(&cached_base64(&m)[..], b"b/wA=");
        assert!(is_binary_event(&socketio_event(&m, "/")));
        assert!(is_binary_ws_message(&ws_message(&m)));
        let j = Message::new("a.b", &br#"{"binary":true}"#[..]);
        assert!(!is_binary_event(&socketio_event(&j, "/")));
        assert!(!is_binary_ws_message(&ws_message(&j)));
        assert_eq!(
            &ws_message(&m)[..],
            br#"{"op":"message","topic":"a.b","binary":true}"#
        );
    }

    #[test]
    fn offsets_are_appended_to_a_copy() {
        let m = Message::new("a.b", &b"[1]"[..]);
        let ev = cached_socketio_event(&m, "/");
        assert_eq!(
            &socketio_event_with_offset(&ev, 17)[..],
            br#"42["a.b",[1],"17"]"#
        );
        assert_eq!(&ev[..], br#"42["a.b",[1]]"#);
        assert_eq!(
            &ws_message_with_offset(&ws_message(&m), 3)[..],
            br#"{"op":"message","topic":"a.b","payload":[1],"offset":3}"#
        );
    }
}
