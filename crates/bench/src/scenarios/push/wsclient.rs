//! A minimal WebSocket client (RFC 6455) for the bench: the upgrade
//! request, masked text frames out, frames in parsed straight from the
//! read buffer (a message is a slice of it, no copy). Bounded: a message
//! above [`MAX_MESSAGE`] is an error.
//!
//! [`WsConn::next_message`] only awaits a socket read, so it may be
//! cancelled (in a `select!`) without losing data; pings it meets are
//! answered by [`WsConn::answer_pings`], called outside any `select!`.

use std::io;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Largest message accepted.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

fn bad(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// A message from the server.
#[derive(Debug)]
pub enum WsMessage {
    /// A text message.
    Text(Bytes),
    /// A binary message.
    Binary(Bytes),
    /// The server closed.
    Close,
}

/// One client connection after the upgrade: a reading half and a writing
/// half, which [`WsConn::into_split`] hands to different tasks (a
/// publisher writes while something else drains what the server sends).
#[derive(Debug)]
pub struct WsConn {
    rd: WsReader,
    wr: WsWriter,
}

/// The reading half: frames parsed from the read buffer.
#[derive(Debug)]
pub struct WsReader {
    half: OwnedReadHalf,
    buf: BytesMut,
    /// A fragmented message being put together: (is text, bytes so far).
    partial: Option<(bool, BytesMut)>,
    /// Payloads of the server's pings not answered yet.
    pings: Vec<Bytes>,
    /// Bytes read from the socket so far.
    pub bytes_read: u64,
}

/// The writing half: masked frames out.
#[derive(Debug)]
pub struct WsWriter {
    half: OwnedWriteHalf,
    mask_seed: u32,
}

impl WsConn {
    /// Upgrades `stream` with `GET path` (Host `host`).
    pub async fn upgrade(mut stream: TcpStream, host: &str, path: &str) -> io::Result<WsConn> {
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(req.as_bytes()).await?;
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let head_len = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            if buf.len() > 16 * 1024 {
                return Err(bad("upgrade response head too long"));
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        };
        let head = buf.split_to(head_len);
        if !head.starts_with(b"HTTP/1.1 101") {
            let line = String::from_utf8_lossy(&head[..head.len().min(120)]).into_owned();
            return Err(bad(format!("upgrade refused: {line}")));
        }
        let (rd, wr) = stream.into_split();
        Ok(WsConn {
            rd: WsReader {
                half: rd,
                buf,
                partial: None,
                pings: Vec::new(),
                bytes_read: head_len as u64,
            },
            wr: WsWriter {
                half: wr,
                mask_seed: 0x9e37_79b9,
            },
        })
    }

    /// The two halves, for separate tasks.
    pub fn into_split(self) -> (WsReader, WsWriter) {
        (self.rd, self.wr)
    }

    /// Appends one masked frame (see [`WsWriter::encode_frame`]).
    pub fn encode_frame(&mut self, opcode: u8, payload: &[u8], out: &mut Vec<u8>) {
        self.wr.encode_frame(opcode, payload, out)
    }

    /// Sends one text message.
    pub async fn send_text(&mut self, text: &str) -> io::Result<()> {
        self.wr.send_text(text).await
    }

    /// Writes bytes already framed.
    pub async fn send_raw(&mut self, frames: &[u8]) -> io::Result<()> {
        self.wr.send_raw(frames).await
    }

    /// The next whole message (see [`WsReader::next_message`]).
    pub async fn next_message(&mut self) -> io::Result<WsMessage> {
        self.rd.next_message().await
    }

    /// The next message already read (see [`WsReader::next_buffered`]).
    pub fn next_buffered(&mut self) -> io::Result<Option<WsMessage>> {
        self.rd.next_buffered()
    }

    /// Answers the pings the reader saw.
    pub async fn answer_pings(&mut self) -> io::Result<()> {
        for p in std::mem::take(&mut self.rd.pings) {
            self.wr.send_frame(0xA, &p).await?;
        }
        Ok(())
    }

    /// Bytes read from the socket so far.
    pub fn bytes_read(&self) -> u64 {
        self.rd.bytes_read
    }
}

impl WsWriter {
    /// Appends one masked frame of `opcode` carrying `payload` to `out`.
    pub fn encode_frame(&mut self, opcode: u8, payload: &[u8], out: &mut Vec<u8>) {
        out.push(0x80 | opcode);
        let n = payload.len();
        if n < 126 {
            out.push(0x80 | n as u8);
        } else if n <= usize::from(u16::MAX) {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        self.mask_seed = self
            .mask_seed
            .wrapping_mul(1_664_525)
            .wrapping_add(1_013_904_223);
        let key = self.mask_seed.to_be_bytes();
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    }

    /// Sends one frame.
    pub async fn send_frame(&mut self, opcode: u8, payload: &[u8]) -> io::Result<()> {
        let mut out = Vec::with_capacity(payload.len() + 14);
        self.encode_frame(opcode, payload, &mut out);
        self.half.write_all(&out).await
    }

    /// Sends one text message.
    pub async fn send_text(&mut self, text: &str) -> io::Result<()> {
        self.send_frame(0x1, text.as_bytes()).await
    }

    /// Writes bytes already framed by [`WsWriter::encode_frame`].
    pub async fn send_raw(&mut self, frames: &[u8]) -> io::Result<()> {
        self.half.write_all(frames).await
    }
}

impl WsReader {
    /// Takes the payloads of the pings seen so far (each owes a pong).
    pub fn take_pings(&mut self) -> Vec<Bytes> {
        std::mem::take(&mut self.pings)
    }

    /// The next whole message (pings noted for [`WsReader::take_pings`]).
    pub async fn next_message(&mut self) -> io::Result<WsMessage> {
        loop {
            if let Some(m) = self.next_buffered()? {
                return Ok(m);
            }
            let n = self.half.read_buf(&mut self.buf).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.bytes_read += n as u64;
        }
    }

    /// The next whole message already in the read buffer, without reading
    /// the socket: a subscriber handles everything one read brought in one
    /// go (pings noted for [`WsReader::take_pings`]).
    pub fn next_buffered(&mut self) -> io::Result<Option<WsMessage>> {
        while let Some((fin, opcode, payload)) = self.parse_frame()? {
            match opcode {
                0x9 => {
                    if self.pings.len() >= 64 {
                        return Err(bad("pings pile up unanswered"));
                    }
                    self.pings.push(payload);
                }
                0xA => {}
                0x8 => return Ok(Some(WsMessage::Close)),
                0x1 | 0x2 if fin && self.partial.is_none() => {
                    return Ok(Some(if opcode == 0x1 {
                        WsMessage::Text(payload)
                    } else {
                        WsMessage::Binary(payload)
                    }));
                }
                0x1 | 0x2 if self.partial.is_none() => {
                    self.partial = Some((opcode == 0x1, BytesMut::from(&payload[..])));
                }
                0x0 => {
                    let Some((text, mut acc)) = self.partial.take() else {
                        return Err(bad("continuation without a first frame"));
                    };
                    if acc.len() + payload.len() > MAX_MESSAGE {
                        return Err(bad("message too large"));
                    }
                    acc.extend_from_slice(&payload);
                    if !fin {
                        self.partial = Some((text, acc));
                        continue;
                    }
                    let b = acc.freeze();
                    return Ok(Some(if text {
                        WsMessage::Text(b)
                    } else {
                        WsMessage::Binary(b)
                    }));
                }
                _ => return Err(bad(format!("unexpected opcode {opcode}"))),
            }
        }
        Ok(None)
    }

    /// One frame from the buffer, if whole: (fin, opcode, payload).
    fn parse_frame(&mut self) -> io::Result<Option<(bool, u8, Bytes)>> {
        let b = &self.buf[..];
        if b.len() < 2 {
            return Ok(None);
        }
        let fin = b[0] & 0x80 != 0;
        let opcode = b[0] & 0x0f;
        let masked = b[1] & 0x80 != 0;
        let (len, mut at) = match b[1] & 0x7f {
            126 if b.len() >= 4 => (usize::from(u16::from_be_bytes([b[2], b[3]])), 4),
            127 if b.len() >= 10 => {
                let mut l = [0u8; 8];
                l.copy_from_slice(&b[2..10]);
                (
                    usize::try_from(u64::from_be_bytes(l)).unwrap_or(usize::MAX),
                    10,
                )
            }
            126 | 127 => return Ok(None),
            n => (usize::from(n), 2),
        };
        if len > MAX_MESSAGE {
            return Err(bad("frame too large"));
        }
        let key = if masked {
            if b.len() < at + 4 {
                return Ok(None);
            }
            let k = [b[at], b[at + 1], b[at + 2], b[at + 3]];
            at += 4;
            Some(k)
        } else {
            None
        };
        if b.len() < at + len {
            self.buf.reserve(at + len - b.len());
            return Ok(None);
        }
        self.buf.advance(at);
        let mut payload = self.buf.split_to(len);
        if let Some(k) = key {
            payload
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x ^= k[i % 4]);
        }
        Ok(Some((fin, opcode, payload.freeze())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn messages_are_parsed_and_pings_answered() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut b = vec![0u8; 4096];
            let _ = s.read(&mut b).await.unwrap();
            s.write_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
                .await
                .unwrap();
            let long = vec![b'y'; 300];
            let mut frames = vec![0x89, 2, b'h', b'i', 0x81, 3, b'a', b'b', b'c'];
            frames.extend_from_slice(&[0x01, 2, b'd', b'e', 0x80, 1, b'f']);
            frames.extend_from_slice(&[0x81, 126, 1, 44]);
            frames.extend_from_slice(&long);
            s.write_all(&frames).await.unwrap();
            // The pong: masked, opcode 0xA, payload "hi".
            let mut pong = [0u8; 8];
            s.read_exact(&mut pong).await.unwrap();
            assert_eq!(pong[0], 0x8A);
            assert_eq!(pong[1], 0x80 | 2);
            assert_eq!([pong[6] ^ pong[2], pong[7] ^ pong[3]], [b'h', b'i']);
        });
        let s = TcpStream::connect(addr).await.unwrap();
        let mut c = WsConn::upgrade(s, "x", "/ws").await.unwrap();
        let texts: Vec<Bytes> = texts(&mut c, 3).await;
        c.answer_pings().await.unwrap();
        assert_eq!(&texts[0][..], b"abc");
        assert_eq!(&texts[1][..], b"def");
        assert_eq!(texts[2].len(), 300);
        server.await.unwrap();
    }

    async fn texts(c: &mut WsConn, n: usize) -> Vec<Bytes> {
        let mut v = Vec::new();
        while v.len() < n {
            match c.next_message().await.unwrap() {
                WsMessage::Text(t) => v.push(t),
                other => panic!("{other:?}"),
            }
        }
        v
    }
}
