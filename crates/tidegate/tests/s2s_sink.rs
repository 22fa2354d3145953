//! `[sinks.s2s]` through the `tidegate` binary: one `tidegate serve` takes
//! FlowFiles on its own S2S input port and routes them (`fwd.>` → `s2s`)
//! to a second `tidegate serve` whose `[http]` and `[s2s]` listeners
//! require TLS client certificates; over RAW and over HTTP every FlowFile
//! arrives with its attributes and `tidegate.topic`, and the first
//! server's `TRANSACTION_FINISHED` comes only after the second confirmed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidegate_listener::TestPki;
use tidegate_s2s::client::{discover, ClientOptions, RawClient};
use tidegate_s2s::codec::DataPacket;
use tidegate_s2s::tls::ClientTls;

mod common;

use common::{free_ports, Served};

fn tls_block(section: &str, pki: &TestPki) -> String {
    let p = |n: &str| pki.path(n).display().to_string();
    format!(
        "[{section}.tls]\ncert = {:?}\nkey = {:?}\nclient_ca = {:?}\nclient_auth = \"required\"\n",
        p("server.pem"),
        p("server.key"),
        p("ca.pem")
    )
}

/// The receiver: TLS everywhere, input port `in` → `got`, output port
/// `out` ← `got` (to read back what arrived).
fn receiver(http: SocketAddr, raw: SocketAddr, pki: &TestPki) -> Served {
    common::serve(&format!(
        "[http]\nlisten = \"{http}\"\n{}\
         [wire]\nenabled = false\n[sockperf]\nenabled = false\n[forward]\nenabled = false\n\
         [s2s]\nlisten = \"{raw}\"\nhost = \"127.0.0.1\"\n{}\
         [[s2s.input_ports]]\nname = \"in\"\ntopic = \"got\"\n\
         [[s2s.output_ports]]\nname = \"out\"\ntopic = \"got\"\n",
        tls_block("http", pki),
        tls_block("s2s", pki),
    ))
}

/// The sender: plain S2S input port `src` → `fwd.x`, routed to the sink.
fn sender(
    http: SocketAddr,
    raw: SocketAddr,
    to_http: SocketAddr,
    transport: &str,
    pki: &TestPki,
) -> Served {
    let p = |n: &str| pki.path(n).display().to_string();
    common::serve(&format!(
        "[http]\nlisten = \"{http}\"\n\
         [wire]\nenabled = false\n[sockperf]\nenabled = false\n[forward]\nenabled = false\n\
         [s2s]\nlisten = \"{raw}\"\nhost = \"127.0.0.1\"\n\
         [[s2s.input_ports]]\nname = \"src\"\ntopic = \"fwd.x\"\n\
         [sinks.s2s]\nurl = \"https://127.0.0.1:{}/nifi\"\nport = \"in\"\ntransport = \"{transport}\"\n\
         batch_max_flowfiles = 4\ntimeout_ms = 5000\n\
         [sinks.s2s.tls]\nca = {:?}\ncert = {:?}\nkey = {:?}\n\
         [[routes]]\ntopics = \"fwd.>\"\nsink = \"s2s\"\n",
        to_http.port(),
        p("ca.pem"),
        p("client.pem"),
        p("client.key"),
    ))
}

async fn discovered(addr: SocketAddr, tls: Option<&ClientTls>, served: &mut Served) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tidegate_s2s::client::discover_with(addr, tls, Duration::from_secs(2)).await {
            Ok(d) => return d.input_ports[0].1.clone(),
            Err(e) => {
                assert!(
                    served.child.try_wait().unwrap().is_none(),
                    "tidegate serve exited: {}",
                    served.log()
                );
                assert!(Instant::now() < deadline, "no discovery: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn through_tls(transport: &str) {
    let pki = TestPki::generate().unwrap();
    let tls = ClientTls::new(pki.client_config(true).unwrap());
    // All four picked together: separate picks can return one port twice.
    let [r_http, r_raw, s_http, s_raw] = free_ports();
    let mut recv = receiver(r_http, r_raw, &pki);
    discovered(r_http, Some(&tls), &mut recv).await;
    let mut send = sender(s_http, s_raw, r_http, transport, &pki);
    let src = discovered(s_http, None, &mut send).await;
    assert!(discover(s_http, Duration::from_secs(2)).await.is_ok());

    let mut client = RawClient::connect(s_raw, Some(&src), ClientOptions::default())
        .await
        .unwrap();
    let n_tx = 5;
    let per_tx = 10;
    for tx in 0..n_tx {
        let packets: Vec<DataPacket> = (0..per_tx)
            .map(|i| DataPacket {
                attributes: vec![("id".into(), format!("{tx}-{i}"))],
                content: Bytes::from(format!("content {tx}-{i}")),
            })
            .collect();
        // TRANSACTION_FINISHED: the sink had every FlowFile confirmed.
        client
            .send_transaction(&packets)
            .await
            .unwrap_or_else(|e| panic!("tx {tx}: {e}\n{}", send.log()));
    }

    // Read back from the receiver's output port over RAW + TLS.
    let out = tidegate_s2s::client::discover_with(r_http, Some(&tls), Duration::from_secs(2))
        .await
        .unwrap()
        .output_id("out")
        .unwrap()
        .to_owned();
    let mut reader = tls
        .connect(r_raw, Some(&out), ClientOptions::default())
        .await
        .unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < n_tx * per_tx {
        assert!(Instant::now() < deadline, "only {} arrived", got.len());
        got.extend(reader.receive_transaction().await.unwrap());
    }
    // Exactly once: every id sent, none twice (a count alone would pass one
    // duplicate plus one loss).
    let ids: Vec<String> = got.iter().map(id_of).collect();
    let distinct: BTreeSet<String> = ids.iter().cloned().collect();
    let twice: Vec<&String> = distinct
        .iter()
        .filter(|id| ids.iter().filter(|i| i == id).count() > 1)
        .collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let expected: BTreeSet<String> = (0..n_tx)
        .flat_map(|tx| (0..per_tx).map(move |i| format!("{tx}-{i}")))
        .collect();
    assert_eq!(distinct, expected, "exactly the FlowFiles sent");
    // Nothing more comes late (a redelivery after the count was reached).
    let mut late = Vec::new();
    let drain_until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < drain_until {
        let more = reader.receive_transaction().await.unwrap();
        if more.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        late.extend(more);
    }
    assert!(
        late.is_empty(),
        "{} FlowFiles arrived after all {} (ids {:?})",
        late.len(),
        n_tx * per_tx,
        late.iter().map(id_of).collect::<Vec<_>>()
    );
    for p in &got {
        let attr = |k: &str| {
            p.attributes
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        let id = attr("id").expect("the FlowFile's own attribute");
        assert_eq!(attr("tidegate.topic").as_deref(), Some("fwd.x"));
        assert_eq!(p.content, format!("content {id}").as_bytes());
    }
    let metrics = reqwest_metrics(s_http).await;
    assert!(
        metrics.contains("tidegate_s2s_sink_delivered_total 50"),
        "{metrics}"
    );
}

/// A FlowFile's own `id` attribute.
fn id_of(p: &DataPacket) -> String {
    p.attributes
        .iter()
        .find(|(n, _)| n == "id")
        .map(|(_, v)| v.clone())
        .expect("the FlowFile's own attribute")
}

/// The sender's `/metrics` text.
async fn reqwest_metrics(http: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nhost: {http}\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_sink_over_tls_delivers_to_a_second_tidegate() {
    through_tls("raw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sink_over_tls_delivers_to_a_second_tidegate() {
    through_tls("http").await;
}
