//! The Forward protocol codec: pure functions and state machines from bytes
//! to events and back. No sockets, clocks or globals live here, so every part
//! can be fuzzed, property-tested and benchmarked alone.
//!
//! - [`scan`]: finds where one msgpack value ends in a growing buffer
//!   (resumable, limit-checked before anything is allocated).
//! - [`reader`]: a zero-copy msgpack cursor over one complete value.
//! - [`frame`]: one Forward message → tag, option and events (all four modes).
//! - [`time`]: EventTime and integer/float seconds.
//! - [`gzip`]: size-capped multi-member gzip for CompressedPackedForward.
//! - [`transcode`]: a msgpack record → JSON bytes, and JSON → msgpack.
//! - [`json`]: JSON connections (first byte `{` or `[`).
//! - [`encode`]: the client side: messages, acks and handshake frames.
//! - [`decoder`]: the stream decoder tying scan and frame together.

pub mod decoder;
pub mod encode;
pub mod frame;
pub mod gzip;
pub mod json;
pub mod reader;
pub mod scan;
pub mod time;
pub mod transcode;

pub use decoder::ForwardDecoder;
pub use frame::{Event, Frame, FrameKind, RecordBytes};
pub use time::EventTime;

use thiserror::Error;

/// Limits that bound what one peer can make the decoder hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single top-level value, bytes.
    pub max_frame_bytes: usize,
    /// Largest decompressed chunk, bytes.
    pub max_decompressed_bytes: usize,
    /// Deepest container nesting.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: crate::config::DEFAULT_MAX_CHUNK_BYTES,
            max_decompressed_bytes: crate::config::DEFAULT_MAX_DECOMPRESSED_BYTES,
            max_depth: crate::config::DEFAULT_MAX_DEPTH,
        }
    }
}

/// A stream that cannot be decoded; the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Byte 0xC1 (never used by msgpack) or another impossible marker.
    #[error("invalid msgpack marker 0x{marker:02x} at offset {offset}")]
    BadMarker {
        /// The byte.
        marker: u8,
        /// Where, within the value.
        offset: usize,
    },
    /// A value (or its declared length) exceeds the frame limit.
    #[error("value declares {declared} bytes, over the limit of {limit}")]
    FrameTooLarge {
        /// Bytes the value needs at least.
        declared: u64,
        /// The configured limit.
        limit: usize,
    },
    /// Containers nested deeper than allowed.
    #[error("msgpack nesting deeper than {limit}")]
    TooDeep {
        /// The configured limit.
        limit: usize,
    },
    /// Decompressing a chunk produced more than allowed.
    #[error("decompressed chunk exceeds the limit of {limit} bytes")]
    DecompressedTooLarge {
        /// The configured limit.
        limit: usize,
    },
    /// The gzip stream is corrupt.
    #[error("bad gzip data: {0}")]
    BadGzip(String),
    /// A `compressed` option this server does not know.
    #[error("unsupported compression {0:?}")]
    UnsupportedCompression(String),
    /// A value ends before its declared length (inside a complete frame).
    #[error("truncated msgpack value: {0}")]
    Truncated(&'static str),
    /// The message has a shape no Forward mode has.
    #[error("malformed forward message: {0}")]
    Malformed(&'static str),
    /// Invalid JSON on a JSON connection.
    #[error("bad JSON: {0}")]
    BadJson(String),
    /// The memory a decompressed chunk needs was not granted (the server's
    /// in-flight byte budget stayed full for the read timeout).
    #[error("no memory budget for a decompressed chunk of {wanted} more bytes")]
    NoBudget {
        /// Bytes the decompression asked for.
        wanted: usize,
    },
}

/// Asked for room before a decompressed chunk's buffer grows by that many
/// bytes; an error ends the decoding with it. The codec stays pure: what
/// granting means (a budget, a wait) is the caller's.
pub type InflateGrant<'a> = &'a mut dyn FnMut(usize) -> Result<(), DecodeError>;

impl DecodeError {
    /// The short kind counted in the listener's error metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            DecodeError::BadMarker { .. } => "bad_msgpack",
            DecodeError::FrameTooLarge { .. } => "chunk_too_large",
            DecodeError::TooDeep { .. } => "too_deep",
            DecodeError::DecompressedTooLarge { .. } => "decompressed_too_large",
            DecodeError::BadGzip(_) => "bad_gzip",
            DecodeError::UnsupportedCompression(_) => "unsupported_compression",
            DecodeError::Truncated(_) => "truncated",
            DecodeError::Malformed(_) => "malformed",
            DecodeError::BadJson(_) => "bad_json",
            DecodeError::NoBudget { .. } => "inflate_budget",
        }
    }
}
