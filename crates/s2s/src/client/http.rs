//! [`HttpS2sClient`]: the HTTP transport to one input port, one
//! transaction at a time, sending each request the way NiFi's own
//! `SiteToSiteRestApiClient` does:
//!
//! | step | request | `Accept` | other headers |
//! |---|---|---|---|
//! | create | `POST …/input-ports/{id}/transactions` | `application/json` | handshake properties |
//! | send | `POST {tx}/flow-files` | `text/plain` | `Content-Type: application/octet-stream`, handshake properties |
//! | extend | `PUT {tx}` | `application/json` | handshake properties |
//! | commit | `DELETE {tx}?responseCode=12` | `application/json` | handshake properties |
//!
//! Every request carries `x-nifi-site-to-site-protocol-version: 1`; the
//! handshake properties are `…-use-compression: true` (only when
//! compressing) and `…-request-expiration` (the client's timeout). The
//! transaction's TTL comes from the create answer's
//! `x-nifi-site-to-site-server-transaction-ttl`; a transaction older than
//! half of it is extended before its next request, as NiFi's client does
//! from a timer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hyper::{Method, StatusCode};

use super::http_conn::{media, HttpConn};
use super::ClientError;
use crate::codec::{encode_compressed, encode_packet, DataPacket, ResponseCode};
use crate::http::{
    LOCATION_INTENT_HEADER, LOCATION_INTENT_TRANSACTION, REQUEST_EXPIRATION_HEADER, TTL_HEADER,
    USE_COMPRESSION_HEADER,
};
use crate::tls::ClientTls;

/// The `responseCode` of a `TransactionResultEntity` body.
fn json_code(body: &[u8]) -> Option<ResponseCode> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let c = v.get("responseCode")?.as_u64()?;
    ResponseCode::from_byte(u8::try_from(c).ok()?)
}

/// A refusal as NiFi's client reads it: the entity's response code (ABORT
/// when the body is not one), the status and the body.
fn refused(status: StatusCode, body: &[u8]) -> ClientError {
    let code = json_code(body).unwrap_or(ResponseCode::Abort);
    ClientError::Refused(
        code,
        format!("HTTP {status}: {}", String::from_utf8_lossy(body)),
    )
}

/// The handshake properties every request carries (a free function so the
/// borrow of the client's fields stays apart from its connection).
fn handshake(expiration_ms: &str, gzip: bool) -> Vec<(&'static str, &str)> {
    let mut h = vec![(REQUEST_EXPIRATION_HEADER, expiration_ms)];
    if gzip {
        h.push((USE_COMPRESSION_HEADER, "true"));
    }
    h
}

/// An open transaction.
struct Open {
    /// `/nifi-api/data-transfer/…/transactions/{id}`.
    path: String,
    /// When it was created or last extended.
    touched: Instant,
}

/// The HTTP transport to one input port, one transaction at a time.
pub struct HttpS2sClient {
    conn: HttpConn,
    port_id: String,
    gzip: bool,
    expiration_ms: String,
    ttl: Duration,
    tx: Option<Open>,
    body: BytesMut,
    plain: BytesMut,
    crc: crc32fast::Hasher,
    count: usize,
}

impl HttpS2sClient {
    /// Opens a plain connection to the `[http]` listener (or NiFi's web
    /// port) at `addr`.
    pub async fn connect(
        addr: SocketAddr,
        port_id: &str,
        gzip: bool,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Self::connect_with(addr, None, port_id, gzip, timeout).await
    }

    /// Like [`Self::connect`], over TLS when `tls` is given.
    pub async fn connect_with(
        addr: SocketAddr,
        tls: Option<&ClientTls>,
        port_id: &str,
        gzip: bool,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        Ok(HttpS2sClient {
            conn: HttpConn::open(addr, tls, timeout).await?,
            port_id: port_id.to_owned(),
            gzip,
            expiration_ms: timeout.as_millis().to_string(),
            // NiFi's default until the server says otherwise.
            ttl: Duration::from_secs(30),
            tx: None,
            body: BytesMut::new(),
            plain: BytesMut::new(),
            crc: crc32fast::Hasher::new(),
            count: 0,
        })
    }

    /// The server's transaction TTL (from the last create).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// FlowFiles added to the open transaction.
    pub fn pending(&self) -> usize {
        self.count
    }

    /// `POST …/transactions`: opens a transaction.
    pub async fn create(&mut self) -> Result<(), ClientError> {
        let path = format!(
            "/nifi-api/data-transfer/input-ports/{}/transactions",
            self.port_id
        );
        let headers = handshake(&self.expiration_ms, self.gzip);
        let (status, headers, body) = self
            .conn
            .request(Method::POST, &path, media::JSON, &headers, Bytes::new())
            .await?;
        if status != StatusCode::CREATED {
            return Err(refused(status, &body));
        }
        let intent = headers
            .get(LOCATION_INTENT_HEADER)
            .and_then(|v| v.to_str().ok());
        if intent != Some(LOCATION_INTENT_TRANSACTION) {
            return Err(ClientError::Protocol(format!(
                "201 without {LOCATION_INTENT_HEADER}: {LOCATION_INTENT_TRANSACTION}"
            )));
        }
        let loc = headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| ClientError::Protocol("201 without Location".into()))?;
        self.ttl = headers
            .get(TTL_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
            .ok_or_else(|| ClientError::Protocol(format!("201 without {TTL_HEADER}")))?;
        // Requests go over this connection: keep the path, drop the
        // scheme and authority the server put in front of it.
        let path = loc.find("/nifi-api/").map(|i| &loc[i..]).unwrap_or(loc);
        self.tx = Some(Open {
            path: path.to_owned(),
            touched: Instant::now(),
        });
        self.body.clear();
        self.crc = crc32fast::Hasher::new();
        self.count = 0;
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
        self.count += 1;
    }

    fn tx(&self) -> Result<String, ClientError> {
        self.tx
            .as_ref()
            .map(|t| t.path.clone())
            .ok_or_else(|| ClientError::Protocol("no open transaction".into()))
    }

    /// `PUT {tx}`: pushes the transaction's expiry out by one TTL.
    pub async fn extend(&mut self) -> Result<(), ClientError> {
        let path = self.tx()?;
        let headers = handshake(&self.expiration_ms, self.gzip);
        let (status, _, body) = self
            .conn
            .request(Method::PUT, &path, media::JSON, &headers, Bytes::new())
            .await?;
        if status != StatusCode::OK {
            return Err(refused(status, &body));
        }
        if let Some(t) = self.tx.as_mut() {
            t.touched = Instant::now();
        }
        Ok(())
    }

    /// Extends the transaction if half its TTL has passed since it was
    /// created or last extended. Every request of a transaction does this
    /// first; a caller that waits between requests (for more FlowFiles)
    /// calls it at least every half TTL, as NiFi's client does from a timer.
    pub async fn keep_alive(&mut self) -> Result<(), ClientError> {
        let due = self
            .tx
            .as_ref()
            .is_some_and(|t| t.touched.elapsed() >= self.ttl / 2);
        if due {
            self.extend().await?;
        }
        Ok(())
    }

    /// `POST {tx}/flow-files` and the checksum check; on a mismatch the
    /// transaction is ended with `BAD_CHECKSUM`.
    pub async fn confirm(&mut self) -> Result<(), ClientError> {
        self.keep_alive().await?;
        let path = format!("{}/flow-files", self.tx()?);
        let body = self.body.split().freeze();
        let mut headers = handshake(&self.expiration_ms, self.gzip);
        headers.push(("content-type", media::OCTET_STREAM));
        let (status, _, resp) = self
            .conn
            .request(Method::POST, &path, media::TEXT, &headers, body)
            .await?;
        if status != StatusCode::ACCEPTED {
            return Err(refused(status, &resp));
        }
        let ours = self.crc.clone().finalize().to_string();
        let theirs = String::from_utf8_lossy(&resp).trim().to_string();
        if ours != theirs {
            let _ = self.end(ResponseCode::BadChecksum).await;
            return Err(ClientError::BadChecksum { ours, theirs });
        }
        Ok(())
    }

    /// `DELETE {tx}?responseCode=code`; the transaction is closed on our
    /// side whatever the answer.
    async fn end(&mut self, code: ResponseCode) -> Result<Bytes, ClientError> {
        self.keep_alive().await?;
        let path = format!("{}?responseCode={}", self.tx()?, code.byte());
        self.tx = None;
        let headers = handshake(&self.expiration_ms, self.gzip);
        let (status, _, body) = self
            .conn
            .request(Method::DELETE, &path, media::JSON, &headers, Bytes::new())
            .await?;
        if status != StatusCode::OK {
            return Err(refused(status, &body));
        }
        Ok(body)
    }

    /// Commits (`responseCode=12`); `Ok(true)` = the server's destination
    /// is full (the FlowFiles were taken; back off before the next one).
    pub async fn complete(&mut self) -> Result<bool, ClientError> {
        let body = self.end(ResponseCode::ConfirmTransaction).await?;
        match json_code(&body) {
            Some(ResponseCode::TransactionFinished) => Ok(false),
            Some(ResponseCode::TransactionFinishedButDestinationFull) => Ok(true),
            other => Err(ClientError::Protocol(format!("commit answered {other:?}"))),
        }
    }

    /// Cancels (`responseCode=15`).
    pub async fn cancel(&mut self) -> Result<(), ClientError> {
        self.end(ResponseCode::CancelTransaction).await?;
        Ok(())
    }

    /// A whole send transaction: create, packets, confirm, commit;
    /// `Ok(true)` = destination full after this one.
    pub async fn send_transaction(&mut self, packets: &[DataPacket]) -> Result<bool, ClientError> {
        self.create().await?;
        for p in packets {
            self.send(p);
        }
        self.confirm().await?;
        self.complete().await
    }
}
