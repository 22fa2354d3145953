//! Engine.IO v4: the packet codec ([`packet`]), the polling payload codec
//! ([`payload`]) and the handshake's query and open packet ([`handshake`]).
//! Pure: bytes in, values out; sessions and sockets live elsewhere.

pub mod handshake;
pub mod packet;
pub mod payload;

pub use packet::{EioError, EioPacket};
