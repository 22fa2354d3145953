//! One RAW connection, top to bottom: magic, protocol negotiation,
//! handshake, then requests until `SHUTDOWN`, EOF or an error.

use std::io;

use tidegate_listener::{ConnStream, Connection, Inbound};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{receive, transfer, SessionError};
use crate::codec::{
    decode_handshake, decode_magic, decode_request, decode_resource_offer, encode_peer_list,
    encode_resource_reply, encode_response, Handshake, PeerInfo, RequestType, ResourceReply,
    ResponseCode, CODEC_NAME, CODEC_VERSION, PROTOCOL_NAME, PROTOCOL_VERSION,
};
use crate::frame_io::{FrameError, FrameIo};
use crate::ports::{PortRef, S2sPorts};

/// Most resource offers a client may make before agreeing.
const MAX_NEGOTIATION_ROUNDS: usize = 8;

/// What the handshake settled.
#[derive(Debug, Default, Clone)]
pub(crate) struct Settled {
    /// Packets are compressed (`GZIP=true`).
    pub(crate) gzip: bool,
    /// `BATCH_COUNT` (0 = unset).
    pub(crate) batch_count: u64,
    /// `BATCH_SIZE` in bytes (0 = unset).
    pub(crate) batch_bytes: u64,
}

/// Per-connection state.
pub(crate) struct Session {
    /// Read through the listener core's [`Inbound`]: every read takes its
    /// bytes from the in-flight budget first and obeys the idle and
    /// partial-message timeouts.
    pub(crate) io: FrameIo<ConnStream, Inbound>,
    pub(crate) ports: S2sPorts,
    pub(crate) settled: Settled,
    port: Option<PortRef>,
    dn: Option<String>,
    /// The client's address, named in the session's log events (the
    /// listener's per-connection span is DEBUG-level).
    pub(crate) peer: std::net::SocketAddr,
    raw_port: u16,
    codec_ok: bool,
}

/// Serves one accepted connection until it ends; errors are logged and
/// counted, never propagated.
pub(crate) async fn serve(conn: Connection, ports: S2sPorts, raw_port: u16) {
    let Connection {
        stream,
        peer,
        tls,
        inbound,
        shutdown,
        ..
    } = conn;
    let dn = tls.and_then(|t| t.client_dn);
    let mut s = Session {
        io: FrameIo::with_side(stream, inbound),
        ports,
        settled: Settled::default(),
        port: None,
        dn,
        peer,
        raw_port,
        codec_ok: false,
    };
    let result = s.run(&shutdown).await;
    if let Err(e) = result {
        // The listener core counted the timeouts it reports.
        if !timed_out_in_listener(&e) {
            s.ports.metrics().error(e.kind());
        }
        match &e {
            SessionError::Refused(..) | SessionError::BadChecksum(_) => {
                info!(peer = %s.peer, error = %e, "s2s connection closed")
            }
            _ => {
                warn!(peer = %s.peer, error = %e, "s2s connection closed with an error; open transaction rolled back")
            }
        }
    }
    s.io.shutdown().await;
}

/// True for an idle or partial-message timeout of the listener core, which
/// reaches the session as a `TimedOut` i/o error.
fn timed_out_in_listener(e: &SessionError) -> bool {
    matches!(e, SessionError::Io(e) if e.kind() == io::ErrorKind::TimedOut)
}

impl Session {
    async fn run(&mut self, shutdown: &CancellationToken) -> Result<(), SessionError> {
        let t = self.ports.config().read_timeout();
        self.io.read(decode_magic, t, "magic bytes").await?;
        self.negotiate_protocol().await?;
        let hs = self.io.read(decode_handshake, t, "handshake").await?;
        self.handshake(&hs).await?;
        self.io.flush().await?;

        loop {
            let idle = self.ports.config().idle_timeout();
            let req = if self.io.has_buffered() {
                self.io.read(decode_request, t, "a request").await
            } else {
                tokio::select! {
                    // A request already on the socket wins over shutdown.
                    biased;
                    r = self.io.read(decode_request, idle, "the next request") => r,
                    _ = shutdown.cancelled() => return Ok(()),
                }
            };
            let req = match req {
                Ok(r) => r,
                // A pooled connection may close between requests.
                Err(FrameError::Eof) => return Ok(()),
                Err(FrameError::Timeout(_)) => {
                    debug!("idle s2s connection timed out");
                    return Ok(());
                }
                Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::TimedOut => {
                    debug!(error = %e, "s2s connection closed by the listener's timeout");
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            match req {
                RequestType::NegotiateFlowfileCodec => self.negotiate_codec().await?,
                RequestType::RequestPeerList => self.send_peer_list().await?,
                RequestType::SendFlowfiles => match self.port.clone() {
                    Some(PortRef::Input(p)) if self.codec_ok => receive::run(self, &p).await?,
                    _ => {
                        return Err(SessionError::Protocol(
                            "SEND_FLOWFILES without an input port and codec".into(),
                        ))
                    }
                },
                RequestType::ReceiveFlowfiles => match self.port.clone() {
                    Some(PortRef::Output(p)) if self.codec_ok => transfer::run(self, &p).await?,
                    _ => {
                        return Err(SessionError::Protocol(
                            "RECEIVE_FLOWFILES without an output port and codec".into(),
                        ))
                    }
                },
                RequestType::Shutdown => return Ok(()),
            }
            self.io.flush().await?;
        }
    }

    /// `SocketFlowFileProtocol` version 6; other versions get
    /// `DIFFERENT_RESOURCE_VERSION 6`, other names `ABORT`.
    async fn negotiate_protocol(&mut self) -> Result<(), SessionError> {
        let t = self.ports.config().read_timeout();
        for _ in 0..MAX_NEGOTIATION_ROUNDS {
            let offer = self
                .io
                .read(decode_resource_offer, t, "protocol negotiation")
                .await?;
            if offer.name != PROTOCOL_NAME {
                let msg = format!("Unknown Protocol: {}", offer.name);
                encode_resource_reply(&ResourceReply::Abort(msg.clone()), &mut self.io.wbuf);
                self.io.flush().await?;
                return Err(SessionError::Refused(ResponseCode::Abort, msg));
            }
            if offer.version == PROTOCOL_VERSION {
                encode_resource_reply(&ResourceReply::Ok, &mut self.io.wbuf);
                self.io.flush().await?;
                return Ok(());
            }
            encode_resource_reply(
                &ResourceReply::DifferentVersion(PROTOCOL_VERSION),
                &mut self.io.wbuf,
            );
            self.io.flush().await?;
        }
        Err(SessionError::Protocol(
            "protocol negotiation did not converge".into(),
        ))
    }

    async fn refuse(&mut self, code: ResponseCode, msg: String) -> Result<(), SessionError> {
        encode_response(code, Some(&msg), &mut self.io.wbuf);
        self.io.flush().await?;
        Err(SessionError::Refused(code, msg))
    }

    /// Validates the handshake properties as NiFi does and answers
    /// `PROPERTIES_OK` or the refusal (after which the connection closes).
    async fn handshake(&mut self, hs: &Handshake) -> Result<(), SessionError> {
        let mut gzip = None;
        for (name, value) in &hs.properties {
            let numeric = |v: &str| v.parse::<i64>().is_ok();
            match name.as_str() {
                "GZIP" => gzip = Some(value.eq_ignore_ascii_case("true")),
                "REQUEST_EXPIRATION_MILLIS" | "BATCH_DURATION" | "BATCH_COUNT" | "BATCH_SIZE" => {
                    if !numeric(value) {
                        let msg = format!(
                            "Received invalid value for property '{name}'; invalid value: {value}"
                        );
                        return self.refuse(ResponseCode::IllegalPropertyValue, msg).await;
                    }
                    let v = value.parse::<i64>().unwrap_or(0).max(0) as u64;
                    match name.as_str() {
                        "BATCH_COUNT" => self.settled.batch_count = v,
                        "BATCH_SIZE" => self.settled.batch_bytes = v,
                        _ => {}
                    }
                }
                "PORT_IDENTIFIER" => {
                    let Some(port) = self.ports.find(value) else {
                        let msg = format!("Received unknown port identifier: {value}");
                        return self.refuse(ResponseCode::UnknownPort, msg).await;
                    };
                    if let Err(msg) = self.ports.authorize(&port, self.dn.as_deref()) {
                        return self.refuse(ResponseCode::Unauthorized, msg).await;
                    }
                    if let PortRef::Input(p) = &port {
                        if self.ports.destination_full(p) {
                            let msg = format!(
                                "Received port identifier {value}, but its destination is full"
                            );
                            return self.refuse(ResponseCode::PortsDestinationFull, msg).await;
                        }
                    }
                    self.port = Some(port);
                }
                _ => {
                    let msg = format!("Received unknown property: {name}");
                    return self.refuse(ResponseCode::UnknownPropertyName, msg).await;
                }
            }
        }
        match gzip {
            Some(g) => self.settled.gzip = g,
            None => {
                return self
                    .refuse(
                        ResponseCode::MissingProperty,
                        "Missing Property GZIP".into(),
                    )
                    .await
            }
        }
        encode_response(ResponseCode::PropertiesOk, None, &mut self.io.wbuf);
        debug!(comms_id = %hs.comms_id, gzip = self.settled.gzip, "s2s handshake done");
        Ok(())
    }

    async fn negotiate_codec(&mut self) -> Result<(), SessionError> {
        let t = self.ports.config().read_timeout();
        for _ in 0..MAX_NEGOTIATION_ROUNDS {
            let offer = self
                .io
                .read(decode_resource_offer, t, "codec negotiation")
                .await?;
            if self.port.is_none() {
                let msg = "Cannot transfer FlowFiles because no port was specified".to_string();
                encode_resource_reply(&ResourceReply::Abort(msg.clone()), &mut self.io.wbuf);
                self.io.flush().await?;
                return Err(SessionError::Protocol(msg));
            }
            if offer.name != CODEC_NAME {
                let msg = format!("Unknown codec: {}", offer.name);
                encode_resource_reply(&ResourceReply::Abort(msg.clone()), &mut self.io.wbuf);
                self.io.flush().await?;
                return Err(SessionError::Protocol(msg));
            }
            if offer.version == CODEC_VERSION {
                encode_resource_reply(&ResourceReply::Ok, &mut self.io.wbuf);
                self.codec_ok = true;
                return Ok(());
            }
            encode_resource_reply(
                &ResourceReply::DifferentVersion(CODEC_VERSION),
                &mut self.io.wbuf,
            );
            self.io.flush().await?;
        }
        Err(SessionError::Protocol(
            "codec negotiation did not converge".into(),
        ))
    }

    async fn send_peer_list(&mut self) -> Result<(), SessionError> {
        let cfg = self.ports.config();
        let peers = [PeerInfo {
            host: cfg.host.clone(),
            port: self.raw_port as i32,
            secure: cfg.secure(),
            flow_file_count: 0,
        }];
        encode_peer_list(&peers, &mut self.io.wbuf)?;
        Ok(())
    }
}
