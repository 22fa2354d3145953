//! RAW over TLS with client certificates: discovery says secure, a client
//! with a certificate from the configured CA gets in, the port allow list
//! is checked against the certificate DN, a client without a certificate is
//! refused at the TLS handshake.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{start, test_config};
use tidegate_hub::Hub;
use tidegate_s2s::client::{discover, ClientError, ClientOptions, RawClient};
use tidegate_s2s::codec::{DataPacket, ResponseCode};
use tidegate_s2s::tls::TestPki;
use tidegate_s2s::PortConfig;

#[tokio::test]
async fn client_certificates_and_dn_allow_lists() {
    let pki = TestPki::generate().unwrap();
    let mut cfg = test_config();
    cfg.tls = Some(pki.server_config());
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

    let tls = pki.client().unwrap();
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
