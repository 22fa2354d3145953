//! `RECEIVE_FLOWFILES`: the client takes FlowFiles from an output port.
//!
//! ```text
//! S: RC 15                                 NO_MORE_DATA (nothing queued), or
//! S: RC 14 packet ( RC 0A packet )* RC 0B  MORE_DATA ... FINISH
//! C: RC 0C <crc>                           the client's checksum
//! S: RC 0C ""  |  RC 13                    CONFIRM | BAD_CHECKSUM
//! C: RC 0D                                 TRANSACTION_FINISHED: messages are gone
//! ```
//! Anything else puts the messages back at the front of the port's queue,
//! and so does a transaction still open after `max_transaction_ms` (a client
//! that reads or answers slowly would otherwise keep them from every other
//! client).

use super::session::Session;
use super::SessionError;
use crate::codec::{
    decode_response, encode_compressed, encode_packet, encode_response, ResponseCode,
};
use crate::ports::{packet_for, OutputPort};
use bytes::BytesMut;

pub(crate) async fn run(s: &mut Session, port: &OutputPort) -> Result<(), SessionError> {
    let cfg = s.ports.config();
    let mut max = cfg.output_batch_max.max(1);
    if s.settled.batch_count > 0 {
        max = max.min(s.settled.batch_count as usize);
    }
    let msgs = port.take(max);
    if msgs.is_empty() {
        encode_response(ResponseCode::NoMoreData, None, &mut s.io.wbuf);
        return Ok(());
    }
    let limit = s.ports.config().max_transaction();
    let result = tokio::time::timeout(limit, send(s, &msgs))
        .await
        .unwrap_or(Err(SessionError::TransactionTimeout(limit)));
    if result.is_err() {
        port.requeue(msgs);
    }
    result
}

async fn send(s: &mut Session, msgs: &[tidegate_hub::SharedMessage]) -> Result<(), SessionError> {
    let t = s.ports.config().read_timeout();
    let gzip = s.settled.gzip;
    let mut crc = crc32fast::Hasher::new();
    let mut plain = BytesMut::new();
    encode_response(ResponseCode::MoreData, None, &mut s.io.wbuf);
    for (i, m) in msgs.iter().enumerate() {
        if i > 0 {
            encode_response(ResponseCode::ContinueTransaction, None, &mut s.io.wbuf);
        }
        plain.clear();
        encode_packet(&packet_for(m), &mut plain);
        crc.update(&plain);
        if gzip {
            encode_compressed(&plain, &mut s.io.wbuf);
        } else {
            s.io.wbuf.extend_from_slice(&plain);
        }
        s.io.flush_if_large().await?;
    }
    encode_response(ResponseCode::FinishTransaction, None, &mut s.io.wbuf);
    s.io.flush().await?;

    let ours = crc.finalize().to_string();
    let r =
        s.io.read(decode_response, t, "the client's CONFIRM")
            .await?;
    match r.code {
        ResponseCode::ConfirmTransaction => {
            let theirs = r.message.unwrap_or_default();
            if theirs != ours {
                encode_response(ResponseCode::BadChecksum, None, &mut s.io.wbuf);
                s.io.flush().await?;
                return Err(SessionError::BadChecksum(format!(
                    "client computed {theirs}, we sent {ours}"
                )));
            }
        }
        ResponseCode::BadChecksum => {
            return Err(SessionError::BadChecksum(
                "client reported BAD_CHECKSUM".into(),
            ))
        }
        other => {
            return Err(SessionError::Protocol(format!(
                "expected CONFIRM, got {other:?}"
            )))
        }
    }
    encode_response(ResponseCode::ConfirmTransaction, Some(""), &mut s.io.wbuf);
    s.io.flush().await?;
    let r =
        s.io.read(decode_response, t, "TRANSACTION_FINISHED")
            .await?;
    match r.code {
        ResponseCode::TransactionFinished | ResponseCode::TransactionFinishedButDestinationFull => {
            Ok(())
        }
        other => Err(SessionError::Protocol(format!(
            "expected TRANSACTION_FINISHED, got {other:?}"
        ))),
    }
}
