//! The stock npm clients (`socket.io-client`, `engine.io-client`, installed
//! by scripts/setup/push.sh) against the push server, over polling,
//! websocket and the upgrade from one to the other: connect with auth,
//! subscribe (accepted and refused patterns), publish JSON / text / binary
//! and receive each as an event named after its topic, unsubscribe, and a
//! CONNECT_ERROR for an unknown namespace.

mod common;

use common::Server;
use tidegate_push::PushConfig;

/// Runs `peer.js <scenario> <url>` and returns its last output line.
async fn peer(scenario: &str, url: String) -> String {
    common::js_peer(scenario, url, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_io_client_over_polling_websocket_and_upgrade() {
    let s = Server::start(PushConfig::default()).await;
    for (scenario, transport) in [
        ("socketio-polling", "polling"),
        ("socketio-websocket", "websocket"),
        ("socketio-upgrade", "websocket"),
    ] {
        let line = peer(scenario, s.url()).await;
        assert!(
            line.contains(&format!(r#""transport":"{transport}""#))
                && line.contains(r#""events":3"#)
                && line.contains("Invalid namespace"),
            "{scenario}: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_io_client_over_polling_websocket_and_upgrade() {
    let s = Server::start(PushConfig::default()).await;
    for (scenario, transport) in [
        ("engineio-polling", "polling"),
        ("engineio-websocket", "websocket"),
        ("engineio-upgrade", "websocket"),
    ] {
        let line = peer(scenario, s.url()).await;
        assert!(
            line.contains(&format!(r#""transport":"{transport}""#)),
            "{scenario}: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_mode_behaves_like_the_reference_test_servers() {
    let s = Server::start(PushConfig {
        conformance: true,
        ..PushConfig::default()
    })
    .await;
    let line = peer("conformance", s.url()).await;
    assert_eq!(line, r#"{"ok":true}"#);
}
