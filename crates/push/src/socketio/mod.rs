//! Socket.IO v5: the packet codec ([`packet`]) and the reassembly of binary
//! packets from their attachments ([`binary`]). Pure, like the Engine.IO
//! codec it rides on.

pub mod binary;
pub mod packet;

pub use binary::BinaryAssembler;
pub use packet::{SioError, SioPacket, SioType};
