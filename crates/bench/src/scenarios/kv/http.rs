//! A minimal HTTP/1.1 keep-alive client connection for load: it writes a
//! request already laid out in bytes and reads exactly one response,
//! returning its status. Bodies are counted and discarded, never kept past
//! the read buffer. Heads are parsed with `httparse`; `Content-Length` and
//! chunked bodies are understood; a response that says `Connection: close`
//! (or an HTTP/1.0 one) ends the connection, and the caller reconnects.
//!
//! Not a general client: no redirects, no pipelining, no TLS — one
//! request in flight per connection, as wrk and wrk2 do.

use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head read.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most headers in one response head.
const MAX_HEADERS: usize = 64;
/// Largest body accepted (a GET of a huge value is a broken run, not a
/// reason to use unbounded memory; the body is discarded as it arrives).
pub const MAX_BODY_BYTES: u64 = 1 << 30;
/// Read buffer size.
const READ_CHUNK: usize = 64 * 1024;

/// One round trip failed.
#[derive(Debug, Error)]
pub enum HttpError {
    /// The socket failed or the peer closed it mid-response.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed before answering.
    #[error("connection closed by the server")]
    Closed,
    /// The response is not HTTP/1.x as this client reads it.
    #[error("malformed response: {0}")]
    Malformed(String),
}

/// How the body of a response is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyLen {
    Length(u64),
    Chunked,
}

/// A parsed response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    status: u16,
    head_len: usize,
    body: BodyLen,
    close: bool,
}

/// Parses a response head from the start of `buf`; `None` while incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<Head>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(HttpError::Malformed("response head too long".into()))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    };
    let status = resp.code.unwrap_or(0);
    let mut body = BodyLen::Length(0);
    let mut close = resp.version == Some(0);
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| HttpError::Malformed("bad content-length".into()))?;
            if n > MAX_BODY_BYTES {
                return Err(HttpError::Malformed(format!("body of {n} bytes")));
            }
            body = BodyLen::Length(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if h.value.eq_ignore_ascii_case(b"chunked") {
                body = BodyLen::Chunked;
            } else {
                return Err(HttpError::Malformed("unsupported transfer-encoding".into()));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = h.value.eq_ignore_ascii_case(b"close");
        }
    }
    // 1xx, 204 and 304 carry no body whatever the headers say.
    if status < 200 || status == 204 || status == 304 {
        body = BodyLen::Length(0);
    }
    Ok(Some(Head {
        status,
        head_len,
        body,
        close,
    }))
}

/// Where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunked {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data; this many bytes plus its CRLF still to skip.
    Data(u64),
    /// After the last (zero) chunk: trailers until an empty line.
    Trailer,
    /// The body ended.
    Done,
}

/// Consumes as much of a chunked body from `buf` as possible.
fn skip_chunked(buf: &mut BytesMut, mut state: Chunked) -> Result<Chunked, HttpError> {
    loop {
        match state {
            Chunked::Size => match httparse::parse_chunk_size(buf) {
                Ok(httparse::Status::Complete((n, size))) => {
                    buf.advance(n);
                    if size > MAX_BODY_BYTES {
                        return Err(HttpError::Malformed("chunk too large".into()));
                    }
                    state = if size == 0 {
                        Chunked::Trailer
                    } else {
                        Chunked::Data(size + 2)
                    };
                }
                Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
                    return Err(HttpError::Malformed("chunk-size line too long".into()))
                }
                Ok(httparse::Status::Partial) => return Ok(state),
                Err(_) => return Err(HttpError::Malformed("bad chunk size".into())),
            },
            Chunked::Data(left) => {
                let n = (left as usize).min(buf.len());
                buf.advance(n);
                let left = left - n as u64;
                if left > 0 {
                    return Ok(Chunked::Data(left));
                }
                state = Chunked::Size;
            }
            Chunked::Trailer => match buf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    buf.advance(2);
                    return Ok(Chunked::Done);
                }
                Some(i) => buf.advance(i + 2),
                None if buf.len() > MAX_HEAD_BYTES => {
                    return Err(HttpError::Malformed("trailer too long".into()))
                }
                None => return Ok(state),
            },
            Chunked::Done => return Ok(state),
        }
    }
}

/// One keep-alive connection.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    open: bool,
}

impl Conn {
    /// Connects to `addr` (Nagle off: requests are written whole).
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(READ_CHUNK),
            open: true,
        })
    }

    /// Whether the server left the connection open after the last response.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Writes `request` and reads one response; returns its status.
    pub async fn round_trip(&mut self, request: &[u8]) -> Result<u16, HttpError> {
        self.stream.write_all(request).await?;
        let head = loop {
            if let Some(h) = parse_head(&self.buf)? {
                break h;
            }
            self.fill().await?;
        };
        self.buf.advance(head.head_len);
        match head.body {
            BodyLen::Length(mut left) => loop {
                let n = (left as usize).min(self.buf.len());
                self.buf.advance(n);
                left -= n as u64;
                if left == 0 {
                    break;
                }
                self.fill().await?;
            },
            BodyLen::Chunked => {
                let mut state = Chunked::Size;
                loop {
                    state = skip_chunked(&mut self.buf, state)?;
                    if state == Chunked::Done {
                        break;
                    }
                    self.fill().await?;
                }
            }
        }
        if head.close {
            self.open = false;
        }
        Ok(head.status)
    }

    async fn fill(&mut self) -> Result<(), HttpError> {
        self.buf.reserve(READ_CHUNK);
        match self.stream.read_buf(&mut self.buf).await? {
            0 => {
                self.open = false;
                Err(HttpError::Closed)
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_give_status_length_and_close() {
        let h = parse_head(b"HTTP/1.1 201 Created\r\ncontent-length: 8\r\n\r\nCreated\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.status, 201);
        assert_eq!(h.body, BodyLen::Length(8));
        assert!(!h.close);
        let h = parse_head(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!((h.status, h.body, h.close), (200, BodyLen::Chunked, true));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nConte").unwrap(), None);
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
        assert!(parse_head(&vec![b'a'; MAX_HEAD_BYTES + 1]).is_err());
    }

    #[test]
    fn chunked_bodies_are_skipped_across_reads() {
        let body = b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\nNEXT";
        for split in 0..body.len() {
            let mut buf = BytesMut::from(&body[..split]);
            let mut state = skip_chunked(&mut buf, Chunked::Size).unwrap();
            buf.extend_from_slice(&body[split..]);
            state = skip_chunked(&mut buf, state).unwrap();
            assert_eq!(state, Chunked::Done, "split at {split}");
            assert_eq!(&buf[..], b"NEXT");
        }
    }
}
