//! Helpers shared by the integration tests: an in-process server on a free
//! port, records, and draining a hub subscriber.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tidegate_forward::codec::encode::record_from_json;
use tidegate_forward::{ForwardConfig, ForwardServer};
use tidegate_hub::{Hub, OverflowPolicy, SharedMessage, Subscriber, SubscriberOptions};
use tokio_util::sync::CancellationToken;

/// A running server; cancelled on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    pub hub: Hub,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts a server on 127.0.0.1:0 with `config` (its `listen` is replaced).
pub async fn start(hub: Hub, mut config: ForwardConfig) -> TestServer {
    config.listener.listen = "127.0.0.1:0".parse().unwrap();
    let server = ForwardServer::bind(config).expect("bind");
    let addr = server.local_addr();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server.run(hub.clone(), shutdown.clone()));
    TestServer {
        addr,
        hub,
        shutdown,
        task,
    }
}

/// A subscriber on `pattern` with room for `capacity` messages.
pub fn subscribe(hub: &Hub, pattern: &str, capacity: usize) -> Subscriber {
    let mut s = hub.subscriber(SubscriberOptions {
        capacity,
        overflow: OverflowPolicy::Disconnect,
    });
    s.subscribe(pattern).unwrap();
    s
}

/// Receives exactly `n` messages (or panics after 10 s).
pub async fn recv_n(sub: &mut Subscriber, n: usize) -> Vec<SharedMessage> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        let mut batch = Vec::new();
        match tokio::time::timeout_at(deadline, sub.recv_many(&mut batch, n - got.len())).await {
            Ok(Ok(_)) => got.extend(batch),
            Ok(Err(e)) => panic!("subscriber failed: {e}"),
            Err(_) => panic!("only {} of {n} messages arrived", got.len()),
        }
    }
    got
}

/// The msgpack record `{"i": i, "msg": "line <i>"}`.
pub fn record(i: usize) -> Vec<u8> {
    record_from_json(&serde_json::json!({"i": i, "msg": format!("line {i}")}))
}

/// The JSON a payload holds.
pub fn json_of(m: &SharedMessage) -> serde_json::Value {
    serde_json::from_slice(&m.payload).expect("payload is JSON")
}
