//! The `/ws` JSON protocol's session logic: subscribe, unsubscribe, publish,
//! and hub messages out. Used by `/ws` and by plain Engine.IO sessions.
//! Errors are answered (`{"op":"error",…}`), never fatal: the transport
//! bounds message sizes. With recovery on, the session's first frame is
//! `{"op":"session","session":id}`, messages carry `"offset"`, and
//! `{"op":"recover",…}` takes a lost session over ([`crate::recovery`]);
//! one that does not succeed once the server is shutting down is not
//! answered.
//! In cluster mode a subscribe can ask for the backbone's `positions` and
//! recover `from` them on any node ([`tidegate_hub::backbone`]).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Value};
use tidegate_hub::backbone::{position, Positions};
use tidegate_hub::{Hub, Message, Pattern, SharedMessage, Subscriber};

use super::subscriptions::{self, Refused};
use super::App;
use crate::auth::Grants;
use crate::context::PushContext;
use crate::delivery::{cached_ws_message, cached_ws_message_with_offset, is_binary_ws_message};
use crate::recovery::{self, Claim, NotTaken, Protocol, RecoveryHandle, Since, Ticket};
use crate::ws::protocol::{decode, positions as parse_positions, ClientOp};

use crate::recovery::MAX_CLUSTER_REPLAY;

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
    /// The session's id for recovery, with recovery on.
    recovery: Option<Ticket>,
    /// With recovery on: the history sequence each subscription started at.
    since: Since,
    /// After a recovery: messages before this sequence were replayed (or
    /// sent before), so the live queue skips them.
    live_from: u64,
    /// Messages are sent (false while parked).
    attached: bool,
    /// Patterns were unsubscribed while messages of theirs may be queued:
    /// each message is matched against `since` until the queue has been
    /// empty once (the hub matched it when it was queued).
    unmatched_queued: bool,
    /// After a cluster recovery: per backbone partition, the end of what
    /// was replayed; live messages before it were sent already.
    replayed_to: Positions,
}

fn reply(v: Value) -> JsonOut {
    JsonOut::Text(Bytes::from(v.to_string()))
}

impl JsonSession {
    /// A session with its own hub queue and the given rights.
    pub fn new(ctx: &PushContext, grants: Grants) -> Self {
        let recovery = if ctx.config.recovery() {
            ctx.recovery
                .register(ctx.config.max_sessions, Claim::new(Protocol::Json, &grants))
        } else {
            None
        };
        JsonSession {
            sub: ctx.hub.subscriber(ctx.config.subscriber_options()),
            max_subscriptions: ctx.config.max_subscriptions,
            grants,
            pending_publish: None,
            recovery,
            since: Since::default(),
            live_from: 0,
            attached: true,
            unmatched_queued: false,
            replayed_to: Positions::new(),
        }
    }

    /// The first frame to send, with recovery on: the session's id.
    pub fn hello(&self) -> Option<JsonOut> {
        let t = self.recovery.as_ref()?;
        Some(reply(json!({"op": "session", "session": t.pid()})))
    }

    /// Where a reconnecting client asks for this session's state.
    pub fn recovery_handle(&self) -> Option<Arc<RecoveryHandle>> {
        self.recovery.as_ref().map(|t| t.handle().clone())
    }

    /// Whether recovery is on for this session.
    pub fn recoverable(&self) -> bool {
        self.recovery.is_some()
    }

    /// The transport is gone: messages are no longer sent.
    pub fn detach(&mut self) {
        self.attached = false;
    }

    fn pid(&self) -> Option<&str> {
        self.recovery.as_ref().map(|t| t.pid())
    }

    /// Takes over the lost session `pid` if the history still holds
    /// everything its subscriptions missed after `offset`: returns those
    /// messages (live delivery goes on after them); the reason otherwise.
    async fn take_over(
        &mut self,
        pid: &str,
        offset: u64,
        ctx: &PushContext,
    ) -> Result<Vec<SharedMessage>, &'static str> {
        let (Some(_), Some(history)) = (&self.recovery, &ctx.history) else {
            return Err("recovery is off");
        };
        if self.pid() == Some(pid) {
            return Err("that is this session");
        }
        if self.sub.patterns().next().is_some() {
            return Err("recover must come before any subscribe");
        }
        let claim = Claim::new(Protocol::Json, &self.grants);
        let mut old = match ctx.recovery.take(pid, &claim, &ctx.shutdown).await {
            Ok(App::Json(old)) => old,
            // The claim said `/ws`: not reached.
            Ok(_) | Err(NotTaken::Unknown) => return Err("unknown or expired session"),
            Err(NotTaken::OtherOwner) => return Err("the session belongs to another subject"),
        };
        // Recovering with another token gives no more rights than it: what
        // it does not allow is dropped before the replay.
        let refused: Vec<String> = old
            .since
            .patterns()
            .filter(|p| !self.grants.may_subscribe(p))
            .map(str::to_owned)
            .collect();
        if !refused.is_empty() {
            subscriptions::unsubscribe(&mut old.sub, &refused);
            for p in &refused {
                old.since.remove(p);
            }
            // Messages of those patterns may be queued already.
            old.unmatched_queued = true;
        }
        let Ok((missed, live_from)) = recovery::replay(history, offset, &old.since) else {
            return Err("the history no longer holds what the session missed");
        };
        let grants = self.grants.clone();
        *self = *old;
        self.grants = grants;
        self.attached = true;
        self.live_from = live_from;
        Ok(missed)
    }

    /// The hub queue.
    pub fn subscriber(&self) -> &Subscriber {
        &self.sub
    }

    /// Handles one text frame.
    pub async fn on_text(&mut self, text: &str, ctx: &PushContext, out: &mut Vec<JsonOut>) {
        let hub = &ctx.hub;
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
            ClientOp::Subscribe {
                id,
                patterns,
                positions,
                from,
            } => {
                let (allowed, refused): (Vec<String>, Vec<String>) = patterns
                    .into_iter()
                    .partition(|p| self.grants.may_subscribe(p));
                // Live first, so nothing published during a replay is missed.
                let started = recovery::now(ctx.history.as_ref());
                let mut o =
                    subscriptions::subscribe(&mut self.sub, &allowed, self.max_subscriptions);
                o.refused.extend(refused.into_iter().map(|pattern| Refused {
                    pattern,
                    reason: "not allowed by the token".into(),
                }));
                for p in &o.accepted {
                    self.since.add(p, started);
                }
                let mut answer = json!({"op": "subscribed", "id": id, "accepted": o.accepted, "refused": o.refused});
                let mut replayed = Vec::new();
                if positions || from.is_some() {
                    let recovering = from.is_some();
                    let history = match from.as_ref().map(parse_positions).transpose() {
                        // A backbone read can take as long as the broker
                        // makes it; at shutdown it would hold this
                        // session's close, so it is given up.
                        Ok(from) => tokio::select! {
                            r = self.cluster_history(hub, &o.accepted, from) => r,
                            () = ctx.shutdown.cancelled() => {
                                Err("the server is shutting down".to_owned())
                            }
                        },
                        Err(e) => Err(e),
                    };
                    match history {
                        Ok((ends, messages)) => {
                            answer["positions"] = json!(ends);
                            if recovering {
                                answer["recovered"] = json!(messages.len());
                            }
                            replayed = messages;
                        }
                        Err(why) => answer["cluster_error"] = json!(why),
                    }
                }
                out.push(reply(answer));
                for m in &replayed {
                    push_message(m, false, out);
                }
            }
            ClientOp::Unsubscribe { id, patterns } => {
                let o = subscriptions::unsubscribe(&mut self.sub, &patterns);
                for p in &o.accepted {
                    self.since.remove(p);
                }
                // Nothing of those patterns after the answer.
                self.unmatched_queued |= !o.accepted.is_empty();
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
                out.push(publish(ctx, id, topic, bytes).await);
            }
            ClientOp::Recover {
                id,
                session,
                offset,
            } => {
                let r = self.take_over(&session, offset, ctx).await;
                if r.is_err() && ctx.shutting_down() {
                    // Given up for the shutdown (or failed during it): no
                    // answer, whose `session` would be this connection's
                    // new id. The client sees the close 1001 that follows
                    // and asks again elsewhere with the id it had.
                    return;
                }
                ctx.recovery.count(r.is_ok());
                let mut answer = json!({"op": "recovered", "id": id, "recovered": r.is_ok(), "session": self.pid()});
                if let Err(why) = &r {
                    answer["reason"] = json!(why);
                }
                out.push(reply(answer));
                for m in r.iter().flatten() {
                    push_message(m, true, out);
                }
            }
        }
    }

    /// Cluster mode: the backbone's positions now and, with `from`, the
    /// messages of `patterns` after it (live ones before those positions
    /// are skipped from now on, being replayed).
    async fn cluster_history(
        &mut self,
        hub: &Hub,
        patterns: &[String],
        from: Option<Positions>,
    ) -> Result<(Positions, Vec<Message>), String> {
        let backbone = hub
            .backbone()
            .ok_or("not in cluster mode: no history to read")?;
        match from {
            None => Ok((backbone.positions().await?, Vec::new())),
            Some(from) => {
                let parsed: Vec<Pattern> = patterns
                    .iter()
                    .filter_map(|p| Pattern::parse(p).ok())
                    .collect();
                let replay = backbone.replay(from, parsed, MAX_CLUSTER_REPLAY).await?;
                for (p, end) in &replay.ends {
                    let e = self.replayed_to.entry(*p).or_insert(*end);
                    *e = (*e).max(*end);
                }
                Ok((replay.ends, replay.messages))
            }
        }
    }

    /// Handles one binary frame: the payload of a pending binary publish.
    pub async fn on_binary(&mut self, b: Bytes, ctx: &PushContext, out: &mut Vec<JsonOut>) {
        match self.pending_publish.take() {
            Some((id, topic)) => out.push(publish(ctx, id, topic, b).await),
            None => out.push(reply(
                json!({"op": "error", "reason": "binary frame without a pending binary publish"}),
            )),
        }
    }

    /// Encodes hub messages (the text form is shared by every session;
    /// with recovery on, each carries its history sequence as offset, and
    /// what a recovery replayed is skipped).
    pub fn deliver(&mut self, msgs: &[SharedMessage], out: &mut Vec<JsonOut>) {
        for m in msgs {
            if self.unmatched_queued && !self.since.matches(&m.topic) {
                continue; // of a pattern unsubscribed since it was queued
            }
            if !self.replayed_to.is_empty() {
                if let Some((p, o)) = position(m) {
                    if self.replayed_to.get(&p).is_some_and(|end| o < *end) {
                        continue; // sent by the cluster replay
                    }
                }
            }
            if self.attached && m.seq().is_none_or(|s| s >= self.live_from) {
                push_message(m, self.recovery.is_some(), out);
            }
        }
        if self.unmatched_queued && self.sub.is_empty() {
            self.unmatched_queued = false;
        }
    }
}

fn push_message(m: &Message, with_offset: bool, out: &mut Vec<JsonOut>) {
    let text = cached_ws_message(m);
    let binary = is_binary_ws_message(&text);
    out.push(JsonOut::Text(if with_offset {
        cached_ws_message_with_offset(m)
    } else {
        text
    }));
    if binary {
        out.push(JsonOut::Binary(m.payload.clone()));
    }
}

fn refuse_publish(id: Option<u64>) -> JsonOut {
    reply(json!({"op": "error", "id": id, "reason": "not allowed by the token"}))
}

/// Given up at shutdown ([`crate::publish::to_hub`]): then answered with
/// an error, and the session goes on to its close.
async fn publish(ctx: &PushContext, id: Option<u64>, topic: String, payload: Bytes) -> JsonOut {
    match crate::publish::to_hub(ctx, Message::new(topic, payload)).await {
        Ok(()) => reply(json!({"op": "published", "id": id})),
        Err(e) => reply(json!({"op": "error", "id": id, "reason": e.to_string()})),
    }
}
