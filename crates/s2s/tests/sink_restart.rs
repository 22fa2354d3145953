//! The S2S sink survives its receiver's `kill -9` and restart without
//! losing a message it acknowledged, over RAW and HTTP.
//!
//! The receiver is this test binary run again as a child process
//! ([`receiver_process`], selected by environment variables): Tidegate's
//! S2S server on fixed ports whose input port routes to a sink that
//! appends each payload to a file before it acknowledges. What the file
//! holds is therefore exactly what the receiver confirmed, kill or not.
//! The sender publishes numbered messages; the receiver is killed with
//! SIGKILL midway and started again on the same ports. Every message the
//! sender's source saw acknowledged must be in the file (duplicates are
//! allowed: at-least-once).

mod common;

use std::collections::HashSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tidegate_hub::{
    AckGroup, AckToken, Hub, Message, Pattern, RouteTable, SharedMessage, Sink, SinkFuture,
};
use tidegate_s2s::client::discover;
use tidegate_s2s::sink::{S2sSink, S2sSinkConfig, Transport};
use tokio::process::{Child, Command};

const RAW_PORT: &str = "TIDEGATE_TEST_RECEIVER_RAW";
const HTTP_PORT: &str = "TIDEGATE_TEST_RECEIVER_HTTP";
const OUT_FILE: &str = "TIDEGATE_TEST_RECEIVER_FILE";

/// The receiver's route: appends the payload and a newline, then
/// acknowledges. The page cache outlives a killed process, so a line
/// written before the acknowledgement survives SIGKILL.
struct FileSink(Mutex<std::fs::File>);

impl Sink for FileSink {
    fn name(&self) -> &str {
        "file"
    }

    fn send(&self, msg: SharedMessage, ack: AckToken) -> SinkFuture<'_> {
        let mut f = self.0.lock();
        let mut line = msg.payload.to_vec();
        line.push(b'\n');
        f.write_all(&line).expect("receiver file");
        drop(f);
        ack.succeed();
        Box::pin(async {})
    }
}

/// Not a test: the receiver process the restart tests start (and kill).
/// Runs only when the environment names its ports and file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the restart tests"]
async fn receiver_process() {
    let (Ok(raw), Ok(http), Ok(file)) = (
        std::env::var(RAW_PORT),
        std::env::var(HTTP_PORT),
        std::env::var(OUT_FILE),
    ) else {
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .unwrap();
    let mut routes = RouteTable::default();
    routes.add(
        Pattern::parse("s2s.input").unwrap(),
        Arc::new(FileSink(Mutex::new(file))),
    );
    let hub = Hub::new(routes);
    let mut config = common::test_config();
    config.listener.listen = format!("127.0.0.1:{raw}").parse().unwrap();
    let srv = tidegate_s2s::S2sServer::bind(config.clone()).unwrap();
    let ports = tidegate_s2s::S2sPorts::new(config, hub.clone()).unwrap();
    let http: u16 = http.parse().unwrap();
    let router = tidegate_s2s::http::router_with_ports(
        ports.clone(),
        http,
        false,
        Some(srv.local_addr().port()),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", http))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let shutdown = tokio_util::sync::CancellationToken::new();
    srv.with_ports(ports).run(hub, shutdown).await.unwrap();
}

/// Two distinct free ports for the receiver process, from below the
/// ephemeral range ([`tidegate_testkit::free_ports`]).
fn free_ports() -> (u16, u16) {
    let [a, b] = tidegate_testkit::free_ports();
    (a.port(), b.port())
}

async fn spawn_receiver(raw: u16, http: u16, file: &Path) -> Child {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["receiver_process", "--exact", "--ignored", "--nocapture"])
        .env(RAW_PORT, raw.to_string())
        .env(HTTP_PORT, http.to_string())
        .env(OUT_FILE, file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], http).into();
    for _ in 0..200 {
        if discover(addr, Duration::from_millis(500)).await.is_ok() {
            return child;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the receiver process did not come up");
}

fn received(file: &PathBuf) -> HashSet<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn survives_kill_9(transport: Transport) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("received.txt");
    let (raw, http) = free_ports();
    let mut child = spawn_receiver(raw, http, &file).await;

    let sink = Arc::new(
        S2sSink::new(S2sSinkConfig {
            url: vec![format!("http://127.0.0.1:{http}/nifi")],
            port: "input".into(),
            transport,
            batch_max_flowfiles: 10,
            connections: 2,
            timeout_ms: 2_000,
            retry_min_ms: 20,
            retry_max_ms: 200,
            ..S2sSinkConfig::default()
        })
        .unwrap(),
    );
    let mut routes = RouteTable::default();
    routes.add(Pattern::parse("out.>").unwrap(), sink.clone());
    let hub = Hub::new(routes);

    // Each message is its own acknowledged publish, 50 at a time.
    let n = 3_000usize;
    let acked = Arc::new(Mutex::new(Vec::<usize>::new()));
    let publisher = tokio::spawn({
        let (hub, acked) = (hub.clone(), acked.clone());
        async move {
            let mut set = tokio::task::JoinSet::new();
            for i in 0..n {
                if set.len() >= 50 {
                    set.join_next().await;
                }
                let (hub, acked) = (hub.clone(), acked.clone());
                set.spawn(async move {
                    let group = AckGroup::new();
                    hub.publish_acked(Message::new("out.n", i.to_string()), &group)
                        .await
                        .unwrap();
                    if group.wait().await.is_ok() {
                        acked.lock().push(i);
                    }
                });
            }
            while set.join_next().await.is_some() {}
        }
    });

    common::wait_until("a third acknowledged", Duration::from_secs(30), || {
        acked.lock().len() >= n / 3
    })
    .await;
    child.kill().await.unwrap(); // SIGKILL
    let at_kill = acked.lock().len();
    assert!(at_kill < n, "killed midway");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _restarted = spawn_receiver(raw, http, &file).await;

    tokio::time::timeout(Duration::from_secs(60), publisher)
        .await
        .expect("every message acknowledged after the restart")
        .unwrap();
    let acked = acked.lock().clone();
    assert_eq!(acked.len(), n, "the sink delivered everything in the end");
    let got = received(&file);
    let lost: Vec<usize> = acked
        .iter()
        .copied()
        .filter(|i| !got.contains(&i.to_string()))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged but not received: {} (e.g. {:?})",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert!(
        [
            "connection_closed",
            "connection_refused",
            "io",
            "http",
            "timeout"
        ]
        .iter()
        .map(|k| sink.metrics().error_count(k))
        .sum::<u64>()
            > 0,
        "the sink saw the receiver die"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_sink_survives_the_receivers_kill_9() {
    survives_kill_9(Transport::Raw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sink_survives_the_receivers_kill_9() {
    survives_kill_9(Transport::Http).await;
}
