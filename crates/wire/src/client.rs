//! An async client of the `[wire]` protocol, used by the tests and the bench:
//! connect (plain TCP or TLS, with an optional AUTH token), publish,
//! subscribe (confirmed), echo, ping, and receive frames.
//!
//! Confirmation uses the protocol's ordering guarantee: the server applies a
//! connection's frames in order and writes a PONG only after the
//! subscriptions that preceded its PING are live, so "SUBSCRIBE, PING, wait
//! for PONG" means later publishes will be delivered. Frames that arrive while
//! a call waits for its answer (e.g. MESSAGEs) are kept, in order, for
//! [`WireClient::recv`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use thiserror::Error;
use tidegate_hub::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use crate::codec::{self, DecodeError, EncodeError};
use crate::frame::{AuthToken, Echo, ErrorFrame, Frame, FrameType};

/// Largest frame the client accepts from a server, bytes.
pub const CLIENT_MAX_FRAME: usize = 64 * 1024 * 1024;
/// Most frames kept aside while a call waits for its answer.
pub const MAX_HELD_FRAMES: usize = 1 << 20;

/// What went wrong on the client side.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Socket error.
    #[error("wire client I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The server sent bytes that are not a frame.
    #[error("wire client got an invalid frame: {0}")]
    Decode(#[from] DecodeError),
    /// A value that cannot be encoded.
    #[error("wire client cannot encode: {0}")]
    Encode(#[from] EncodeError),
    /// The server answered with an ERROR frame.
    #[error("server error {:?}: {}", .0.code, .0.message)]
    Server(ErrorFrame),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// Too many frames arrived while waiting for an answer.
    #[error("more than {MAX_HELD_FRAMES} frames arrived while waiting for an answer")]
    TooManyHeld,
    /// The TLS server name is not a valid DNS name or IP address.
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
}

/// How [`WireClient::connect_with`] connects: plain TCP or TLS, and with or
/// without an AUTH token. The default is plain TCP without a token, as
/// [`WireClient::connect`].
#[derive(Clone, Default)]
pub struct ConnectOptions {
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    token: Option<AuthToken>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("tls", &self.tls.as_ref().map(|(_, name)| name))
            .field("token", &self.token)
            .finish()
    }
}

impl ConnectOptions {
    /// Plain TCP, no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Speak TLS with `config` (e.g. from `tidegate_listener::tls::client_config`),
    /// checking the server's certificate against `server_name` (a DNS name
    /// or an IP address).
    pub fn tls(
        mut self,
        config: Arc<ClientConfig>,
        server_name: &str,
    ) -> Result<Self, ClientError> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|_| ClientError::ServerName(server_name.to_owned()))?;
        self.tls = Some((config, name));
        Ok(self)
    }

    /// Authenticate with `token` right after connecting (AUTH, then wait for
    /// AUTH_OK); needed when the server has `[wire] tokens`.
    pub fn token(mut self, token: impl Into<Bytes>) -> Self {
        self.token = Some(AuthToken::new(token));
        self
    }
}

/// Plain TCP or TLS.
type ClientStream = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// A connection to a `[wire]` listener.
#[derive(Debug)]
pub struct WireClient {
    stream: ClientStream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    held: VecDeque<Frame>,
    next_token: u64,
}

impl WireClient {
    /// Connects over plain TCP (with TCP_NODELAY), without a token.
    pub async fn connect(addr: SocketAddr) -> Result<Self, ClientError> {
        Self::connect_with(addr, &ConnectOptions::default()).await
    }

    /// Connects as `options` say: TLS handshake first if asked, then AUTH
    /// with the token if one is given (an ERROR answer is returned as
    /// [`ClientError::Server`]).
    pub async fn connect_with(
        addr: SocketAddr,
        options: &ConnectOptions,
    ) -> Result<Self, ClientError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let stream = match &options.tls {
            None => Either::Left(tcp),
            Some((config, name)) => {
                let tls = TlsConnector::from(config.clone())
                    .connect(name.clone(), tcp)
                    .await?;
                Either::Right(Box::new(tls))
            }
        };
        let mut client = WireClient {
            stream,
            rbuf: BytesMut::with_capacity(64 * 1024),
            wbuf: BytesMut::with_capacity(64 * 1024),
            held: VecDeque::new(),
            next_token: 1,
        };
        if let Some(token) = &options.token {
            client.authenticate(token.as_bytes()).await?;
        }
        Ok(client)
    }

    /// True when the connection speaks TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.stream, Either::Right(_))
    }

    /// Sends AUTH with `token` and waits for AUTH_OK. A refused token comes
    /// back as [`ClientError::Server`] with code `Unauthorized`, and the
    /// server closes the connection.
    pub async fn authenticate(&mut self, token: &[u8]) -> Result<(), ClientError> {
        codec::encode_auth(token, &mut self.wbuf)?;
        self.flush().await?;
        self.wait_for(|f| matches!(f, Frame::AuthOk)).await?;
        Ok(())
    }

    /// Buffers a frame without sending it (see [`WireClient::flush`]).
    pub fn queue(&mut self, frame: &Frame) -> Result<(), ClientError> {
        codec::encode_frame(frame, &mut self.wbuf)?;
        Ok(())
    }

    /// Sends everything buffered in one write.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Sends one frame now.
    pub async fn send(&mut self, frame: &Frame) -> Result<(), ClientError> {
        self.queue(frame)?;
        self.flush().await
    }

    /// Sends raw bytes (tests use it to send invalid frames).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.flush().await?;
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Publishes a message (fire and forget; use [`WireClient::ping`] as a
    /// barrier to learn that the server has taken it).
    pub async fn publish(&mut self, msg: &Message) -> Result<(), ClientError> {
        codec::encode_message(FrameType::Publish, msg, &mut self.wbuf)?;
        self.flush().await
    }

    /// Subscribes to `pattern` and waits until the subscription is live.
    pub async fn subscribe(&mut self, pattern: &str) -> Result<(), ClientError> {
        self.queue(&Frame::Subscribe(pattern.to_owned()))?;
        self.ping().await.map(|_| ())
    }

    /// Removes a subscription and waits until the server has applied it.
    pub async fn unsubscribe(&mut self, pattern: &str) -> Result<(), ClientError> {
        self.queue(&Frame::Unsubscribe(pattern.to_owned()))?;
        self.ping().await.map(|_| ())
    }

    /// Sends a PING and waits for its PONG; returns the round trip. An ERROR
    /// received first is returned as [`ClientError::Server`].
    pub async fn ping(&mut self) -> Result<Duration, ClientError> {
        let token = self.next_token;
        self.next_token += 1;
        codec::encode_token(FrameType::Ping, token, &mut self.wbuf);
        let t0 = Instant::now();
        self.flush().await?;
        self.wait_for(|f| matches!(f, Frame::Pong(t) if *t == token))
            .await?;
        Ok(t0.elapsed())
    }

    /// Sends an ECHO that asks for a reply and waits for the reply with the
    /// same correlation id.
    pub async fn echo(
        &mut self,
        correlation_id: i64,
        send_time_ns: i64,
        extra: &[u8],
    ) -> Result<Echo, ClientError> {
        codec::encode_echo(
            Echo::RESPOND,
            send_time_ns,
            correlation_id,
            extra,
            &mut self.wbuf,
        )?;
        self.flush().await?;
        match self
            .wait_for(|f| matches!(f, Frame::Echo(e) if e.correlation_id == correlation_id))
            .await?
        {
            Frame::Echo(e) => Ok(e),
            _ => unreachable!("wait_for returns a matching frame"),
        }
    }

    /// The next frame from the server (held frames first); `Ok(None)` when
    /// the server closed the connection cleanly.
    pub async fn recv(&mut self) -> Result<Option<Frame>, ClientError> {
        if let Some(f) = self.held.pop_front() {
            return Ok(Some(f));
        }
        self.read_frame().await
    }

    /// The next MESSAGE; an ERROR becomes [`ClientError::Server`], other
    /// frames are skipped.
    pub async fn recv_message(&mut self) -> Result<Message, ClientError> {
        loop {
            match self.recv().await? {
                Some(Frame::Message(m)) => return Ok(m),
                Some(Frame::Error(e)) => return Err(ClientError::Server(e)),
                Some(_) => continue,
                None => return Err(ClientError::Closed),
            }
        }
    }

    /// Reads until a frame `want` accepts. An ERROR on the way is returned
    /// instead, once the wanted frame (or the end of the connection) comes.
    async fn wait_for(&mut self, want: impl Fn(&Frame) -> bool) -> Result<Frame, ClientError> {
        let mut error = None;
        loop {
            let f = match self.read_frame().await {
                Ok(Some(f)) => f,
                Ok(None) => return Err(error.map_or(ClientError::Closed, ClientError::Server)),
                Err(e) => return Err(error.map_or(e, ClientError::Server)),
            };
            if want(&f) {
                return match error {
                    Some(e) => Err(ClientError::Server(e)),
                    None => Ok(f),
                };
            }
            if let Frame::Error(e) = f {
                error.get_or_insert(e);
                continue;
            }
            if self.held.len() >= MAX_HELD_FRAMES {
                return Err(ClientError::TooManyHeld);
            }
            self.held.push_back(f);
        }
    }

    async fn read_frame(&mut self) -> Result<Option<Frame>, ClientError> {
        loop {
            if let Some(f) = codec::decode_frame(&mut self.rbuf, CLIENT_MAX_FRAME)? {
                return Ok(Some(f));
            }
            if self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(64 * 1024);
            }
            if self.stream.read_buf(&mut self.rbuf).await? == 0 {
                if self.rbuf.is_empty() {
                    return Ok(None);
                }
                return Err(DecodeError::EndedMidFrame {
                    received: self.rbuf.len(),
                }
                .into());
            }
        }
    }

    /// Half-closes the sending side (the server sees end of stream).
    pub async fn shutdown_write(&mut self) -> Result<(), ClientError> {
        self.flush().await?;
        self.stream.shutdown().await?;
        Ok(())
    }
}
