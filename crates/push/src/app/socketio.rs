//! Socket.IO v5 on one Engine.IO session: namespaces, CONNECT (with an auth
//! payload), EVENT / ACK (binary ones with attachments), DISCONNECT, and
//! Tidegate's events: `subscribe` / `unsubscribe` (a list of topic
//! patterns, acked with what was accepted and what was refused and why),
//! `publish` (topic, payload). Each hub message reaches the client as an
//! event named after its topic.
//!
//! A malformed packet closes this session only.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{json, Value};
use tidegate_hub::{Message, Pattern, SharedMessage, Subscriber};

use super::subscriptions::{self, Outcome, Refused};
use super::CloseReason;
use crate::auth::{authorize, now_s, Grants};
use crate::context::PushContext;
use crate::delivery::{cached_base64, cached_socketio_event, payload_kind, PayloadKind};
use crate::engineio::handshake::{new_sid, Transport};
use crate::session::{EngineSession, Outgoing};
use crate::socketio::binary::{placeholder_num, BinaryAssembler};
use crate::socketio::{SioPacket, SioType};

/// Namespaces one session may join at once.
pub const MAX_NAMESPACES_PER_SESSION: usize = 32;

/// One joined namespace.
#[derive(Debug)]
struct NspSocket {
    patterns: HashMap<String, Pattern>,
    grants: Grants,
}

/// The Socket.IO state of one Engine.IO session.
#[derive(Debug)]
pub struct SocketIoApp {
    sub: Subscriber,
    nsps: HashMap<String, NspSocket>,
    pending: Option<BinaryAssembler>,
}

fn close(why: impl Into<String>) -> CloseReason {
    CloseReason(why.into())
}

impl SocketIoApp {
    /// A session with no namespace joined yet.
    pub fn new(ctx: &PushContext) -> Self {
        SocketIoApp {
            sub: ctx.hub.subscriber(ctx.config.subscriber_options()),
            nsps: HashMap::new(),
            pending: None,
        }
    }

    /// The session's hub queue.
    pub fn subscriber(&self) -> &Subscriber {
        &self.sub
    }

    /// A text Engine.IO message: a Socket.IO packet.
    pub async fn on_text(
        &mut self,
        text: &str,
        s: &EngineSession,
        ctx: &PushContext,
    ) -> Result<(), CloseReason> {
        if self.pending.is_some() {
            return Err(close("text packet while binary attachments were due"));
        }
        let p = SioPacket::decode(text).map_err(|e| close(format!("socket.io: {e}")))?;
        if p.kind.is_binary() && p.attachments > 0 {
            self.pending = Some(BinaryAssembler::new(p));
            return Ok(());
        }
        self.on_packet(p, Vec::new(), s, ctx).await
    }

    /// A binary Engine.IO message: the next attachment.
    pub async fn on_binary(
        &mut self,
        b: Bytes,
        s: &EngineSession,
        ctx: &PushContext,
    ) -> Result<(), CloseReason> {
        let Some(mut a) = self.pending.take() else {
            return Err(close("binary message with no binary packet pending"));
        };
        a.push(b);
        if !a.is_complete() {
            self.pending = Some(a);
            return Ok(());
        }
        let (p, parts) = a.finish();
        self.on_packet(p, parts, s, ctx).await
    }

    async fn on_packet(
        &mut self,
        p: SioPacket,
        parts: Vec<Bytes>,
        s: &EngineSession,
        ctx: &PushContext,
    ) -> Result<(), CloseReason> {
        match p.kind {
            SioType::Connect => {
                self.connect(&p, s, ctx);
                Ok(())
            }
            SioType::Disconnect => {
                self.leave(&p.nsp);
                Ok(())
            }
            SioType::Event | SioType::BinaryEvent => {
                if !self.nsps.contains_key(&p.nsp) {
                    return Err(close(format!(
                        "event on namespace {} before CONNECT",
                        p.nsp
                    )));
                }
                self.event(p, parts, s, ctx).await;
                Ok(())
            }
            // Acks from the client answer server events with acks, which
            // Tidegate never asks for.
            SioType::Ack | SioType::BinaryAck => Ok(()),
            SioType::ConnectError => Err(close("CONNECT_ERROR from a client")),
        }
    }

    fn connect(&mut self, p: &SioPacket, s: &EngineSession, ctx: &PushContext) {
        if !ctx.config.has_namespace(&p.nsp) {
            let e = SioPacket::new(
                SioType::ConnectError,
                &p.nsp,
                Some(json!({"message": "Invalid namespace"})),
            );
            s.send_text(format!("4{}", e.encode()));
            return;
        }
        if self.nsps.len() >= MAX_NAMESPACES_PER_SESSION && !self.nsps.contains_key(&p.nsp) {
            let e = SioPacket::new(
                SioType::ConnectError,
                &p.nsp,
                Some(json!({"message": "Too many namespaces"})),
            );
            s.send_text(format!("4{}", e.encode()));
            return;
        }
        let token = p
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .and_then(Value::as_str);
        let grants = match authorize(&ctx.config, token, now_s()) {
            Ok(g) => g,
            Err(e) => {
                let refusal = SioPacket::new(
                    SioType::ConnectError,
                    &p.nsp,
                    Some(json!({"message": e.to_string()})),
                );
                s.send_text(format!("4{}", refusal.encode()));
                return;
            }
        };
        if let Some(old) = self.nsps.get_mut(&p.nsp) {
            old.grants = grants;
        } else {
            let sock = NspSocket {
                patterns: HashMap::new(),
                grants,
            };
            self.nsps.insert(p.nsp.clone(), sock);
        }
        let ok = SioPacket::new(SioType::Connect, &p.nsp, Some(json!({"sid": new_sid()})));
        let mut out = vec![text(&ok)];
        if ctx.config.conformance {
            let auth = p.data.clone().unwrap_or(Value::Null);
            let ev = SioPacket::new(SioType::Event, &p.nsp, Some(json!(["auth", auth])));
            out.push(text(&ev));
        }
        s.send(out);
    }

    fn leave(&mut self, nsp: &str) {
        let Some(gone) = self.nsps.remove(nsp) else {
            return;
        };
        for p in gone.patterns.keys() {
            if !self.nsps.values().any(|n| n.patterns.contains_key(p)) {
                self.sub.unsubscribe(p);
            }
        }
    }

    async fn event(
        &mut self,
        p: SioPacket,
        parts: Vec<Bytes>,
        s: &EngineSession,
        ctx: &PushContext,
    ) {
        let Some((name, args)) = p.event() else {
            return;
        };
        let reply: Option<Value> = match name {
            "subscribe" => Some(self.subscribe(&p.nsp, args, ctx)),
            "unsubscribe" => Some(self.unsubscribe(&p.nsp, args)),
            "publish" => {
                let grants = self.nsps.get(&p.nsp).map(|n| &n.grants);
                Some(publish(args, &parts, grants, ctx).await)
            }
            "message" if ctx.config.conformance => {
                let mut a = vec![json!("message-back")];
                a.extend(args.iter().cloned());
                let mut back = SioPacket::new(p.kind, &p.nsp, Some(Value::Array(a)));
                back.attachments = parts.len();
                let mut out = vec![text(&back)];
                out.extend(parts.iter().map(|b| Outgoing::Binary {
                    raw: b.clone(),
                    base64: None,
                }));
                s.send(out);
                None
            }
            "message-with-ack" if ctx.config.conformance => Some(Value::Array(args.to_vec())),
            _ => None,
        };
        if let (Some(id), Some(reply)) = (p.id, reply) {
            let args = match reply {
                Value::Array(a) if name == "message-with-ack" => a,
                other => vec![other],
            };
            let kind = if name == "message-with-ack" && !parts.is_empty() {
                SioType::BinaryAck
            } else {
                SioType::Ack
            };
            let mut ack = SioPacket::new(kind, &p.nsp, Some(Value::Array(args)));
            ack.id = Some(id);
            let mut out = vec![text(&ack)];
            if kind == SioType::BinaryAck {
                ack.attachments = parts.len();
                out = vec![text(&ack)];
                out.extend(parts.iter().map(|b| Outgoing::Binary {
                    raw: b.clone(),
                    base64: None,
                }));
            }
            s.send(out);
        }
    }

    fn subscribe(&mut self, nsp: &str, args: &[Value], ctx: &PushContext) -> Value {
        let Some(sock) = self.nsps.get_mut(nsp) else {
            return Value::Null;
        };
        let (allowed, refused): (Vec<String>, Vec<String>) = pattern_list(args)
            .into_iter()
            .partition(|p| sock.grants.may_subscribe(p));
        let mut o = subscriptions::subscribe(&mut self.sub, &allowed, ctx.config.max_subscriptions);
        o.refused.extend(refused.into_iter().map(|pattern| Refused {
            pattern,
            reason: "not allowed by the token".into(),
        }));
        for p in &o.accepted {
            if let Ok(parsed) = Pattern::parse(p) {
                sock.patterns.insert(p.clone(), parsed);
            }
        }
        outcome_json(&o)
    }

    fn unsubscribe(&mut self, nsp: &str, args: &[Value]) -> Value {
        let patterns = pattern_list(args);
        let mut o = Outcome::default();
        for p in patterns {
            let held = self
                .nsps
                .get_mut(nsp)
                .is_some_and(|n| n.patterns.remove(&p).is_some());
            if !held {
                o.refused.push(Refused {
                    pattern: p,
                    reason: "not subscribed".into(),
                });
                continue;
            }
            if !self.nsps.values().any(|n| n.patterns.contains_key(&p)) {
                self.sub.unsubscribe(&p);
            }
            o.accepted.push(p);
        }
        outcome_json(&o)
    }

    /// Encodes hub messages as events, for every namespace subscribed to
    /// their topic.
    pub fn deliver(&self, msgs: &[SharedMessage], transport: Transport, out: &mut Vec<Outgoing>) {
        let mut with_patterns = self.nsps.iter().filter(|(_, n)| !n.patterns.is_empty());
        let only = match (with_patterns.next(), with_patterns.next()) {
            (Some((nsp, _)), None) => Some(nsp.as_str()),
            _ => None,
        };
        for m in msgs {
            match only {
                // The common case: one namespace holds every subscription,
                // so no pattern needs matching here (the hub did it).
                Some(nsp) => push_event(m, nsp, transport, out),
                None => {
                    for (nsp, n) in &self.nsps {
                        if n.patterns.values().any(|p| p.matches(&m.topic)) {
                            push_event(m, nsp, transport, out);
                        }
                    }
                }
            }
        }
    }
}

fn push_event(m: &Message, nsp: &str, transport: Transport, out: &mut Vec<Outgoing>) {
    out.push(Outgoing::Text(cached_socketio_event(m, nsp)));
    if payload_kind(&m.payload) == PayloadKind::Binary {
        let base64 = (transport == Transport::Polling).then(|| cached_base64(m));
        out.push(Outgoing::Binary {
            raw: m.payload.clone(),
            base64,
        });
    }
}

fn text(p: &SioPacket) -> Outgoing {
    Outgoing::Text(Bytes::from(format!("4{}", p.encode())))
}

/// `subscribe` takes a list of patterns (or one pattern, or several
/// arguments).
fn pattern_list(args: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for a in args {
        match a {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => {
                out.extend(items.iter().filter_map(|v| v.as_str().map(str::to_owned)))
            }
            _ => {}
        }
    }
    out
}

fn outcome_json(o: &Outcome) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

/// `publish(topic, payload)`: JSON payloads are published as their JSON
/// text, strings as their UTF-8 bytes, binary attachments as the bytes.
async fn publish(
    args: &[Value],
    parts: &[Bytes],
    grants: Option<&Grants>,
    ctx: &PushContext,
) -> Value {
    let Some(Value::String(topic)) = args.first() else {
        return json!({"ok": false, "reason": "publish(topic, payload): topic must be a string"});
    };
    if !grants.is_some_and(|g| g.may_publish(topic)) {
        return json!({"ok": false, "reason": "not allowed by the token"});
    }
    let payload = match args.get(1) {
        None | Some(Value::Null) => Bytes::new(),
        Some(Value::String(s)) => Bytes::from(s.clone()),
        Some(v) => match placeholder_num(v) {
            Some(n) => match parts.get(n) {
                Some(b) => b.clone(),
                None => return json!({"ok": false, "reason": "missing attachment"}),
            },
            None => Bytes::from(v.to_string()),
        },
    };
    match ctx.hub.publish(Message::new(topic.clone(), payload)).await {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "reason": e.to_string()}),
    }
}
