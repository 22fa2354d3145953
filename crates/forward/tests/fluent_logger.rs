//! The stock `fluent-logger` Python client (PyPI; installed by
//! scripts/setup/forward.sh) sends Message mode with nanosecond EventTime to
//! an in-process server: every record arrives on a hub subscriber, exact.

mod common;

use std::process::Command;

use common::*;
use tidegate_forward::ForwardConfig;
use tidegate_hub::Hub;

const COUNT: usize = 300;
const BASE_NS: u64 = 1_700_000_000_123_456_789;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fluent_logger_message_mode_with_nanoseconds_delivers_every_record() {
    let hub = Hub::default();
    let mut sub = subscribe(&hub, "logs.py.>", COUNT * 2);
    let srv = start(hub, ForwardConfig::default()).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/fluent_logger_send.py"
    );
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let port = srv.addr.port().to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args([
                script,
                "127.0.0.1",
                &port,
                &COUNT.to_string(),
                &BASE_NS.to_string(),
            ])
            .output()
    })
    .await
    .unwrap()
    .expect("python3 must be installed (scripts/setup/forward.sh)");
    assert!(
        out.status.success(),
        "fluent-logger script failed (run scripts/setup/forward.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = recv_n(&mut sub, COUNT).await;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.topic, "logs.py.test");
        assert_eq!(m.timestamp_ns, BASE_NS + i as u64, "record {i}");
        assert_eq!(
            json_of(m),
            serde_json::json!({"i": i, "msg": format!("hello {i}"), "nested": {"ok": true}})
        );
    }
}
