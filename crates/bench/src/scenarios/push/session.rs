//! One bench client session, whatever the transport: Socket.IO over
//! Engine.IO long-polling, Socket.IO over Engine.IO websocket, or
//! Tidegate's plain `/ws` JSON protocol. Opening it includes the Socket.IO
//! CONNECT to namespace `/`; [`ClientSession::recv`] hands each
//! application packet (a Socket.IO packet, or a `/ws` JSON frame) to the
//! caller and notes the Engine.IO pings, which [`ClientSession::answer`]
//! answers outside any `select!` (so a cancelled receive never leaves a
//! half-written frame).

use std::io;
use std::net::SocketAddr;

use super::http1::HttpConn;
use super::net::connect;
use super::wsclient::{WsConn, WsMessage, WsReader, WsWriter};
use super::Transport;

fn bad(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

enum Inner {
    Polling {
        get: HttpConn,
        post: HttpConn,
        path: String,
    },
    EngineWs(WsConn),
    PlainWs(WsConn),
}

/// A connected client session.
pub struct ClientSession {
    inner: Inner,
    /// Engine.IO pings received and not answered yet.
    pongs_due: u32,
}

impl ClientSession {
    /// Opens a session to `server` from client `i`'s source address and,
    /// for Socket.IO, connects namespace `/`.
    pub async fn open(transport: Transport, server: SocketAddr, i: usize) -> io::Result<Self> {
        let host = server.to_string();
        let mut s = match transport {
            Transport::Polling => {
                let mut get = HttpConn::new(connect(server, i).await?, host.clone());
                let (st, body) = get
                    .request("GET", "/socket.io/?EIO=4&transport=polling", b"")
                    .await?;
                if st != 200 || body.first() != Some(&b'0') {
                    return Err(bad(format!("handshake answered {st}")));
                }
                let open: serde_json::Value = serde_json::from_slice(&body[1..])
                    .map_err(|e| bad(format!("open packet: {e}")))?;
                let sid = open["sid"]
                    .as_str()
                    .ok_or_else(|| bad("open packet without sid"))?;
                let path = format!("/socket.io/?EIO=4&transport=polling&sid={sid}");
                let post = HttpConn::new(connect(server, i).await?, host);
                ClientSession {
                    inner: Inner::Polling { get, post, path },
                    pongs_due: 0,
                }
            }
            Transport::Websocket => {
                let ws = WsConn::upgrade(
                    connect(server, i).await?,
                    &host,
                    "/socket.io/?EIO=4&transport=websocket",
                )
                .await?;
                ClientSession {
                    inner: Inner::EngineWs(ws),
                    pongs_due: 0,
                }
            }
            Transport::Ws => {
                let ws = WsConn::upgrade(connect(server, i).await?, &host, "/ws").await?;
                return Ok(ClientSession {
                    inner: Inner::PlainWs(ws),
                    pongs_due: 0,
                });
            }
        };
        if let Inner::EngineWs(ws) = &mut s.inner {
            match ws.next_message().await? {
                WsMessage::Text(t) if t.first() == Some(&b'0') => {}
                _ => return Err(bad("no open packet on the websocket")),
            }
        }
        s.send("40").await?;
        let mut connected = false;
        while !connected {
            if !s
                .recv(&mut |p| {
                    if p.first() == Some(&b'0') {
                        connected = true;
                    }
                })
                .await?
            {
                return Err(bad("closed before CONNECT was answered"));
            }
            s.answer().await?;
        }
        Ok(s)
    }

    /// Sends one Engine.IO message (or `/ws` frame) as is.
    pub async fn send(&mut self, text: &str) -> io::Result<()> {
        match &mut self.inner {
            Inner::Polling { post, path, .. } => {
                let (st, _) = post.request("POST", path, text.as_bytes()).await?;
                if st != 200 {
                    return Err(bad(format!("POST answered {st}")));
                }
                Ok(())
            }
            Inner::EngineWs(ws) | Inner::PlainWs(ws) => ws.send_text(text).await,
        }
    }

    /// Sends many messages in one write (websocket transports only; polling
    /// sends them as one `\x1e`-joined POST).
    pub async fn send_many(&mut self, texts: &[String]) -> io::Result<()> {
        match &mut self.inner {
            Inner::Polling { .. } => {
                let body = texts.join("\u{1e}");
                self.send(&body).await
            }
            Inner::EngineWs(ws) | Inner::PlainWs(ws) => {
                let mut out = Vec::with_capacity(texts.iter().map(|t| t.len() + 14).sum());
                for t in texts {
                    ws.encode_frame(0x1, t.as_bytes(), &mut out);
                }
                ws.send_raw(&out).await
            }
        }
    }

    /// Reads what the server sent next (one polling response, or every
    /// websocket message one socket read brought) and calls `f` with each
    /// application packet.
    /// `Ok(false)` when the server closed the session. Cancel-safe for
    /// websockets; a cancelled poll loses that response.
    pub async fn recv(&mut self, f: &mut impl FnMut(&[u8])) -> io::Result<bool> {
        match &mut self.inner {
            Inner::Polling { get, path, .. } => {
                let (st, body) = get.request("GET", path, b"").await?;
                if st != 200 {
                    return Err(bad(format!("poll answered {st}")));
                }
                for p in packets(&body) {
                    match p.first() {
                        Some(b'4') => f(&p[1..]),
                        Some(b'2') => self.pongs_due += 1,
                        Some(b'1') => return Ok(false),
                        _ => {}
                    }
                }
                Ok(true)
            }
            Inner::EngineWs(ws) => {
                let mut m = ws.next_message().await?;
                loop {
                    match m {
                        WsMessage::Text(t) => match t.first() {
                            Some(b'4') => f(&t[1..]),
                            Some(b'2') => self.pongs_due += 1,
                            Some(b'1') => return Ok(false),
                            _ => {}
                        },
                        WsMessage::Binary(_) => {}
                        WsMessage::Close => return Ok(false),
                    }
                    match ws.next_buffered()? {
                        Some(next) => m = next,
                        None => return Ok(true),
                    }
                }
            }
            Inner::PlainWs(ws) => {
                let mut m = ws.next_message().await?;
                loop {
                    match m {
                        WsMessage::Text(t) => f(&t),
                        WsMessage::Binary(_) => {}
                        WsMessage::Close => return Ok(false),
                    }
                    match ws.next_buffered()? {
                        Some(next) => m = next,
                        None => return Ok(true),
                    }
                }
            }
        }
    }

    /// Answers the pings [`ClientSession::recv`] saw (Engine.IO `3`,
    /// websocket pongs).
    pub async fn answer(&mut self) -> io::Result<()> {
        if let Inner::EngineWs(ws) | Inner::PlainWs(ws) = &mut self.inner {
            ws.answer_pings().await?;
        }
        while self.pongs_due > 0 {
            self.pongs_due -= 1;
            self.send("3").await?;
        }
        Ok(())
    }

    /// Bytes read from the server so far.
    pub fn bytes_read(&self) -> u64 {
        match &self.inner {
            Inner::Polling { get, post, .. } => get.bytes_read + post.bytes_read,
            Inner::EngineWs(ws) | Inner::PlainWs(ws) => ws.bytes_read(),
        }
    }

    /// The websocket's two halves (a publisher writes on one while a task
    /// drains the other); `None` for polling sessions.
    pub fn into_ws_halves(self) -> Option<(WsReader, WsWriter)> {
        match self.inner {
            Inner::EngineWs(ws) | Inner::PlainWs(ws) => Some(ws.into_split()),
            Inner::Polling { .. } => None,
        }
    }
}

/// The packets of a polling payload, split on the `\x1e` separator with
/// `memchr`: a byte-by-byte split was 13 % of the client's CPU at
/// 250,000 messages/s.
fn packets(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut seps = memchr::memchr_iter(0x1e, body);
    std::iter::from_fn(move || {
        if start > body.len() {
            return None;
        }
        let end = seps.next().unwrap_or(body.len());
        let p = &body[start..end];
        start = end + 1;
        Some(p)
    })
}

#[cfg(test)]
mod tests {
    use super::packets;

    #[test]
    fn packets_split_like_the_separator_does() {
        for body in [
            &b""[..],
            b"\x1e",
            b"4a",
            b"4a\x1e42[\"x\"]",
            b"\x1e\x1e4a\x1e",
            b"2\x1e4hello\x1e1",
        ] {
            let want: Vec<&[u8]> = body.split(|&b| b == 0x1e).collect();
            let got: Vec<&[u8]> = packets(body).collect();
            assert_eq!(got, want, "{body:?}");
        }
    }
}
