//! The application protocols an Engine.IO session can run: Socket.IO
//! ([`socketio`]) under `/socket.io/`, the JSON protocol of `/ws`
//! ([`json`]) or the conformance echo under `/engine.io/`; and the
//! subscribe/unsubscribe bookkeeping they share ([`subscriptions`]).

pub mod json;
pub mod socketio;
pub mod subscriptions;

use std::sync::Arc;

use bytes::Bytes;
use tidegate_hub::{SharedMessage, Subscriber};

use crate::context::PushContext;
use crate::engineio::handshake::Transport;
use crate::recovery::RecoveryHandle;
use crate::session::{EngineSession, Outgoing};

/// Why a session is being closed by its application protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CloseReason(pub String);

/// One session's application protocol.
#[derive(Debug)]
pub enum App {
    /// Socket.IO v5.
    SocketIo(Box<socketio::SocketIoApp>),
    /// The `/ws` JSON protocol inside Engine.IO messages.
    Json(Box<json::JsonSession>),
    /// Echo every message back (`[push] conformance`).
    Echo,
}

impl App {
    /// Handles a client text message.
    pub async fn on_text(
        &mut self,
        text: String,
        s: &EngineSession,
        ctx: &PushContext,
    ) -> Result<(), CloseReason> {
        match self {
            App::SocketIo(a) => a.on_text(&text, s, ctx).await,
            App::Json(j) => {
                let mut out = Vec::new();
                j.on_text(&text, ctx, &mut out).await;
                send_json(s, out);
                Ok(())
            }
            App::Echo => {
                s.send_text(format!("4{text}"));
                Ok(())
            }
        }
    }

    /// Packets that must go in a later write than what is queued now
    /// (conformance mode only).
    pub fn take_after_write(&mut self) -> Option<Vec<Outgoing>> {
        match self {
            App::SocketIo(a) => a.take_after_write(),
            _ => None,
        }
    }

    /// A Socket.IO connection that has not CONNECTed to any namespace yet.
    pub fn awaiting_connect(&self) -> bool {
        matches!(self, App::SocketIo(a) if a.awaiting_connect())
    }

    /// The session sent a ping (its periodic tick).
    pub fn on_ping(&mut self, ctx: &PushContext) {
        if let App::SocketIo(a) = self {
            a.on_ping(ctx);
        }
    }

    /// Handles a client binary message.
    pub async fn on_binary(
        &mut self,
        b: Bytes,
        s: &EngineSession,
        ctx: &PushContext,
    ) -> Result<(), CloseReason> {
        match self {
            App::SocketIo(a) => a.on_binary(b, s, ctx).await,
            App::Json(j) => {
                let mut out = Vec::new();
                j.on_binary(b, ctx, &mut out).await;
                send_json(s, out);
                Ok(())
            }
            App::Echo => {
                s.send([Outgoing::Binary {
                    raw: b,
                    base64: None,
                }]);
                Ok(())
            }
        }
    }

    /// The hub queue feeding this session, if it has one.
    pub fn subscriber(&self) -> Option<&Subscriber> {
        match self {
            App::SocketIo(a) => Some(a.subscriber()),
            App::Json(j) => Some(j.subscriber()),
            App::Echo => None,
        }
    }

    /// Where a reconnecting client asks for this session's state (with
    /// recovery on).
    pub fn recovery_handle(&self) -> Option<Arc<RecoveryHandle>> {
        match self {
            App::SocketIo(a) => a.recovery_handle(),
            App::Json(j) => j.recovery_handle(),
            App::Echo => None,
        }
    }

    /// Whether parking this session would keep anything a client could
    /// recover.
    pub fn recoverable(&self) -> bool {
        match self {
            App::SocketIo(a) => a.recoverable(),
            App::Json(j) => j.recoverable(),
            App::Echo => false,
        }
    }

    /// The transport is gone: from now on events are not sent.
    pub fn detach(&mut self) {
        match self {
            App::SocketIo(a) => a.detach(),
            App::Json(j) => j.detach(),
            App::Echo => {}
        }
    }

    /// Encodes hub messages for the client.
    pub fn deliver(
        &mut self,
        msgs: &[SharedMessage],
        transport: Transport,
        out: &mut Vec<Outgoing>,
    ) {
        match self {
            App::SocketIo(a) => a.deliver(msgs, transport, out),
            App::Json(j) => {
                let mut frames = Vec::new();
                j.deliver(msgs, &mut frames);
                out.extend(frames.into_iter().map(engine_form));
            }
            App::Echo => {}
        }
    }
}

fn engine_form(f: json::JsonOut) -> Outgoing {
    match f {
        json::JsonOut::Text(t) => {
            let mut v = Vec::with_capacity(t.len() + 1);
            v.push(b'4');
            v.extend_from_slice(&t);
            Outgoing::Text(Bytes::from(v))
        }
        json::JsonOut::Binary(b) => Outgoing::Binary {
            raw: b,
            base64: None,
        },
    }
}

/// Queues `/ws` JSON frames on an Engine.IO session (as `4…` messages).
pub fn send_json(s: &EngineSession, out: Vec<json::JsonOut>) {
    if !out.is_empty() {
        s.send(out.into_iter().map(engine_form));
    }
}
