//! TLS of the RAW listener through the listener core's `tls` block: with
//! `client_ca` and `client_auth = "required"` (NiFi's secure Site-to-Site) a
//! client without a certificate is refused at the handshake; with
//! `"optional"` it is served on ports without a DN list only; a missing
//! file stops `bind` with the section, key and path; discovery says
//! `siteToSiteSecure` exactly when the RAW listener serves TLS (or, without
//! a RAW listener, when `[http]` does), and the HTTP transport's peer list
//! says `secure` exactly when `[http]` serves TLS.

mod common;

use std::time::Duration;

use common::{flowfile, port_id, start, test_config, wait_until};
use tidegate_hub::Hub;
use tidegate_listener::{ClientAuth, TestPki};
use tidegate_s2s::client::{discover, ClientError, ClientOptions};
use tidegate_s2s::codec::ResponseCode;
use tidegate_s2s::tls::ClientTls;
use tidegate_s2s::{PortConfig, S2sPorts, S2sServer};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(5);

fn opts() -> ClientOptions {
    ClientOptions {
        timeout: LIMIT,
        ..Default::default()
    }
}

#[tokio::test]
async fn without_a_client_certificate_a_required_listener_refuses_the_handshake() {
    let pki = TestPki::generate().unwrap();
    let mut cfg = test_config();
    cfg.listener.tls = Some(pki.server_tls(Some(ClientAuth::Required)));
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(cfg, hub.clone()).await;
    let metrics = srv.ports.metrics().clone();

    let anonymous = ClientTls::new(pki.client_config(false).unwrap());
    let refused = anonymous
        .connect(srv.raw, Some(&port_id("input")), opts())
        .await;
    assert!(refused.is_err(), "served without a client certificate");
    wait_until("handshake failure counted", LIMIT, || {
        metrics.error_count("tls_handshake") == 1
    })
    .await;

    let known = ClientTls::new(pki.client_config(true).unwrap());
    let mut c = known
        .connect(srv.raw, Some(&port_id("input")), opts())
        .await
        .unwrap();
    c.send_transaction(&[flowfile(b"ok")]).await.unwrap();
    assert_eq!(&sub.recv().await.unwrap().payload[..], b"ok");
}

#[tokio::test]
async fn optional_client_auth_serves_anonymous_clients_on_open_ports_only() {
    let pki = TestPki::generate().unwrap();
    let mut cfg = test_config();
    cfg.listener.tls = Some(pki.server_tls(Some(ClientAuth::Optional)));
    cfg.input_ports.push(PortConfig {
        allowed_dns: vec![pki.client_dn.clone()],
        ..PortConfig::new("mine", "s2s.mine")
    });
    let hub = Hub::default();
    let open = hub.subscribe("s2s.input").unwrap();
    let srv = start(cfg, hub.clone()).await;

    let anonymous = ClientTls::new(pki.client_config(false).unwrap());
    let mut c = anonymous
        .connect(srv.raw, Some(&port_id("input")), opts())
        .await
        .unwrap();
    c.send_transaction(&[flowfile(b"open")]).await.unwrap();
    assert_eq!(&open.recv().await.unwrap().payload[..], b"open");
    match anonymous
        .connect(srv.raw, Some(&port_id("mine")), opts())
        .await
    {
        Err(ClientError::Refused(ResponseCode::Unauthorized, msg)) => {
            assert!(msg.contains("requires a client certificate"), "{msg}")
        }
        other => panic!("expected UNAUTHORIZED, got {:?}", other.err()),
    }

    let known = ClientTls::new(pki.client_config(true).unwrap());
    known
        .connect(srv.raw, Some(&port_id("mine")), opts())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_missing_tls_file_stops_bind_naming_section_key_and_path() {
    let pki = TestPki::generate().unwrap();
    let mut cfg = test_config();
    let mut tls = pki.server_tls(Some(ClientAuth::Required));
    tls.client_ca = Some("/nonexistent/ca.pem".into());
    cfg.listener.tls = Some(tls);
    let e = S2sServer::bind(cfg).unwrap_err().to_string();
    for part in ["[s2s]", "tls.client_ca", "/nonexistent/ca.pem"] {
        assert!(e.contains(part), "{part} missing from: {e}");
    }
}

/// Discovery (and the RAW peer list) as served with `config`, advertising
/// the RAW listener only when `with_raw`.
async fn secure_flags(
    pki: &TestPki,
    tls: bool,
    with_raw: bool,
    http_tls: bool,
) -> (bool, Option<bool>, bool) {
    let mut cfg = test_config();
    if tls {
        cfg.listener.tls = Some(pki.server_tls(Some(ClientAuth::Required)));
    }
    cfg.listener.enabled = with_raw;
    let hub = Hub::default();
    let ports = S2sPorts::new(cfg.clone(), hub.clone()).unwrap();
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let raw = if with_raw {
        let server = S2sServer::bind(cfg).unwrap().with_ports(ports.clone());
        let addr = server.local_addr();
        tokio::spawn(server.run(hub.clone(), shutdown.clone()));
        Some(addr)
    } else {
        None
    };
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr = http.local_addr().unwrap();
    let router = tidegate_s2s::http::router_with_ports(
        ports,
        http_addr.port(),
        http_tls,
        raw.map(|a| a.port()),
    );
    let sd = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(http, router)
            .with_graceful_shutdown(async move { sd.cancelled().await })
            .await
    });
    let advertised = discover(http_addr, LIMIT).await.unwrap().secure;
    let peer_list = match raw {
        None => None,
        Some(addr) => {
            let peers = if tls {
                let c = ClientTls::new(pki.client_config(true).unwrap());
                c.connect(addr, None, opts())
                    .await
                    .unwrap()
                    .peer_list()
                    .await
            } else {
                tidegate_s2s::client::RawClient::connect(addr, None, opts())
                    .await
                    .unwrap()
                    .peer_list()
                    .await
            };
            Some(peers.unwrap()[0].secure)
        }
    };
    (advertised, peer_list, http_peers_secure(http_addr).await)
}

/// The `secure` flag of the HTTP transport's peer list.
async fn http_peers_secure(addr: std::net::SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /nifi-api/site-to-site/peers HTTP/1.1\r\nhost: x\r\n\
          x-nifi-site-to-site-protocol-version: 1\r\nconnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).await.unwrap();
    let body = &response[response.find("\r\n\r\n").expect("a response") + 4..];
    let v: serde_json::Value = serde_json::from_str(body).expect(&response);
    v["peers"][0]["secure"].as_bool().expect(&response)
}

#[tokio::test]
async fn site_to_site_secure_follows_the_raw_listeners_tls() {
    let pki = TestPki::generate().unwrap();
    let f = |tls, raw, http_tls| secure_flags(&pki, tls, raw, http_tls);
    assert_eq!(f(true, true, false).await, (true, Some(true), false));
    assert_eq!(f(false, true, false).await, (false, Some(false), false));
    // TLS configured but no RAW listener: the HTTP transport is plain.
    assert_eq!(f(true, false, false).await, (false, None, false));
    // `[http]` with TLS: its peer list says so (a client then uses https),
    // and without a RAW listener so does discovery; a plain RAW listener
    // beside it keeps discovery's flag off (RAW clients read it).
    assert_eq!(f(false, false, true).await, (true, None, true));
    assert_eq!(f(false, true, true).await, (false, Some(false), true));
}
