//! Socket.IO v5 on one Engine.IO session: namespaces, CONNECT (with an auth
//! payload), EVENT / ACK (binary ones with attachments), DISCONNECT, and
//! Tidegate's events: `subscribe` / `unsubscribe` (a list of topic
//! patterns, acked with what was accepted and what was refused and why),
//! `publish` (topic, payload). Each hub message reaches the client as an
//! event named after its topic.
//!
//! With recovery on (`[push] recovery_window_ms`), CONNECT answers carry
//! the session's `pid`, every event carries its offset as a last string
//! argument, and a CONNECT with `{pid, offset}` takes a lost session over
//! (see [`crate::recovery`]).
//!
//! A malformed packet closes this session only.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};
use tidegate_hub::{Message, SharedMessage, Subscriber};

use super::subscriptions::{self, Outcome, Refused};
use super::App;
use super::CloseReason;
use crate::auth::Grants;
use crate::context::PushContext;
use crate::delivery::{
    cached_base64, cached_socketio_event, cached_socketio_event_with_offset, is_binary_event,
};
use crate::engineio::handshake::{new_sid, Transport};
use crate::recovery::{self, RecoveryHandle, Since, Ticket};
use crate::session::{EngineSession, Outgoing};
use crate::socketio::binary::{placeholder_num, BinaryAssembler};
use crate::socketio::{SioPacket, SioType};

/// Namespaces one session may join at once.
pub const MAX_NAMESPACES_PER_SESSION: usize = 32;

/// One joined namespace.
#[derive(Debug)]
struct NspSocket {
    /// The namespace.
    name: Arc<str>,
    /// The socket id given in the CONNECT answer (kept across a recovery).
    sid: String,
    /// Its subscriptions, each with the history sequence it started at (0
    /// with recovery off).
    subscriptions: Since,
    /// After a recovery: messages before this sequence were replayed (or
    /// sent before), so the live queue skips them.
    live_from: u64,
    grants: Grants,
    /// Events are sent: false while parked and, after a recovery, until the
    /// client CONNECTs this namespace again.
    connected: bool,
}

/// The Socket.IO state of one Engine.IO session.
#[derive(Debug)]
pub struct SocketIoApp {
    sub: Subscriber,
    nsps: HashMap<String, NspSocket>,
    pending: Option<BinaryAssembler>,
    /// The session's id for recovery, with recovery on.
    recovery: Option<Ticket>,
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
            recovery: None,
        }
    }

    /// Where a reconnecting client asks for this session's state.
    pub fn recovery_handle(&self) -> Option<Arc<RecoveryHandle>> {
        self.recovery.as_ref().map(|t| t.handle().clone())
    }

    /// Whether there is anything to recover (a namespace still joined).
    pub fn recoverable(&self) -> bool {
        self.recovery.is_some() && !self.nsps.is_empty()
    }

    /// The transport is gone: events are no longer sent.
    pub fn detach(&mut self) {
        self.nsps.values_mut().for_each(|n| n.connected = false);
        // Attachments cut off with the transport never complete.
        self.pending = None;
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
                self.connect(&p, s, ctx).await;
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

    async fn connect(&mut self, p: &SioPacket, s: &EngineSession, ctx: &PushContext) {
        if !ctx.config.has_namespace(&p.nsp) {
            s.send([connect_error(&p.nsp, "Invalid namespace")]);
            return;
        }
        if self.nsps.len() >= MAX_NAMESPACES_PER_SESSION && !self.nsps.contains_key(&p.nsp) {
            s.send([connect_error(&p.nsp, "Too many namespaces")]);
            return;
        }
        let field = |k: &str| {
            p.data
                .as_ref()
                .and_then(|d| d.get(k))
                .and_then(Value::as_str)
        };
        let grants = match ctx.authorize(field("token")) {
            Ok(g) => g,
            Err(e) => {
                s.send([connect_error(&p.nsp, &e.to_string())]);
                return;
            }
        };
        // A client that had a session sends its pid and the offset of the
        // last event it received (none if it received none).
        let mut replay = None;
        let mut hide_pid = false;
        if let (true, Some(pid)) = (ctx.config.recovery(), field("pid")) {
            let offset = field("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
            replay = self.recover(pid, offset, &p.nsp, &grants, ctx).await;
            ctx.recovery.count(replay.is_some());
            if replay.is_none() && self.recovery.as_ref().is_some_and(|t| t.pid() == pid) {
                // A namespace of this very session that cannot be replayed
                // starts afresh, and its answer carries no pid: the same
                // pid would tell the client it was recovered.
                self.leave(&p.nsp);
                hide_pid = true;
            }
        }
        if self.recovery.is_none() && ctx.config.recovery() {
            self.recovery = ctx.recovery.register(ctx.config.max_sessions);
        }
        let sock = match self.nsps.get_mut(&p.nsp) {
            Some(sock) if replay.is_some() => sock,
            Some(sock) => {
                // A fresh CONNECT on a namespace already joined: a new socket.
                sock.sid = new_sid();
                sock
            }
            None => self.nsps.entry(p.nsp.clone()).or_insert_with(|| NspSocket {
                name: Arc::from(p.nsp.as_str()),
                sid: new_sid(),
                subscriptions: Since::default(),
                live_from: 0,
                grants: grants.clone(),
                connected: true,
            }),
        };
        sock.grants = grants;
        sock.connected = true;
        let mut answer = json!({"sid": sock.sid});
        if let (Some(t), false) = (&self.recovery, hide_pid) {
            answer["pid"] = json!(t.pid());
        }
        let ok = SioPacket::new(SioType::Connect, &p.nsp, Some(answer));
        let mut out = vec![text(&ok)];
        if ctx.config.conformance {
            let auth = p.data.clone().unwrap_or(Value::Null);
            let ev = SioPacket::new(SioType::Event, &p.nsp, Some(json!(["auth", auth])));
            out.push(text(&ev));
        }
        if let Some((missed, live_from)) = replay {
            sock.live_from = live_from;
            for m in &missed {
                push_event(m, &sock.name, true, s.transport(), &mut out);
            }
        }
        s.send(out);
    }

    /// Takes over the session `pid` for namespace `nsp`, if the history
    /// still holds everything its subscriptions missed after `offset`:
    /// returns those messages and the sequence live delivery goes on from;
    /// None for a clean start.
    async fn recover(
        &mut self,
        pid: &str,
        offset: u64,
        nsp: &str,
        grants: &Grants,
        ctx: &PushContext,
    ) -> Option<(Vec<SharedMessage>, u64)> {
        let history = ctx.history.as_ref()?;
        let missed = |app: &SocketIoApp| {
            let n = app
                .nsps
                .get(nsp)
                .filter(|n| !n.connected && n.grants.subject() == grants.subject())?;
            recovery::replay(history, offset, &n.subscriptions).ok()
        };
        if self.recovery.as_ref().is_some_and(|t| t.pid() == pid) {
            // Another namespace of a session this one already took over.
            return missed(self);
        }
        if !self.nsps.is_empty() {
            // This session has state of its own; it cannot adopt another.
            return None;
        }
        match ctx.recovery.take(pid).await {
            Some(App::SocketIo(old)) => {
                // Anything that cannot be replayed is dropped: its
                // subscriptions and id go away.
                let replay = missed(&old)?;
                *self = *old;
                Some(replay)
            }
            _ => None,
        }
    }

    fn leave(&mut self, nsp: &str) {
        let Some(gone) = self.nsps.remove(nsp) else {
            return;
        };
        for p in gone.subscriptions.patterns() {
            if !self.nsps.values().any(|n| n.subscriptions.contains(p)) {
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
        let from = recovery::now(ctx.history.as_ref());
        let mut o = subscriptions::subscribe(&mut self.sub, &allowed, ctx.config.max_subscriptions);
        o.refused.extend(refused.into_iter().map(|pattern| Refused {
            pattern,
            reason: "not allowed by the token".into(),
        }));
        for p in &o.accepted {
            sock.subscriptions.add(p, from);
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
                .is_some_and(|n| n.subscriptions.remove(&p));
            if !held {
                o.refused.push(Refused {
                    pattern: p,
                    reason: "not subscribed".into(),
                });
                continue;
            }
            if !self.nsps.values().any(|n| n.subscriptions.contains(&p)) {
                self.sub.unsubscribe(&p);
            }
            o.accepted.push(p);
        }
        outcome_json(&o)
    }

    /// Encodes hub messages as events, for every namespace subscribed to
    /// their topic and connected (with recovery on, each carries its
    /// history sequence as offset, and what a recovery replayed is
    /// skipped).
    pub fn deliver(
        &mut self,
        msgs: &[SharedMessage],
        transport: Transport,
        out: &mut Vec<Outgoing>,
    ) {
        let mut with_patterns = self.nsps.values().filter(|n| !n.subscriptions.is_empty());
        let only = match (with_patterns.next(), with_patterns.next()) {
            (Some(n), None) => Some(n),
            _ => None,
        };
        let with_offset = self.recovery.is_some();
        let one = |m: &SharedMessage, n: &NspSocket, out: &mut Vec<Outgoing>| {
            if n.connected && m.seq().is_none_or(|s| s >= n.live_from) {
                push_event(m, &n.name, with_offset, transport, out);
            }
        };
        for m in msgs {
            match only {
                // The common case: one namespace holds every subscription,
                // so no pattern needs matching here (the hub did it).
                Some(n) => one(m, n, out),
                None => {
                    for n in self.nsps.values() {
                        if n.subscriptions.matches(&m.topic) {
                            one(m, n, out);
                        }
                    }
                }
            }
        }
    }
}

fn push_event(
    m: &Message,
    nsp: &str,
    with_offset: bool,
    transport: Transport,
    out: &mut Vec<Outgoing>,
) {
    let event = if with_offset {
        cached_socketio_event_with_offset(m, nsp)
    } else {
        cached_socketio_event(m, nsp)
    };
    let binary = is_binary_event(&event);
    out.push(Outgoing::Text(event));
    if binary {
        let base64 = (transport == Transport::Polling).then(|| cached_base64(m));
        out.push(Outgoing::Binary {
            raw: m.payload.clone(),
            base64,
        });
    }
}

fn connect_error(nsp: &str, why: &str) -> Outgoing {
    text(&SioPacket::new(
        SioType::ConnectError,
        nsp,
        Some(json!({ "message": why })),
    ))
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
