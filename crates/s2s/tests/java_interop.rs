//! The stock NiFi Site-to-Site client (1.28.1 on Java 17, 2.6.0 on Java
//! 21+) against Tidegate over RAW and HTTP: FlowFiles of 0 B, 1 B and 1 MiB
//! with attributes arrive intact on the hub exactly once per completed
//! transaction; output ports deliver to the client; cancel and a wrong port
//! name are handled as NiFi does.

mod common;

use std::time::Duration;

use common::{content, java, start, test_config, Nifi};
use tidegate_hub::{Hub, Message, SharedMessage, SubscriberOptions};

const T: Duration = Duration::from_secs(90);

async fn send_case(version: Nifi, transport: &str, compress: bool) {
    let hub = Hub::default();
    let mut sub = hub.subscriber(SubscriberOptions {
        capacity: 100_000,
        ..Default::default()
    });
    sub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let url = srv.url();
    let mut args = vec![
        "send",
        "--url",
        &url,
        "--transport",
        transport,
        "--port",
        "input",
        "--sizes",
        "0,1,1048576",
        "--tx",
        "3",
    ];
    if compress {
        args.push("--compress");
    }
    let out = java(version, &args, T).await;
    let completes: Vec<_> = out.iter().filter(|v| v["event"] == "complete").collect();
    assert_eq!(completes.len(), 3, "{out:?}");
    for c in &completes {
        assert_eq!(c["flowFiles"], 3, "{c}");
    }
    let mut got: Vec<SharedMessage> = Vec::new();
    while got.len() < 9 {
        tokio::time::timeout(Duration::from_secs(10), sub.recv_many(&mut got, 100))
            .await
            .expect("all FlowFiles on the hub")
            .unwrap();
    }
    assert!(sub.is_empty(), "exactly once");
    got.sort_by_key(|m| m.attribute("i").unwrap().parse::<usize>().unwrap());
    let sizes = [0usize, 1, 1 << 20];
    for (i, m) in got.iter().enumerate() {
        let m: &Message = m;
        assert_eq!(m.topic, "s2s.input");
        assert_eq!(m.attribute("i"), Some(i.to_string().as_str()));
        assert_eq!(m.attribute("tx"), Some((i / 3).to_string().as_str()));
        assert_eq!(m.attribute("unicode"), Some("héllo ☃ 😀"));
        assert_eq!(
            &m.payload[..],
            &content(i, sizes[i % 3])[..],
            "content of FlowFile {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_raw_sends_flowfiles_intact() {
    send_case(Nifi::V1, "RAW", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_raw_compressed_sends_flowfiles_intact() {
    send_case(Nifi::V1, "RAW", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_http_sends_flowfiles_intact() {
    send_case(Nifi::V1, "HTTP", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_raw_sends_flowfiles_intact() {
    send_case(Nifi::V2, "RAW", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_http_compressed_sends_flowfiles_intact() {
    send_case(Nifi::V2, "HTTP", true).await;
}

async fn receive_case(version: Nifi, transport: &str, compress: bool) {
    let hub = Hub::default();
    let srv = start(test_config(), hub.clone()).await;
    let sizes = [0usize, 1, 1 << 20, 7];
    for (i, size) in sizes.iter().enumerate() {
        let m = Message::new("s2s.output", content(i, *size))
            .with_attribute("i", i.to_string())
            .with_attribute("kind", "out");
        hub.publish(m).await.unwrap();
    }
    let url = srv.url();
    let mut args = vec![
        "receive",
        "--url",
        &url,
        "--transport",
        transport,
        "--port",
        "output",
        "--expect",
        "4",
    ];
    if compress {
        args.push("--compress");
    }
    let out = java(version, &args, T).await;
    let files: Vec<_> = out.iter().filter(|v| v["event"] == "flowfile").collect();
    assert_eq!(files.len(), 4, "{out:?}");
    for f in files {
        let i: usize = f["attributes"]["i"].as_str().unwrap().parse().unwrap();
        assert_eq!(f["attributes"]["kind"], "out");
        assert_eq!(f["size"], sizes[i]);
        let want = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(content(i, sizes[i])));
        assert_eq!(f["sha256"], want.as_str(), "content of FlowFile {i}");
    }
    // Committed: nothing is left to redeliver.
    assert!(srv.ports.outputs()[0].is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_raw_receives_from_an_output_port() {
    receive_case(Nifi::V1, "RAW", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_http_receives_from_an_output_port() {
    receive_case(Nifi::V1, "HTTP", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_raw_compressed_receives_from_an_output_port() {
    receive_case(Nifi::V2, "RAW", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_http_receives_from_an_output_port() {
    receive_case(Nifi::V2, "HTTP", false).await;
}

async fn cancel_case(version: Nifi, transport: &str) {
    let hub = Hub::default();
    let sub = hub.subscribe("s2s.input").unwrap();
    let srv = start(test_config(), hub.clone()).await;
    let url = srv.url();
    let out = java(
        version,
        &[
            "cancel",
            "--url",
            &url,
            "--transport",
            transport,
            "--port",
            "input",
        ],
        T,
    )
    .await;
    assert!(out.iter().any(|v| v["event"] == "cancelled"), "{out:?}");
    assert!(out.iter().any(|v| v["event"] == "complete"), "{out:?}");
    let m = tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        m.attribute("after"),
        Some("cancel"),
        "the cancelled FlowFile must not arrive"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(sub.is_empty());
    assert_eq!(srv.ports.metrics().error_count("client_cancel"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_raw_cancel_rolls_back() {
    cancel_case(Nifi::V1, "RAW").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_http_cancel_rolls_back() {
    cancel_case(Nifi::V1, "HTTP").await;
}

async fn wrong_port_case(version: Nifi, transport: &str) {
    let hub = Hub::default();
    let srv = start(test_config(), hub.clone()).await;
    let url = srv.url();
    let out = java(
        version,
        &[
            "send",
            "--url",
            &url,
            "--transport",
            transport,
            "--port-id",
            "no-such-port",
            "--sizes",
            "1",
            "--timeout-ms",
            "5000",
        ],
        T,
    )
    .await;
    assert!(!out.iter().any(|v| v["event"] == "complete"), "{out:?}");
    assert!(out.iter().any(|v| v["event"] == "error"), "{out:?}");
    assert!(
        srv.ports.metrics().error_count("unknown_port") >= 1,
        "the server saw the unknown port"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_raw_wrong_port_is_refused() {
    wrong_port_case(Nifi::V1, "RAW").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_http_wrong_port_is_refused() {
    wrong_port_case(Nifi::V1, "HTTP").await;
}
