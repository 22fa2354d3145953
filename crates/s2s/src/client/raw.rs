//! [`RawClient`]: the RAW socket transport, as the stock client speaks it.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::ClientError;
use crate::codec::{
    decode_peer_list, decode_resource_reply, decode_response, encode_compressed, encode_handshake,
    encode_packet, encode_request, encode_resource_offer, encode_response, DataPacket, Handshake,
    PacketLimits, PeerInfo, RequestType, ResourceOffer, ResourceReply, ResponseCode, CODEC_NAME,
    CODEC_VERSION, MAGIC, PROTOCOL_NAME, PROTOCOL_VERSION,
};
use crate::frame_io::{FrameIo, QuickAck};

/// A boxed byte stream (plain TCP or TLS), so one client type serves both.
pub trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send + QuickAck {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + QuickAck> AsyncStream for T {}

impl QuickAck for DynStream {
    fn quick_ack(&self) {
        (**self).quick_ack()
    }
}

/// A plain or TLS stream behind one type.
pub type DynStream = Box<dyn AsyncStream>;

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Compress packets (`GZIP=true`).
    pub gzip: bool,
    /// Per-read timeout.
    pub timeout: Duration,
    /// `BATCH_COUNT` for receiving.
    pub batch_count: Option<u32>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            gzip: false,
            timeout: Duration::from_secs(30),
            batch_count: None,
        }
    }
}

/// One RAW connection after the handshake; reusable across transactions.
pub struct RawClient<S = TcpStream> {
    io: FrameIo<S>,
    opts: ClientOptions,
    crc: crc32fast::Hasher,
    sent: usize,
    plain: BytesMut,
}

impl RawClient<TcpStream> {
    /// Connects, negotiates, handshakes (with `port_id` if given) and, with a
    /// port, negotiates the codec.
    pub async fn connect(
        addr: SocketAddr,
        port_id: Option<&str>,
        opts: ClientOptions,
    ) -> Result<Self, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Self::handshake_on(stream, port_id, opts).await
    }
}

impl RawClient<DynStream> {
    /// Like [`RawClient::connect`], with the stream boxed.
    pub async fn connect_dyn(
        addr: SocketAddr,
        port_id: Option<&str>,
        opts: ClientOptions,
    ) -> Result<Self, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Self::handshake_on(Box::new(stream) as DynStream, port_id, opts).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + QuickAck> RawClient<S> {
    /// Runs the connection set-up over an already open stream (e.g. TLS).
    pub async fn handshake_on(
        stream: S,
        port_id: Option<&str>,
        opts: ClientOptions,
    ) -> Result<Self, ClientError> {
        let mut c = RawClient {
            io: FrameIo::new(stream),
            opts,
            crc: crc32fast::Hasher::new(),
            sent: 0,
            plain: BytesMut::new(),
        };
        let t = c.opts.timeout;
        c.io.wbuf.extend_from_slice(&MAGIC);
        let offer = ResourceOffer {
            name: PROTOCOL_NAME.into(),
            version: PROTOCOL_VERSION,
        };
        encode_resource_offer(&offer, &mut c.io.wbuf)?;
        c.io.flush().await?;
        match c
            .io
            .read(decode_resource_reply, t, "protocol reply")
            .await?
        {
            ResourceReply::Ok => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "protocol negotiation: {other:?}"
                )))
            }
        }
        let mut properties = vec![("GZIP".to_string(), c.opts.gzip.to_string())];
        if let Some(p) = port_id {
            properties.push(("PORT_IDENTIFIER".into(), p.into()));
        }
        properties.push((
            "REQUEST_EXPIRATION_MILLIS".into(),
            t.as_millis().to_string(),
        ));
        if let Some(n) = c.opts.batch_count {
            properties.push(("BATCH_COUNT".into(), n.to_string()));
        }
        let hs = Handshake {
            comms_id: uuid::Uuid::new_v4().to_string(),
            transit_uri: "nifi://tidegate-client:0".into(),
            properties,
        };
        encode_handshake(&hs, &mut c.io.wbuf)?;
        c.io.flush().await?;
        let r = c.io.read(decode_response, t, "handshake reply").await?;
        if r.code != ResponseCode::PropertiesOk {
            return Err(ClientError::Refused(r.code, r.message.unwrap_or_default()));
        }
        if port_id.is_some() {
            encode_request(RequestType::NegotiateFlowfileCodec, &mut c.io.wbuf);
            let offer = ResourceOffer {
                name: CODEC_NAME.into(),
                version: CODEC_VERSION,
            };
            encode_resource_offer(&offer, &mut c.io.wbuf)?;
            c.io.flush().await?;
            match c.io.read(decode_resource_reply, t, "codec reply").await? {
                ResourceReply::Ok => {}
                other => {
                    return Err(ClientError::Protocol(format!(
                        "codec negotiation: {other:?}"
                    )))
                }
            }
        }
        Ok(c)
    }

    /// `REQUEST_PEER_LIST`.
    pub async fn peer_list(&mut self) -> Result<Vec<PeerInfo>, ClientError> {
        encode_request(RequestType::RequestPeerList, &mut self.io.wbuf);
        self.io.flush().await?;
        Ok(self
            .io
            .read(decode_peer_list, self.opts.timeout, "peer list")
            .await?)
    }

    /// Starts a `SEND_FLOWFILES` transaction.
    pub async fn begin_send(&mut self) -> Result<(), ClientError> {
        self.crc = crc32fast::Hasher::new();
        self.sent = 0;
        encode_request(RequestType::SendFlowfiles, &mut self.io.wbuf);
        self.io.flush().await?;
        Ok(())
    }

    /// Sends one packet of the open transaction (buffered; `confirm` flushes).
    pub async fn send(&mut self, packet: &DataPacket) -> Result<(), ClientError> {
        if self.sent > 0 {
            encode_response(ResponseCode::ContinueTransaction, None, &mut self.io.wbuf);
        }
        self.plain.clear();
        encode_packet(packet, &mut self.plain);
        self.crc.update(&self.plain);
        if self.opts.gzip {
            encode_compressed(&self.plain, &mut self.io.wbuf);
        } else {
            self.io.wbuf.extend_from_slice(&self.plain);
        }
        self.sent += 1;
        self.io.flush_if_large().await?;
        Ok(())
    }

    /// `FINISH`, the server's `CONFIRM` and checksum check, our `CONFIRM`.
    pub async fn confirm(&mut self) -> Result<(), ClientError> {
        encode_response(ResponseCode::FinishTransaction, None, &mut self.io.wbuf);
        self.io.flush().await?;
        let r = self
            .io
            .read(decode_response, self.opts.timeout, "CONFIRM")
            .await?;
        if r.code != ResponseCode::ConfirmTransaction {
            return Err(ClientError::Protocol(format!(
                "expected CONFIRM, got {:?}",
                r.code
            )));
        }
        let ours = self.crc.clone().finalize().to_string();
        let theirs = r.message.unwrap_or_default();
        if ours != theirs {
            encode_response(ResponseCode::BadChecksum, None, &mut self.io.wbuf);
            self.io.flush().await?;
            return Err(ClientError::BadChecksum { ours, theirs });
        }
        encode_response(
            ResponseCode::ConfirmTransaction,
            Some(""),
            &mut self.io.wbuf,
        );
        self.io.flush().await?;
        Ok(())
    }

    /// Waits for `TRANSACTION_FINISHED`; `Ok(true)` when the server added
    /// "but destination full".
    pub async fn complete(&mut self) -> Result<bool, ClientError> {
        let r = self
            .io
            .read(decode_response, self.opts.timeout, "TRANSACTION_FINISHED")
            .await?;
        match r.code {
            ResponseCode::TransactionFinished => Ok(false),
            ResponseCode::TransactionFinishedButDestinationFull => Ok(true),
            other => Err(ClientError::Protocol(format!(
                "expected TRANSACTION_FINISHED, got {other:?}"
            ))),
        }
    }

    /// Cancels the open transaction (after at least one packet).
    pub async fn cancel(&mut self, reason: &str) -> Result<(), ClientError> {
        encode_response(
            ResponseCode::CancelTransaction,
            Some(reason),
            &mut self.io.wbuf,
        );
        self.io.flush().await?;
        Ok(())
    }

    /// A whole send transaction.
    pub async fn send_transaction(&mut self, packets: &[DataPacket]) -> Result<bool, ClientError> {
        self.begin_send().await?;
        for p in packets {
            self.send(p).await?;
        }
        self.confirm().await?;
        self.complete().await
    }

    /// A whole receive transaction; empty when the port has nothing.
    pub async fn receive_transaction(&mut self) -> Result<Vec<DataPacket>, ClientError> {
        let (packets, crc) = self.receive_packets().await?;
        if !packets.is_empty() {
            self.confirm_receive(&crc).await?;
        }
        Ok(packets)
    }

    /// `RECEIVE_FLOWFILES` up to the server's FINISH: the packets and our
    /// checksum of them (empty when the port has nothing).
    pub async fn receive_packets(&mut self) -> Result<(Vec<DataPacket>, String), ClientError> {
        let t = self.opts.timeout;
        let limits = PacketLimits::default();
        encode_request(RequestType::ReceiveFlowfiles, &mut self.io.wbuf);
        self.io.flush().await?;
        let r = self.io.read(decode_response, t, "MORE_DATA").await?;
        match r.code {
            ResponseCode::NoMoreData => return Ok((Vec::new(), String::new())),
            ResponseCode::MoreData => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected MORE_DATA, got {other:?}"
                )))
            }
        }
        let mut crc = crc32fast::Hasher::new();
        let mut out = Vec::new();
        loop {
            let (p, _) = self
                .io
                .read_packet(self.opts.gzip, &limits, &mut crc, t)
                .await?;
            out.push(p);
            let r = self
                .io
                .read(decode_response, t, "CONTINUE or FINISH")
                .await?;
            match r.code {
                ResponseCode::ContinueTransaction => continue,
                ResponseCode::FinishTransaction => break,
                other => {
                    return Err(ClientError::Protocol(format!(
                        "expected CONTINUE/FINISH, got {other:?}"
                    )))
                }
            }
        }
        Ok((out, crc.finalize().to_string()))
    }

    /// Sends `CONFIRM` with `crc`, reads the server's answer, and on its
    /// `CONFIRM` sends `TRANSACTION_FINISHED`.
    pub async fn confirm_receive(&mut self, crc: &str) -> Result<(), ClientError> {
        let t = self.opts.timeout;
        encode_response(
            ResponseCode::ConfirmTransaction,
            Some(crc),
            &mut self.io.wbuf,
        );
        self.io.flush().await?;
        let r = self.io.read(decode_response, t, "CONFIRM").await?;
        match r.code {
            ResponseCode::ConfirmTransaction => {}
            ResponseCode::BadChecksum => {
                return Err(ClientError::BadChecksum {
                    ours: crc.to_owned(),
                    theirs: "(server reported BAD_CHECKSUM)".into(),
                })
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "expected CONFIRM, got {other:?}"
                )))
            }
        }
        encode_response(ResponseCode::TransactionFinished, None, &mut self.io.wbuf);
        self.io.flush().await?;
        Ok(())
    }

    /// Sends `SHUTDOWN` and closes.
    pub async fn shutdown(mut self) {
        encode_request(RequestType::Shutdown, &mut self.io.wbuf);
        let _ = self.io.flush().await;
        self.io.shutdown().await;
    }

    /// Raw access for tests that misbehave on purpose: queue bytes to write.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.io.wbuf.extend_from_slice(bytes);
    }

    /// Flushes bytes queued with [`Self::write_raw`].
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        Ok(self.io.flush().await?)
    }

    /// Reads one response code (tests).
    pub async fn read_response(&mut self) -> Result<crate::codec::Response, ClientError> {
        Ok(self
            .io
            .read(decode_response, self.opts.timeout, "a response")
            .await?)
    }
}
