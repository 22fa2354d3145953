//! [`HttpConn`]: one kept-alive HTTP/1.1 connection (hyper), plain or TLS,
//! with a timeout on each request. Discovery, the peer list and the HTTP
//! transport all ride on it.
//!
//! Each request names its own `Accept`: NiFi's Jersey resources answer
//! `406 Not Acceptable` when it does not match what they produce (the
//! flow-files POST produces `text/plain`, everything else JSON), so there is
//! no connection-wide default.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::ClientError;
use crate::frame_io::FrameError;
use crate::http::PROTOCOL_VERSION_HEADER;
use crate::tls::ClientTls;

/// The transport protocol version this client speaks (NiFi's only one).
pub const HTTP_PROTOCOL_VERSION: &str = "1";

/// Media types named in `Accept` / `Content-Type`.
pub mod media {
    /// JSON entities (discovery, transaction results).
    pub const JSON: &str = "application/json";
    /// The flow-files POST's answer: the server's CRC32 as text.
    pub const TEXT: &str = "text/plain";
    /// Packets.
    pub const OCTET_STREAM: &str = "application/octet-stream";
}

/// Largest response body read (discovery, peer lists and transaction
/// results are small; a peer sending more is refused, not buffered).
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// An answered request: status, headers, whole body.
pub(crate) type Answer = (StatusCode, hyper::HeaderMap, Bytes);

/// One HTTP/1.1 connection.
pub(crate) struct HttpConn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    timeout: Duration,
}

impl HttpConn {
    /// Connects to `addr`, over TLS when `tls` is given (the server is
    /// verified against `tls`'s CA by IP address).
    pub(crate) async fn open(
        addr: SocketAddr,
        tls: Option<&ClientTls>,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let connect = async {
            let tcp = TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            match tls {
                Some(tls) => {
                    let s = tls.wrap(addr, tcp).await?;
                    Self::handshake(TokioIo::new(s)).await
                }
                None => Self::handshake(TokioIo::new(tcp)).await,
            }
        };
        let sender = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| ClientError::Frame(FrameError::Timeout("an HTTP connection")))??;
        Ok(HttpConn {
            sender,
            host: addr.to_string(),
            timeout,
        })
    }

    async fn handshake<T>(io: TokioIo<T>) -> Result<SendRequest<Full<Bytes>>, ClientError>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Sends one request with the protocol version header, `Accept: accept`
    /// and `headers`; returns status, headers and the whole body.
    pub(crate) async fn request(
        &mut self,
        method: Method,
        path: &str,
        accept: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, ClientError> {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header(PROTOCOL_VERSION_HEADER, HTTP_PROTOCOL_VERSION)
            .header("accept", accept);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let req = b
            .body(Full::new(body))
            .map_err(|e| ClientError::Http(e.to_string()))?;
        let fut = async {
            self.sender
                .ready()
                .await
                .map_err(|e| ClientError::Http(e.to_string()))?;
            let resp = self
                .sender
                .send_request(req)
                .await
                .map_err(|e| ClientError::Http(e.to_string()))?;
            let (parts, body) = resp.into_parts();
            let body = http_body_util::Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| ClientError::Http(format!("response body: {e}")))?
                .to_bytes();
            Ok::<_, ClientError>((parts.status, parts.headers, body))
        };
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| ClientError::Frame(FrameError::Timeout("an HTTP response")))?
    }
}
