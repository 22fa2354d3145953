//! `SEND_FLOWFILES`: the client sends packets to an input port.
//!
//! ```text
//! C: packet ( RC 0A packet )* RC 0B        CONTINUE ... FINISH
//! S: RC 0C <crc>                           CONFIRM with our checksum
//! C: RC 0C ""  |  RC 13                    CONFIRM | BAD_CHECKSUM
//! S: RC 0D  |  RC 0E                       after every FlowFile is acknowledged
//! ```
//! `CANCEL` after any packet, EOF, a timeout or a limit rolls back: nothing
//! reaches the hub before the client's CONFIRM. Everything the transaction
//! holds is taken from the hub's in-flight byte budget before it is read and
//! given back when the transaction ends.

use tokio::io::{AsyncRead, AsyncWrite};

use crate::frame_io::{QuickAck, TransactionBudget};
use tracing::info;

use super::session::Session;
use super::SessionError;
use crate::codec::{decode_response, encode_response, DataPacket, PacketDecoder, ResponseCode};
use crate::ports::InputPort;

pub(crate) async fn run<S: AsyncRead + AsyncWrite + Unpin + QuickAck>(
    s: &mut Session<S>,
    port: &InputPort,
) -> Result<(), SessionError> {
    let cfg = s.ports.config();
    let t = cfg.read_timeout();
    let (max_files, max_bytes) = (cfg.max_transaction_flowfiles, cfg.max_transaction_bytes);
    let mut decoder = PacketDecoder::new(s.settled.gzip, cfg.packet_limits());
    // Dropped at every exit of this function: finished, cancelled or failed.
    let mut held = TransactionBudget::new(s.ports.hub().budget(), t);
    let mut crc = crc32fast::Hasher::new();
    let mut packets = Vec::new();
    let mut bytes: u64 = 0;
    loop {
        let room = max_bytes.saturating_sub(bytes);
        let (packet, n) = read_packet(s, &mut decoder, &mut crc, &mut held, room).await?;
        bytes += n as u64;
        held.add_packet(n);
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

/// Reads one packet. Before every read the transaction takes what it will
/// then hold from the budget (waiting while it is spent), and a packet whose
/// announced size exceeds the `room` left in the transaction is refused
/// before its bytes arrive.
async fn read_packet<S: AsyncRead + AsyncWrite + Unpin + QuickAck>(
    s: &mut Session<S>,
    decoder: &mut PacketDecoder,
    crc: &mut crc32fast::Hasher,
    held: &mut TransactionBudget,
    room: u64,
) -> Result<(DataPacket, usize), SessionError> {
    let cfg = s.ports.config();
    let (t, max_bytes) = (cfg.read_timeout(), cfg.max_transaction_bytes);
    loop {
        if let Some(p) = s.io.next_packet(decoder, crc)? {
            return Ok(p);
        }
        if decoder.announced_bytes() > room {
            return Err(SessionError::Limit(format!(
                "more than {max_bytes} bytes in one transaction (a packet announces {} bytes)",
                decoder.announced_bytes()
            )));
        }
        let size = s.io.packet_read_size(decoder);
        held.cover(s.io.buffered() + decoder.held_bytes() + size)
            .await
            .map_err(|e| SessionError::Limit(e.to_string()))?;
        s.io.fill(size, t, "a packet").await?;
    }
}
