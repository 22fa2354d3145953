//! The listener core's limits on `[wire]`: the partial-frame read timeout
//! (slowloris guard), the idle timeout, the CIDR allow-list, the connection
//! limit, the in-flight byte budget held by a PUBLISH until the hub took
//! it — and bad input closing only its own connection, with a counted
//! reason, while another connection is served. A client that stops reading
//! is closed too: after an outbound overflow, or by the idle timeout while
//! the server cannot write to it.

#[macro_use]
mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{eventually, eventually_within, expect_error_then_close, TestServer, PATIENCE};
use tidegate_hub::{
    AckToken, Hub, InflightBudget, Message, Pattern, RouteTable, SharedMessage, Sink,
};
use tidegate_wire::{ErrorCode, FrameType, WireClient, WireConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

fn config(edit: impl FnOnce(&mut WireConfig)) -> WireConfig {
    let mut c = WireConfig::default();
    edit(&mut c);
    c
}

/// True when the server closed `c` (end of stream or reset) within
/// [`PATIENCE`], having sent nothing.
async fn closed_without_a_word(c: &mut tokio::net::TcpStream) -> bool {
    let mut b = [0u8; 64];
    matches!(
        tokio::time::timeout(PATIENCE, c.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

both_modes! {
    async fn one_byte_of_a_frame_is_closed_by_the_read_timeout() {
        let s = TestServer::start(config(|c| c.listener.read_timeout_ms = 200)).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let t0 = Instant::now();
        c.send_raw(&[9]).await.unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(200));
        assert_eq!(s.metrics("wire").error_count("read_timeout"), 1);
    }
}

both_modes! {
    async fn a_frame_trickled_slower_than_the_read_timeout_is_closed() {
        let s = TestServer::start(config(|c| c.listener.read_timeout_ms = 300)).await;
        let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        // A PING (13 bytes) one byte every 50 ms would take 650 ms.
        let ping = [9u8, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 0, 0];
        let t0 = Instant::now();
        for b in ping {
            if c.write_all(&[b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let m = s.metrics("wire");
        eventually("the trickle to be cut", || {
            m.error_count("read_timeout") == 1
        })
        .await;
        assert!(t0.elapsed() < Duration::from_millis(650) + PATIENCE);
        // Whatever the server wrote last was the TIMED_OUT error, not a PONG.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(PATIENCE, c.read_to_end(&mut rest)).await;
        assert_eq!(rest.get(4), Some(&8), "expected an ERROR frame: {rest:?}");
    }
}

both_modes! {
    async fn a_steady_stream_of_whole_frames_is_not_cut_by_the_read_timeout() {
        let s = TestServer::start(config(|c| c.listener.read_timeout_ms = 150)).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let until = Instant::now() + Duration::from_millis(600);
        while Instant::now() < until {
            c.ping().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(s.metrics("wire").error_count("read_timeout"), 0);
    }
}

both_modes! {
    async fn a_silent_connection_is_closed_by_the_idle_timeout() {
        // An idle timeout ten times the busy client's gap: a stall of the
        // (shared, 2-core) machine must not idle the busy one out too.
        let s = TestServer::start(config(|c| c.listener.idle_timeout_ms = 1_000)).await;
        let mut busy = WireClient::connect(s.addr).await.unwrap();
        let mut quiet = WireClient::connect(s.addr).await.unwrap();
        let until = Instant::now() + Duration::from_millis(2_500);
        while Instant::now() < until {
            busy.ping().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let e = expect_error_then_close(&mut quiet).await;
        assert_eq!(e.code, ErrorCode::TimedOut);
        assert!(e.message.contains("idle"), "{}", e.message);
        busy.ping().await.unwrap();
        assert_eq!(s.metrics("wire").error_count("idle_timeout"), 1);
    }
}

both_modes! {
    async fn a_client_outside_the_allow_list_is_refused_and_counted() {
        let s = TestServer::start(config(|c| {
            c.listener.allow = vec!["10.0.0.0/8".parse().unwrap()];
        }))
        .await;
        let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let _ = c.write_all(&[9, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 0, 0]).await;
        assert!(closed_without_a_word(&mut c).await);
        let m = s.metrics("wire");
        eventually("the refusal to be counted", || {
            m.refused_count("not_allowed") == 1
        })
        .await;
        assert_eq!(m.open_connections(), 0);
    }
}

both_modes! {
    async fn the_connection_beyond_max_connections_is_refused_and_counted() {
        let s = TestServer::start(config(|c| c.listener.max_connections = 2)).await;
        let mut first = WireClient::connect(s.addr).await.unwrap();
        let mut second = WireClient::connect(s.addr).await.unwrap();
        first.ping().await.unwrap();
        second.ping().await.unwrap();
        let mut extra = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        assert!(closed_without_a_word(&mut extra).await);
        let m = s.metrics("wire");
        assert_eq!(m.refused_count("max_connections"), 1);
        first.ping().await.unwrap();
        // A slot freed is a slot to take.
        drop(second);
        eventually("the slot to free", || m.open_connections() == 1).await;
        let mut again = WireClient::connect(s.addr).await.unwrap();
        again.ping().await.unwrap();
    }
}

both_modes! {
    async fn each_bad_input_closes_only_its_connection_with_a_counted_reason() {
        let s = TestServer::start(config(|c| c.max_frame = 1024)).await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("ok").await.unwrap();
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        let cases: [(&str, &[u8], ErrorCode, &str); 5] = [
            (
                "garbage",
                b"\x05\x00\x00\x00\x7fGARBAGE",
                ErrorCode::UnknownType,
                "unknown_type",
            ),
            (
                "oversize",
                &[1, 8, 0, 0, 1],
                ErrorCode::FrameTooLarge,
                "oversize_frame",
            ),
            (
                "http",
                b"GET / HTTP/1.1\r\n\r\n",
                ErrorCode::FrameTooLarge,
                "oversize_frame",
            ),
            (
                "truncated body",
                &[10, 0, 0, 0, 5, 1, 0, 0, 0, 1, 2, 3, 4, 5],
                ErrorCode::TruncatedFrame,
                "truncated_frame",
            ),
            (
                "zero length",
                &[0, 0, 0, 0],
                ErrorCode::MalformedFrame,
                "malformed_frame",
            ),
        ];
        let m = s.metrics("wire");
        for (i, (what, bytes, code, kind)) in cases.iter().enumerate() {
            let before = m.error_count(kind);
            let mut bad = WireClient::connect(s.addr).await.unwrap();
            bad.send_raw(bytes).await.unwrap();
            let e = expect_error_then_close(&mut bad).await;
            assert_eq!(e.code, *code, "{what}: {}", e.message);
            assert_eq!(m.error_count(kind), before + 1, "{what}");
            // The well-behaved pair is still served.
            let payload = format!("after {what}");
            publ.publish(&Message::new("ok", Bytes::from(payload.clone())))
                .await
                .unwrap();
            let got = tokio::time::timeout(PATIENCE, sub.recv_message())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(got.payload, payload.as_bytes(), "case {i}");
        }
        // A connection that ends mid-frame.
        let mut cut = WireClient::connect(s.addr).await.unwrap();
        cut.send_raw(&[100, 0, 0, 0, 1, 1, 2]).await.unwrap();
        cut.shutdown_write().await.unwrap();
        assert_eq!(
            expect_error_then_close(&mut cut).await.code,
            ErrorCode::TruncatedFrame
        );
        assert_eq!(m.error_count("truncated_frame"), 2);
        publ.ping().await.unwrap();
        sub.ping().await.unwrap();
    }
}

/// A sink that holds every message until the test opens its gate.
struct GateSink {
    gate: Arc<Semaphore>,
}

impl Sink for GateSink {
    fn name(&self) -> &str {
        "gate"
    }

    fn send(
        &self,
        _msg: SharedMessage,
        ack: AckToken,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let _pass = self.gate.acquire().await;
            ack.succeed();
        })
    }

    fn is_full(&self) -> bool {
        true
    }
}

both_modes! {
    async fn a_publish_holds_its_bytes_of_the_budget_until_the_hub_took_it() {
        let gate = Arc::new(Semaphore::new(0));
        let mut routes = RouteTable::default();
        routes.add(
            Pattern::parse("slow.>").unwrap(),
            Arc::new(GateSink { gate: gate.clone() }),
        );
        let budget = InflightBudget::new(1 << 20);
        let s = TestServer::start_with_hub(
            WireConfig::default(),
            Hub::with_budget(routes, budget.clone()),
        )
        .await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let msg = Message::new("slow.q", Bytes::from(vec![1u8; 1000]));
        let mut frame = bytes::BytesMut::new();
        tidegate_wire::codec::encode_message(tidegate_wire::FrameType::Publish, &msg, &mut frame)
            .unwrap();
        c.publish(&msg).await.unwrap();
        eventually("the frame's bytes to be held", || {
            budget.in_use() == frame.len()
        })
        .await;
        // Still held while the sink has not taken the message.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(budget.in_use(), frame.len());
        gate.add_permits(1);
        c.ping().await.unwrap();
        eventually("the bytes to return", || budget.in_use() == 0).await;
    }
}

/// How long a connection the server gave up on may take to be gone: far
/// more than the server needs (about a second), for a loaded machine.
const CLOSE_PATIENCE: Duration = Duration::from_secs(20);

/// `n` PING frames.
fn pings(n: u64) -> bytes::BytesMut {
    let mut b = bytes::BytesMut::new();
    for token in 0..n {
        tidegate_wire::codec::encode_token(FrameType::Ping, token, &mut b);
    }
    b
}

both_modes! {
    async fn a_client_flooding_pings_without_reading_is_closed_after_the_overflow() {
        // An idle timeout far beyond the test: the overflow alone must close
        // the connection, though the client never reads its ERROR.
        let s = TestServer::start(config(|c| {
            c.listener.idle_timeout_ms = 600_000;
            c.max_outbound_bytes = 256 * 1024;
        }))
        .await;
        let m = s.metrics("wire");
        let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        // First fill the sockets with PONGs until the server's writes block:
        // a chunk at a time, each answered before the next, until its
        // answers stop leaving for a second.
        let chunk = pings(1000);
        let mut sent = 0u64;
        loop {
            c.write_all(&chunk).await.unwrap();
            sent += chunk.len() as u64;
            let wait = tokio::time::Instant::now() + Duration::from_secs(1);
            while m.bytes_out_total() < sent && tokio::time::Instant::now() < wait {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if m.bytes_out_total() < sent {
                break;
            }
            assert!(sent < 1 << 30, "the server's writes never blocked");
        }
        // Then more PINGs than `max_outbound_bytes` of PONGs can wait for.
        let burst = pings(64 * 1024);
        while m.error_count("outbound_overflow") == 0 {
            let w = tokio::time::timeout(Duration::from_secs(1), c.write_all(&burst)).await;
            if !matches!(w, Ok(Ok(()))) {
                break; // the server stopped reading (it overflowed) or closed
            }
        }
        eventually("the overflow to be counted", || {
            m.error_count("outbound_overflow") == 1
        })
        .await;
        // Its socket, slot and buffers are released.
        eventually_within("the connection to close", CLOSE_PATIENCE, || {
            m.open_connections() == 0
        })
        .await;
        drop(c);
    }
}

both_modes! {
    async fn a_subscriber_that_stops_reading_is_closed_by_the_idle_timeout() {
        let s = TestServer::start(config(|c| {
            c.listener.idle_timeout_ms = 5_000;
            c.subscriber_capacity = 16;
            c.max_outbound_bytes = 256 * 1024;
        }))
        .await;
        let m = s.metrics("wire");
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("big").await.unwrap();
        // Publish (32 KiB messages) until most are dropped for it: the
        // server cannot write to it any more.
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        let body = Bytes::from(vec![b'x'; 32 * 1024]);
        let dropped = || s.hub.metrics().dropped_oldest.get();
        let mut published = 0;
        while dropped() < 500 && published < 2000 {
            for _ in 0..50 {
                publ.publish(&Message::new("big", body.clone()))
                    .await
                    .unwrap();
                published += 1;
            }
            publ.ping().await.unwrap();
        }
        drop(publ);
        // Nothing moves on the subscriber's connection: the idle timeout
        // closes it although the server cannot write its ERROR.
        eventually_within("the subscriber to be closed", CLOSE_PATIENCE, || {
            m.open_connections() == 0
        })
        .await;
        drop(sub);
    }
}
