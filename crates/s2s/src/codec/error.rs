//! [`CodecError`]: why bytes can never decode.

use thiserror::Error;

/// Input that is not, and cannot become, a valid Site-to-Site message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    /// The connection did not start with `NiFi`.
    #[error("bad magic bytes {0:02x?}, expected \"NiFi\"")]
    BadMagic([u8; 4]),
    /// A response code did not start with `RC`.
    #[error("expected a response code (\"RC\"), got {0:02x?}")]
    NotAResponse([u8; 2]),
    /// A response code byte NiFi does not define.
    #[error("unknown response code {0}")]
    UnknownResponseCode(u8),
    /// A request name NiFi does not define.
    #[error("unknown request type {0:?}")]
    UnknownRequest(String),
    /// A length or count field was negative.
    #[error("negative {what}: {value}")]
    Negative {
        /// Which field.
        what: &'static str,
        /// The value read.
        value: i64,
    },
    /// A count or size above its configured limit.
    #[error("{what} of {value} exceeds the limit of {limit}")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// The value read.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// Bytes that are not valid (modified) UTF-8.
    #[error("invalid UTF-8 in {0}")]
    BadUtf8(&'static str),
    /// A string too long for Java's `writeUTF` (65,535 bytes).
    #[error("string of {0} bytes is too long for writeUTF")]
    StringTooLong(usize),
    /// A compressed chunk that is not `SYNC`-framed zlib data.
    #[error("bad compressed chunk: {0}")]
    BadCompression(String),
    /// A packet's length fields disagree with the bytes that carry it.
    #[error("packet framing mismatch: {0}")]
    Framing(String),
}
