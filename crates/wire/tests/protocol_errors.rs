//! Invalid input: oversize, unknown-type, truncated and malformed frames are
//! answered with an ERROR naming the problem, then that connection (and only
//! that one) is closed. Also: echo semantics and shutdown.

#[macro_use]
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{expect_error_then_close, TestServer};
use tidegate_hub::Message;
use tidegate_wire::{ErrorCode, Frame, WireClient, WireConfig};

/// A bystander connection with a live subscription, to show it is unaffected.
async fn bystander(s: &TestServer) -> WireClient {
    let mut c = WireClient::connect(s.addr).await.unwrap();
    c.subscribe("ok").await.unwrap();
    c
}

async fn bystander_still_works(s: &TestServer, mut c: WireClient) {
    let mut p = WireClient::connect(s.addr).await.unwrap();
    p.publish(&Message::new("ok", Bytes::from_static(b"still here")))
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), c.recv_message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"still here");
}

both_modes! {
    async fn an_oversize_frame_gets_frame_too_large_then_close() {
        let s = TestServer::start(WireConfig {
            max_frame: 1024,
            ..Default::default()
        })
        .await;
        let by = bystander(&s).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let mut frame = 2000u32.to_le_bytes().to_vec();
        frame.push(0x01);
        frame.extend_from_slice(&[0u8; 1999]);
        c.send_raw(&frame).await.unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::FrameTooLarge);
        assert!(
            e.message.contains("2000") && e.message.contains("1024"),
            "{}",
            e.message
        );
        bystander_still_works(&s, by).await;
        assert_eq!(
            s.hub
                .metrics()
                .listener("wire")
                .error_count("oversize_frame"),
            1
        );
    }
}

both_modes! {
    async fn the_default_limit_is_one_mebibyte() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let mut frame = ((1u32 << 20) + 1).to_le_bytes().to_vec();
        frame.push(0x01);
        c.send_raw(&frame).await.unwrap();
        assert_eq!(
            expect_error_then_close(&mut c).await.code,
            ErrorCode::FrameTooLarge
        );
    }
}

both_modes! {
    async fn garbage_gets_unknown_type_then_close() {
        let s = TestServer::default().await;
        let by = bystander(&s).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.send_raw(b"\x05\x00\x00\x00\x7fGARBAGE GARBAGE GARBAGE")
            .await
            .unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::UnknownType);
        assert!(e.message.contains("0x7f"), "{}", e.message);
        bystander_still_works(&s, by).await;
    }
}

both_modes! {
    async fn http_sent_to_the_wire_port_is_refused() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // "GET " read as a little-endian length is far over 1 MiB.
        assert_eq!(
            expect_error_then_close(&mut c).await.code,
            ErrorCode::FrameTooLarge
        );
    }
}

both_modes! {
    async fn a_truncated_body_names_the_missing_field() {
        let s = TestServer::default().await;
        let by = bystander(&s).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        // ECHO with a 9-byte body: options plus half a send time.
        c.send_raw(&[10, 0, 0, 0, 0x05, 1, 0, 0, 0, 1, 2, 3, 4, 5])
            .await
            .unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::TruncatedFrame);
        assert!(e.message.contains("send_time_ns"), "{}", e.message);
        bystander_still_works(&s, by).await;
    }
}

both_modes! {
    async fn a_connection_ending_mid_frame_gets_truncated_frame() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.send_raw(&[100, 0, 0, 0, 0x01, 1, 2, 3]).await.unwrap();
        c.shutdown_write().await.unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::TruncatedFrame);
        assert!(e.message.contains("8 bytes"), "{}", e.message);
    }
}

both_modes! {
    async fn a_zero_length_frame_is_malformed() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.send_raw(&[0, 0, 0, 0]).await.unwrap();
        assert_eq!(
            expect_error_then_close(&mut c).await.code,
            ErrorCode::MalformedFrame
        );
    }
}

both_modes! {
    async fn a_server_only_frame_from_a_client_is_malformed() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.send(&Frame::Pong(1)).await.unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::MalformedFrame);
        assert!(e.message.contains("PONG"), "{}", e.message);
    }
}

both_modes! {
    async fn frames_before_the_bad_one_are_still_served() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&[9, 0, 0, 0, 0x06, 7, 0, 0, 0, 0, 0, 0, 0]); // PING 7
        bytes.extend_from_slice(&[1, 0, 0, 0, 0xee]); // unknown type
        c.send_raw(&bytes).await.unwrap();
        assert_eq!(c.recv().await.unwrap(), Some(Frame::Pong(7)));
        assert_eq!(
            expect_error_then_close(&mut c).await.code,
            ErrorCode::UnknownType
        );
    }
}

both_modes! {
    async fn echo_answers_only_when_asked_and_without_the_extra_bytes() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.send(&Frame::Echo(tidegate_wire::Echo {
            options: 0,
            send_time_ns: 1,
            correlation_id: 1,
            extra: Bytes::from_static(&[1; 64]),
        }))
        .await
        .unwrap();
        let reply = c.echo(2, 123, &[7; 64]).await.unwrap();
        assert_eq!(
            (reply.options, reply.send_time_ns, reply.correlation_id),
            (1, 123, 2)
        );
        assert!(reply.extra.is_empty());
        c.ping().await.unwrap();
        // Nothing was held back: the unanswered echo produced no frame.
        let nothing = tokio::time::timeout(Duration::from_millis(100), c.recv()).await;
        assert!(nothing.is_err(), "unexpected frame {nothing:?}");
    }
}

both_modes! {
    async fn pipelined_echoes_are_all_answered_in_order() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        for i in 0..10_000i64 {
            let options = if i % 100 == 0 { 1 } else { 0 };
            c.queue(&Frame::Echo(tidegate_wire::Echo {
                options,
                send_time_ns: i,
                correlation_id: i,
                extra: Bytes::from_static(&[0; 64]),
            }))
            .unwrap();
        }
        c.flush().await.unwrap();
        for i in 0..100i64 {
            match c.recv().await.unwrap() {
                Some(Frame::Echo(e)) => assert_eq!(e.correlation_id, i * 100),
                other => panic!("expected echo {i}, got {other:?}"),
            }
        }
    }
}

both_modes! {
    async fn echoes_between_bursts_of_publishes_are_all_answered_in_order() {
        // Bursts longer than the low-latency mode's hub queue (1,024
        // requests): ECHO replies queued behind them wait for room.
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let m = Message::new("nobody.listens", Bytes::from_static(b"p"));
        let mut id = 0i64;
        for _ in 0..40 {
            for burst in [1500, 200] {
                for _ in 0..burst {
                    c.queue(&Frame::Publish(m.clone())).unwrap();
                }
                for _ in 0..20 {
                    c.queue(&Frame::Echo(tidegate_wire::Echo {
                        options: tidegate_wire::Echo::RESPOND,
                        send_time_ns: id,
                        correlation_id: id,
                        extra: Bytes::new(),
                    }))
                    .unwrap();
                    id += 1;
                }
            }
        }
        // The replies (1,600 × 25 bytes) fit in the socket buffers: the
        // client can write everything before reading.
        c.flush().await.unwrap();
        for want in 0..id {
            let f = tokio::time::timeout(Duration::from_secs(10), c.recv())
                .await
                .unwrap_or_else(|_| panic!("no reply for echo {want}"));
            match f {
                Ok(Some(Frame::Echo(e))) => assert_eq!(e.correlation_id, want),
                other => panic!("expected echo {want}, got {other:?}"),
            }
        }
        c.ping().await.unwrap();
    }
}

both_modes! {
    async fn shutdown_tells_clients_and_closes() {
        let mut s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.ping().await.unwrap();
        s.shutdown.cancel();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::ShuttingDown);
        let task = s.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}
