//! Token authentication (`[wire] tokens`): with tokens configured, nothing
//! but an AUTH carrying one of them is accepted first; every refusal is an
//! ERROR 10 (UNAUTHORIZED), a close, and a count of `auth_failed`.

#[macro_use]
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{expect_error_then_close, TestServer, PATIENCE};
use tidegate_hub::Message;
use tidegate_wire::{
    ClientError, ConnectOptions, Echo, ErrorCode, Frame, FrameType, WireClient, WireConfig,
};

const TOKEN: &str = "s3cret-token";
const OTHER_TOKEN: &str = "another-one";

fn with_tokens() -> WireConfig {
    WireConfig {
        tokens: vec![TOKEN.into(), OTHER_TOKEN.into()],
        ..Default::default()
    }
}

fn auth_failures(s: &TestServer) -> u64 {
    s.metrics("wire").error_count("auth_failed")
}

both_modes! {
    async fn without_a_token_publish_subscribe_echo_and_ping_are_refused() {
        let s = TestServer::start(with_tokens()).await;
        let watcher = s.hub.subscribe("t").unwrap();
        let first_frames = [
            Frame::Publish(Message::new("t", Bytes::from_static(b"sneaky"))),
            Frame::Subscribe("t".into()),
            Frame::Echo(Echo {
                options: Echo::RESPOND,
                send_time_ns: 1,
                correlation_id: 1,
                extra: Bytes::new(),
            }),
            Frame::Ping(1),
        ];
        for (i, frame) in first_frames.iter().enumerate() {
            let mut c = WireClient::connect(s.addr).await.unwrap();
            c.send(frame).await.unwrap();
            let e = expect_error_then_close(&mut c).await;
            assert_eq!(e.code, ErrorCode::Unauthorized);
            let name = frame.frame_type().name();
            assert!(
                e.message.contains("AUTH") && e.message.contains(name),
                "{}",
                e.message
            );
            assert_eq!(auth_failures(&s), i as u64 + 1);
        }
        assert!(watcher.is_empty(), "an unauthenticated publish got through");
    }
}

both_modes! {
    async fn an_unauthenticated_frame_is_refused_from_its_header_without_its_body() {
        let s = TestServer::start(with_tokens()).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        // A PUBLISH announcing a whole mebibyte; only its header is ever sent.
        let mut header = ((1u32 << 20) - 1).to_le_bytes().to_vec();
        header.push(FrameType::Publish as u8);
        c.send_raw(&header).await.unwrap();
        assert_eq!(
            expect_error_then_close(&mut c).await.code,
            ErrorCode::Unauthorized
        );
    }
}

both_modes! {
    async fn a_wrong_token_is_refused_and_closes_the_connection() {
        let s = TestServer::start(with_tokens()).await;
        for wrong in ["wrong", "s3cret-toke", "s3cret-token!", "S3CRET-TOKEN"] {
            let opts = ConnectOptions::new().token(wrong.as_bytes().to_vec());
            match WireClient::connect_with(s.addr, &opts).await {
                Err(ClientError::Server(e)) => {
                    assert_eq!(e.code, ErrorCode::Unauthorized, "{}", e.message);
                    assert!(!e.message.contains(TOKEN), "the error leaks a token");
                }
                other => panic!("token {wrong:?} was not refused: {other:?}"),
            }
        }
        assert_eq!(auth_failures(&s), 4);
    }
}

both_modes! {
    async fn a_wrong_token_after_a_good_one_still_closes() {
        let s = TestServer::start(with_tokens()).await;
        let opts = ConnectOptions::new().token(TOKEN);
        let mut c = WireClient::connect_with(s.addr, &opts).await.unwrap();
        c.ping().await.unwrap();
        let e = c.authenticate(b"nope").await.unwrap_err();
        assert!(
            matches!(&e, ClientError::Server(f) if f.code == ErrorCode::Unauthorized),
            "{e}"
        );
    }
}

both_modes! {
    async fn the_right_token_lets_publish_and_subscribe_through() {
        let s = TestServer::start(with_tokens()).await;
        let mut sub = WireClient::connect_with(s.addr, &ConnectOptions::new().token(OTHER_TOKEN))
            .await
            .unwrap();
        sub.subscribe("orders.>").await.unwrap();
        let mut publ = WireClient::connect_with(s.addr, &ConnectOptions::new().token(TOKEN))
            .await
            .unwrap();
        publ.publish(&Message::new("orders.eu", Bytes::from_static(b"ok")))
            .await
            .unwrap();
        let m = tokio::time::timeout(PATIENCE, sub.recv_message())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&m.payload[..], b"ok");
        let reply = publ.echo(9, 99, &[]).await.unwrap();
        assert_eq!(reply.correlation_id, 9);
        assert_eq!(auth_failures(&s), 0);
    }
}

both_modes! {
    async fn auth_and_frames_pipelined_in_one_write_are_served_in_order() {
        let s = TestServer::start(with_tokens()).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.queue(&Frame::Auth(tidegate_wire::AuthToken::new(TOKEN)))
            .unwrap();
        c.queue(&Frame::Ping(5)).unwrap();
        c.flush().await.unwrap();
        assert_eq!(c.recv().await.unwrap(), Some(Frame::AuthOk));
        assert_eq!(c.recv().await.unwrap(), Some(Frame::Pong(5)));
    }
}

both_modes! {
    async fn a_server_without_tokens_accepts_any_auth() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect_with(s.addr, &ConnectOptions::new().token("anything"))
            .await
            .unwrap();
        c.ping().await.unwrap();
    }
}

both_modes! {
    async fn an_auth_token_over_256_bytes_is_refused_from_its_header() {
        let s = TestServer::start(with_tokens()).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let mut header = 258u32.to_le_bytes().to_vec(); // type byte + 257
        header.push(FrameType::Auth as u8);
        c.send_raw(&header).await.unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::MalformedFrame);
        assert!(e.message.contains("257"), "{}", e.message);
    }
}

both_modes! {
    async fn a_silent_unauthenticated_connection_is_closed_by_the_idle_timeout() {
        let mut config = with_tokens();
        config.listener.idle_timeout_ms = 200;
        let s = TestServer::start(config).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        let e = expect_error_then_close(&mut c).await;
        assert_eq!(e.code, ErrorCode::TimedOut);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(s.metrics("wire").error_count("idle_timeout"), 1);
    }
}
