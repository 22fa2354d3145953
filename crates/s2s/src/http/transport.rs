//! The HTTP transport under `/nifi-api/data-transfer/{input,output}-ports/`:
//!
//! - `POST …/{port}/transactions` opens a transaction (201 + `Location`);
//! - `POST …/{tx}/flow-files` streams packets in (202, body = our CRC32);
//! - `GET  …/{tx}/flow-files` streams packets out (202; 200 when none);
//! - `PUT  …/{tx}` extends the TTL;
//! - `DELETE …/{tx}?responseCode=12` commits (input: only after every
//!   FlowFile was acknowledged by its route; output: when the client's
//!   `checksum` matches), `15` cancels, `19` reports a bad checksum.
//!
//! Before a request reaches its transaction it passes what NiFi checks
//! ([`super::negotiate`]): `Accept` and `Content-Type` against what the
//! endpoint produces and consumes, then the port, then the protocol
//! version; a transaction that is unknown or past its TTL is `404`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::BytesMut;
use http_body_util::BodyExt;
use serde_json::json;
use tidegate_hub::BodyBytes;
use tracing::{info, warn};

use super::negotiate::{self, media};
use super::transactions::{rollback_data, TxData};
use super::{
    HttpState, BATCH_COUNT_HEADER, LOCATION_INTENT_HEADER, LOCATION_INTENT_TRANSACTION,
    PROTOCOL_VERSION_HEADER, TTL_HEADER, USE_COMPRESSION_HEADER,
};
use crate::codec::{encode_compressed, encode_packet, PacketDecoder, ResponseCode};
use crate::frame_io::{release_drained, TransactionBudget};
use crate::ports::{packet_for, PortRef};

const INPUT: &str = "input-ports";
const OUTPUT: &str = "output-ports";
/// A `TransactionResultEntity` body with `status`.
fn result(status: StatusCode, code: ResponseCode, message: impl Into<String>) -> Response {
    let body = json!({ "responseCode": code.byte(), "message": message.into() });
    (status, common_headers(), Json(body)).into_response()
}

fn common_headers() -> [(&'static str, HeaderValue); 1] {
    [(PROTOCOL_VERSION_HEADER, HeaderValue::from_static("1"))]
}

fn flag(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Finds the port of the right kind, or answers as NiFi does.
fn find_port(st: &HttpState, kind: &str, port_id: &str) -> Result<PortRef, Box<Response>> {
    let port = match (kind, st.ports.find(port_id)) {
        (INPUT, Some(p @ PortRef::Input(_))) | (OUTPUT, Some(p @ PortRef::Output(_))) => p,
        (INPUT | OUTPUT, _) => {
            st.ports.metrics().error("unknown_port");
            return Err(Box::new(result(
                StatusCode::NOT_FOUND,
                ResponseCode::UnknownPort,
                format!("Received unknown port identifier: {port_id}"),
            )));
        }
        _ => {
            return Err(Box::new(result(
                StatusCode::BAD_REQUEST,
                ResponseCode::Abort,
                format!("Port type was wrong. portType={kind}"),
            )))
        }
    };
    // The [http] listener carries no client certificate: a port with an
    // allow list is reachable over RAW+TLS only.
    if let Err(msg) = st.ports.authorize(&port, None) {
        st.ports.metrics().error("unauthorized");
        return Err(Box::new(result(
            StatusCode::UNAUTHORIZED,
            ResponseCode::Unauthorized,
            msg,
        )));
    }
    Ok(port)
}

fn unknown_transaction(id: &str) -> Response {
    result(
        StatusCode::NOT_FOUND,
        ResponseCode::Abort,
        format!("Transaction was not found. transactionId={id}"),
    )
}

/// NiFi's order of checks: media types, the port, the protocol version.
fn admit(
    st: &HttpState,
    headers: &HeaderMap,
    (produced, consumed): (&str, Option<&str>),
    kind: &str,
    port_id: &str,
) -> Result<PortRef, Box<Response>> {
    negotiate::accept(headers, produced)?;
    if let Some(c) = consumed {
        negotiate::content_type(headers, c)?;
    }
    let port = find_port(st, kind, port_id)?;
    negotiate::version(headers).inspect_err(|_| st.ports.metrics().error("bad_request"))?;
    Ok(port)
}

/// `POST …/{port}/transactions`.
pub(crate) async fn create(
    State(st): State<Arc<HttpState>>,
    Path((kind, port_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let port = match admit(&st, &headers, (media::JSON, None), &kind, &port_id) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    if let PortRef::Input(p) = &port {
        if st.ports.destination_full(p) {
            st.ports.metrics().error("destination_full");
            return result(
                StatusCode::SERVICE_UNAVAILABLE,
                ResponseCode::PortsDestinationFull,
                format!("Received port identifier {port_id}, but its destination is full"),
            );
        }
    }
    let Ok(tx) = st.transactions.create(port) else {
        st.ports.metrics().error("too_many_transactions");
        return result(
            StatusCode::SERVICE_UNAVAILABLE,
            ResponseCode::Abort,
            "Too many open transactions; retry later",
        );
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{}:{}", st.ports.config().host, st.http_port));
    let location =
        format!("http://{host}/nifi-api/data-transfer/{kind}/{port_id}/transactions/{tx}");
    let body = json!({
        "responseCode": ResponseCode::PropertiesOk.byte(),
        "message": format!("Handshake properties are valid, and port is running. A transaction is created:{tx}"),
    });
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&location) {
        h.insert(header::LOCATION, v);
    }
    h.insert(
        LOCATION_INTENT_HEADER,
        HeaderValue::from_static(LOCATION_INTENT_TRANSACTION),
    );
    h.insert(PROTOCOL_VERSION_HEADER, HeaderValue::from_static("1"));
    h.insert(
        TTL_HEADER,
        HeaderValue::from(st.transactions.ttl().as_secs()),
    );
    resp
}

/// `PUT …/{tx}`: extends the TTL.
pub(crate) async fn extend(
    State(st): State<Arc<HttpState>>,
    Path((kind, port_id, tx)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = admit(&st, &headers, (media::JSON, None), &kind, &port_id) {
        return *r;
    }
    if !st.transactions.extend(&tx) {
        return unknown_transaction(&tx);
    }
    let mut r = result(
        StatusCode::OK,
        ResponseCode::ContinueTransaction,
        "Extended TTL.",
    );
    r.headers_mut().insert(
        TTL_HEADER,
        HeaderValue::from(st.transactions.ttl().as_secs()),
    );
    r
}

/// `POST …/{tx}/flow-files`: FlowFiles in.
pub(crate) async fn receive_flow_files(
    State(st): State<Arc<HttpState>>,
    Path((kind, port_id, tx)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    if kind != INPUT {
        return result(
            StatusCode::METHOD_NOT_ALLOWED,
            ResponseCode::Abort,
            "POST flow-files is for input ports",
        );
    }
    let wants = (media::TEXT, Some(media::OCTET_STREAM));
    if let Err(r) = admit(&st, req.headers(), wants, &kind, &port_id) {
        return *r;
    }
    let Some(port) = st.transactions.take_open(&tx) else {
        return unknown_transaction(&tx);
    };
    let gzip = flag(req.headers(), USE_COMPRESSION_HEADER);
    let cfg = st.ports.config();
    let t = cfg.read_timeout();
    let mut decoder = PacketDecoder::new(gzip, cfg.packet_limits());
    // The [http] server takes each body frame's bytes from the in-flight
    // budget before handing it over (`BodyBytes`); `held` adds what
    // decompression makes of them. Both travel with the packets into the
    // transaction table and are given back when the client's DELETE
    // commits (or the transaction is cancelled or expires).
    let mut held = TransactionBudget::new(st.ports.hub().budget(), t);
    let body_budget = req.extensions().get::<BodyBytes>().cloned();
    let mut body = req.into_body();
    let mut buf = BytesMut::new();
    let mut crc = crc32fast::Hasher::new();
    let mut packets = Vec::new();
    let mut bytes: u64 = 0;
    let mut body_bytes: usize = 0;
    let outcome: Result<(), (&'static str, String)> = async {
        loop {
            while let Some((p, n)) = decoder
                .decode(&mut buf, &mut crc)
                .map_err(|e| ("bad_frame", e.to_string()))?
            {
                packets.push(p);
                bytes += n as u64;
                release_drained(&mut buf);
                if packets.len() as u64 > cfg.max_transaction_flowfiles
                    || bytes > cfg.max_transaction_bytes
                {
                    return Err((
                        "limit",
                        "transaction exceeds its FlowFile or byte limit".to_string(),
                    ));
                }
            }
            // Refused as soon as a packet announces more than the room left.
            if !decoder.is_idle() && bytes + decoder.announced_bytes() > cfg.max_transaction_bytes {
                return Err((
                    "limit",
                    format!(
                        "transaction exceeds its limit of {} bytes",
                        cfg.max_transaction_bytes
                    ),
                ));
            }
            let holding = bytes as usize + decoder.held_bytes() + buf.len();
            held.cover(holding.saturating_sub(body_bytes))
                .await
                .map_err(|e| ("limit", e.to_string()))?;
            match tokio::time::timeout(t, body.frame()).await {
                Err(_) => return Err(("read_timeout", "timed out reading flow-files".into())),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(("io", e.to_string())),
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        body_bytes += d.len();
                        buf.extend_from_slice(&d);
                    }
                }
            }
        }
        if !buf.is_empty() || !decoder.is_idle() {
            return Err((
                "bad_frame",
                format!(
                    "{} bytes of an unfinished packet at the end",
                    buf.len() + decoder.held_bytes()
                ),
            ));
        }
        Ok(())
    }
    .await;
    if let Some(b) = body_budget {
        held.keep(b.take());
    }
    let mut held = held.into_permit();
    // Keep what the packets hold (the request's framing goes back now).
    held.shrink_to(bytes as usize);
    if let Err((kind, msg)) = outcome {
        st.ports.metrics().error(kind);
        warn!(error = %msg, transaction = %tx, "s2s http flow-files failed; transaction rolled back");
        st.transactions.cancel(&tx);
        return result(StatusCode::BAD_REQUEST, ResponseCode::Abort, msg);
    }
    if packets.is_empty() {
        st.transactions.put(&tx, &port, TxData::Open);
        return (
            StatusCode::BAD_REQUEST,
            "Client should send request when there is data to send. There was no flow file sent.",
        )
            .into_response();
    }
    st.transactions
        .put(&tx, &port, TxData::Received { packets, held });
    let crc = crc.finalize().to_string();
    (
        StatusCode::ACCEPTED,
        common_headers(),
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"))],
        crc,
    )
        .into_response()
}

/// `GET …/{tx}/flow-files`: FlowFiles out.
pub(crate) async fn send_flow_files(
    State(st): State<Arc<HttpState>>,
    Path((kind, port_id, tx)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if kind != OUTPUT {
        return result(
            StatusCode::METHOD_NOT_ALLOWED,
            ResponseCode::Abort,
            "GET flow-files is for output ports",
        );
    }
    if let Err(r) = admit(&st, &headers, (media::OCTET_STREAM, None), &kind, &port_id) {
        return *r;
    }
    let Some(port_ref) = st.transactions.take_open(&tx) else {
        return unknown_transaction(&tx);
    };
    let PortRef::Output(port) = port_ref.clone() else {
        return unknown_transaction(&tx);
    };
    let mut max = st.ports.config().output_batch_max.max(1);
    if let Some(n) = headers
        .get(BATCH_COUNT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        max = max.min(n);
    }
    let msgs = port.take(max);
    if msgs.is_empty() {
        st.transactions.put(&tx, &port_ref, TxData::Open);
        return (StatusCode::OK, common_headers()).into_response();
    }
    let gzip = flag(&headers, USE_COMPRESSION_HEADER);
    let mut crc = crc32fast::Hasher::new();
    let mut out = BytesMut::new();
    let mut plain = BytesMut::new();
    for m in &msgs {
        plain.clear();
        encode_packet(&packet_for(m), &mut plain);
        crc.update(&plain);
        if gzip {
            encode_compressed(&plain, &mut out);
        } else {
            out.extend_from_slice(&plain);
        }
    }
    let crc = crc.finalize().to_string();
    st.transactions
        .put(&tx, &port_ref, TxData::Sent { msgs, crc });
    (
        StatusCode::ACCEPTED,
        common_headers(),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        Body::from(out.freeze()),
    )
        .into_response()
}

/// `DELETE …/{tx}?responseCode=…[&checksum=…]`: commit or cancel.
pub(crate) async fn finish(
    State(st): State<Arc<HttpState>>,
    Path((kind, port_id, tx)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let wants = (media::JSON, Some(media::OCTET_STREAM));
    if let Err(r) = admit(&st, &headers, wants, &kind, &port_id) {
        return *r;
    }
    let code = q
        .get("responseCode")
        .and_then(|c| c.parse::<u8>().ok())
        .and_then(ResponseCode::from_byte);
    match code {
        Some(ResponseCode::CancelTransaction) => {
            if !st.transactions.cancel(&tx) {
                return unknown_transaction(&tx);
            }
            st.ports.metrics().error("client_cancel");
            info!(transaction = %tx, "s2s http transaction cancelled by the client; rolled back");
            result(
                StatusCode::OK,
                ResponseCode::CancelTransaction,
                "Transaction has been canceled.",
            )
        }
        Some(ResponseCode::BadChecksum) => {
            if !st.transactions.cancel(&tx) {
                return unknown_transaction(&tx);
            }
            st.ports.metrics().error("bad_checksum");
            warn!(transaction = %tx, "s2s http client reported a bad checksum; rolled back");
            result(
                StatusCode::OK,
                ResponseCode::CancelTransaction,
                "Bad checksum; transaction rolled back.",
            )
        }
        Some(ResponseCode::ConfirmTransaction) => {
            let Some((port, data)) = st.transactions.remove_live(&tx) else {
                return unknown_transaction(&tx);
            };
            commit(&st, port, data, q.get("checksum").map(String::as_str)).await
        }
        _ => result(
            StatusCode::BAD_REQUEST,
            ResponseCode::Abort,
            format!("responseCode {:?} is invalid.", q.get("responseCode")),
        ),
    }
}

async fn commit(st: &HttpState, port: PortRef, data: TxData, checksum: Option<&str>) -> Response {
    match (&port, data) {
        (PortRef::Input(p), TxData::Received { packets, held }) => {
            // The budget bytes return once the hub has the FlowFiles.
            let committed = st.ports.commit(p, packets).await;
            drop(held);
            match committed {
                Ok(c) => {
                    let code = if c.destination_full {
                        ResponseCode::TransactionFinishedButDestinationFull
                    } else {
                        ResponseCode::TransactionFinished
                    };
                    let body = json!({ "responseCode": code.byte(), "flowFileSent": c.flow_files, "message": "" });
                    (StatusCode::OK, common_headers(), Json(body)).into_response()
                }
                Err(e) => {
                    st.ports.metrics().error("delivery_failed");
                    warn!(error = %e, "s2s http commit failed; transaction not acknowledged");
                    result(
                        StatusCode::SERVICE_UNAVAILABLE,
                        ResponseCode::Abort,
                        e.to_string(),
                    )
                }
            }
        }
        (PortRef::Output(_), TxData::Sent { msgs, crc }) => {
            if checksum != Some(crc.as_str()) {
                st.ports.metrics().error("bad_checksum");
                let msg = format!(
                    "checksum mismatch: client {:?}, server {crc}",
                    checksum.unwrap_or("")
                );
                rollback_data(&port, TxData::Sent { msgs, crc });
                return result(StatusCode::BAD_REQUEST, ResponseCode::BadChecksum, msg);
            }
            let body = json!({
                "responseCode": ResponseCode::ConfirmTransaction.byte(),
                "flowFileSent": msgs.len(),
                "message": "",
            });
            (StatusCode::OK, common_headers(), Json(body)).into_response()
        }
        (_, other) => {
            rollback_data(&port, other);
            result(
                StatusCode::BAD_REQUEST,
                ResponseCode::Abort,
                "No FlowFiles were transferred in this transaction",
            )
        }
    }
}
