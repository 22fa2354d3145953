//! [`ClientError`]: why a client step failed.

use thiserror::Error;

use crate::codec::{CodecError, ResponseCode};
use crate::frame_io::FrameError;

/// Why a client step failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Socket, timeout or framing trouble.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The server refused with this code.
    #[error("server answered {0:?}: {1}")]
    Refused(ResponseCode, String),
    /// The server said something out of order.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The two checksums differ.
    #[error("checksum mismatch: ours {ours}, server's {theirs}")]
    BadChecksum {
        /// Ours.
        ours: String,
        /// The server's.
        theirs: String,
    },
    /// An HTTP request failed or answered an unexpected status.
    #[error("http: {0}")]
    Http(String),
}

impl From<CodecError> for ClientError {
    fn from(e: CodecError) -> Self {
        ClientError::Frame(FrameError::Codec(e))
    }
}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Frame(FrameError::Io(e))
    }
}

impl ClientError {
    /// A short cause label for failure tables.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::Frame(FrameError::Eof) => "connection_closed",
            ClientError::Frame(FrameError::Timeout(_)) => "timeout",
            ClientError::Frame(FrameError::Io(e))
                if e.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                "connection_refused"
            }
            ClientError::Frame(FrameError::Io(e)) if e.raw_os_error() == Some(24) => {
                "too_many_open_files"
            }
            ClientError::Frame(FrameError::Io(_)) => "io",
            ClientError::Frame(FrameError::Codec(_)) => "bad_frame",
            ClientError::Refused(ResponseCode::PortsDestinationFull, _) => "destination_full",
            ClientError::Refused(_, _) => "refused",
            ClientError::Protocol(_) => "protocol",
            ClientError::BadChecksum { .. } => "bad_checksum",
            ClientError::Http(_) => "http",
        }
    }
}
