//! The `/ws` JSON protocol's session logic: subscribe, unsubscribe, publish,
//! and hub messages out. Used by `/ws` and by plain Engine.IO sessions.
//! Errors are answered (`{"op":"error",…}`), never fatal: the transport
//! bounds message sizes.

use bytes::Bytes;
use serde_json::{json, Value};
use tidegate_hub::{Hub, Message, SharedMessage, Subscriber};

use super::subscriptions::{self, Refused};
use crate::auth::Grants;
use crate::delivery::{cached_ws_message, payload_kind, PayloadKind};
use crate::ws::protocol::{decode, ClientOp};

/// A frame for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonOut {
    /// A JSON text frame.
    Text(Bytes),
    /// A binary frame (follows a `"binary":true` message).
    Binary(Bytes),
}

/// One `/ws` session's state.
#[derive(Debug)]
pub struct JsonSession {
    sub: Subscriber,
    max_subscriptions: usize,
    grants: Grants,
    /// A `publish` with `"binary": true` waiting for its frame.
    pending_publish: Option<(Option<u64>, String)>,
}

fn reply(v: Value) -> JsonOut {
    JsonOut::Text(Bytes::from(v.to_string()))
}

impl JsonSession {
    /// A session with the given hub queue and rights.
    pub fn new(sub: Subscriber, max_subscriptions: usize, grants: Grants) -> Self {
        JsonSession {
            sub,
            max_subscriptions,
            grants,
            pending_publish: None,
        }
    }

    /// The hub queue.
    pub fn subscriber(&self) -> &Subscriber {
        &self.sub
    }

    /// Handles one text frame.
    pub async fn on_text(&mut self, text: &str, hub: &Hub, out: &mut Vec<JsonOut>) {
        self.pending_publish = None;
        let op = match decode(text) {
            Ok(op) => op,
            Err(e) => {
                out.push(reply(
                    json!({"op": "error", "reason": format!("bad request: {e}")}),
                ));
                return;
            }
        };
        match op {
            ClientOp::Subscribe { id, patterns } => {
                let (allowed, refused): (Vec<String>, Vec<String>) = patterns
                    .into_iter()
                    .partition(|p| self.grants.may_subscribe(p));
                let mut o =
                    subscriptions::subscribe(&mut self.sub, &allowed, self.max_subscriptions);
                o.refused.extend(refused.into_iter().map(|pattern| Refused {
                    pattern,
                    reason: "not allowed by the token".into(),
                }));
                out.push(reply(json!({"op": "subscribed", "id": id, "accepted": o.accepted, "refused": o.refused})));
            }
            ClientOp::Unsubscribe { id, patterns } => {
                let o = subscriptions::unsubscribe(&mut self.sub, &patterns);
                out.push(reply(json!({"op": "unsubscribed", "id": id, "accepted": o.accepted, "refused": o.refused})));
            }
            // A refused binary publish leaves its frame unexpected: that
            // frame then gets an error too.
            ClientOp::Publish { id, topic, .. } if !self.grants.may_publish(&topic) => {
                out.push(refuse_publish(id))
            }
            ClientOp::Publish {
                id,
                topic,
                binary: true,
                ..
            } => self.pending_publish = Some((id, topic)),
            ClientOp::Publish {
                id, topic, payload, ..
            } => {
                let bytes = match payload {
                    None | Some(Value::Null) => Bytes::new(),
                    Some(Value::String(s)) => Bytes::from(s),
                    Some(v) => Bytes::from(v.to_string()),
                };
                out.push(publish(hub, id, topic, bytes).await);
            }
        }
    }

    /// Handles one binary frame: the payload of a pending binary publish.
    pub async fn on_binary(&mut self, b: Bytes, hub: &Hub, out: &mut Vec<JsonOut>) {
        match self.pending_publish.take() {
            Some((id, topic)) => out.push(publish(hub, id, topic, b).await),
            None => out.push(reply(
                json!({"op": "error", "reason": "binary frame without a pending binary publish"}),
            )),
        }
    }

    /// Encodes hub messages (the text form is shared by every session).
    pub fn deliver(&self, msgs: &[SharedMessage], out: &mut Vec<JsonOut>) {
        for m in msgs {
            out.push(JsonOut::Text(cached_ws_message(m)));
            if payload_kind(&m.payload) == PayloadKind::Binary {
                out.push(JsonOut::Binary(m.payload.clone()));
            }
        }
    }
}

fn refuse_publish(id: Option<u64>) -> JsonOut {
    reply(json!({"op": "error", "id": id, "reason": "not allowed by the token"}))
}

async fn publish(hub: &Hub, id: Option<u64>, topic: String, payload: Bytes) -> JsonOut {
    match hub.publish(Message::new(topic, payload)).await {
        Ok(()) => reply(json!({"op": "published", "id": id})),
        Err(e) => reply(json!({"op": "error", "id": id, "reason": e.to_string()})),
    }
}
