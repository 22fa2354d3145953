//! Test harness: a hub, the RAW listener and the HTTP router on free ports,
//! and the stock Java client driver (tests/java) run as a child process.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tidegate_hub::{Hub, SharedMessage, Subscriber};
use tidegate_listener::ListenerConfig;
use tidegate_s2s::{PortConfig, S2sConfig, S2sPorts, S2sServer};
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

/// A running server pair; cancelled on drop.
pub struct Running {
    pub hub: Hub,
    pub raw: SocketAddr,
    pub http: SocketAddr,
    pub ports: S2sPorts,
    pub shutdown: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Running {
    /// `http://127.0.0.1:<http>/nifi`, the URL clients are given.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/nifi", self.http.port())
    }
}

/// A config with input port `input` → `s2s.input` and output port `output`
/// ← `s2s.output`, on free ports.
pub fn test_config() -> S2sConfig {
    S2sConfig {
        listener: ListenerConfig::on("127.0.0.1:0".parse().unwrap()),
        host: "127.0.0.1".into(),
        input_ports: vec![PortConfig::new("input", "s2s.input")],
        output_ports: vec![PortConfig::new("output", "s2s.output")],
        ..S2sConfig::default()
    }
}

/// Starts the RAW listener and the HTTP router with one shared port set.
pub async fn start(config: S2sConfig, hub: Hub) -> Running {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_test_writer()
        .try_init();
    let shutdown = CancellationToken::new();
    let server = S2sServer::bind(config.clone()).unwrap();
    let raw = server.local_addr();
    let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = http_listener.local_addr().unwrap();
    let ports = S2sPorts::new(config, hub.clone()).unwrap();
    let router =
        tidegate_s2s::http::router_with_ports(ports.clone(), http.port(), false, Some(raw.port()));
    let sd = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(http_listener, router)
            .with_graceful_shutdown(async move { sd.cancelled().await })
            .await
            .unwrap();
    });
    tokio::spawn(
        server
            .with_ports(ports.clone())
            .run(hub.clone(), shutdown.clone()),
    );
    Running {
        hub,
        raw,
        http,
        ports,
        shutdown,
    }
}

/// Which stock client to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nifi {
    /// nifi-site-to-site-client 1.28.1 on Java 17.
    V1,
    /// nifi-site-to-site-client 2.6.0 on Java 21+.
    V2,
}

fn java_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/java")
}

/// Runs the Java driver with `args`; returns its JSON lines. Panics (the
/// test fails) if the driver was not built by scripts/setup/s2s.sh.
pub async fn java(version: Nifi, args: &[&str], timeout: Duration) -> Vec<serde_json::Value> {
    let dir = java_dir();
    let (sub, java) = match version {
        Nifi::V1 => ("v1", "java".to_string()),
        Nifi::V2 => {
            let home = std::fs::read_to_string(dir.join(".jdk21"))
                .expect("tests/java/.jdk21 missing: run scripts/setup/s2s.sh");
            ("v2", format!("{}/bin/java", home.trim()))
        }
    };
    let target = dir.join(sub).join("target");
    let jar = target.join(format!("s2s-driver-{sub}-1.jar"));
    assert!(
        jar.exists(),
        "{} missing: run scripts/setup/s2s.sh",
        jar.display()
    );
    let cp = format!("{}:{}/lib/*", jar.display(), target.display());
    let mut child = tokio::process::Command::new(java)
        .arg("-cp")
        .arg(cp)
        .arg(format!(
            "-Dorg.slf4j.simpleLogger.defaultLogLevel={}",
            std::env::var("S2S_JAVA_LOG").unwrap_or_else(|_| "warn".into())
        ))
        .arg("tidegate.s2s.Driver")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("java is not installed: run scripts/setup/s2s.sh");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let err_task = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        let mut all = String::new();
        while let Ok(Some(l)) = lines.next_line().await {
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut out = Vec::new();
    let read = async {
        while let Ok(Some(l)) = lines.next_line().await {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) {
                out.push(v);
            }
        }
        child.wait().await
    };
    let status = tokio::time::timeout(timeout, read).await;
    let stderr = err_task.await.unwrap_or_default();
    match status {
        Ok(_) => {}
        Err(_) => panic!("java driver timed out; output so far: {out:?}\nstderr:\n{stderr}"),
    }
    if out.is_empty() || out.iter().any(|v| v["event"] == "error") {
        eprintln!("java stderr:\n{stderr}");
    }
    out
}

/// Byte `j` of FlowFile `i` in the driver's `send` mode.
pub fn content(i: usize, size: usize) -> Vec<u8> {
    (0..size).map(|j| ((i * 31 + j) % 251) as u8).collect()
}

/// The identifier of the port named `name` (derived from the name).
pub fn port_id(name: &str) -> String {
    PortConfig::new(name, "x").resolved_id()
}

/// A FlowFile with no attributes.
pub fn flowfile(content: &[u8]) -> tidegate_s2s::codec::DataPacket {
    tidegate_s2s::codec::DataPacket {
        attributes: Vec::new(),
        content: bytes::Bytes::copy_from_slice(content),
    }
}

/// A RAW client on port `input`, handshake done.
pub async fn input_client(raw: SocketAddr) -> tidegate_s2s::client::RawClient {
    let opts = tidegate_s2s::client::ClientOptions {
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    tidegate_s2s::client::RawClient::connect(raw, Some(&port_id("input")), opts)
        .await
        .unwrap()
}

/// Polls `cond` every 10 ms until it holds; panics after `limit`.
pub async fn wait_until(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let until = tokio::time::Instant::now() + limit;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < until,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads until the server closes the connection (EOF or reset); returns
/// how long that took, or `None` if it stayed open for `limit`.
pub async fn closed_within(s: &mut tokio::net::TcpStream, limit: Duration) -> Option<Duration> {
    use tokio::io::AsyncReadExt;
    let start = tokio::time::Instant::now();
    let mut sink = Vec::new();
    match tokio::time::timeout(limit, s.read_to_end(&mut sink)).await {
        Ok(_) => Some(start.elapsed()),
        Err(_) => None,
    }
}

/// How long a test waits for a message it expects to be published.
pub const WAIT: Duration = Duration::from_secs(10);

/// The next message on `sub` (at most [`WAIT`]); `what` names it if it
/// does not arrive.
pub async fn next(sub: &Subscriber, what: &str) -> SharedMessage {
    tokio::time::timeout(WAIT, sub.recv())
        .await
        .unwrap_or_else(|_| panic!("{what} was not published within {WAIT:?}"))
        .unwrap()
}

/// At least `n` messages from `sub` (at most [`WAIT`]).
pub async fn at_least(sub: &Subscriber, n: usize) -> Vec<SharedMessage> {
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, async {
        while got.len() < n {
            sub.recv_many(&mut got, 10).await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "only {} of {n} messages published within {WAIT:?}",
            got.len()
        )
    });
    got
}
