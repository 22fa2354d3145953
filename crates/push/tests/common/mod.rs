//! A push server on a free loopback port for one test, plus small raw
//! HTTP helpers (the tests speak the protocol byte for byte).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use tidegate_hub::{Hub, RouteTable};
use tidegate_push::{PushConfig, PushContext};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A running server; dropping it stops the server.
pub struct Server {
    pub addr: SocketAddr,
    pub ctx: Arc<PushContext>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub async fn start(config: PushConfig) -> Server {
        let hub = Hub::new(RouteTable::default());
        let ctx = PushContext::new(hub, config);
        let app = tidegate_push::router_with_context(ctx.clone());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(l, app).await.unwrap();
        });
        Server { addr, ctx, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One HTTP/1.1 request on a new connection: (status, body).
    pub async fn request(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        request_at(self.addr, method, path, body).await
    }

    /// A websocket handshake on `path` (`/socket.io/`, `/engine.io/`):
    /// the socket and its open packet (`0{…}`).
    pub async fn open_ws(&self, path: &str) -> (Ws, String) {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!(
            "ws://{}{path}?EIO=4&transport=websocket",
            self.addr
        ))
        .await
        .unwrap();
        let open = next_frame_text(&mut ws).await;
        assert!(open.starts_with("0{"), "{open:?}");
        (ws, open)
    }

    /// A polling handshake: the new sid.
    pub async fn open(&self, path: &str) -> String {
        let (st, body) = self
            .request("GET", &format!("{path}?EIO=4&transport=polling"), b"")
            .await;
        assert_eq!(st, 200);
        let v: serde_json::Value = serde_json::from_slice(&body[1..]).unwrap();
        v["sid"].as_str().unwrap().to_owned()
    }

    pub async fn get(&self, path: &str, sid: &str) -> (u16, Vec<u8>) {
        self.request(
            "GET",
            &format!("{path}?EIO=4&transport=polling&sid={sid}"),
            b"",
        )
        .await
    }

    pub async fn post(&self, path: &str, sid: &str, body: &[u8]) -> (u16, Vec<u8>) {
        self.request(
            "POST",
            &format!("{path}?EIO=4&transport=polling&sid={sid}"),
            body,
        )
        .await
    }

    /// A Socket.IO session over polling, connected to `/` and subscribed to
    /// `pattern` (CONNECT and the subscribe ack already read); its sid.
    pub async fn subscribed_polling(&self, path: &str, pattern: &str) -> String {
        let sid = self.open(path).await;
        assert_eq!(self.post(path, &sid, b"40").await.0, 200);
        assert!(self.get(path, &sid).await.1.starts_with(b"40"));
        let subscribe = format!(r#"421["subscribe",["{pattern}"]]"#);
        assert_eq!(self.post(path, &sid, subscribe.as_bytes()).await.0, 200);
        assert!(self.get(path, &sid).await.1.starts_with(b"431"));
        sid
    }
}

/// One HTTP/1.1 request to `addr` on a new connection: (status, body).
/// Needs no `Server`, so a task of its own can send one that waits.
pub async fn request_at(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    parse_response(&out)
}

/// Status and (de-chunked) body of a raw response.
pub fn parse_response(raw: &[u8]) -> (u16, Vec<u8>) {
    let text = String::from_utf8_lossy(raw);
    let status = text[9..12].parse().unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = text[..split].to_ascii_lowercase();
    let mut body = raw[split..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16)
                .unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
            rest = &rest[eol + 4 + n..];
        }
        body = out;
    }
    (status, body)
}

/// Runs `node tests/js/peer.js <scenario> <url> <args…>` (the stock npm
/// clients, installed by scripts/setup/push.sh) and returns its last
/// output line; panics with its output if it fails.
pub async fn js_peer(scenario: &str, url: String, args: &[&str]) -> String {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/js");
    assert!(
        dir.join("node_modules/socket.io-client").is_dir(),
        "npm peers missing: run bash scripts/setup/push.sh"
    );
    let mut cmd = std::process::Command::new("node");
    cmd.arg("peer.js")
        .arg(scenario)
        .arg(&url)
        .args(args)
        .current_dir(dir);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("running node"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "peer failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().last().unwrap_or_default().to_owned()
}

/// A config with fast heartbeats, for tests that wait on them.
pub fn fast_heartbeats() -> PushConfig {
    PushConfig {
        ping_interval_ms: 300,
        ping_timeout_ms: 300,
        ..PushConfig::default()
    }
}

/// A websocket client stream (`/ws`, Engine.IO's websocket).
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next text frame, skipping pings and pongs (at most 5 s).
pub async fn next_frame_text(ws: &mut Ws) -> String {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(5), ws.next())
            .await
            .expect("a frame within 5 s")
            .expect("socket open")
            .unwrap();
        match m {
            Message::Text(t) => return t.to_string(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The next text frame as JSON, skipping pings and pongs (at most 5 s).
pub async fn next_json(ws: &mut Ws) -> serde_json::Value {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let m = tokio::time::timeout(std::time::Duration::from_secs(5), ws.next())
            .await
            .expect("a frame within 5 s")
            .expect("socket open")
            .unwrap();
        match m {
            Message::Text(t) => return serde_json::from_str(&t).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The pid in a Socket.IO CONNECT answer (`40…{"sid":…,"pid":…}`), if any.
pub fn pid_of(answer: &str) -> Option<String> {
    let json = &answer[answer.find('{')?..];
    let v: serde_json::Value = serde_json::from_str(json.split('\u{1e}').next()?).ok()?;
    v["pid"].as_str().map(str::to_owned)
}
