//! Helpers of the KV end-to-end tests: a cluster of `tidegate serve`
//! processes whose data directories outlive each process (so a node can be
//! stopped, killed and restarted on its data), and a minimal blocking
//! HTTP/1.1 client that shows status codes and chunked bodies exactly.
//! Included by each `kv_*.rs` test with `#[path]`; compiled alone it has
//! no tests.

#![allow(dead_code)] // each test binary uses its own subset

#[path = "common/mod.rs"]
pub mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[allow(unused_imports)] // each test binary uses its own subset
pub use common::{free_addr, free_addrs, serve, Served};

/// The secret every test cluster shares.
pub const SECRET: &str = "test-cluster-secret";
/// How long a node gets to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Socket timeout of one test request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One node: its address, its data directory and, while it runs, its process.
pub struct Node {
    /// The `[http]` address.
    pub addr: SocketAddr,
    /// Holds `data/` across restarts.
    pub home: tempfile::TempDir,
    /// The `[kv]` and other config lines, without `data_dir`.
    pub config: String,
    /// Extra lines of the `[http]` section.
    pub http: String,
    /// Where `[wire]` listens, when enabled.
    pub wire: Option<SocketAddr>,
    /// The running process.
    pub served: Option<Served>,
}

impl Node {
    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.home.path().join("data")
    }

    /// Starts the process and waits until it answers.
    pub fn start(&mut self) {
        assert!(self.served.is_none(), "node {} already runs", self.addr);
        let toml = format!(
            "[http]\nlisten = \"{}\"\n{}\n[wire]\n{}\n[sockperf]\nenabled = false\n\
             [forward]\nenabled = false\n[s2s]\nenabled = false\n{}\ndata_dir = \"{}\"\n",
            self.addr,
            self.http,
            match self.wire {
                Some(a) => format!("listen = \"{a}\""),
                None => "enabled = false".into(),
            },
            self.config,
            self.data_dir().display()
        );
        let served = serve(&toml);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok((200, _)) = try_request(self.addr, "GET", "/healthz", b"") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not start: {}",
                self.addr,
                served.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.served = Some(served);
    }

    /// Kills the process with SIGKILL (kill -9) and waits for it.
    pub fn kill(&mut self) {
        let mut s = self.served.take().expect("node not running");
        s.child.kill().unwrap();
        s.child.wait().unwrap();
    }

    /// Stops the process with SIGTERM and waits for a clean exit.
    pub fn stop(&mut self) {
        let mut s = self.served.take().expect("node not running");
        let pid = s.child.id().to_string();
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(ok.success());
        let status = s.child.wait().unwrap();
        assert!(status.success(), "unclean exit {status}: {}", s.log());
    }

    /// What the running node logged.
    pub fn log(&self) -> String {
        self.served.as_ref().map(Served::log).unwrap_or_default()
    }

    /// A request to this node.
    pub fn req(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        request(self.addr, method, path, body)
    }
}

/// `n` nodes knowing each other (not started). `extra` goes into `[kv]`.
pub fn cluster(n: usize, extra: &str) -> Vec<Node> {
    let addrs: Vec<SocketAddr> = free_addrs(n);
    let urls: Vec<String> = addrs.iter().map(|a| format!("\"http://{a}\"")).collect();
    addrs
        .iter()
        .map(|a| Node {
            addr: *a,
            home: tempfile::tempdir().unwrap(),
            config: format!(
                "[kv]\nself = \"http://{a}\"\nnodes = [{}]\ncluster_secret = \"{SECRET}\"\n{extra}",
                urls.join(", ")
            ),
            http: String::new(),
            wire: None,
            served: None,
        })
        .collect()
}

/// A started cluster of `n` nodes.
pub fn started(n: usize, extra: &str) -> Vec<Node> {
    let mut nodes = cluster(n, extra);
    nodes.iter_mut().for_each(Node::start);
    nodes
}

/// One HTTP/1.1 request on a fresh connection; panics on I/O errors.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    try_request(addr, method, path, body)
        .unwrap_or_else(|e| panic!("{method} {path} to {addr}: {e}"))
}

/// One request with extra headers.
pub fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT)?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// [`request`] without panicking.
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    request_with(addr, method, path, &[], body)
}

fn parse_response(raw: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_owned());
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok((status, body))
}

/// The chunks of a chunked body, each as sent.
pub fn chunks(raw: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut rest = raw;
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..eol]).ok()?.trim(), 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.push(rest.get(..size)?.to_vec());
        rest = rest.get(size + 2..)?;
    }
}

fn dechunk(raw: &[u8]) -> Option<Vec<u8>> {
    Some(chunks(raw)?.concat())
}

/// The raw response (headers and undecoded body) of a GET.
pub fn raw_get(addr: SocketAddr, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    raw
}

/// `/v0/entity?id=<key>` with extra query parameters.
pub fn entity(key: &str, extra: &str) -> String {
    format!("/v0/entity?id={key}{extra}")
}

/// Whether `node` holds a live value for `key` in its own data (the range
/// endpoint is local-only).
pub fn holds(node: &Node, key: &str) -> bool {
    let (status, body) = node.req("GET", &format!("/v0/entities?start={key}&end={key}0"), b"");
    assert_eq!(status, 200);
    body.starts_with(format!("{key}\n").as_bytes())
}

/// A signed internal request, as a coordinator sends it.
pub fn internal(node: &Node, secret: &str, method: &str, key: &str, body: &[u8]) -> (u16, Vec<u8>) {
    internal_signed_for(node, node.addr, secret, method, key, body)
}

/// [`internal`], signed for the node at `signed_for` (another node: a
/// replayed request) but sent to `node`.
pub fn internal_signed_for(
    node: &Node,
    signed_for: SocketAddr,
    secret: &str,
    method: &str,
    key: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let path = format!(
        "{}?id={}",
        tidegate_kv::client::INTERNAL_PATH,
        tidegate_kv::client::percent_encode(key.as_bytes())
    );
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let to = format!("http://{signed_for}");
    let sig = tidegate_kv::auth::sign(secret.as_bytes(), &to, method, &path, time, body);
    request_with(
        node.addr,
        method,
        &path,
        &[
            (tidegate_kv::auth::TIME_HEADER, time.to_string()),
            (tidegate_kv::auth::SIGNATURE_HEADER, sig),
        ],
        body,
    )
    .unwrap()
}

/// The value of a metric line starting with `name` in `/metrics` (0 when absent).
pub fn metric(node: &Node, name: &str) -> f64 {
    let (status, body) = node.req("GET", "/metrics", b"");
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A peer that accepts connections and never reads or answers them (a
/// stopped process, a partition that drops packets). Dropped, it closes
/// them unread: whatever was sent to it is lost.
pub struct SilentPeer {
    pub addr: SocketAddr,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    held: Option<std::thread::JoinHandle<()>>,
}

impl SilentPeer {
    /// Listens on `addr` (port 0 for any free one).
    pub fn bind(addr: SocketAddr) -> SilentPeer {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let held = std::thread::spawn(move || {
            let mut conns = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((c, _)) => conns.push(c),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SilentPeer {
            addr,
            done,
            held: Some(held),
        }
    }
}

impl Drop for SilentPeer {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(h) = self.held.take() {
            let _ = h.join();
        }
    }
}
