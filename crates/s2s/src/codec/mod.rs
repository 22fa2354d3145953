//! The Site-to-Site wire format, pure: bytes in, values out, no I/O.
//!
//! Every decoder takes the bytes received so far and answers
//! `Ok(Some((value, consumed)))`, `Ok(None)` when more bytes are needed, or a
//! [`CodecError`] when the input can never become valid. Encoders append to a
//! `BytesMut`. Sizes are bounded by [`PacketLimits`] before anything is
//! allocated, so hostile input cannot make a decoder allocate without bound.
//!
//! Not here: sockets, timeouts, transactions (see `server` and `client`).

mod error;
mod handshake;
mod packet;
mod peers;
mod reader;
mod response;
mod utf;

pub use error::CodecError;
pub use handshake::{
    decode_handshake, decode_magic, decode_request, decode_resource_offer, decode_resource_reply,
    encode_handshake, encode_request, encode_resource_offer, encode_resource_reply, Handshake,
    RequestType, ResourceOffer, ResourceReply, CODEC_NAME, CODEC_VERSION, MAGIC, PROTOCOL_NAME,
    PROTOCOL_VERSION,
};
pub use packet::{
    decode_compressed_packet, decode_packet, encode_compressed, encode_packet,
    encode_packet_header, split_packet, DataPacket, PacketFrame, PacketLimits, COMPRESSION_CHUNK,
    SYNC,
};
pub use peers::{decode_peer_list, encode_peer_list, PeerInfo};
pub use response::{decode_response, encode_response, Response, ResponseCode};
pub use utf::{decode_utf, encode_utf};

/// What every decoder returns: a value and the bytes it used, `None` for
/// "need more bytes", or an error for input that can never be valid.
pub type Decoded<T> = Result<Option<(T, usize)>, CodecError>;

/// The CRC32 (IEEE, as `java.util.zip.CRC32`) of a transaction's
/// uncompressed packet bytes, rendered as NiFi sends it: a decimal string.
pub fn checksum_string(crc: &crc32fast::Hasher) -> String {
    crc.clone().finalize().to_string()
}
