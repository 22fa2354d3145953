//! One `[wire]` connection, as handed over by the listener core: a reader
//! (`reader.rs`) that decodes frames and acts on them, and a writer
//! (`writer.rs`) that owns the socket's write half and, once the client
//! subscribes, the connection's hub subscriber. They run concurrently and
//! meet only in the [`Outbound`] mailbox.
//!
//! Accepting, the connection limit, the allow-list, TLS and the timeouts
//! belong to the listener core; this file only wires the two halves.

use std::sync::Arc;

use tidegate_hub::Hub;
use tidegate_listener::Connection;

use crate::auth::TokenSet;
use crate::outbound::Outbound;
use crate::reader::Reader;
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
    let reader = Reader::new(&ctx, &out, &metrics, inbound, peer);
    tokio::join!(
        reader.run(rd, &cancel),
        writer::run(wr, &out, &ctx, &metrics, &cancel, &shutdown)
    );
}
