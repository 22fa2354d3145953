//! The shared-key handshake and TLS over real sockets.

mod common;

use std::time::Duration;

use common::*;
use tidegate_forward::client::ClientError;
use tidegate_forward::codec::EventTime;
use tidegate_forward::handshake::HandshakeError;
use tidegate_forward::{
    ClientAuth, ClientOptions, ClientTls, ForwardClient, ForwardConfig, TlsConfig, UserConfig,
};
use tidegate_hub::Hub;

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

struct Pki {
    ca_pem: String,
    _dir: tempfile::TempDir,
    tls: TlsConfig,
}

/// A CA and a `localhost` certificate it signed (rcgen), in a temp dir.
fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let (tls, ca_pem) = tidegate_forward::tls::generate_test_pki(dir.path()).unwrap();
    Pki {
        ca_pem,
        _dir: dir,
        tls,
    }
}

fn other_ca_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.self_signed(&key).unwrap().pem()
}

#[tokio::test]
async fn tls_with_the_right_ca_and_the_handshake_delivers() {
    let pki = pki();
    let hub = Hub::default();
    let mut sub = subscribe(&hub, ">", 10);
    let config = ForwardConfig {
        tls: Some(pki.tls.clone()),
        ..secured()
    };
    let srv = start(hub, config).await;
    let opts = ClientOptions {
        tls: Some(ClientTls {
            ca_pem: pki.ca_pem.clone().into_bytes(),
            server_name: "localhost".into(),
        }),
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
    let pki = pki();
    let hub = Hub::default();
    let config = ForwardConfig {
        tls: Some(pki.tls.clone()),
        ..Default::default()
    };
    let srv = start(hub.clone(), config).await;
    let opts = ClientOptions {
        tls: Some(ClientTls {
            ca_pem: other_ca_pem().into_bytes(),
            server_name: "localhost".into(),
        }),
        ..Default::default()
    };
    let err = ForwardClient::connect(srv.addr, opts).await.unwrap_err();
    assert!(matches!(err, ClientError::Io(_)), "{err:?}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    let m = hub.metrics().listener("forward");
    let deadline = tokio::time::Instant::now() + WAIT;
    while m.error_count("tls_handshake") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "tls_handshake error not counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
