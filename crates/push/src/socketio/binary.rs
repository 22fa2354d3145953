//! Reassembling a BINARY_EVENT / BINARY_ACK from its text packet and the
//! binary Engine.IO messages that follow it, and building the placeholders
//! of outgoing ones.

use bytes::Bytes;
use serde_json::{json, Value};

use super::packet::SioPacket;

/// A binary packet waiting for its attachments.
#[derive(Debug)]
pub struct BinaryAssembler {
    packet: SioPacket,
    attachments: Vec<Bytes>,
}

impl BinaryAssembler {
    /// Starts collecting the `packet.attachments` parts of `packet`.
    pub fn new(packet: SioPacket) -> Self {
        let n = packet.attachments;
        BinaryAssembler {
            packet,
            attachments: Vec::with_capacity(n),
        }
    }

    /// Whether every announced attachment has arrived.
    pub fn is_complete(&self) -> bool {
        self.attachments.len() >= self.packet.attachments
    }

    /// Adds the next attachment.
    pub fn push(&mut self, part: Bytes) {
        self.attachments.push(part);
    }

    /// The packet and its attachments, in order.
    pub fn finish(self) -> (SioPacket, Vec<Bytes>) {
        (self.packet, self.attachments)
    }
}

/// The placeholder JSON standing for attachment `num`.
pub fn placeholder(num: usize) -> Value {
    json!({"_placeholder": true, "num": num})
}

/// If `v` is a placeholder, the attachment it stands for.
pub fn placeholder_num(v: &Value) -> Option<usize> {
    let o = v.as_object()?;
    if o.get("_placeholder")?.as_bool()? {
        o.get("num")?.as_u64().map(|n| n as usize)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socketio::packet::SioPacket;

    #[test]
    fn a_binary_event_collects_its_attachments() {
        let p = SioPacket::decode(
            r#"52-["up",{"_placeholder":true,"num":0},{"_placeholder":true,"num":1}]"#,
        )
        .unwrap();
        let mut a = BinaryAssembler::new(p);
        assert!(!a.is_complete());
        a.push(Bytes::from_static(b"x"));
        a.push(Bytes::from_static(b"y"));
        assert!(a.is_complete());
        let (p, parts) = a.finish();
        let (_, args) = p.event().unwrap();
        assert_eq!(placeholder_num(&args[1]), Some(1));
        assert_eq!(parts[1], Bytes::from_static(b"y"));
        assert_eq!(placeholder_num(&placeholder(3)), Some(3));
        assert_eq!(placeholder_num(&json!({"num": 1})), None);
    }
}
