//! [`SessionError`]: why a RAW connection ended early.

use std::io;
use std::time::Duration;

use thiserror::Error;

use crate::codec::{CodecError, ResponseCode};
use crate::ports::CommitError;

/// Why a RAW connection (and any transaction on it) ended. Every variant
/// rolls the open transaction back.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The client closed the connection.
    #[error("connection closed by the client")]
    Eof,
    /// A read took longer than its timeout.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The transaction was still open when `max_transaction_ms` (this
    /// duration) ran out, however steadily its bytes arrived.
    #[error("transaction still open after max_transaction_ms ({0:?})")]
    TransactionTimeout(Duration),
    /// A socket error.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// Bytes that are not Site-to-Site.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A valid message at the wrong time.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A configured limit was exceeded.
    #[error("limit exceeded: {0}")]
    Limit(String),
    /// The handshake was refused with this code (already answered).
    #[error("handshake refused: {0:?} {1}")]
    Refused(ResponseCode, String),
    /// The checksums of the two sides disagreed.
    #[error("bad checksum: {0}")]
    BadChecksum(String),
    /// The hub or a sink did not take the FlowFiles.
    #[error(transparent)]
    Commit(#[from] CommitError),
    /// TLS set-up failed.
    #[error("tls handshake failed: {0}")]
    Tls(String),
}

impl From<crate::frame_io::FrameError> for SessionError {
    fn from(e: crate::frame_io::FrameError) -> Self {
        use crate::frame_io::FrameError;
        match e {
            FrameError::Eof => SessionError::Eof,
            FrameError::Timeout(w) => SessionError::Timeout(w),
            FrameError::Io(e) => SessionError::Io(e),
            FrameError::Codec(e) => SessionError::Codec(e),
        }
    }
}

impl SessionError {
    /// A short label for the `listener_errors{kind}` counter.
    pub fn kind(&self) -> &'static str {
        match self {
            SessionError::Eof => "eof_in_transaction",
            SessionError::Timeout(_) => "read_timeout",
            SessionError::TransactionTimeout(_) => "transaction_timeout",
            SessionError::Io(_) => "io",
            SessionError::Codec(_) => "bad_frame",
            SessionError::Protocol(_) => "protocol",
            SessionError::Limit(_) => "limit",
            SessionError::Refused(ResponseCode::UnknownPort, _) => "unknown_port",
            SessionError::Refused(ResponseCode::Unauthorized, _) => "unauthorized",
            SessionError::Refused(ResponseCode::PortsDestinationFull, _) => "destination_full",
            SessionError::Refused(_, _) => "handshake_refused",
            SessionError::BadChecksum(_) => "bad_checksum",
            SessionError::Commit(_) => "delivery_failed",
            SessionError::Tls(_) => "tls_handshake",
        }
    }
}
