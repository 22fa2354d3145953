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
//! (see [`crate::recovery`]). In cluster mode the offset also says where
//! the session is in the backbone, its subscriptions are announced to the
//! other nodes, and a session another node served is recovered from the
//! backbone ([`crate::recovery::cluster`]). A recovery that does not
//! succeed once the server is shutting down is not answered: the client
//! keeps its `pid` and offset for another node ([`crate::shutdown`]).
//!
//! A malformed packet closes this session only.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};
use tidegate_hub::backbone::{position, Positions};
use tidegate_hub::{Message, Pattern, SharedMessage, Subscriber};
use tracing::debug;

use super::subscriptions::{self, Outcome, Refused};
use super::App;
use super::CloseReason;
use crate::auth::Grants;
use crate::context::PushContext;
use crate::delivery::{
    cached_base64, cached_socketio_event, cached_socketio_event_with_offset, is_binary_event,
    socketio_event_with_offset_text,
};
use crate::engineio::handshake::{new_sid, Transport};
use crate::recovery::cluster::{self, Op, Subscription, Update};
use crate::recovery::{self, Claim, Protocol, RecoveryHandle, Since, Ticket, MAX_REPLAY};
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
    /// The sequence an event without one (replayed from the backbone)
    /// carries in its offset: just before this node's live ones.
    seq_floor: u64,
    /// Cluster mode: where each subscription started in the backbone.
    starts: HashMap<String, Arc<Positions>>,
    /// Cluster mode: per backbone partition, the position after the last
    /// message of it sent (the positions part of each event's offset).
    positions: Positions,
    /// After a recovery from the backbone: per partition, the end of what
    /// was replayed; live messages before it were sent already.
    replayed_to: Positions,
    /// Cluster mode: the version of its last announcement.
    announced: u64,
    /// Cluster mode: its last announcement was dropped (the backbone was
    /// full), so the next one carries the whole state.
    dirty: bool,
    grants: Grants,
    /// Events are sent: false while parked and, after a recovery, until the
    /// client CONNECTs this namespace again.
    connected: bool,
}

/// The Socket.IO state of one Engine.IO session.
#[derive(Debug)]
pub struct SocketIoApp {
    sub: Subscriber,
    /// Boxed: a map's table holds room for several entries, and a session
    /// usually joins one namespace, so each empty slot costs a pointer, not
    /// a whole socket (idle sessions, BENCHMARKS.md).
    nsps: HashMap<String, Box<NspSocket>>,
    pending: Option<BinaryAssembler>,
    /// The session's id for recovery, with recovery on.
    recovery: Option<Ticket>,
    /// This incarnation of the session, in what is announced.
    owner: String,
    /// The cluster backbone, when events carry cluster offsets and
    /// subscriptions are announced ([`PushContext::cluster_recovery`]).
    backbone: Option<Arc<dyn tidegate_hub::Backbone>>,
    /// A failed recovery's subscriptions were undone while their messages
    /// may still be queued: deliveries are matched against each
    /// namespace's subscriptions until the queue has been empty once.
    unmatched_queued: bool,
    /// Pings sent since the session last announced its whole state
    /// (cluster mode, `[push] cluster_reannounce_ms`).
    pings_since_state: u32,
    /// Packets to queue only once what is queued now has been written
    /// (conformance mode's `auth` events, one per CONNECT handled before
    /// the next write; [`Self::take_after_write`]). Boxed: 8 bytes in
    /// every session instead of a `Vec`'s 24, and empty in every session
    /// outside conformance mode (idle sessions, BENCHMARKS.md).
    #[allow(clippy::box_collection)]
    after_write: Option<Box<Vec<Outgoing>>>,
}

/// How long a recovery from the backbone may take: well within the ping
/// timeout, as the session answers no ping meanwhile.
fn recovery_time(ctx: &PushContext) -> std::time::Duration {
    std::time::Duration::from_millis((ctx.config.ping_timeout_ms / 2).clamp(1_000, 10_000))
}

/// What offset events carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offsets {
    /// None (recovery off).
    None,
    /// The hub sequence, shared by every session.
    Seq,
    /// The sequence and the session's backbone positions.
    Cluster,
}

/// A recovery's outcome: what to replay and where live delivery goes on.
#[derive(Debug, Default)]
struct Recovered {
    missed: Vec<SharedMessage>,
    live_from: u64,
    /// The client's positions, from its offset (cluster mode).
    had: Positions,
    /// Recovered from the backbone: where the replay ended.
    replayed_to: Positions,
}

fn close(why: impl Into<String>) -> CloseReason {
    CloseReason(why.into())
}

impl SocketIoApp {
    /// A session with no namespace joined yet.
    pub fn new(ctx: &PushContext) -> Self {
        let backbone = ctx
            .hub
            .backbone()
            .filter(|_| ctx.cluster_recovery())
            .cloned();
        // A random phase: sessions that connected together (a storm) do
        // not all announce in the same round of pings. Drawn in cluster
        // mode only, the one that announces.
        let pings_since_state = match (&backbone, ctx.config.reannounce_every_pings()) {
            (Some(_), Some(every)) => rand::Rng::gen_range(&mut rand::thread_rng(), 0..every),
            _ => 0,
        };
        SocketIoApp {
            sub: ctx.hub.subscriber(ctx.config.subscriber_options()),
            nsps: HashMap::new(),
            pending: None,
            recovery: None,
            owner: new_sid(),
            backbone,
            unmatched_queued: false,
            pings_since_state,
            after_write: None,
        }
    }

    /// Called at each ping the session sends: in cluster mode, every
    /// `cluster_reannounce_ms` (in whole pings) it announces each
    /// namespace's whole state again, so that a node started since it
    /// subscribed knows it whole and can recover it too.
    pub fn on_ping(&mut self, ctx: &PushContext) {
        let Some(every) = ctx.config.reannounce_every_pings() else {
            return;
        };
        if !self.cluster() || self.recovery.is_none() {
            return;
        }
        self.pings_since_state += 1;
        if self.pings_since_state < every {
            return;
        }
        self.pings_since_state = 0;
        let connected: Vec<String> = self
            .nsps
            .iter()
            .filter(|(_, n)| n.connected)
            .map(|(nsp, _)| nsp.clone())
            .collect();
        for nsp in connected {
            self.announce_state(&nsp, ctx);
        }
    }

    /// Cluster mode with recovery on: events carry cluster offsets and
    /// subscriptions are announced.
    fn cluster(&self) -> bool {
        self.backbone.is_some()
    }

    fn offsets(&self) -> Offsets {
        match (&self.recovery, self.cluster()) {
            (None, _) => Offsets::None,
            (Some(_), false) => Offsets::Seq,
            (Some(_), true) => Offsets::Cluster,
        }
    }

    /// Announces a change to namespace `nsp` (recoverable sessions in
    /// cluster mode only). After an announcement the backbone could not
    /// take, the next one is the whole state instead: the registry's copy
    /// is whole again from there.
    fn announce(&mut self, nsp: &str, op: Op, ctx: &PushContext) {
        let op = if self.nsps.get(nsp).is_some_and(|n| n.dirty) {
            let Some(own) = self.state(nsp) else { return };
            own
        } else {
            op
        };
        if let Some(u) = self.update(nsp, op) {
            let sent = ctx.announce_now(u);
            if let Some(n) = self.nsps.get_mut(nsp) {
                n.dirty = !sent;
            }
        }
    }

    /// Namespace `nsp`'s whole state, as an `Own`.
    fn state(&self, nsp: &str) -> Option<Op> {
        let n = self.nsps.get(nsp)?;
        Some(Op::Own {
            subject: n.grants.subject().map(str::to_owned),
            sid: Some(n.sid.clone()),
            groups: cluster::groups(
                n.subscriptions
                    .patterns()
                    .map(|p| (p.to_owned(), n.starts.get(p).cloned().unwrap_or_default())),
            ),
        })
    }

    /// The next announcement about namespace `nsp` of this session (`Own`
    /// starts its count afresh). None unless recoverable in cluster mode.
    fn update(&mut self, nsp: &str, op: Op) -> Option<Update> {
        let t = self.recovery.as_ref().filter(|_| self.cluster())?;
        let n = self.nsps.get_mut(nsp)?;
        n.announced = match op {
            Op::Own { .. } => 1,
            _ => n.announced + 1,
        };
        Some(Update {
            key: cluster::key_of(t.pid()),
            nsp: nsp.to_owned(),
            owner: self.owner.clone(),
            version: n.announced,
            op,
        })
    }

    /// That namespace `nsp` of this session is gone.
    fn gone(&self, nsp: &str) -> Option<Update> {
        let t = self.recovery.as_ref().filter(|_| self.cluster())?;
        Some(Update {
            key: cluster::key_of(t.pid()),
            nsp: nsp.to_owned(),
            owner: self.owner.clone(),
            version: 0,
            op: Op::Gone,
        })
    }

    /// Announces namespace `nsp`'s whole state (after a fresh CONNECT or
    /// a recovery from the backbone): from now on this session owns it.
    fn announce_state(&mut self, nsp: &str, ctx: &PushContext) {
        if let Some(op) = self.state(nsp) {
            self.announce(nsp, op, ctx);
        }
    }

    /// The session ended for good (not recovered in time, or closed): tells
    /// the other nodes to forget it.
    pub fn announce_gone(&self, ctx: &PushContext) {
        for nsp in self.nsps.keys() {
            if let Some(u) = self.gone(nsp) {
                ctx.announce_now(u);
            }
        }
    }

    /// Where a reconnecting client asks for this session's state.
    pub fn recovery_handle(&self) -> Option<Arc<RecoveryHandle>> {
        self.recovery.as_ref().map(|t| t.handle().clone())
    }

    /// No namespace joined: a connection that has not CONNECTed yet
    /// counts against `connect_timeout_ms`.
    pub fn awaiting_connect(&self) -> bool {
        self.nsps.is_empty()
    }

    /// Whether this session's state can be recovered (recovery on, a
    /// namespace joined).
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
                self.leave(&p.nsp, ctx);
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
            let offset = field("offset").unwrap_or("0");
            replay = self.recover(pid, offset, &p.nsp, &grants, ctx).await;
            if replay.is_none() && ctx.shutting_down() {
                // Given up for the shutdown (or failed during it): no
                // answer at all. A clean start's new pid would replace the
                // old one in socket.io-client, which could then no longer
                // recover the session on another node; unanswered, the
                // client sees the session's close (which the task sends
                // next) and reconnects elsewhere with its pid and offset.
                debug!(nsp = %p.nsp, "recovery given up at shutdown; CONNECT not answered");
                return;
            }
            ctx.recovery.count(replay.is_some());
            if replay.is_none() && self.recovery.as_ref().is_some_and(|t| t.pid() == pid) {
                // A namespace of this very session that cannot be replayed
                // starts afresh, and its answer carries no pid: the same
                // pid would tell the client it was recovered.
                self.leave(&p.nsp, ctx);
                hide_pid = true;
            }
        }
        if self.recovery.is_none() && ctx.config.recovery() {
            self.recovery = ctx.recovery.register(
                ctx.config.max_sessions,
                Claim::new(Protocol::SocketIo, &grants),
            );
        }
        let tag = cluster::owner_tag(&self.owner).to_owned();
        let offsets = match self.cluster() {
            true => Offsets::Cluster,
            false => Offsets::Seq,
        };
        let sock = match self.nsps.get_mut(&p.nsp) {
            Some(sock) if replay.is_some() => sock,
            Some(sock) => {
                // A fresh CONNECT on a namespace already joined: a new socket.
                sock.sid = new_sid();
                sock
            }
            None => self.nsps.entry(p.nsp.clone()).or_insert_with(|| {
                Box::new(NspSocket {
                    name: Arc::from(p.nsp.as_str()),
                    sid: new_sid(),
                    subscriptions: Since::default(),
                    live_from: 0,
                    seq_floor: 0,
                    starts: HashMap::new(),
                    positions: Positions::new(),
                    replayed_to: Positions::new(),
                    announced: 0,
                    dirty: false,
                    grants: grants.clone(),
                    connected: true,
                })
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
            // The reference test server emits the handshake's auth payload
            // (`{}` when there is none) from its `connection` handler, in a
            // write of its own after the CONNECT reply; the protocol's test
            // suite waits for the two one after the other and misses the
            // second when both come in one websocket read.
            let auth = p.data.clone().unwrap_or_else(|| json!({}));
            let ev = text(&SioPacket::new(
                SioType::Event,
                &p.nsp,
                Some(json!(["auth", auth])),
            ));
            if s.transport() == Transport::WebSocket {
                self.after_write.get_or_insert_with(Box::default).push(ev);
            } else {
                out.push(ev);
            }
        }
        let recovered = replay.is_some();
        if let Some(r) = replay {
            sock.live_from = r.live_from;
            sock.positions = r.had;
            for m in &r.missed {
                sock.send(m, offsets, &tag, s.transport(), &mut out);
            }
            // Set after the replay, which is all before it: live messages
            // before these ends were replayed, and the client has
            // everything it wanted before them.
            for (p, end) in r.replayed_to {
                for at in [
                    sock.replayed_to.entry(p).or_insert(end),
                    sock.positions.entry(p).or_insert(end),
                ] {
                    *at = (*at).max(end);
                }
            }
        }
        s.send(out);
        if !recovered {
            self.announce_state(&p.nsp, ctx);
        }
    }

    /// The packets to queue now that the outbox was written, if any.
    pub fn take_after_write(&mut self) -> Option<Vec<Outgoing>> {
        self.after_write.take().map(|b| *b)
    }

    /// Takes over the session `pid` for namespace `nsp`, if the history
    /// still holds everything its subscriptions missed after `offset` (the
    /// client's last): from this node's history when the session was
    /// here, else, in cluster mode, from the backbone. None for a clean
    /// start — or, once the server shuts down, for no answer (the waits
    /// for another session's state and for the backbone are given up then).
    async fn recover(
        &mut self,
        pid: &str,
        offset: &str,
        nsp: &str,
        grants: &Grants,
        ctx: &PushContext,
    ) -> Option<Recovered> {
        let o = cluster::parse_offset(offset);
        if let Some(r) = self.recover_here(pid, &o, nsp, grants, ctx).await {
            return Some(r);
        }
        self.recover_elsewhere(pid, o.positions, nsp, grants, ctx)
            .await
    }

    /// [`SocketIoApp::recover`] from a session this node holds (live or
    /// parked) and its history.
    async fn recover_here(
        &mut self,
        pid: &str,
        offset: &cluster::ClientOffset,
        nsp: &str,
        grants: &Grants,
        ctx: &PushContext,
    ) -> Option<Recovered> {
        let history = ctx.history.as_ref()?;
        let (seq, had) = (offset.seq, &offset.positions);
        let missed = |app: &SocketIoApp| {
            let n = app
                .nsps
                .get(nsp)
                .filter(|n| !n.connected && n.grants.subject() == grants.subject())?;
            let (mut missed, live_from) = recovery::replay(history, seq, &n.subscriptions).ok()?;
            // What the client's positions say it had (a backbone replay
            // on another node sent it, or this one before).
            missed
                .retain(|m| position(m).is_none_or(|(p, at)| had.get(&p).is_none_or(|h| at >= *h)));
            Some(Recovered {
                missed,
                live_from,
                had: had.clone(),
                replayed_to: Positions::new(),
            })
        };
        if self.recovery.as_ref().is_some_and(|t| t.pid() == pid) {
            // Another namespace of a session this one already took over.
            if self.drop_disallowed(nsp, grants) {
                self.announce_state(nsp, ctx);
            }
            return missed(self);
        }
        if !self.nsps.is_empty() {
            // This session has state of its own; it cannot adopt another.
            return None;
        }
        // A session of another subject is not even asked (asking closes
        // its transport).
        let claim = Claim::new(Protocol::SocketIo, grants);
        match ctx.recovery.take(pid, &claim, &ctx.shutdown).await {
            Ok(App::SocketIo(old)) => {
                // In cluster mode the client may have been recovered on
                // another node since: then this copy is stale (its
                // subscriptions and sequence are not the client's).
                let stale = old.cluster()
                    && (offset
                        .tag
                        .as_deref()
                        .is_some_and(|t| t != cluster::owner_tag(&old.owner))
                        || ctx.cluster_sessions.as_ref().is_some_and(|r| {
                            r.get(&cluster::key_of(pid), nsp)
                                .is_some_and(|e| e.owner != old.owner)
                        })
                        // The client lost part of a replay from the
                        // backbone: that part is in no history here.
                        || old.nsps.get(nsp).is_some_and(|n| {
                            n.replayed_to
                                .iter()
                                .any(|(p, end)| had.get(p).is_none_or(|h| h < end))
                        }));
                if stale {
                    return None;
                }
                // Anything that cannot be replayed is dropped: its
                // subscriptions and id go away.
                let mut old = old;
                let dropped = old.drop_disallowed(nsp, grants);
                let replay = missed(&old)?;
                *self = *old;
                if dropped {
                    self.announce_state(nsp, ctx);
                }
                Some(replay)
            }
            _ => None,
        }
    }

    /// [`SocketIoApp::recover`] in cluster mode, of a session another node
    /// announced: its subscriptions are put in place here (live first, so
    /// nothing published during the replay is missed), then what it missed
    /// is read from the backbone. Refused (a clean start) when the state
    /// known here is not whole, a subscription cannot be put back, the
    /// backbone cannot replay it in time, or live messages had to be
    /// dropped meanwhile.
    async fn recover_elsewhere(
        &mut self,
        pid: &str,
        had: Positions,
        nsp: &str,
        grants: &Grants,
        ctx: &PushContext,
    ) -> Option<Recovered> {
        let same = self.recovery.as_ref().is_some_and(|t| t.pid() == pid);
        let fresh = self.nsps.is_empty() && self.recovery.is_none();
        if !self.cluster() || self.nsps.contains_key(nsp) || !(same || fresh) {
            return None;
        }
        let registry = ctx.cluster_sessions.as_ref()?.clone();
        let backbone = self.backbone.clone()?;
        let key = cluster::key_of(pid);
        if registry.get(&key, nsp).is_none() {
            debug!(nsp, "cluster recovery: no such session in the registry");
            return None;
        }
        let Ok(_permit) = registry.recoveries.try_acquire() else {
            debug!(nsp, "cluster recovery: too many at once");
            return None;
        };
        // Reserve the id first: the replay is the expensive part.
        let ticket = match self.recovery.take() {
            Some(t) => t,
            None => ctx.recovery.register_as(
                pid,
                ctx.config.max_sessions,
                Claim::new(Protocol::SocketIo, grants),
            )?,
        };
        let deadline = tokio::time::Instant::now() + recovery_time(ctx);
        let replay = tokio::time::timeout_at(
            deadline,
            self.replay_elsewhere(&key, had, nsp, grants, ctx, &*backbone, &registry),
        );
        // The session's task answers nothing else meanwhile, its shutdown
        // included; and at shutdown the backbone reader stops, so the
        // replay would wait for it until the deadline. Given up, it is
        // undone like a failed one, and `connect` answers nothing.
        let outcome = tokio::select! {
            r = replay => r.map_err(|_| "not recovered in time"),
            _ = ctx.shutdown.cancelled() => Err("the server is shutting down"),
        };
        match outcome {
            Ok(Some(r)) => {
                self.recovery = Some(ticket);
                self.announce_state(nsp, ctx);
                ctx.recovery.count_from_backbone();
                Some(r)
            }
            failed => {
                if let Err(why) = failed {
                    debug!(nsp, why, "cluster recovery: not recovered");
                }
                // Put back what this session was (a fresh one drops the
                // reserved id).
                if same {
                    self.recovery = Some(ticket);
                }
                if let Some(n) = self.nsps.remove(nsp) {
                    for p in n.subscriptions.patterns() {
                        if !self.nsps.values().any(|m| m.subscriptions.contains(p)) {
                            self.sub.unsubscribe(p);
                        }
                    }
                    // Its messages may still be queued: match every one
                    // until the queue has been empty once.
                    self.unmatched_queued = true;
                }
                None
            }
        }
    }

    /// The work of [`SocketIoApp::recover_elsewhere`]: on success the
    /// namespace is joined with its subscriptions; on failure what was
    /// subscribed is left for the caller to undo (in `nsps[nsp]`).
    #[allow(clippy::too_many_arguments)]
    async fn replay_elsewhere(
        &mut self,
        key: &str,
        had: Positions,
        nsp: &str,
        grants: &Grants,
        ctx: &PushContext,
        backbone: &dyn tidegate_hub::Backbone,
        registry: &cluster::ClusterSessions,
    ) -> Option<Recovered> {
        // What the other nodes announced up to now must be read here
        // first: the session's last subscriptions, or its recovery
        // elsewhere.
        let not = |why: &str| debug!(nsp, why, "cluster recovery: not recovered");
        let ends = match backbone.positions().await {
            Ok(e) => e,
            Err(e) => {
                not(&e);
                return None;
            }
        };
        while !ends
            .iter()
            .all(|(p, end)| backbone.delivered().get(p).is_some_and(|at| at >= end))
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let Some(entry) = registry.get(key, nsp) else {
            not("the session left the registry");
            return None;
        };
        if !entry.complete || entry.subject.as_deref() != grants.subject() {
            not("the registry's state is not whole, or another subject");
            return None;
        }
        // A subscription made before this node knew where the backbone
        // stood cannot say from where it wanted messages.
        let all = entry.subs();
        if all.iter().any(|(_, starts)| starts.is_empty()) {
            not("a subscription without a start");
            return None;
        }
        let wanted: Vec<String> = all
            .iter()
            .map(|(p, _)| p.clone())
            .filter(|p| grants.may_subscribe(p))
            .collect();
        let start_seq = recovery::now(ctx.history.as_ref());
        let dropped = self.sub.dropped();
        let o = subscriptions::subscribe(&mut self.sub, &wanted, ctx.config.max_subscriptions);
        let mut since = Since::default();
        for p in &o.accepted {
            since.add(p, start_seq);
        }
        let subs: Vec<Subscription> = all
            .into_iter()
            .filter(|(p, _)| o.accepted.contains(p))
            .collect();
        self.nsps.insert(
            nsp.to_owned(),
            Box::new(NspSocket {
                name: Arc::from(nsp),
                sid: entry.sid.unwrap_or_else(new_sid),
                subscriptions: since,
                live_from: 0,
                seq_floor: start_seq.saturating_sub(1),
                starts: subs.iter().cloned().collect(),
                positions: Positions::new(),
                replayed_to: Positions::new(),
                announced: 0,
                dirty: false,
                grants: grants.clone(),
                connected: false,
            }),
        );
        if !o.refused.is_empty() {
            not("a subscription cannot be put back");
            return None;
        }
        let parsed: Vec<(Pattern, Arc<Positions>)> = subs
            .iter()
            .filter_map(|(p, s)| Some((Pattern::parse(p).ok()?, s.clone())))
            .collect();
        let from = cluster::replay_from(&had, &subs);
        let patterns = parsed.iter().map(|(p, _)| p.clone()).collect();
        let replay = backbone
            .replay(from.clone(), patterns, recovery::MAX_CLUSTER_REPLAY)
            .await
            .map_err(|e| not(&e))
            .ok()?;
        if self.sub.dropped() != dropped {
            // Live messages after the replay's end were lost meanwhile.
            not("live messages were dropped during the replay");
            return None;
        }
        let missed: Vec<SharedMessage> = replay
            .messages
            .into_iter()
            .filter(|m| {
                position(m).is_some_and(|(p, at)| cluster::wanted(&parsed, &m.topic, p, at))
            })
            .map(Arc::new)
            .collect();
        if missed.len() > MAX_REPLAY {
            not("more to replay than a session's outbox holds");
            return None;
        }
        Some(Recovered {
            missed,
            live_from: 0,
            had,
            // Only the partitions read: live messages of the others were
            // never replayed.
            replayed_to: replay
                .ends
                .into_iter()
                .filter(|(p, _)| from.contains_key(p))
                .collect(),
        })
    }

    fn leave(&mut self, nsp: &str, ctx: &PushContext) {
        let Some(gone) = self.nsps.remove(nsp) else {
            return;
        };
        if let Some(u) = self.gone(nsp) {
            ctx.announce_now(u);
        }
        for p in gone.subscriptions.patterns() {
            if !self.nsps.values().any(|n| n.subscriptions.contains(p)) {
                self.sub.unsubscribe(p);
            }
        }
        // Its messages may still be queued: they must not reach the
        // namespaces left (see `deliver`).
        self.unmatched_queued = true;
    }

    /// Drops the subscriptions of namespace `nsp` that `grants` (a
    /// recovering client's token) does not allow, before its replay:
    /// recovering with another token gives no more rights than that token.
    /// True when one was dropped.
    fn drop_disallowed(&mut self, nsp: &str, grants: &Grants) -> bool {
        let Some(n) = self.nsps.get_mut(nsp) else {
            return false;
        };
        let refused: Vec<String> = n
            .subscriptions
            .patterns()
            .filter(|p| !grants.may_subscribe(p))
            .map(str::to_owned)
            .collect();
        for p in &refused {
            n.starts.remove(p);
            n.subscriptions.remove(p);
        }
        for p in &refused {
            if !self.nsps.values().any(|n| n.subscriptions.contains(p)) {
                self.sub.unsubscribe(p);
            }
        }
        if !refused.is_empty() {
            debug!(
                nsp,
                dropped = refused.len(),
                "recovery: subscriptions the token no longer allows dropped"
            );
            self.unmatched_queued = true;
        }
        !refused.is_empty()
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
            "subscribe" => {
                let (reply, change) = self.subscribe(&p.nsp, args, ctx);
                // Queued to the backbone before the ack goes out.
                if let Some(op) = change {
                    self.announce(&p.nsp, op, ctx);
                }
                Some(reply)
            }
            "unsubscribe" => {
                let (reply, change) = self.unsubscribe(&p.nsp, args);
                if let Some(op) = change {
                    self.announce(&p.nsp, op, ctx);
                }
                Some(reply)
            }
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

    /// Subscribes namespace `nsp`; the answer, and in cluster mode what to
    /// announce.
    fn subscribe(&mut self, nsp: &str, args: &[Value], ctx: &PushContext) -> (Value, Option<Op>) {
        // Read before subscribing: what the node delivers after this
        // position reaches the new subscriptions (a little before it may
        // too; a replay then gives it again rather than miss it).
        let starts = Arc::new(
            self.backbone
                .as_ref()
                .map_or_else(Positions::new, |b| b.delivered()),
        );
        let cluster = self.cluster();
        let Some(sock) = self.nsps.get_mut(nsp) else {
            return (Value::Null, None);
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
            if cluster {
                sock.starts
                    .entry(p.clone())
                    .or_insert_with(|| starts.clone());
            }
        }
        let sid = sock.sid.clone();
        let subject = sock.grants.subject().map(str::to_owned);
        let update = match o.accepted.is_empty() || !cluster {
            true => None,
            false => Some(Op::Add {
                subject,
                sid: Some(sid),
                start: Arc::unwrap_or_clone(starts),
                patterns: o.accepted.clone(),
            }),
        };
        (outcome_json(&o), update)
    }

    /// Unsubscribes namespace `nsp`; the answer, and in cluster mode what
    /// to announce.
    fn unsubscribe(&mut self, nsp: &str, args: &[Value]) -> (Value, Option<Op>) {
        let patterns = pattern_list(args);
        let mut o = Outcome::default();
        for p in patterns {
            let held = self.nsps.get_mut(nsp).is_some_and(|n| {
                n.starts.remove(&p);
                n.subscriptions.remove(&p)
            });
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
        if !o.accepted.is_empty() {
            // Messages of those patterns may be queued already: with more
            // than one namespace left they must not reach the others.
            self.unmatched_queued = true;
        }
        let update = match o.accepted.is_empty() || !self.cluster() {
            true => None,
            false => Some(Op::Remove {
                patterns: o.accepted.clone(),
            }),
        };
        (outcome_json(&o), update)
    }

    /// Encodes hub messages as events, for every namespace subscribed to
    /// their topic and connected (with recovery on, each carries its
    /// offset, and what a recovery replayed is skipped).
    pub fn deliver(
        &mut self,
        msgs: &[SharedMessage],
        transport: Transport,
        out: &mut Vec<Outgoing>,
    ) {
        // The common case: one namespace holds every subscription, so no
        // pattern needs matching here (the hub did it).
        let single = !self.unmatched_queued
            && self
                .nsps
                .values()
                .filter(|n| !n.subscriptions.is_empty())
                .count()
                == 1;
        let offsets = self.offsets();
        let tag = cluster::owner_tag(&self.owner);
        for m in msgs {
            for n in self.nsps.values_mut() {
                if n.subscriptions.is_empty() || !(single || n.subscriptions.matches(&m.topic)) {
                    continue;
                }
                if n.connected && m.seq().is_none_or(|s| s >= n.live_from) {
                    n.send(m, offsets, tag, transport, out);
                }
            }
        }
        if !self.sub.is_empty() {
            return;
        }
        self.unmatched_queued = false;
        // Cluster mode, queue empty: the session's positions move up to how
        // far the node has fanned each partition out, even in partitions it
        // got nothing from — a later replay then reads from there, not from
        // when the session subscribed. Read only when the queue is empty
        // (no lock and copy per batch under load), and trusted only if it
        // still is: the reader queues a record's messages before it moves
        // that point, so whatever lies before it is sent or still queued.
        if let (Offsets::Cluster, Some(b)) = (offsets, &self.backbone) {
            let floor = b.delivered();
            if !self.sub.is_empty() {
                return;
            }
            for n in self.nsps.values_mut().filter(|n| n.connected) {
                for (p, at) in &floor {
                    let e = n.positions.entry(*p).or_insert(*at);
                    *e = (*e).max(*at);
                }
            }
        }
    }
}

impl NspSocket {
    /// Encodes `m` as an event of this namespace into `out`.
    fn send(
        &mut self,
        m: &Message,
        offsets: Offsets,
        tag: &str,
        transport: Transport,
        out: &mut Vec<Outgoing>,
    ) {
        let event = match offsets {
            Offsets::None => cached_socketio_event(m, &self.name),
            Offsets::Seq => cached_socketio_event_with_offset(m, &self.name),
            Offsets::Cluster => {
                if let Some((p, at)) = position(m) {
                    if self.replayed_to.get(&p).is_some_and(|end| at < *end) {
                        return; // sent by the backbone replay
                    }
                    let next = self.positions.entry(p).or_insert(at.saturating_add(1));
                    *next = (*next).max(at.saturating_add(1));
                }
                let seq = m.seq().unwrap_or(self.seq_floor);
                socketio_event_with_offset_text(
                    &cached_socketio_event(m, &self.name),
                    &cluster::encode_offset(seq, tag, &self.positions),
                )
            }
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
/// Given up at shutdown ([`crate::publish::to_hub`]): then acked
/// `{ok: false, reason}`, and the session goes on to its close.
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
    match crate::publish::to_hub(ctx, Message::new(topic.clone(), payload)).await {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "reason": e.to_string()}),
    }
}
