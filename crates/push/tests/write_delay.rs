//! `[push] write_delay_ms`: a session holds its first pending packet that
//! long and sends what arrived meanwhile in the same write — one long-poll
//! answer, one websocket flush (Engine.IO websocket and `/ws`).
//! `[push] busy_write_delay_ms`: the same hold, only while the server is
//! loaded and in a session whose packets come close together.

mod common;

use std::time::{Duration, Instant};

use common::Server;
use tidegate_hub::Message;
use tidegate_push::PushConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SIO: &str = "/socket.io/";
const DELAY_MS: u64 = 500;

fn delayed() -> PushConfig {
    PushConfig {
        write_delay_ms: DELAY_MS,
        ..PushConfig::default()
    }
}

/// Long enough that "at once" (under half of it) and "held" (all of it)
/// stay apart on a loaded 2-core machine.
const BUSY_MS: u64 = 1000;
/// What "at once" means next to `BUSY_MS`.
const AT_ONCE: Duration = Duration::from_millis(BUSY_MS / 2);
/// Longer than the busy window (ten times `BUSY_MS`): a session whose last
/// packet came this long ago is quiet.
const QUIET: Duration = Duration::from_millis(10 * BUSY_MS + 200);

fn busy() -> PushConfig {
    PushConfig {
        busy_write_delay_ms: BUSY_MS,
        ..PushConfig::default()
    }
}

/// Publishes `1` on `d.x`, then `2` 100 ms later; returns when `1` went out.
async fn publish_two(s: &Server) -> Instant {
    let t0 = Instant::now();
    s.ctx.hub.publish(Message::new("d.x", "1")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.ctx.hub.publish(Message::new("d.x", "2")).await.unwrap();
    t0
}

#[tokio::test]
async fn a_waiting_poll_is_answered_once_with_everything_the_delay_gathered() {
    let s = Server::start(delayed()).await;
    let sid = s.subscribed_polling(SIO, "d.>").await;
    // A GET waits; the first message arrives, the second 100 ms later.
    let ((st, body), t0) = tokio::join!(s.get(SIO, &sid), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        publish_two(&s).await
    });
    let waited = t0.elapsed();
    assert_eq!(st, 200);
    assert_eq!(
        body, b"42[\"d.x\",1]\x1e42[\"d.x\",2]",
        "both in one answer"
    );
    assert!(
        waited >= Duration::from_millis(DELAY_MS - 50),
        "answered after {waited:?}, before the delay"
    );
}

/// A websocket handshake on raw TCP; the stream after the 101 head.
async fn raw_ws(s: &Server, path: &str) -> TcpStream {
    let mut t = TcpStream::connect(s.addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    t.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(t.read(&mut b).await.unwrap(), 1);
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    t
}

/// A client text frame (masked with a zero key, so the payload goes as is).
async fn send_text(t: &mut TcpStream, text: &str) {
    assert!(text.len() < 126);
    let mut f = vec![0x81, 0x80 | text.len() as u8, 0, 0, 0, 0];
    f.extend_from_slice(text.as_bytes());
    t.write_all(&f).await.unwrap();
}

/// Reads one short server text frame.
async fn read_text(t: &mut TcpStream) -> String {
    let mut h = [0u8; 2];
    t.read_exact(&mut h).await.unwrap();
    assert_eq!(h[0], 0x81, "a text frame");
    assert!(h[1] < 126, "a short frame");
    let mut body = vec![0u8; h[1] as usize];
    t.read_exact(&mut body).await.unwrap();
    String::from_utf8(body).unwrap()
}

/// A `/ws` connection subscribed to `d.>` (the answer already read).
async fn subscribed_ws(s: &Server) -> TcpStream {
    let mut t = raw_ws(s, "/ws").await;
    send_text(&mut t, r#"{"op":"subscribe","patterns":["d.>"]}"#).await;
    assert!(read_text(&mut t).await.contains("subscribed"));
    t
}

/// The short text frames of what one read returned.
fn frames(mut b: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    while b.len() >= 2 {
        assert_eq!(b[0], 0x81, "a text frame");
        let n = b[1] as usize;
        out.push(String::from_utf8(b[2..2 + n].to_vec()).unwrap());
        b = &b[2 + n..];
    }
    out
}

/// Publishes two messages 100 ms apart; both must come in the first read,
/// not before the delay.
async fn both_in_one_write(s: &Server, t: &mut TcpStream) -> Vec<String> {
    let t0 = publish_two(s).await;
    let mut buf = vec![0u8; 4096];
    let n = t.read(&mut buf).await.unwrap();
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(DELAY_MS - 50),
        "written after {waited:?}, before the delay"
    );
    frames(&buf[..n])
}

#[tokio::test]
async fn a_socket_io_websocket_flushes_what_the_delay_gathered_at_once() {
    let s = Server::start(delayed()).await;
    let mut t = raw_ws(&s, "/socket.io/?EIO=4&transport=websocket").await;
    assert!(read_text(&mut t).await.starts_with('0'));
    send_text(&mut t, "40").await;
    assert!(read_text(&mut t).await.starts_with("40"));
    send_text(&mut t, r#"421["subscribe",["d.>"]]"#).await;
    assert!(read_text(&mut t).await.starts_with("431"));
    assert_eq!(
        both_in_one_write(&s, &mut t).await,
        [r#"42["d.x",1]"#, r#"42["d.x",2]"#]
    );
}

#[tokio::test]
async fn a_ws_connection_flushes_what_the_delay_gathered_at_once() {
    let s = Server::start(delayed()).await;
    let mut t = subscribed_ws(&s).await;
    assert_eq!(
        both_in_one_write(&s, &mut t).await,
        [
            r#"{"op":"message","topic":"d.x","payload":1}"#,
            r#"{"op":"message","topic":"d.x","payload":2}"#
        ]
    );
}

#[tokio::test]
async fn a_quiet_session_is_answered_at_once_and_a_busy_one_holds_the_busy_delay() {
    let s = Server::start(busy()).await;
    // As on a loaded server (the only place the busy delay holds anything).
    s.ctx.load.force(Some(true));
    let sid = s.subscribed_polling(SIO, "d.>").await;
    tokio::time::sleep(QUIET).await;
    // Quiet for longer than twice the delay: the waiting GET goes at once.
    let ((st, body), t0) = tokio::join!(s.get(SIO, &sid), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        s.ctx.hub.publish(Message::new("d.x", "1")).await.unwrap();
        t0
    });
    let quick = t0.elapsed();
    assert_eq!((st, &body[..]), (200, &b"42[\"d.x\",1]"[..]));
    assert!(quick < AT_ONCE, "held {quick:?}");
    // Right after that answer the session is busy: the next waiting GET
    // holds its first packet and carries what arrived meanwhile.
    let ((st, body), t1) = tokio::join!(s.get(SIO, &sid), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t1 = Instant::now();
        s.ctx.hub.publish(Message::new("d.x", "2")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.ctx.hub.publish(Message::new("d.x", "3")).await.unwrap();
        t1
    });
    let held = t1.elapsed();
    assert_eq!(st, 200);
    assert_eq!(
        body, b"42[\"d.x\",2]\x1e42[\"d.x\",3]",
        "both in one answer"
    );
    assert!(
        held >= Duration::from_millis(BUSY_MS - 30),
        "answered {held:?} after the first packet"
    );
}

#[tokio::test]
async fn a_quiet_ws_connection_writes_at_once_and_a_busy_one_holds_the_busy_delay() {
    let s = Server::start(busy()).await;
    // As on a loaded server (the only place the busy delay holds anything).
    s.ctx.load.force(Some(true));
    let mut t = subscribed_ws(&s).await;
    tokio::time::sleep(QUIET).await;
    let t0 = Instant::now();
    s.ctx.hub.publish(Message::new("d.x", "1")).await.unwrap();
    assert_eq!(
        read_text(&mut t).await,
        r#"{"op":"message","topic":"d.x","payload":1}"#
    );
    let quick = t0.elapsed();
    assert!(quick < AT_ONCE, "held {quick:?}");
    let t1 = Instant::now();
    s.ctx.hub.publish(Message::new("d.x", "2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.ctx.hub.publish(Message::new("d.x", "3")).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = t.read(&mut buf).await.unwrap();
    let held = t1.elapsed();
    assert_eq!(
        frames(&buf[..n]),
        [
            r#"{"op":"message","topic":"d.x","payload":2}"#,
            r#"{"op":"message","topic":"d.x","payload":3}"#
        ]
    );
    assert!(
        held >= Duration::from_millis(BUSY_MS - 30),
        "written {held:?} after the first packet"
    );
}

#[tokio::test]
async fn a_server_that_is_not_loaded_writes_at_once_however_busy_the_session() {
    let s = Server::start(busy()).await;
    s.ctx.load.force(Some(false));
    let mut t = subscribed_ws(&s).await;
    for i in 1..=3 {
        let t0 = Instant::now();
        s.ctx
            .hub
            .publish(Message::new("d.x", i.to_string()))
            .await
            .unwrap();
        assert_eq!(
            read_text(&mut t).await,
            format!(r#"{{"op":"message","topic":"d.x","payload":{i}}}"#)
        );
        let quick = t0.elapsed();
        assert!(quick < AT_ONCE, "held {quick:?}");
    }
}
