//! A minimal HTTP/1.1 keep-alive client for Engine.IO long-polling: one
//! request at a time on one connection, a body by `Content-Length` or
//! `chunked`. Bounded: headers up to [`MAX_HEAD`], bodies up to
//! [`MAX_BODY`]; anything else is an error, never a panic.

use std::io;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
/// Largest response body accepted (above Engine.IO's 1 MB maxPayload).
pub const MAX_BODY: usize = 16 * 1024 * 1024;

fn bad(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// One keep-alive connection.
#[derive(Debug)]
pub struct HttpConn {
    stream: TcpStream,
    buf: BytesMut,
    host: String,
    /// Bytes read from the socket so far (heads included).
    pub bytes_read: u64,
}

/// How a response body is delimited.
enum Framing {
    Length(usize),
    Chunked,
}

impl HttpConn {
    /// Wraps a connected stream; `host` goes in the `Host` header.
    pub fn new(stream: TcpStream, host: String) -> Self {
        HttpConn {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            host,
            bytes_read: 0,
        }
    }

    /// Sends `method path` with `body` and returns the status and body.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> io::Result<(u16, Bytes)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: text/plain;charset=UTF-8\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        let mut req = Vec::with_capacity(head.len() + body.len());
        req.extend_from_slice(head.as_bytes());
        req.extend_from_slice(body);
        self.stream.write_all(&req).await?;
        self.read_response().await
    }

    async fn fill(&mut self) -> io::Result<()> {
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.bytes_read += n as u64;
        Ok(())
    }

    async fn read_response(&mut self) -> io::Result<(u16, Bytes)> {
        let head_len = loop {
            if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                break p + 4;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(bad("response head too long"));
            }
            self.fill().await?;
        };
        let head = self.buf.split_to(head_len);
        let text = std::str::from_utf8(&head).map_err(|_| bad("head is not UTF-8"))?;
        let status: u16 = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("no status code"))?;
        let mut framing = Framing::Length(0);
        for line in text.split("\r\n").skip(1) {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            if k.eq_ignore_ascii_case("content-length") {
                framing = Framing::Length(v.parse().map_err(|_| bad("bad content-length"))?);
            } else if k.eq_ignore_ascii_case("transfer-encoding")
                && v.eq_ignore_ascii_case("chunked")
            {
                framing = Framing::Chunked;
            }
        }
        let body = match framing {
            Framing::Length(n) => {
                if n > MAX_BODY {
                    return Err(bad("body too large"));
                }
                while self.buf.len() < n {
                    self.fill().await?;
                }
                self.buf.split_to(n).freeze()
            }
            Framing::Chunked => self.read_chunked().await?,
        };
        Ok((status, body))
    }

    async fn read_chunked(&mut self) -> io::Result<Bytes> {
        let mut body = BytesMut::new();
        loop {
            let line_end = loop {
                if let Some(p) = find(&self.buf, b"\r\n") {
                    break p;
                }
                if self.buf.len() > 1024 {
                    return Err(bad("chunk size line too long"));
                }
                self.fill().await?;
            };
            let line = std::str::from_utf8(&self.buf[..line_end]).map_err(|_| bad("chunk"))?;
            let size_hex = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad("bad chunk size"))?;
            if body.len() + size > MAX_BODY {
                return Err(bad("body too large"));
            }
            self.buf.advance(line_end + 2);
            while self.buf.len() < size + 2 {
                self.fill().await?;
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.advance(size + 2);
            if size == 0 {
                return Ok(body.freeze());
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn reads_length_and_chunked_bodies_on_one_connection() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = vec![0u8; 4096];
            let _ = s.read(&mut b).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                .await
                .unwrap();
            let _ = s.read(&mut b).await.unwrap();
            s.write_all(b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                .await
                .unwrap();
        });
        let s = TcpStream::connect(addr).await.unwrap();
        let mut c = HttpConn::new(s, addr.to_string());
        let (st, b) = c.request("GET", "/", b"").await.unwrap();
        assert_eq!((st, &b[..]), (200, &b"hello"[..]));
        let (st, b) = c.request("POST", "/", b"x").await.unwrap();
        assert_eq!((st, &b[..]), (400, &b"abcde"[..]));
    }
}
