//! `[wire]` over TLS (the listener core's `tls` block) with the client's TLS
//! support: publish, subscribe and echo round trips, a client certificate
//! with a token, and a plain client refused at the handshake.

#[macro_use]
mod common;

use bytes::Bytes;
use common::{eventually, TestServer, PATIENCE};
use tidegate_hub::Message;
use tidegate_listener::{ClientAuth, TestPki};
use tidegate_wire::{ConnectOptions, WireClient, WireConfig};

async fn tls_server(pki: &TestPki, client_auth: Option<ClientAuth>, tokens: &[&str]) -> TestServer {
    let mut config = WireConfig {
        tokens: tokens.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    };
    config.listener.tls = Some(pki.server_tls(client_auth));
    TestServer::start(config).await
}

fn tls_options(pki: &TestPki, with_identity: bool) -> ConnectOptions {
    ConnectOptions::new()
        .tls(pki.client_config(with_identity).unwrap(), "localhost")
        .unwrap()
}

both_modes! {
    async fn publish_subscribe_and_echo_work_over_tls() {
        let pki = TestPki::generate().unwrap();
        let s = tls_server(&pki, None, &[]).await;
        let opts = tls_options(&pki, false);
        let mut sub = WireClient::connect_with(s.addr, &opts).await.unwrap();
        assert!(sub.is_tls());
        sub.subscribe("secure.*").await.unwrap();
        let mut publ = WireClient::connect_with(s.addr, &opts).await.unwrap();
        let sent = Message::new("secure.a", Bytes::from(vec![42u8; 100_000]))
            .with_key(Bytes::from_static(b"k"))
            .with_timestamp_ns(7);
        publ.publish(&sent).await.unwrap();
        let got = tokio::time::timeout(PATIENCE, sub.recv_message())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, sent);
        let reply = publ.echo(3, 33, &[1; 64]).await.unwrap();
        assert_eq!((reply.correlation_id, reply.send_time_ns), (3, 33));
        publ.ping().await.unwrap();
    }
}

both_modes! {
    async fn a_client_certificate_and_a_token_together() {
        let pki = TestPki::generate().unwrap();
        let s = tls_server(&pki, Some(ClientAuth::Required), &["tok"]).await;
        let opts = tls_options(&pki, true).token("tok");
        let mut c = WireClient::connect_with(s.addr, &opts).await.unwrap();
        c.ping().await.unwrap();
        // Without the certificate the handshake itself fails.
        let no_cert = tls_options(&pki, false).token("tok");
        let refused = match WireClient::connect_with(s.addr, &no_cert).await {
            Err(_) => true,
            // TLS 1.3: the client may finish before the server's refusal arrives.
            Ok(mut c) => c.ping().await.is_err(),
        };
        assert!(refused, "a client without a certificate was served");
    }
}

both_modes! {
    async fn a_plain_client_on_a_tls_listener_fails_the_handshake_and_is_counted() {
        let pki = TestPki::generate().unwrap();
        let s = tls_server(&pki, None, &[]).await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        assert!(c.ping().await.is_err());
        let m = s.metrics("wire");
        eventually("a counted handshake failure", || {
            m.error_count("tls_handshake") == 1
        })
        .await;
    }
}
