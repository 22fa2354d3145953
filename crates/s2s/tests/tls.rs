//! RAW over TLS with client certificates: discovery says secure, a client
//! with a certificate from the configured CA gets in, the port allow list
//! is checked against the certificate DN, a client without a certificate is
//! refused at the TLS handshake.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{start, test_config};
use tidegate_hub::Hub;
use tidegate_listener::{ClientAuth, TestPki};
use tidegate_s2s::client::{discover, ClientError, ClientOptions, RawClient};
use tidegate_s2s::codec::{DataPacket, ResponseCode};
use tidegate_s2s::tls::ClientTls;
use tidegate_s2s::PortConfig;

#[tokio::test]
async fn client_certificates_and_dn_allow_lists() {
    let pki = TestPki::generate().unwrap();
    let mut cfg = test_config();
    cfg.listener.tls = Some(pki.server_tls(Some(ClientAuth::Required)));
    cfg.input_ports.push(PortConfig {
        allowed_dns: vec!["OU=bench, CN=tidegate-client".into()],
        ..PortConfig::new("mine", "s2s.mine")
    });
    cfg.input_ports.push(PortConfig {
        allowed_dns: vec!["CN=someone-else".into()],
        ..PortConfig::new("theirs", "s2s.theirs")
    });
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.mine").unwrap();
    let srv = start(cfg, hub.clone()).await;
    assert!(
        discover(srv.http, Duration::from_secs(5))
            .await
            .unwrap()
            .secure
    );

    let tls = ClientTls::new(pki.client_config(true).unwrap());
    let opts = ClientOptions::default();
    let id = |n: &str| PortConfig::new(n, "x").resolved_id();
    let mut c = tls
        .connect(srv.raw, Some(&id("mine")), opts.clone())
        .await
        .unwrap();
    let p = DataPacket {
        attributes: vec![],
        content: Bytes::from_static(b"secret"),
    };
    c.send_transaction(std::slice::from_ref(&p)).await.unwrap();
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"secret");

    match tls
        .connect(srv.raw, Some(&id("theirs")), opts.clone())
        .await
    {
        Err(ClientError::Refused(ResponseCode::Unauthorized, msg)) => {
            assert!(msg.contains("not authorized"), "{msg}")
        }
        other => panic!("expected UNAUTHORIZED, got {:?}", other.err()),
    }
    assert_eq!(srv.ports.metrics().error_count("unauthorized"), 1);

    // Plain TCP against the TLS listener fails at the TLS layer.
    let plain = RawClient::connect(
        srv.raw,
        Some(&id("mine")),
        ClientOptions {
            timeout: Duration::from_secs(3),
            ..opts
        },
    )
    .await;
    assert!(plain.is_err());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(srv.ports.metrics().error_count("tls_handshake") >= 1);
}

/// The stock 1.28.1 client over RAW+TLS with a client certificate (PKCS12
/// keystores made from the throw-away PKI with openssl and keytool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_client_sends_over_tls() {
    let pki = TestPki::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ks = dir.path().join("client.p12");
    let ts = dir.path().join("trust.p12");
    let st = std::process::Command::new("openssl")
        .args([
            "pkcs12",
            "-export",
            "-passout",
            "pass:secret",
            "-name",
            "client",
            "-in",
        ])
        .arg(pki.path("client.pem"))
        .arg("-inkey")
        .arg(pki.path("client.key"))
        .arg("-out")
        .arg(&ks)
        .status()
        .expect("openssl is installed");
    assert!(st.success());
    let st = std::process::Command::new("keytool")
        .args([
            "-importcert",
            "-noprompt",
            "-storetype",
            "PKCS12",
            "-storepass",
            "secret",
            "-alias",
            "ca",
            "-file",
        ])
        .arg(pki.path("ca.pem"))
        .arg("-keystore")
        .arg(&ts)
        .status()
        .expect("keytool is installed");
    assert!(st.success());

    let mut cfg = test_config();
    cfg.listener.tls = Some(pki.server_tls(Some(ClientAuth::Required)));
    cfg.input_ports[0].allowed_dns = vec![pki.client_dn.clone()];
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(cfg, hub.clone()).await;
    let url = srv.url();
    let (ks, ts) = (ks.display().to_string(), ts.display().to_string());
    let out = common::java(
        common::Nifi::V1,
        &[
            "send",
            "--url",
            &url,
            "--transport",
            "RAW",
            "--port",
            "input",
            "--sizes",
            "0,5",
            "--tls",
            &ks,
            &ts,
            "secret",
        ],
        Duration::from_secs(90),
    )
    .await;
    assert!(out.iter().any(|v| v["event"] == "complete"), "{out:?}");
    let a = sub.recv().await.unwrap();
    let b = sub.recv().await.unwrap();
    assert_eq!((a.payload.len(), b.payload.len()), (0, 5));
}
