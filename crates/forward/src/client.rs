//! A Forward protocol client: plain TCP or TLS, the optional shared-key
//! handshake, every mode (Message, Forward, PackedForward,
//! CompressedPackedForward), chunk ids and ack waits. Used by the tests, the
//! load generator and the Kafka interop tests.
//!
//! Records are msgpack maps given as bytes (encode once with
//! [`crate::codec::encode::record_from_json`] or by hand, send many times).
//! For pipelining, [`ForwardClient::into_split`] gives a writer and an ack
//! reader that can run in separate tasks.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use rand::RngCore;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::codec::encode::{
    gzip, packed_entries, write_forward, write_message, write_packed_forward, EntriesWrap,
    MessageOption, TimeForm,
};
use crate::codec::reader::MsgReader;
use crate::codec::{DecodeError, EventTime, ForwardDecoder, Limits};
use crate::handshake::{parse_helo, ClientHandshake, HandshakeError};

/// Why a client operation failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The socket failed (includes a TLS handshake the client refused).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The shared-key handshake failed.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The server sent bytes that are not msgpack.
    #[error("undecodable reply: {0}")]
    Decode(#[from] DecodeError),
    /// The server sent a value that is no ack.
    #[error("unexpected reply from the server")]
    UnexpectedReply,
    /// An ack for another chunk arrived while waiting for this one.
    #[error("expected ack for {expected:?}, got {got:?}")]
    WrongAck {
        /// The chunk waited for.
        expected: String,
        /// The chunk acked.
        got: String,
    },
    /// The server closed the connection.
    #[error("connection closed by the server")]
    Closed,
    /// No answer in time.
    #[error("timed out")]
    Timeout,
}

/// TLS settings of a client.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// PEM of the CA certificate(s) to trust.
    pub ca_pem: Vec<u8>,
    /// Name to verify the server certificate against (`localhost`).
    pub server_name: String,
}

/// Shared-key credentials of a client.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    /// The shared key.
    pub shared_key: String,
    /// Hostname stated in PING (must differ from the server's).
    pub hostname: String,
    /// User name (empty for none).
    pub username: String,
    /// Password (empty for none).
    pub password: String,
}

/// How a client connects.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// TLS, if the server speaks it.
    pub tls: Option<ClientTls>,
    /// The handshake, if the server requires a shared key.
    pub auth: Option<ClientAuth>,
    /// Connect + handshakes time limit (default 10 s).
    pub connect_timeout: Option<Duration>,
}

/// A byte stream the client can use: TCP or TLS over TCP.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> ClientStream for T {}

/// A connected Forward client.
pub struct ForwardClient {
    stream: Box<dyn ClientStream>,
    reader: AckReaderState,
    out: Vec<u8>,
    /// How event times are written.
    pub time_form: TimeForm,
}

impl std::fmt::Debug for ForwardClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardClient")
            .field("time_form", &self.time_form)
            .finish()
    }
}

/// A random chunk id: 32 lowercase hex characters (Fluent Bit's form).
pub fn new_chunk_id() -> String {
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

impl ForwardClient {
    /// Connects to `addr`, then runs TLS and the handshake as configured.
    pub async fn connect(addr: SocketAddr, options: ClientOptions) -> Result<Self, ClientError> {
        let limit = options.connect_timeout.unwrap_or(Duration::from_secs(10));
        tokio::time::timeout(limit, Self::connect_inner(addr, options))
            .await
            .map_err(|_| ClientError::Timeout)?
    }

    async fn connect_inner(addr: SocketAddr, options: ClientOptions) -> Result<Self, ClientError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let stream: Box<dyn ClientStream> = match &options.tls {
            None => Box::new(tcp),
            Some(t) => {
                let connector = TlsConnector::from(crate::tls::client_config(&t.ca_pem)?);
                let name = rustls::pki_types::ServerName::try_from(t.server_name.clone()).map_err(
                    |e| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("server name: {e}"),
                        )
                    },
                )?;
                Box::new(connector.connect(name, tcp).await?)
            }
        };
        let mut client = ForwardClient {
            stream,
            reader: AckReaderState::new(),
            out: Vec::new(),
            time_form: TimeForm::FixExt8,
        };
        if let Some(auth) = &options.auth {
            client.handshake(auth).await?;
        }
        Ok(client)
    }

    async fn handshake(&mut self, auth: &ClientAuth) -> Result<(), ClientError> {
        let helo = self.reader.next_value(&mut self.stream).await?;
        let helo = parse_helo(&helo)?;
        let hs = ClientHandshake::new(
            auth.hostname.clone(),
            auth.shared_key.clone(),
            auth.username.clone(),
            auth.password.clone(),
        );
        self.send_raw(&hs.ping(&helo)).await?;
        let pong = self.reader.next_value(&mut self.stream).await?;
        hs.check_pong(&helo, &pong)?;
        Ok(())
    }

    /// Sends bytes as they are (any frame, or garbage for tests).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await?;
        Ok(())
    }

    async fn send_out(&mut self) -> Result<(), ClientError> {
        let out = std::mem::take(&mut self.out);
        let r = self.send_raw(&out).await;
        self.out = out;
        self.out.clear();
        r
    }

    /// Message mode: one event.
    pub async fn send_message(
        &mut self,
        tag: &str,
        time: EventTime,
        record: &[u8],
        chunk: Option<&str>,
    ) -> Result<(), ClientError> {
        let opt = MessageOption {
            chunk,
            ..Default::default()
        };
        write_message(&mut self.out, tag, time, self.time_form, record, &opt);
        self.send_out().await
    }

    /// Forward mode: an array of entries.
    pub async fn send_forward(
        &mut self,
        tag: &str,
        entries: &[(EventTime, &[u8])],
        chunk: Option<&str>,
    ) -> Result<(), ClientError> {
        let opt = MessageOption {
            chunk,
            size: Some(entries.len() as u64),
            gzip: false,
        };
        write_forward(&mut self.out, tag, entries, self.time_form, &opt);
        self.send_out().await
    }

    /// PackedForward: entries packed into one str32.
    pub async fn send_packed_forward(
        &mut self,
        tag: &str,
        entries: &[(EventTime, &[u8])],
        chunk: Option<&str>,
    ) -> Result<(), ClientError> {
        let packed = packed_entries(entries, self.time_form);
        let opt = MessageOption {
            chunk,
            size: Some(entries.len() as u64),
            gzip: false,
        };
        write_packed_forward(&mut self.out, tag, &packed, EntriesWrap::Str32, &opt);
        self.send_out().await
    }

    /// CompressedPackedForward: packed entries, gzip-compressed, as bin.
    pub async fn send_compressed_packed_forward(
        &mut self,
        tag: &str,
        entries: &[(EventTime, &[u8])],
        chunk: Option<&str>,
    ) -> Result<(), ClientError> {
        let packed = gzip(&packed_entries(entries, self.time_form));
        let opt = MessageOption {
            chunk,
            size: Some(entries.len() as u64),
            gzip: true,
        };
        write_packed_forward(&mut self.out, tag, &packed, EntriesWrap::Bin, &opt);
        self.send_out().await
    }

    /// Waits for the next ack and returns its chunk id.
    pub async fn read_ack(&mut self) -> Result<String, ClientError> {
        self.reader.next_ack(&mut self.stream).await
    }

    /// Waits (up to `timeout`) for the ack of `chunk`, which must be the
    /// next one to arrive.
    pub async fn wait_ack(&mut self, chunk: &str, timeout: Duration) -> Result<(), ClientError> {
        let got = tokio::time::timeout(timeout, self.read_ack())
            .await
            .map_err(|_| ClientError::Timeout)??;
        if got != chunk {
            return Err(ClientError::WrongAck {
                expected: chunk.to_owned(),
                got,
            });
        }
        Ok(())
    }

    /// Splits into a writer and an ack reader for pipelined use.
    pub fn into_split(self) -> (FrameWriter, AckReader) {
        let (r, w) = tokio::io::split(self.stream);
        (
            FrameWriter { stream: w },
            AckReader {
                stream: r,
                state: self.reader,
            },
        )
    }

    /// Closes the connection (TLS close_notify included).
    pub async fn close(mut self) -> Result<(), ClientError> {
        self.stream.shutdown().await?;
        Ok(())
    }
}

/// The writing half of a split client.
pub struct FrameWriter {
    stream: WriteHalf<Box<dyn ClientStream>>,
}

impl FrameWriter {
    /// Writes pre-encoded frames.
    pub async fn write_all(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Closes the writing side.
    pub async fn shutdown(&mut self) -> Result<(), ClientError> {
        self.stream.shutdown().await?;
        Ok(())
    }
}

/// The reading half of a split client.
pub struct AckReader {
    stream: ReadHalf<Box<dyn ClientStream>>,
    state: AckReaderState,
}

impl AckReader {
    /// The next ack's chunk id; `Err(Closed)` when the server closed.
    pub async fn next_ack(&mut self) -> Result<String, ClientError> {
        self.state.next_ack(&mut self.stream).await
    }
}

/// Buffered decoding of server replies.
struct AckReaderState {
    buf: BytesMut,
    decoder: ForwardDecoder,
}

impl AckReaderState {
    fn new() -> Self {
        AckReaderState {
            buf: BytesMut::with_capacity(4096),
            decoder: ForwardDecoder::msgpack_only(Limits {
                max_frame_bytes: 1 << 20,
                ..Limits::default()
            }),
        }
    }

    async fn next_value<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<bytes::Bytes, ClientError> {
        loop {
            if let Some(v) = self.decoder.next_value(&mut self.buf)? {
                return Ok(v);
            }
            self.buf.reserve(4096);
            if stream.read_buf(&mut self.buf).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
    }

    async fn next_ack<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
    ) -> Result<String, ClientError> {
        let v = self.next_value(stream).await?;
        parse_ack(&v).ok_or(ClientError::UnexpectedReply)
    }
}

/// The chunk id of an `{"ack": chunk}` reply.
pub fn parse_ack(v: &[u8]) -> Option<String> {
    let mut r = MsgReader::new(v);
    let n = r.read_map_len().ok()??;
    for _ in 0..n {
        let key = r.read_raw_bytes().ok()?;
        if key == Some(b"ack".as_slice()) {
            let chunk = r.read_raw_bytes().ok()??;
            return Some(String::from_utf8_lossy(chunk).into_owned());
        }
        if key.is_none() {
            r.skip_value().ok()?;
        }
        r.skip_value().ok()?;
    }
    None
}
