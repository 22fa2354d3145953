//! [`HttpS2sClient`]: the HTTP transport over one kept-alive HTTP/1.1
//! connection (hyper), and the small request helper discovery uses.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::ClientError;
use crate::codec::{encode_compressed, encode_packet, DataPacket, ResponseCode};
use crate::http::{PROTOCOL_VERSION_HEADER, USE_COMPRESSION_HEADER};

/// One HTTP/1.1 connection.
pub(crate) struct HttpConn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    timeout: Duration,
}

impl HttpConn {
    pub(crate) async fn open(addr: SocketAddr, timeout: Duration) -> Result<Self, ClientError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(HttpConn {
            sender,
            host: addr.to_string(),
            timeout,
        })
    }

    /// Sends one request; returns status, headers and the whole body.
    pub(crate) async fn request(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), ClientError> {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header(PROTOCOL_VERSION_HEADER, "1")
            .header("accept", "application/json");
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
            let body = body
                .collect()
                .await
                .map_err(|e| ClientError::Http(e.to_string()))?
                .to_bytes();
            Ok::<_, ClientError>((parts.status, parts.headers, body))
        };
        tokio::time::timeout(self.timeout, fut).await.map_err(|_| {
            ClientError::Frame(crate::frame_io::FrameError::Timeout("an HTTP response"))
        })?
    }
}

fn json_code(body: &[u8]) -> Option<u8> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("responseCode")?.as_u64().map(|c| c as u8)
}

/// The HTTP transport to one input port, one transaction at a time.
pub struct HttpS2sClient {
    conn: HttpConn,
    port_id: String,
    gzip: bool,
    tx_path: Option<String>,
    body: BytesMut,
    plain: BytesMut,
    crc: crc32fast::Hasher,
}

impl HttpS2sClient {
    /// Opens a connection to the `[http]` listener at `addr`.
    pub async fn connect(
        addr: SocketAddr,
        port_id: &str,
        gzip: bool,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Ok(HttpS2sClient {
            conn: HttpConn::open(addr, timeout).await?,
            port_id: port_id.to_owned(),
            gzip,
            tx_path: None,
            body: BytesMut::new(),
            plain: BytesMut::new(),
            crc: crc32fast::Hasher::new(),
        })
    }

    /// `POST …/transactions`: opens a transaction.
    pub async fn create(&mut self) -> Result<(), ClientError> {
        let path = format!(
            "/nifi-api/data-transfer/input-ports/{}/transactions",
            self.port_id
        );
        let (status, headers, body) = self
            .conn
            .request(Method::POST, &path, &[], Bytes::new())
            .await?;
        if status != StatusCode::CREATED {
            let code = json_code(&body)
                .and_then(ResponseCode::from_byte)
                .unwrap_or(ResponseCode::Abort);
            return Err(ClientError::Refused(
                code,
                String::from_utf8_lossy(&body).into_owned(),
            ));
        }
        let loc = headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| ClientError::Http("201 without Location".into()))?;
        let path = loc.find("/nifi-api/").map(|i| &loc[i..]).unwrap_or(loc);
        self.tx_path = Some(path.to_owned());
        self.body.clear();
        self.crc = crc32fast::Hasher::new();
        Ok(())
    }

    /// Adds a packet to the transaction's body.
    pub fn send(&mut self, packet: &DataPacket) {
        self.plain.clear();
        encode_packet(packet, &mut self.plain);
        self.crc.update(&self.plain);
        if self.gzip {
            encode_compressed(&self.plain, &mut self.body);
        } else {
            self.body.extend_from_slice(&self.plain);
        }
    }

    fn tx(&self) -> Result<String, ClientError> {
        self.tx_path
            .clone()
            .ok_or_else(|| ClientError::Protocol("no open transaction".into()))
    }

    /// `POST …/flow-files` and the checksum check.
    pub async fn confirm(&mut self) -> Result<(), ClientError> {
        let path = format!("{}/flow-files", self.tx()?);
        let body = self.body.split().freeze();
        let gz = if self.gzip { "true" } else { "false" };
        let headers = [
            ("content-type", "application/octet-stream"),
            (USE_COMPRESSION_HEADER, gz),
        ];
        let (status, _, resp) = self
            .conn
            .request(Method::POST, &path, &headers, body)
            .await?;
        if status != StatusCode::ACCEPTED {
            return Err(ClientError::Http(format!(
                "flow-files answered {status}: {}",
                String::from_utf8_lossy(&resp)
            )));
        }
        let ours = self.crc.clone().finalize().to_string();
        let theirs = String::from_utf8_lossy(&resp).trim().to_string();
        if ours != theirs {
            let path = format!(
                "{}?responseCode={}",
                self.tx()?,
                ResponseCode::BadChecksum.byte()
            );
            let _ = self
                .conn
                .request(Method::DELETE, &path, &[], Bytes::new())
                .await;
            return Err(ClientError::BadChecksum { ours, theirs });
        }
        Ok(())
    }

    /// `DELETE …?responseCode=12`: commit; `Ok(true)` = destination full.
    pub async fn complete(&mut self) -> Result<bool, ClientError> {
        let path = format!(
            "{}?responseCode={}",
            self.tx()?,
            ResponseCode::ConfirmTransaction.byte()
        );
        self.tx_path = None;
        let (status, _, body) = self
            .conn
            .request(Method::DELETE, &path, &[], Bytes::new())
            .await?;
        if status != StatusCode::OK {
            return Err(ClientError::Http(format!(
                "commit answered {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        match json_code(&body).and_then(ResponseCode::from_byte) {
            Some(ResponseCode::TransactionFinished) => Ok(false),
            Some(ResponseCode::TransactionFinishedButDestinationFull) => Ok(true),
            other => Err(ClientError::Protocol(format!("commit answered {other:?}"))),
        }
    }

    /// `DELETE …?responseCode=15`: cancel.
    pub async fn cancel(&mut self) -> Result<(), ClientError> {
        let path = format!(
            "{}?responseCode={}",
            self.tx()?,
            ResponseCode::CancelTransaction.byte()
        );
        self.tx_path = None;
        self.conn
            .request(Method::DELETE, &path, &[], Bytes::new())
            .await?;
        Ok(())
    }
}
