//! Cluster mode end to end: a real Kafka broker (started here) as the
//! backbone, two `tidegate serve` processes, and a stock `socket.io-client`
//! subscriber on each. Messages published on either node with
//! `POST /v1/publish` reach the subscribers of both nodes exactly once and
//! in order — the publishing node's own subscribers from the Kafka record
//! too — while the Kafka sink both nodes route to gets each message once;
//! `tidegate cluster status` lists both nodes. With the broker down,
//! publishes are held in the bounded producer queue and all arrive, in
//! order, once it returns.
//!
//! Peers: scripts/setup/kafka.sh (broker), scripts/setup/push.sh
//! (socket.io-client).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{free_addr, serve, Served};
use tidegate_kafka::testing::{record_count, TestBroker};

fn push_js() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../push/tests/js")
}

fn wait_port(addr: SocketAddr, served: &Served) {
    for _ in 0..300 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{addr} never listened; log:\n{}", served.log());
}

/// One HTTP/1.1 request; returns the status line and the body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.lines().next().unwrap_or_default().to_owned();
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or_default();
    (status, body.to_owned())
}

fn publish(addr: SocketAddr, topic: &str, body: &str) {
    let (status, text) = http(
        addr,
        "POST",
        &format!("/v1/publish?topic={topic}"),
        body.as_bytes(),
    );
    assert!(
        status.contains(" 200"),
        "publish on {addr}: {status} {text}"
    );
}

/// A metric's value from `/metrics` (0 when absent).
fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (_, body) = http(addr, "GET", "/metrics", b"");
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A node of the cluster: `tidegate serve` with only `[http]`, the
/// backbone, and a Kafka sink for `news.>`.
fn node(name: &str, bootstrap: &str) -> (Served, SocketAddr) {
    node_on(name, bootstrap, "cluster-test")
}

/// [`node`] with its own backbone topic (`topic`) and sink topic
/// (`<topic>-out`), for tests sharing a broker.
fn node_on(name: &str, bootstrap: &str, topic: &str) -> (Served, SocketAddr) {
    node_with(name, bootstrap, topic, "")
}

/// [`node_on`] with more `[cluster]` keys (`extra`).
fn node_with(name: &str, bootstrap: &str, topic: &str, extra: &str) -> (Served, SocketAddr) {
    let http = free_addr();
    let served = serve(&format!(
        "[http]\nlisten = \"{http}\"\n[wire]\nenabled = false\n[sockperf]\nenabled = false\n\
         [forward]\nenabled = false\n[s2s]\nenabled = false\n\
         [cluster]\nbackbone = \"kafka\"\nbrokers = \"{bootstrap}\"\ntopic = \"{topic}\"\n\
         node = \"{name}\"\npartitions = 4\n{extra}\n\
         [sinks.kafka]\nbrokers = \"{bootstrap}\"\ntopic = \"{topic}-out\"\nlinger_ms = 5\n\
         [[routes]]\ntopics = \"news.>\"\nsink = \"kafka\"\n"
    ));
    wait_port(http, &served);
    (served, http)
}

/// A socket.io-client subscriber; its lines arrive on `lines`.
struct Subscriber {
    child: Child,
    _stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn subscriber(http: SocketAddr, pattern: &str) -> Subscriber {
    assert!(
        push_js().join("node_modules/socket.io-client").is_dir(),
        "npm peers missing: run bash scripts/setup/push.sh"
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/js/cluster_subscriber.js");
    let mut child = Command::new("node")
        .arg(script)
        .arg(format!("http://{http}"))
        .arg(pattern)
        .env("NODE_PATH", push_js().join("node_modules"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node (scripts/setup/push.sh)");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let stdin = child.stdin.take().unwrap();
    let ready = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
    assert_eq!(ready, "READY", "the subscriber on {http} did not get ready");
    Subscriber {
        child,
        _stdin: stdin,
        lines: rx,
    }
}

impl Subscriber {
    /// Every event received within `wait`, as (event, payload).
    fn drain(&self, wait: Duration) -> Vec<(String, serde_json::Value)> {
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let v: serde_json::Value =
                        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"));
                    assert!(v.get("error").is_none(), "subscriber failed: {v}");
                    out.push((
                        v["event"].as_str().unwrap().to_owned(),
                        v["payload"].clone(),
                    ));
                }
                Err(_) => break,
            }
        }
        out
    }
}

/// The `i` of every event on `topic`, in arrival order.
fn sequence(events: &[(String, serde_json::Value)], topic: &str) -> Vec<u64> {
    events
        .iter()
        .filter(|(e, _)| e == topic)
        .map(|(_, p)| p["i"].as_u64().unwrap())
        .collect()
}

/// Waits until every node of `nodes` reads the backbone's 4 partitions.
fn wait_until_reading(nodes: &[(&Served, SocketAddr)]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for (n, http) in nodes {
        while metric(*http, "tidegate_cluster_partitions") < 4.0 {
            assert!(
                Instant::now() < deadline,
                "no backbone reader; log:\n{}",
                n.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Waits until both nodes read the backbone, connects a subscriber to
/// `news.>` on each, and publishes warm-ups until both see one (readers
/// start at the end of the backbone, which they resolve on their first
/// fetch); the warm-ups are drained.
fn ready_cluster(nodes: &[(&Served, SocketAddr); 2]) -> (Subscriber, Subscriber) {
    wait_until_reading(nodes);
    let subs = (
        subscriber(nodes[0].1, "news.>"),
        subscriber(nodes[1].1, "news.>"),
    );
    let mut warm = [false, false];
    for attempt in 0.. {
        assert!(attempt < 60, "no warm-up message crossed the cluster");
        publish(nodes[0].1, "news.warm", "{\"i\":0}");
        for (i, s) in [&subs.0, &subs.1].into_iter().enumerate() {
            if !s.drain(Duration::from_millis(300)).is_empty() {
                warm[i] = true;
            }
        }
        if warm == [true, true] {
            break;
        }
    }
    // Let warm-ups still in flight arrive, and forget them.
    subs.0.drain(Duration::from_millis(1000));
    subs.1.drain(Duration::from_millis(1000));
    subs
}

/// Receives on `s` until `topic` has `n` events or `wait` passed, then a
/// second more (anything more would be a duplicate); returns their `i`s.
fn receive_sequence(s: &Subscriber, topic: &str, n: usize, wait: Duration) -> Vec<u64> {
    let mut events = Vec::new();
    let deadline = Instant::now() + wait;
    while sequence(&events, topic).len() < n && Instant::now() < deadline {
        events.extend(s.drain(Duration::from_millis(300)));
    }
    events.extend(s.drain(Duration::from_millis(1000)));
    sequence(&events, topic)
}

#[test]
fn a_message_published_on_one_node_reaches_subscribers_on_every_node_once_in_order() {
    let broker = TestBroker::shared().expect("start the test broker (scripts/setup/kafka.sh)");
    let bootstrap = broker.bootstrap();
    let (a, http_a) = node("node-a", &bootstrap);
    let (b, http_b) = node("node-b", &bootstrap);
    let (sub_a, sub_b) = ready_cluster(&[(&a, http_a), (&b, http_b)]);
    let sink_before = record_count(&bootstrap, "cluster-test-out").unwrap();

    let n = 100u64;
    for i in 0..n {
        publish(http_a, "news.from-a", &format!("{{\"i\":{i}}}"));
        publish(http_b, "news.from-b", &format!("{{\"i\":{i}}}"));
    }
    let want: Vec<u64> = (0..n).collect();
    for (name, s, served) in [("A", &sub_a, &a), ("B", &sub_b, &b)] {
        let mut events = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while (sequence(&events, "news.from-a").len() < n as usize
            || sequence(&events, "news.from-b").len() < n as usize)
            && Instant::now() < deadline
        {
            events.extend(s.drain(Duration::from_millis(300)));
        }
        // Anything more would be a duplicate.
        events.extend(s.drain(Duration::from_millis(1000)));
        for topic in ["news.from-a", "news.from-b"] {
            assert_eq!(
                sequence(&events, topic),
                want,
                "node {name}: {topic} exactly once, in order; log:\n{}",
                served.log()
            );
        }
    }

    // Sinks see each message once: on the node where it was published.
    let deadline = Instant::now() + Duration::from_secs(20);
    let expected = sink_before + 2 * n;
    let mut count = 0;
    while Instant::now() < deadline {
        count = record_count(&bootstrap, "cluster-test-out").unwrap();
        if count >= expected {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    count = count.max(record_count(&bootstrap, "cluster-test-out").unwrap());
    assert_eq!(count, expected, "the routed sink got every message once");
    assert!(metric(http_a, "tidegate_cluster_received_own_total") >= n as f64);
    // The dashboard's $sys.stats lists the backbone with the sinks.
    let stats = subscriber(http_b, "$sys.stats");
    let report = stats
        .drain(Duration::from_secs(3))
        .into_iter()
        .find(|(e, _)| e == "$sys.stats")
        .expect("a $sys.stats report")
        .1;
    let names: Vec<&str> = report["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"cluster"), "{report}");
    assert!(metric(http_b, "tidegate_cluster_nodes_seen") >= 2.0);
    // …and the reader's side in its own section.
    let cluster = &report["cluster"];
    assert_eq!(cluster["node"], "node-b", "{report}");
    assert_eq!(cluster["partitions"], 4, "{report}");
    assert!(cluster["nodes_seen"].as_i64().unwrap() >= 2, "{report}");
    for rate in [
        "produced_per_s",
        "received_per_s",
        "received_from_others_per_s",
    ] {
        assert!(cluster[rate].is_number(), "{rate}: {report}");
    }

    // `tidegate cluster status` lists both nodes from their heartbeats.
    let out = Command::new(common::EXE)
        .args(["cluster", "status", "--json", "--config"])
        .arg(a.dir.path().join("tidegate.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        status["partitions"].as_array().unwrap().len(),
        4,
        "{status}"
    );
    let nodes: Vec<&str> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["heartbeat"]["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["node-a", "node-b"], "{status}");
    assert!(
        status["nodes"][0]["heartbeat"]["partitions"] == 4,
        "{status}"
    );
}

#[test]
fn with_the_broker_down_publishes_are_held_and_delivered_in_order_when_it_returns() {
    let mut broker = TestBroker::start().expect("start a test broker (scripts/setup/kafka.sh)");
    let bootstrap = broker.bootstrap();
    let (a, http_a) = node("node-a", &bootstrap);
    let (b, http_b) = node("node-b", &bootstrap);
    let (sub_a, sub_b) = ready_cluster(&[(&a, http_a), (&b, http_b)]);

    let produced = metric(http_a, "tidegate_cluster_produced_total");
    let records = metric(http_a, "tidegate_cluster_records_produced_total");
    broker.stop();
    let n = 50u64;
    for i in 0..n {
        // Accepted: held in the bounded backbone producer queue.
        publish(http_a, "news.outage", &format!("{{\"i\":{i}}}"));
    }
    assert!(
        sequence(&sub_b.drain(Duration::from_secs(2)), "news.outage").is_empty(),
        "nothing crosses the cluster without its broker"
    );
    // Every message is in a bundle the producer holds, none acknowledged.
    assert_eq!(
        metric(http_a, "tidegate_cluster_produced_total") - produced,
        n as f64
    );
    let held = metric(http_a, "tidegate_cluster_produce_in_flight");
    assert!(held >= 1.0 && held <= n as f64, "{held} records in flight");
    assert_eq!(
        metric(http_a, "tidegate_cluster_records_produced_total") - records,
        held
    );

    broker.restart().expect("restart the broker");
    let want: Vec<u64> = (0..n).collect();
    for (name, s, served) in [("A", &sub_a, &a), ("B", &sub_b, &b)] {
        assert_eq!(
            receive_sequence(s, "news.outage", n as usize, Duration::from_secs(60)),
            want,
            "node {name}: every message held during the outage, once, in order; log:\n{}",
            served.log()
        );
    }
    assert_eq!(metric(http_a, "tidegate_cluster_produce_failed_total"), 0.0);
}

/// A `/ws` client that keeps its position in the cluster's history.
struct WsClient {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    /// Per backbone partition, the next offset not received.
    positions: serde_json::Map<String, serde_json::Value>,
    /// (topic, i) of every message, in arrival order.
    got: Vec<(String, u64)>,
}

impl WsClient {
    async fn connect(http: SocketAddr) -> WsClient {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/ws"))
            .await
            .expect("a /ws connection");
        WsClient {
            ws,
            positions: serde_json::Map::new(),
            got: Vec::new(),
        }
    }

    async fn send(&mut self, v: serde_json::Value) {
        use futures::SinkExt;
        self.ws
            .send(tokio_tungstenite::tungstenite::Message::text(v.to_string()))
            .await
            .unwrap();
    }

    /// Reads frames for `wait`, or until a frame with `"op": until`
    /// arrives (returned).
    async fn read(&mut self, wait: Duration, until: Option<&str>) -> Option<serde_json::Value> {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()??;
            let text = match frame.ok()? {
                tokio_tungstenite::tungstenite::Message::Text(t) => t.to_string(),
                _ => continue,
            };
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_ne!(v["op"], "error", "{v}");
            if v["op"] == "message" {
                let (p, o) = (v["pos"][0].as_i64().unwrap(), v["pos"][1].as_i64().unwrap());
                self.positions.insert(p.to_string(), (o + 1).into());
                self.got.push((
                    v["topic"].as_str().unwrap().to_owned(),
                    v["payload"]["i"].as_u64().unwrap_or(0),
                ));
            }
            if until.is_some_and(|u| v["op"] == u) {
                return Some(v);
            }
        }
    }

    fn sequence(&self, topic: &str) -> Vec<u64> {
        self.got
            .iter()
            .filter(|(t, _)| t == topic)
            .map(|(_, i)| *i)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_client_that_loses_its_node_recovers_what_it_missed_on_another() {
    let broker = TestBroker::shared().expect("start the test broker (scripts/setup/kafka.sh)");
    let bootstrap = broker.bootstrap();
    let topic = "cluster-recovery";
    let (a, http_a) = node_on("rec-a", &bootstrap, topic);
    let (mut b, http_b) = node_on("rec-b", &bootstrap, topic);
    let (c, http_c) = node_on("rec-c", &bootstrap, topic);
    wait_until_reading(&[(&a, http_a), (&b, http_b), (&c, http_c)]);

    // On node B: subscribe, asking where in the history it starts.
    let mut client = WsClient::connect(http_b).await;
    client
        .send(serde_json::json!({"op": "subscribe", "patterns": ["news.>"], "positions": true}))
        .await;
    let sub = client
        .read(Duration::from_secs(10), Some("subscribed"))
        .await
        .unwrap();
    client.positions = sub["positions"].as_object().cloned().expect("positions");
    assert_eq!(client.positions.len(), 4, "{sub}");
    // Readers start at the end of the backbone on their first fetch.
    for attempt in 0.. {
        assert!(attempt < 60, "no warm-up reached node B; log:\n{}", b.log());
        publish(http_a, "news.warm", "{\"i\":0}");
        client.read(Duration::from_millis(300), None).await;
        if !client.got.is_empty() {
            break;
        }
    }
    for i in 0..10 {
        publish(http_a, "news.r", &format!("{{\"i\":{i}}}"));
    }
    while client.sequence("news.r").len() < 10 {
        assert!(
            client
                .read(Duration::from_secs(10), Some("message"))
                .await
                .is_some(),
            "node B delivered {:?}",
            client.sequence("news.r")
        );
    }
    assert_eq!(client.sequence("news.r"), (0..10).collect::<Vec<_>>());

    // Node B dies; what is published meanwhile is missed.
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    for i in 10..20 {
        publish(http_a, "news.r", &format!("{{\"i\":{i}}}"));
    }

    // The client comes back on node C with its positions.
    let from = serde_json::Value::Object(client.positions.clone());
    let mut again = WsClient::connect(http_c).await;
    again.positions = client.positions.clone();
    again
        .send(serde_json::json!({"op": "subscribe", "patterns": ["news.>"], "from": from}))
        .await;
    let sub = again
        .read(Duration::from_secs(40), Some("subscribed"))
        .await
        .unwrap_or_else(|| panic!("no subscribe answer; log:\n{}", c.log()));
    assert!(sub.get("cluster_error").is_none(), "{sub}");
    for i in 20..25 {
        publish(http_a, "news.r", &format!("{{\"i\":{i}}}"));
    }
    while again.sequence("news.r").len() < 15 {
        if again
            .read(Duration::from_secs(10), Some("message"))
            .await
            .is_none()
        {
            break;
        }
    }
    // Anything more would be a duplicate.
    again.read(Duration::from_secs(1), None).await;
    assert_eq!(
        again.sequence("news.r"),
        (10..25).collect::<Vec<_>>(),
        "missed messages replayed from the backbone, then live ones, each once, in order; {sub}; log:\n{}",
        c.log()
    );
    assert!(sub["recovered"].as_u64().unwrap() >= 10, "{sub}");
}

#[test]
fn what_a_stopping_node_still_holds_in_bundles_reaches_the_other_nodes() {
    let broker = TestBroker::shared().expect("start the test broker (scripts/setup/kafka.sh)");
    let bootstrap = broker.bootstrap();
    // A long bundle linger: under a stream, messages wait in the bundler
    // for up to a second, so the stop finds some there.
    let linger = "bundle_linger_ms = 1000";
    let (mut a, http_a) = node_with("node-a", &bootstrap, "cluster-stop-test", linger);
    let (b, http_b) = node_with("node-b", &bootstrap, "cluster-stop-test", linger);
    let (_sub_a, sub_b) = ready_cluster(&[(&a, http_a), (&b, http_b)]);
    let n = 30u64;
    for i in 0..n {
        publish(http_a, "news.stop", &format!("{{\"i\":{i}}}"));
    }
    let st = std::process::Command::new("kill")
        .args(["-TERM", &a.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = a.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "node A did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{}", a.log());
    let want: Vec<u64> = (0..n).collect();
    assert_eq!(
        receive_sequence(&sub_b, "news.stop", n as usize, Duration::from_secs(30)),
        want,
        "everything node A accepted before it stopped reaches node B, once, in order; A's log:\n{}",
        a.log()
    );
}

/// A load balancer without sticky sessions, as a test sees one: every new
/// connection goes to the node it points at now.
struct Balancer {
    addr: SocketAddr,
    target: std::sync::Arc<std::sync::Mutex<SocketAddr>>,
    /// The client side of every connection it proxied.
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Balancer {
    fn to(target: SocketAddr) -> Balancer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let target = std::sync::Arc::new(std::sync::Mutex::new(target));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (now, opened) = (target.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let to = *now.lock().unwrap();
                if let Ok(c) = client.try_clone() {
                    opened.lock().unwrap().push(c);
                }
                std::thread::spawn(move || {
                    let Ok(node) = std::net::TcpStream::connect(to) else {
                        return;
                    };
                    let (mut c2, mut n2) = (client.try_clone().unwrap(), node.try_clone().unwrap());
                    let (mut client, mut node) = (client, node);
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut c2, &mut n2);
                        let _ = n2.shutdown(std::net::Shutdown::Both);
                    });
                    let _ = std::io::copy(&mut node, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Balancer { addr, target, open }
    }

    fn point_at(&self, node: SocketAddr) {
        *self.target.lock().unwrap() = node;
    }

    /// Cuts every connection it proxies (a network blip: the node lives on).
    fn cut(&self) {
        for c in self.open.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[test]
fn a_socketio_client_that_loses_its_node_recovers_what_it_missed_on_another() {
    let broker = TestBroker::shared().expect("start the test broker (scripts/setup/kafka.sh)");
    let bootstrap = broker.bootstrap();
    let topic = "cluster-sio-recovery";
    let push = "[push]\nrecovery_window_ms = 60000\n";
    let (a, http_a) = node_with("sio-a", &bootstrap, topic, push);
    let (mut b, http_b) = node_with("sio-b", &bootstrap, topic, push);
    let (c, http_c) = node_with("sio-c", &bootstrap, topic, push);
    wait_until_reading(&[(&a, http_a), (&b, http_b), (&c, http_c)]);

    // A stock socket.io-client, behind the balancer, served by node B.
    let balancer = Balancer::to(http_b);
    let client = recovering_client(&balancer);
    let mut got: Vec<serde_json::Value> = Vec::new();
    let read = |wait: Duration, got: &mut Vec<serde_json::Value>| read_into(&client, wait, got);
    let seq = news_r;
    subscribed_and_first_ten(&read, &mut got, http_a, &b);
    // Node B dies, then node C (node C announced the session it recovered
    // as its own, so node A recovers it in turn).
    let mut c = c;
    recover_after_kill(
        &mut b,
        &balancer,
        (http_c, &c),
        http_a,
        10..20,
        20..25,
        &mut got,
        &read,
    );
    assert_eq!(metric(http_c, "tidegate_push_recovered_total"), 1.0);

    // A blip sends the client to node A and back to node C, which still
    // parks its copy of the session; node A owns the session since, so
    // node C's copy is stale and node C recovers the session from the
    // backbone instead, with what was missed meanwhile.
    let mut next = 25;
    for (to, node) in [(http_a, &a), (http_c, &c)] {
        let before = got.len();
        balancer.point_at(to);
        balancer.cut();
        for i in next..next + 5 {
            publish(http_a, "news.r", &format!("{{\"i\":{i}}}"));
        }
        next += 5;
        let deadline = Instant::now() + Duration::from_secs(40);
        while !got[before..].iter().any(|v| v["connect"] == true) {
            assert!(
                Instant::now() < deadline,
                "no reconnect to {to}: {:?}",
                &got[before..]
            );
            read(Duration::from_millis(300), &mut got);
        }
        let connect = got[before..].iter().find(|v| v["connect"] == true).unwrap();
        assert_eq!(
            connect["recovered"],
            true,
            "recovered on {to}; log:\n{}",
            node.log()
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while seq(&got).len() < next as usize && Instant::now() < deadline {
            read(Duration::from_millis(300), &mut got);
        }
        read(Duration::from_secs(1), &mut got);
        assert_eq!(
            seq(&got),
            (0..next).collect::<Vec<_>>(),
            "after the blip to {to}; log:\n{}",
            node.log()
        );
    }

    // Each move went through the backbone, the return to node C too.
    let from_backbone = "tidegate_push_recovered_from_backbone_total";
    assert_eq!(metric(http_a, from_backbone), 1.0);
    assert_eq!(
        metric(http_c, from_backbone),
        2.0,
        "node C resumed its stale copy"
    );

    // Node C dies: node A recovers the session in turn.
    recover_after_kill(
        &mut c,
        &balancer,
        (http_a, &a),
        http_a,
        35..40,
        40..45,
        &mut got,
        &read,
    );
    drop(client);
}

#[test]
fn a_node_started_after_a_socketio_client_subscribed_learns_it_and_recovers_it() {
    let broker = TestBroker::shared().expect("start the test broker (scripts/setup/kafka.sh)");
    let bootstrap = broker.bootstrap();
    let topic = "cluster-sio-late";
    // Pings every second and the whole state re-announced at each.
    let push = "[push]\nrecovery_window_ms = 60000\nping_interval_ms = 1000\n\
                cluster_reannounce_ms = 1000\n";
    let (a, http_a) = node_with("late-a", &bootstrap, topic, push);
    let (mut b, http_b) = node_with("late-b", &bootstrap, topic, push);
    wait_until_reading(&[(&a, http_a), (&b, http_b)]);
    let balancer = Balancer::to(http_b);
    let client = recovering_client(&balancer);
    let mut got: Vec<serde_json::Value> = Vec::new();
    let read = |wait: Duration, got: &mut Vec<serde_json::Value>| read_into(&client, wait, got);
    subscribed_and_first_ten(&read, &mut got, http_a, &b);

    // Node C starts only now: it never read the session's CONNECT nor its
    // subscription, and learns them from the next whole-state announcement.
    let (c, http_c) = node_with("late-c", &bootstrap, topic, push);
    wait_until_reading(&[(&c, http_c)]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(http_c, "tidegate_push_cluster_sessions") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "node C never learnt the session; log:\n{}",
            c.log()
        );
        read(Duration::from_millis(200), &mut got);
    }
    recover_after_kill(
        &mut b,
        &balancer,
        (http_c, &c),
        http_a,
        10..20,
        20..25,
        &mut got,
        &read,
    );
    assert_eq!(
        metric(http_c, "tidegate_push_recovered_from_backbone_total"),
        1.0
    );
    drop(client);
}

/// Waits for the recovering client's subscription, publishes warm-ups on
/// `publish_to` until its node (`serving`) delivers one (a node reads from
/// where the backbone ended when it started), then `news.r` 0..10, and
/// checks they arrived in order with cluster offsets.
fn subscribed_and_first_ten(
    read: &dyn Fn(Duration, &mut Vec<serde_json::Value>),
    got: &mut Vec<serde_json::Value>,
    publish_to: SocketAddr,
    serving: &Served,
) {
    read(Duration::from_secs(20), got);
    assert!(
        got.iter().any(|v| v["ready"] == true),
        "the client did not subscribe: {got:?}; log:\n{}",
        serving.log()
    );
    for attempt in 0.. {
        assert!(
            attempt < 60,
            "no warm-up reached the client; log:\n{}",
            serving.log()
        );
        publish(publish_to, "news.warm", "{\"i\":0}");
        read(Duration::from_millis(300), got);
        if got.iter().any(|v| v["event"] == "news.warm") {
            break;
        }
    }
    for i in 0..10 {
        publish(publish_to, "news.r", &format!("{{\"i\":{i}}}"));
    }
    while news_r(got).len() < 10 {
        let before = got.len();
        read(Duration::from_secs(10), got);
        assert!(got.len() > before, "delivered {:?}", news_r(got));
    }
    assert_eq!(news_r(got), (0..10).collect::<Vec<_>>());
    let offset = got.iter().rev().find(|v| v["event"] == "news.r").unwrap()["offset"].clone();
    assert!(
        offset.as_str().is_some_and(|o| o.contains(';')),
        "cluster offsets carry the backbone positions: {offset}"
    );
}

/// A stock socket.io-client through `balancer`, subscribed to `news.>`
/// with connection state recovery (tests/js/cluster_recovering_subscriber.js).
fn recovering_client(balancer: &Balancer) -> Subscriber {
    assert!(
        push_js().join("node_modules/socket.io-client").is_dir(),
        "npm peers missing: run bash scripts/setup/push.sh"
    );
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/js/cluster_recovering_subscriber.js");
    let mut child = Command::new("node")
        .arg(script)
        .arg(format!("http://{}", balancer.addr))
        .arg("news.>")
        .env("NODE_PATH", push_js().join("node_modules"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node (scripts/setup/push.sh)");
    let (tx, lines) = mpsc::channel::<String>();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let _stdin = child.stdin.take().unwrap();
    Subscriber {
        child,
        _stdin,
        lines,
    }
}

/// Adds what a recovering client printed within `wait` to `got` (`READY`
/// as `{"ready": true}`); fails on an error line.
fn read_into(client: &Subscriber, wait: Duration, got: &mut Vec<serde_json::Value>) {
    let deadline = Instant::now() + wait;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match client.lines.recv_timeout(left) {
            Ok(l) if l == "READY" => got.push(serde_json::json!({"ready": true})),
            Ok(l) => {
                let v: serde_json::Value =
                    serde_json::from_str(&l).unwrap_or_else(|_| panic!("not JSON: {l}"));
                assert!(v.get("error").is_none(), "subscriber failed: {v}");
                got.push(v);
            }
            Err(_) => break,
        }
    }
}

/// The `i` of every `news.r` event a recovering subscriber printed.
fn news_r(got: &[serde_json::Value]) -> Vec<u64> {
    got.iter()
        .filter(|v| v["event"] == "news.r")
        .map(|v| v["payload"]["i"].as_u64().unwrap())
        .collect()
}

/// Kills `dying`, publishes `missed` on `publish_to` meanwhile, points the
/// balancer at `to`, waits for the subscriber's reconnect there and checks
/// it was recovered, publishes `live`, and checks that every `news.r` so
/// far arrived once and in order.
#[allow(clippy::too_many_arguments)]
fn recover_after_kill(
    dying: &mut Served,
    balancer: &Balancer,
    (to, to_node): (SocketAddr, &Served),
    publish_to: SocketAddr,
    missed: std::ops::Range<u64>,
    live: std::ops::Range<u64>,
    got: &mut Vec<serde_json::Value>,
    read: &dyn Fn(Duration, &mut Vec<serde_json::Value>),
) {
    dying.child.kill().unwrap();
    dying.child.wait().unwrap();
    for i in missed {
        publish(publish_to, "news.r", &format!("{{\"i\":{i}}}"));
    }
    let before = got.len();
    balancer.point_at(to);
    let deadline = Instant::now() + Duration::from_secs(40);
    while !got[before..].iter().any(|v| v["connect"] == true) {
        assert!(
            Instant::now() < deadline,
            "the client did not reconnect: {:?}; log of {to}:\n{}",
            &got[before..],
            to_node.log()
        );
        read(Duration::from_millis(500), got);
    }
    let connect = got[before..].iter().find(|v| v["connect"] == true).unwrap();
    assert_eq!(
        connect["recovered"],
        true,
        "the session is recovered on {to}; log:\n{}",
        to_node.log()
    );
    let end = live.end;
    for i in live {
        publish(publish_to, "news.r", &format!("{{\"i\":{i}}}"));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while news_r(got).len() < end as usize && Instant::now() < deadline {
        read(Duration::from_millis(300), got);
    }
    // Anything more would be a duplicate.
    read(Duration::from_secs(1), got);
    assert_eq!(
        news_r(got),
        (0..end).collect::<Vec<_>>(),
        "missed messages replayed from the backbone, then live ones, each once, in order; log of {to}:\n{}",
        to_node.log()
    );
}
