//! `SEND_FLOWFILES`: the client sends packets to an input port.
//!
//! ```text
//! C: packet ( RC 0A packet )* RC 0B        CONTINUE ... FINISH
//! S: RC 0C <crc>                           CONFIRM with our checksum
//! C: RC 0C ""  |  RC 13                    CONFIRM | BAD_CHECKSUM
//! S: RC 0D  |  RC 0E                       after every FlowFile is acknowledged
//! ```
//! `CANCEL` after any packet, EOF, a timeout or a limit rolls back: nothing
//! reaches the hub before the client's CONFIRM.

use tokio::io::{AsyncRead, AsyncWrite};

use crate::frame_io::QuickAck;
use tracing::info;

use super::session::Session;
use super::SessionError;
use crate::codec::{decode_response, encode_response, ResponseCode};
use crate::ports::InputPort;

pub(crate) async fn run<S: AsyncRead + AsyncWrite + Unpin + QuickAck>(
    s: &mut Session<S>,
    port: &InputPort,
) -> Result<(), SessionError> {
    let cfg = s.ports.config();
    let (t, limits, gzip) = (cfg.read_timeout(), cfg.packet_limits(), s.settled.gzip);
    let (max_files, max_bytes) = (cfg.max_transaction_flowfiles, cfg.max_transaction_bytes);
    let mut crc = crc32fast::Hasher::new();
    let mut packets = Vec::new();
    let mut bytes: u64 = 0;
    loop {
        let (packet, n) = s.io.read_packet(gzip, &limits, &mut crc, t).await?;
        bytes += n as u64;
        packets.push(packet);
        if packets.len() as u64 > max_files {
            return Err(SessionError::Limit(format!(
                "more than {max_files} FlowFiles in one transaction"
            )));
        }
        if bytes > max_bytes {
            return Err(SessionError::Limit(format!(
                "more than {max_bytes} bytes in one transaction"
            )));
        }
        let r = s.io.read(decode_response, t, "CONTINUE or FINISH").await?;
        match r.code {
            ResponseCode::ContinueTransaction => continue,
            ResponseCode::FinishTransaction => break,
            ResponseCode::CancelTransaction => {
                info!(reason = r.message.as_deref().unwrap_or(""), port = %port.name, "client cancelled the transaction; rolled back");
                s.ports.metrics().error("client_cancel");
                return Ok(());
            }
            other => {
                return Err(SessionError::Protocol(format!(
                    "expected CONTINUE or FINISH after a packet, got {other:?}"
                )))
            }
        }
    }

    let ours = crc.finalize().to_string();
    encode_response(
        ResponseCode::ConfirmTransaction,
        Some(&ours),
        &mut s.io.wbuf,
    );
    s.io.flush().await?;

    let r =
        s.io.read(decode_response, t, "the client's CONFIRM")
            .await?;
    match r.code {
        ResponseCode::ConfirmTransaction => {}
        ResponseCode::BadChecksum => {
            return Err(SessionError::BadChecksum(format!(
                "client reported BAD_CHECKSUM for our {ours}; rolled back"
            )))
        }
        ResponseCode::CancelTransaction => {
            s.ports.metrics().error("client_cancel");
            return Ok(());
        }
        other => {
            return Err(SessionError::Protocol(format!(
                "expected CONFIRM, got {other:?}"
            )))
        }
    }

    let committed = s.ports.commit(port, packets).await?;
    let code = if committed.destination_full {
        ResponseCode::TransactionFinishedButDestinationFull
    } else {
        ResponseCode::TransactionFinished
    };
    encode_response(code, None, &mut s.io.wbuf);
    Ok(())
}
