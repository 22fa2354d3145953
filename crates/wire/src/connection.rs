//! One `[wire]` connection, as handed over by the listener core: a reader
//! (`reader.rs`) that decodes frames and acts on them, and a writer
//! (`writer.rs`) that owns the socket's write half and, once the client
//! subscribes, the connection's hub subscriber. They run concurrently and
//! meet only in the [`Outbound`] mailbox.
//!
//! Accepting, the connection limit, the allow-list, TLS and the read
//! timeouts belong to the listener core; this file wires the two halves and
//! gives the writer its deadline (see [`write_timeout`]).

use std::sync::Arc;
use std::time::Duration;

use tidegate_hub::Hub;
use tidegate_listener::{Connection, Inbound};
use tokio_util::sync::CancellationToken;

use crate::auth::TokenSet;
use crate::outbound::Outbound;
use crate::reader::Reader;
use crate::timed_write::StallLimit;
use crate::{writer, WireConfig};

/// What every connection of one listener shares.
#[derive(Clone)]
pub(crate) struct ConnectionContext {
    pub(crate) hub: Hub,
    pub(crate) config: Arc<WireConfig>,
    pub(crate) tokens: Arc<TokenSet>,
}

/// Serves one connection until either side closes it or the server shuts
/// down.
pub(crate) async fn serve(conn: Connection, ctx: ConnectionContext) {
    let Connection {
        stream,
        peer,
        inbound,
        shutdown,
        metrics,
        ..
    } = conn;
    // Plain TCP splits without a lock: the echo path pays nothing for TLS.
    let (rd, wr) = stream.into_split();
    let out = Outbound::new(ctx.config.max_outbound_bytes);
    let cancel = shutdown.child_token();
    // Cancelled when the reader ends: the writer then only finishes what is
    // left, within a short bound, so the connection always closes.
    let reader_ended = CancellationToken::new();
    let limit = StallLimit {
        open: write_timeout(&inbound),
        closing: Some(&reader_ended),
    };
    let reader = Reader::new(&ctx, &out, &metrics, inbound, peer);
    tokio::join!(
        reader.run(rd, &cancel, &reader_ended),
        writer::run(wr, &out, &ctx, &metrics, &cancel, &shutdown, limit)
    );
}

/// How long a write may make no progress before the client is taken for
/// one that does not read: the listener's idle timeout ("nothing read or
/// written"), or its read timeout when the idle timeout is off.
pub(crate) fn write_timeout(inbound: &Inbound) -> Option<Duration> {
    inbound.idle_timeout().or(inbound.read_timeout())
}
