//! `SEND_FLOWFILES`: the client sends packets to an input port.
//!
//! ```text
//! C: packet ( RC 0A packet )* RC 0B        CONTINUE ... FINISH
//! S: RC 0C <crc>                           CONFIRM with our checksum
//! C: RC 0C ""  |  RC 13                    CONFIRM | BAD_CHECKSUM
//! S: RC 0D  |  RC 0E                       after every FlowFile is acknowledged
//! ```
//! `CANCEL` after any packet, EOF, a timeout or a limit rolls back: nothing
//! reaches the hub before the client's CONFIRM. The bytes of the packets are
//! taken from the hub's in-flight byte budget before they are read (by the
//! listener core) and held until the transaction ends, whichever way.
//!
//! The client's part, up to its CONFIRM, must end within
//! `max_transaction_ms`. `read_timeout_ms` bounds each wait for the next
//! bytes, and the listener core's partial-frame clock restarts with every
//! field the decoder consumes, so neither stops a client that sends one
//! small field at a time, just in time: with 25,000 attributes per FlowFile
//! and 100,000 FlowFiles it could keep the transaction, and the budget it
//! holds, for days.

use tidegate_listener::inbound::DEFAULT_MAX_READ_BYTES;

use crate::frame_io::TransactionBudget;
use tracing::info;

use super::session::Session;
use super::SessionError;
use crate::codec::{decode_response, encode_response, DataPacket, PacketDecoder, ResponseCode};
use crate::ports::InputPort;

pub(crate) async fn run(s: &mut Session, port: &InputPort) -> Result<(), SessionError> {
    let limit = s.ports.config().max_transaction();
    // Dropping the client's part at the deadline drops what it holds: the
    // packets and their budget. Nothing of it reached the hub yet.
    let received = tokio::time::timeout(limit, receive(s, port))
        .await
        .map_err(|_| SessionError::TransactionTimeout(limit))??;
    // Cancelled by the client.
    let Some((packets, held)) = received else {
        return Ok(());
    };

    // Not under the deadline: once the FlowFiles are published, cutting the
    // wait for their acknowledgement short would have the client send them
    // again.
    let committed = s.ports.commit(port, packets).await?;
    // The bytes stay held until the route has acknowledged them.
    drop(held);
    let code = if committed.destination_full {
        ResponseCode::TransactionFinishedButDestinationFull
    } else {
        ResponseCode::TransactionFinished
    };
    encode_response(code, None, &mut s.io.wbuf);
    Ok(())
}

/// The client's part: packets until `FINISH`, our checksum, its `CONFIRM`.
/// The packets to commit with the budget they hold, or `None` when the
/// client cancelled.
async fn receive(
    s: &mut Session,
    port: &InputPort,
) -> Result<Option<(Vec<DataPacket>, TransactionBudget)>, SessionError> {
    let cfg = s.ports.config();
    let t = cfg.read_timeout();
    let (max_files, max_bytes) = (cfg.max_transaction_flowfiles, cfg.max_transaction_bytes);
    let mut decoder = PacketDecoder::new(s.settled.gzip, cfg.packet_limits());
    // Dropped at every exit but success: cancelled or failed.
    let mut held = TransactionBudget::new(s.ports.hub().budget(), t);
    let mut crc = crc32fast::Hasher::new();
    let mut packets = Vec::new();
    let mut bytes: u64 = 0;
    loop {
        let (packet, n) = read_packet(s, &mut decoder, &mut crc, &mut held, bytes).await?;
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
                info!(peer = %s.peer, reason = r.message.as_deref().unwrap_or(""), port = %port.name, "client cancelled the transaction; rolled back");
                s.ports.metrics().error("client_cancel");
                return Ok(None);
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
        ResponseCode::ConfirmTransaction => Ok(Some((packets, held))),
        ResponseCode::BadChecksum => Err(SessionError::BadChecksum(format!(
            "client reported BAD_CHECKSUM for our {ours}; rolled back"
        ))),
        ResponseCode::CancelTransaction => {
            s.ports.metrics().error("client_cancel");
            Ok(None)
        }
        other => Err(SessionError::Protocol(format!(
            "expected CONFIRM, got {other:?}"
        ))),
    }
}

/// Reads one packet. The budget of every byte it consumes joins the
/// transaction's `held`, topped up by what decompression adds, before the
/// next read; a packet whose announced size exceeds the `room` left in the
/// transaction is refused before its bytes arrive.
async fn read_packet(
    s: &mut Session,
    decoder: &mut PacketDecoder,
    crc: &mut crc32fast::Hasher,
    held: &mut TransactionBudget,
    done_bytes: u64,
) -> Result<(DataPacket, usize), SessionError> {
    let cfg = s.ports.config();
    let (t, max_bytes) = (cfg.read_timeout(), cfg.max_transaction_bytes);
    loop {
        let done = s.io.next_packet(decoder, crc);
        held.keep(s.io.take_consumed());
        if let Some((packet, n)) = done? {
            let total = done_bytes as usize + n;
            held.cover(total).await.map_err(budget_error)?;
            return Ok((packet, n));
        }
        if done_bytes + decoder.announced_bytes() > max_bytes {
            return Err(SessionError::Limit(format!(
                "more than {max_bytes} bytes in one transaction (a packet announces {} bytes)",
                decoder.announced_bytes()
            )));
        }
        held.cover(done_bytes as usize + decoder.held_bytes())
            .await
            .map_err(budget_error)?;
        // The listener core holds what waits in the read buffer (a content
        // stays there until whole) and takes up to one read more.
        held.ensure_room(s.io.buffered() + DEFAULT_MAX_READ_BYTES)
            .map_err(budget_error)?;
        let size = s.io.packet_read_size(decoder);
        s.io.fill(size, t, "a packet").await?;
    }
}

/// Counted as `limit`: the in-flight budget is the process-wide one.
fn budget_error(e: crate::frame_io::BudgetError) -> SessionError {
    SessionError::Limit(e.to_string())
}
