//! The `[sockperf]` listener on the listener core, without the stock client:
//! the echo rule over a socket, counted messages, the partial-message read
//! timeout and a bad length closing only that connection, and a client
//! that does not read its replies held back and then closed.

#[macro_use]
mod common;

use std::time::Duration;

use common::{eventually, eventually_within, TestServer, PATIENCE};
use tidegate_wire::sockperf_header::{SockperfHeader, FLAG_CLIENT, FLAG_PONG_REQUEST};
use tidegate_wire::SockperfConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn message(sequence: u64, flags: u16, len: u32) -> Vec<u8> {
    let mut m = SockperfHeader {
        sequence,
        flags,
        length: len,
    }
    .to_bytes()
    .to_vec();
    m.resize(len as usize, 0xab);
    m
}

async fn closed(c: &mut TcpStream) -> bool {
    let mut b = [0u8; 64];
    matches!(
        tokio::time::timeout(PATIENCE, c.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

both_modes! {
    async fn pong_requests_are_echoed_and_every_message_is_counted() {
        let s = TestServer::sockperf(SockperfConfig::default()).await;
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        let mut burst = message(1, FLAG_CLIENT, 64);
        burst.extend(message(2, FLAG_CLIENT | FLAG_PONG_REQUEST, 64));
        c.write_all(&burst).await.unwrap();
        let mut reply = [0u8; 64];
        tokio::time::timeout(PATIENCE, c.read_exact(&mut reply))
            .await
            .unwrap()
            .unwrap();
        let h = SockperfHeader::parse(&reply).unwrap();
        assert_eq!((h.sequence, h.flags), (2, FLAG_PONG_REQUEST));
        // Messages a read completes are counted before the reply is written.
        let text = s.hub.metrics().render();
        assert!(
            text.contains("tidegate_listener_frames_in_total{listener=\"sockperf\"} 2"),
            "{text}"
        );
    }
}

both_modes! {
    async fn a_partial_message_is_closed_by_the_read_timeout() {
        let mut config = SockperfConfig::default();
        config.listener.read_timeout_ms = 200;
        let s = TestServer::sockperf(config).await;
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        c.write_all(&message(1, FLAG_CLIENT | FLAG_PONG_REQUEST, 64)[..5])
            .await
            .unwrap();
        assert!(closed(&mut c).await);
        assert_eq!(s.metrics("sockperf").error_count("read_timeout"), 1);
    }
}

both_modes! {
    async fn a_bad_length_closes_only_that_connection() {
        let s = TestServer::sockperf(SockperfConfig::default()).await;
        let mut good = TcpStream::connect(s.addr).await.unwrap();
        let mut bad = TcpStream::connect(s.addr).await.unwrap();
        bad.write_all(
            &SockperfHeader {
                sequence: 1,
                flags: FLAG_CLIENT | FLAG_PONG_REQUEST,
                length: 3,
            }
            .to_bytes(),
        )
        .await
        .unwrap();
        assert!(closed(&mut bad).await);
        let m = s.metrics("sockperf");
        eventually("the bad length counted", || {
            m.error_count("bad_length") == 1
        })
        .await;
        good.write_all(&message(7, FLAG_CLIENT | FLAG_PONG_REQUEST, 32))
            .await
            .unwrap();
        let mut reply = [0u8; 32];
        tokio::time::timeout(Duration::from_secs(5), good.read_exact(&mut reply))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(SockperfHeader::parse(&reply).unwrap().sequence, 7);
    }
}

both_modes! {
    async fn a_client_that_does_not_read_is_held_back_then_closed() {
        let mut config = SockperfConfig::default();
        config.listener.idle_timeout_ms = 2_000;
        let s = TestServer::sockperf(config).await;
        let m = s.metrics("sockperf");
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        // 1 MiB of PONG requests per write, none of the replies read.
        let chunk: Vec<u8> = (0..1024)
            .flat_map(|i| message(i, FLAG_CLIENT | FLAG_PONG_REQUEST, 1024))
            .collect();
        let max = 128 << 20;
        let mut sent = 0;
        while sent < max {
            match tokio::time::timeout(Duration::from_secs(1), c.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                // Stalled (or closed): the server stopped reading.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        // Only the sockets' buffers were filled: the server read no more
        // than it could answer.
        assert!(sent < max, "the server read all {sent} bytes");
        // Then nothing moves, and the idle timeout closes it.
        eventually_within("the connection to close", Duration::from_secs(20), || {
            m.open_connections() == 0
        })
        .await;
        drop(c);
    }
}
