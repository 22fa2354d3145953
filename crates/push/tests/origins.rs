//! `[push] allowed_origins`: a listed origin gets CORS headers on polling
//! (and its preflight answered); an unlisted one is refused with 403 and
//! the reason on polling, on the Engine.IO websocket and on `/ws`; a
//! request without `Origin` (not from a browser) passes.

mod common;

use common::{parse_response, Server};
use tidegate_push::PushConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const GOOD: &str = "https://app.example";

/// One request with extra headers: (status, head, body). A websocket
/// handshake that succeeds is read up to the end of its 101 head.
async fn request(s: &Server, method: &str, path: &str, headers: &str) -> (u16, String, String) {
    let mut t = TcpStream::connect(s.addr).await.unwrap();
    let upgrade = headers.contains("Upgrade:");
    let close = if upgrade { "" } else { "Connection: close\r\n" };
    let req =
        format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{close}Content-Length: 0\r\n{headers}\r\n");
    t.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = t.read(&mut buf).await.unwrap();
        raw.extend_from_slice(&buf[..n]);
        if n == 0 || answer_complete(&raw) {
            break;
        }
    }
    let (status, body) = parse_response(&raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

/// A 101 head, or a head and its whole `Content-Length` body (a refused
/// upgrade may leave the connection open).
fn answer_complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    if head.starts_with("http/1.1 101") {
        return true;
    }
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    len.is_some_and(|len| raw.len() >= split + 4 + len)
}

const WS_HEADERS: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

#[tokio::test]
async fn listed_origins_get_cors_and_others_are_refused_with_why() {
    let s = Server::start(PushConfig {
        allowed_origins: vec![GOOD.into()],
        ..PushConfig::default()
    })
    .await;
    let open = "/socket.io/?EIO=4&transport=polling";

    let (st, head, body) = request(&s, "GET", open, &format!("Origin: {GOOD}\r\n")).await;
    assert_eq!(st, 200, "{body}");
    assert!(
        head.contains(&format!("access-control-allow-origin: {GOOD}")),
        "{head}"
    );
    assert!(
        head.contains("access-control-allow-credentials: true"),
        "{head}"
    );
    assert!(body.starts_with("0{"));

    let (st, head, _) = request(
        &s,
        "OPTIONS",
        open,
        &format!("Origin: {GOOD}\r\nAccess-Control-Request-Headers: content-type\r\n"),
    )
    .await;
    assert_eq!(st, 204);
    assert!(
        head.contains("access-control-allow-methods: get, post, options"),
        "{head}"
    );
    assert!(
        head.contains("access-control-allow-headers: content-type"),
        "{head}"
    );
    assert!(
        head.contains(&format!("access-control-allow-origin: {GOOD}")),
        "{head}"
    );

    // Unlisted: polling, the Engine.IO websocket and /ws, all 403 with why.
    let evil = "Origin: https://evil.example\r\n";
    let live = s.ctx.sessions.len();
    for (path, extra) in [
        (open, ""),
        ("/engine.io/?EIO=4&transport=polling", ""),
        ("/socket.io/?EIO=4&transport=websocket", WS_HEADERS),
        ("/ws", WS_HEADERS),
    ] {
        let (st, head, body) = request(&s, "GET", path, &format!("{evil}{extra}")).await;
        assert_eq!(st, 403, "{path}: {head}");
        assert!(
            !head.contains("access-control-allow-origin"),
            "{path}: {head}"
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["code"], 4, "{path}: {body}");
        assert!(
            v["reason"]
                .as_str()
                .unwrap()
                .contains("https://evil.example"),
            "{path}: {body}"
        );
    }
    assert_eq!(
        s.ctx.sessions.len(),
        live,
        "a refused request opened a session"
    );

    // Listed websockets upgrade; no Origin at all (not a browser) passes.
    for path in ["/socket.io/?EIO=4&transport=websocket", "/ws"] {
        let (st, _, _) = request(&s, "GET", path, &format!("Origin: {GOOD}\r\n{WS_HEADERS}")).await;
        assert_eq!(st, 101, "{path}");
        let (st, _, _) = request(&s, "GET", path, WS_HEADERS).await;
        assert_eq!(st, 101, "{path}");
    }
    let (st, head, _) = request(&s, "GET", open, "").await;
    assert_eq!(st, 200);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
}

#[tokio::test]
async fn without_a_list_nothing_is_checked_or_added() {
    let s = Server::start(PushConfig::default()).await;
    let (st, head, _) = request(
        &s,
        "GET",
        "/socket.io/?EIO=4&transport=polling",
        "Origin: https://anywhere.example\r\n",
    )
    .await;
    assert_eq!(st, 200);
    assert!(!head.contains("access-control-allow-origin"), "{head}");
}
