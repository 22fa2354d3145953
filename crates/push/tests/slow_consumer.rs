//! A subscriber that does not read: its messages wait in its bounded hub
//! queue (plus a bounded outbox), and the overflow policy applies and is
//! counted — drop-oldest keeps the newest, disconnect ends the session.
//! Over websocket (Engine.IO and `/ws`) a client that stops reading stalls
//! the server's writes: memory stays bounded, drops are counted, and the
//! connection is closed once a write has waited the ping timeout.

mod common;

use std::time::Duration;

use common::Server;
use tidegate_hub::{Message, OverflowPolicy};
use tidegate_push::session::engine::OUTBOX_SOFT_LIMIT;
use tidegate_push::session::task::DELIVERY_BATCH;
use tidegate_push::PushConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SIO: &str = "/socket.io/";
const CAPACITY: usize = 16;

async fn publish(s: &Server, n: usize) {
    for i in 0..n {
        s.ctx
            .hub
            .publish(Message::new("slow.x", format!("{i}")))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn drop_oldest_bounds_the_backlog_counts_drops_and_keeps_the_newest() {
    let s = Server::start(PushConfig {
        queue_capacity: CAPACITY,
        overflow: OverflowPolicy::DropOldest,
        max_payload: 10_000_000,
        ..PushConfig::default()
    })
    .await;
    let sid = s.subscribed_polling(SIO, "slow.>").await;
    let total = OUTBOX_SOFT_LIMIT * 3;
    publish(&s, total).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let dropped = s.ctx.hub.metrics().dropped_oldest.get() as usize;
    assert!(
        dropped >= total - OUTBOX_SOFT_LIMIT - CAPACITY,
        "dropped {dropped}"
    );
    // Everything still held comes out in one poll, ending with the newest.
    let (st, body) = s.get(SIO, &sid).await;
    assert_eq!(st, 200);
    let events: Vec<&[u8]> = body.split(|b| *b == 0x1e).collect();
    assert!(
        events.len() <= OUTBOX_SOFT_LIMIT + CAPACITY,
        "{}",
        events.len()
    );
    assert_eq!(events.len() + dropped, total);
    let last = format!(r#"42["slow.x",{}]"#, total - 1);
    assert_eq!(*events.last().unwrap(), last.as_bytes());
}

#[tokio::test]
async fn disconnect_policy_ends_the_slow_session_and_counts_it() {
    let s = Server::start(PushConfig {
        queue_capacity: CAPACITY,
        overflow: OverflowPolicy::Disconnect,
        ..PushConfig::default()
    })
    .await;
    let sid = s.subscribed_polling(SIO, "slow.>").await;
    publish(&s, OUTBOX_SOFT_LIMIT + 4 * CAPACITY).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(s.ctx.hub.metrics().disconnected_slow.get() >= 1);
    let (st, body) = s.get(SIO, &sid).await;
    assert!(st == 400 || body.ends_with(b"1"), "{st}");
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

async fn publish_kb(s: &Server, topic: &str, n: usize) {
    let kb = format!("\"{}\"", "x".repeat(1022));
    for _ in 0..n {
        s.ctx
            .hub
            .publish(Message::new(topic, kb.clone()))
            .await
            .unwrap();
    }
}

fn slow_ws_config() -> PushConfig {
    // Room for everything published (so the writes do stall rather than
    // the queue dropping), pings too rare to end the test: only the write
    // timeout (pingTimeout) can close the stalled connection in time.
    PushConfig {
        queue_capacity: STALL_MESSAGES + 1,
        ping_interval_ms: 60_000,
        ping_timeout_ms: 300,
        ..PushConfig::default()
    }
}

/// 1 KB messages published to a stalled client: 20 MB, far past what the
/// loopback socket buffers hold.
const STALL_MESSAGES: usize = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_io_websocket_that_stops_reading_stays_bounded_and_is_closed() {
    let s = Server::start(slow_ws_config()).await;
    let mut t = raw_ws(&s, "/socket.io/?EIO=4&transport=websocket").await;
    let open = read_text(&mut t).await;
    let sid = open[open.find("\"sid\":\"").unwrap() + 7..][..20].to_owned();
    send_text(&mut t, "40").await;
    send_text(&mut t, r#"421["subscribe",["slow.>"]]"#).await;
    // Subscribed once the ack is read (a fixed sleep raced the server).
    while !read_text(&mut t).await.starts_with("431") {}
    // The client reads nothing more: the writer stalls and the backlog
    // piles up server-side, in the bounded hub queue, not the outbox.
    let session = s.ctx.sessions.get(&sid).expect("live session");
    publish_kb(&s, "slow.x", STALL_MESSAGES).await;
    assert!(
        session.outbox_len() <= OUTBOX_SOFT_LIMIT + DELIVERY_BATCH,
        "outbox {}",
        session.outbox_len()
    );
    // A write waiting past pingTimeout closes the session.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.ctx.sessions.get(&sid).is_some() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        s.ctx.sessions.get(&sid).is_none(),
        "the stalled session lives on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_client_that_stops_reading_is_closed_and_its_queue_released() {
    let s = Server::start(slow_ws_config()).await;
    let mut t = raw_ws(&s, "/ws").await;
    send_text(&mut t, r#"{"op":"subscribe","patterns":["slow.>"]}"#).await;
    assert!(read_text(&mut t).await.contains("subscribed"));
    let subscribers = || s.ctx.hub.metrics().subscribers.get();
    assert_eq!(subscribers(), 1);
    publish_kb(&s, "slow.x", STALL_MESSAGES).await;
    // The connection's loop is stuck in a write; the write timeout (the
    // ping timeout) ends it and drops its hub subscriber.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while subscribers() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(subscribers(), 0, "the stalled /ws connection lives on");
}
