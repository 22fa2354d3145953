//! The shared-key handshake, TLS (served by the listener core, with the
//! test PKI) and the allow-list, over real sockets.

mod common;

use std::time::Duration;

use common::*;
use tidegate_forward::client::ClientError;
use tidegate_forward::codec::EventTime;
use tidegate_forward::handshake::HandshakeError;
use tidegate_forward::{
    ClientAuth, ClientOptions, ClientTls, ForwardClient, ForwardConfig, UserConfig,
};
use tidegate_hub::Hub;
use tidegate_listener::{ClientAuth as ListenerClientAuth, TestPki};

const WAIT: Duration = Duration::from_secs(10);

fn auth(key: &str, user: &str, password: &str) -> ClientAuth {
    ClientAuth {
        shared_key: key.into(),
        hostname: "client.example".into(),
        username: user.into(),
        password: password.into(),
    }
}

fn secured() -> ForwardConfig {
    ForwardConfig {
        shared_key: Some("s3cret".into()),
        self_hostname: "server.example".into(),
        users: vec![UserConfig {
            username: "alice".into(),
            password: "wonder".into(),
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn the_right_key_and_user_pass_the_handshake_and_deliver() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 10);
    let srv = start(hub, secured()).await;
    let opts = ClientOptions {
        auth: Some(auth("s3cret", "alice", "wonder")),
        ..Default::default()
    };
    let mut c = ForwardClient::connect(srv.addr, opts).await.unwrap();
    c.send_message("t", EventTime::new(1, 0), &record(1), Some("c"))
        .await
        .unwrap();
    c.wait_ack("c", WAIT).await.unwrap();
    assert_eq!(recv_n(&mut sub, 1).await.len(), 1);
}

#[tokio::test]
async fn a_wrong_shared_key_gets_pong_false_with_a_reason_then_close() {
    let hub = Hub::default();
    let srv = start(hub.clone(), secured()).await;
    let opts = ClientOptions {
        auth: Some(auth("wrong", "alice", "wonder")),
        ..Default::default()
    };
    match ForwardClient::connect(srv.addr, opts).await {
        Err(ClientError::Handshake(HandshakeError::Refused(reason))) => {
            assert_eq!(reason, "shared_key mismatch")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let m = hub.metrics().listener("forward");
    let deadline = tokio::time::Instant::now() + WAIT;
    while m.error_count("auth_failed") == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_wrong_password_is_refused() {
    let srv = start(Hub::default(), secured()).await;
    let opts = ClientOptions {
        auth: Some(auth("s3cret", "alice", "nope")),
        ..Default::default()
    };
    match ForwardClient::connect(srv.addr, opts).await {
        Err(ClientError::Handshake(HandshakeError::Refused(reason))) => {
            assert_eq!(reason, "username/password mismatch")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn the_server_closes_the_connection_after_refusing() {
    use tidegate_forward::codec::reader::MsgReader;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let srv = start(Hub::default(), secured()).await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let mut helo = vec![0u8; 256];
    let n = s.read(&mut helo).await.unwrap();
    let info = tidegate_forward::handshake::parse_helo(&helo[..n]).unwrap();
    let hs = tidegate_forward::handshake::ClientHandshake::new(
        "c".into(),
        "bad".into(),
        "".into(),
        "".into(),
    );
    s.write_all(&hs.ping(&info)).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut all))
        .await
        .unwrap()
        .unwrap();
    let pong = tidegate_forward::handshake::parse_pong(&all).unwrap();
    assert!(!pong.accepted);
    assert_eq!(pong.reason, "shared_key mismatch");
    assert!(
        MsgReader::new(&all).skip_value().unwrap().end == all.len(),
        "nothing after the PONG"
    );
}

/// A server config serving the test PKI's certificate, with the handshake.
fn tls_config(pki: &TestPki, client_auth: Option<ListenerClientAuth>) -> ForwardConfig {
    let mut config = secured();
    config.listener.tls = Some(pki.server_tls(client_auth));
    config
}

fn client_tls(ca_pem_path: &std::path::Path) -> ClientTls {
    ClientTls {
        ca_pem: std::fs::read(ca_pem_path).unwrap(),
        server_name: "localhost".into(),
    }
}

/// Waits until the listener counted `kind` as an error.
async fn error_counted(hub: &Hub, kind: &str) {
    let m = hub.metrics().listener("forward");
    let deadline = tokio::time::Instant::now() + WAIT;
    while m.error_count(kind) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{kind} error not counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn tls_with_the_right_ca_and_the_handshake_delivers() {
    let pki = TestPki::generate().unwrap();
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 10);
    let srv = start(hub, tls_config(&pki, None)).await;
    let opts = ClientOptions {
        tls: Some(client_tls(&pki.path("ca.pem"))),
        auth: Some(auth("s3cret", "alice", "wonder")),
        ..Default::default()
    };
    let mut c = ForwardClient::connect(srv.addr, opts).await.unwrap();
    let recs: Vec<Vec<u8>> = (0..5).map(record).collect();
    let entries: Vec<(EventTime, &[u8])> = recs
        .iter()
        .map(|r| (EventTime::new(2, 0), r.as_slice()))
        .collect();
    c.send_compressed_packed_forward("tls", &entries, Some("z"))
        .await
        .unwrap();
    c.wait_ack("z", WAIT).await.unwrap();
    assert_eq!(recv_n(&mut sub, 5).await.len(), 5);
}

#[tokio::test]
async fn a_tls_client_without_the_right_ca_fails_the_handshake() {
    let pki = TestPki::generate().unwrap();
    let other = TestPki::generate().unwrap();
    let hub = Hub::default();
    let mut config = ForwardConfig::default();
    config.listener.tls = Some(pki.server_tls(None));
    let srv = start(hub.clone(), config).await;
    let opts = ClientOptions {
        tls: Some(client_tls(&other.path("ca.pem"))),
        ..Default::default()
    };
    let err = ForwardClient::connect(srv.addr, opts).await.unwrap_err();
    assert!(matches!(err, ClientError::Io(_)), "{err:?}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    error_counted(&hub, "tls_handshake").await;
    // A plain-TCP client cannot talk to the TLS port either.
    let mut plain = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    plain
        .send_message("t", EventTime::new(1, 0), &record(1), Some("p"))
        .await
        .unwrap();
    assert!(plain.wait_ack("p", WAIT).await.is_err());
}

/// Connects with TLS presenting (or not) the test PKI's client certificate,
/// sends one Message-mode event with chunk `chunk`, and returns what the
/// server answered before closing or within `WAIT`.
async fn send_over_mtls(
    addr: std::net::SocketAddr,
    pki: &TestPki,
    with_identity: bool,
    chunk: &str,
) -> std::io::Result<Vec<u8>> {
    use tidegate_forward::codec::encode::{write_message, MessageOption, TimeForm};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connector = tokio_rustls::TlsConnector::from(pki.client_config(with_identity)?);
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = connector.connect(name, tcp).await?;
    let mut frame = Vec::new();
    let opt = MessageOption {
        chunk: Some(chunk),
        ..Default::default()
    };
    write_message(
        &mut frame,
        "mtls",
        EventTime::new(1, 0),
        TimeForm::FixExt8,
        &record(1),
        &opt,
    );
    s.write_all(&frame).await?;
    s.flush().await?;
    let mut reply = vec![0u8; 256];
    let n = tokio::time::timeout(WAIT, s.read(&mut reply))
        .await
        .map_err(|_| std::io::Error::other("no answer"))??;
    reply.truncate(n);
    Ok(reply)
}

#[tokio::test]
async fn a_required_client_certificate_is_checked_by_the_listener_core() {
    let pki = TestPki::generate().unwrap();
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 10);
    let mut config = ForwardConfig::default();
    config.listener.tls = Some(pki.server_tls(Some(ListenerClientAuth::Required)));
    let srv = start(hub.clone(), config).await;
    let reply = send_over_mtls(srv.addr, &pki, true, "m1").await.unwrap();
    assert!(reply.windows(2).any(|w| w == b"m1"), "no ack in {reply:?}");
    assert_eq!(recv_n(&mut sub, 1).await[0].topic, "logs.mtls");
    // Without a certificate: refused in the TLS handshake, counted, no ack.
    let refused = send_over_mtls(srv.addr, &pki, false, "m2").await;
    assert!(
        refused.as_ref().map_or(true, |r| r.is_empty()),
        "acked without a client certificate: {refused:?}"
    );
    error_counted(&hub, "tls_handshake").await;
    // ForwardClient presents no certificate: it cannot deliver either.
    let opts = ClientOptions {
        tls: Some(client_tls(&pki.path("ca.pem"))),
        ..Default::default()
    };
    if let Ok(mut c) = ForwardClient::connect(srv.addr, opts).await {
        let _ = c
            .send_message("t", EventTime::new(1, 0), &record(1), Some("c"))
            .await;
        assert!(c.wait_ack("c", WAIT).await.is_err());
    }
}

#[tokio::test]
async fn a_client_outside_the_allow_list_is_refused_at_accept() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let hub = Hub::default();
    let mut config = ForwardConfig::default();
    config.listener.allow = vec!["10.0.0.0/8".parse().unwrap()];
    let srv = start(hub.clone(), config).await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let _ = s.write_all(&[0xc0]).await;
    let mut b = [0u8; 16];
    match tokio::time::timeout(WAIT, s.read(&mut b))
        .await
        .expect("refused connection must be closed")
    {
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("server answered {:?}", &b[..n]),
    }
    let m = hub.metrics().listener("forward");
    assert_eq!(m.refused_count("not_allowed"), 1);
    assert_eq!(m.open_connections(), 0);

    // 127.0.0.1 inside the list is served.
    let mut config = ForwardConfig::default();
    config.listener.allow = vec!["127.0.0.0/8".parse().unwrap()];
    let srv = start(Hub::default(), config).await;
    let mut c = ForwardClient::connect(srv.addr, ClientOptions::default())
        .await
        .unwrap();
    c.send_message("t", EventTime::new(1, 0), &record(1), Some("in"))
        .await
        .unwrap();
    c.wait_ack("in", WAIT).await.unwrap();
}
