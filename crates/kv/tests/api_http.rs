//! The KV routes served over real sockets by a server this test controls
//! (`api::router_with`, a runtime with a small blocking pool, small send
//! buffers): range streams whose clients stop reading, and the request
//! checks (ids that are not UTF-8, HEAD).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use axum::serve::ListenerExt;
use bytes::Bytes;
use tidegate_kv::api::{self, RangeLimits};
use tidegate_kv::engine::now_ns;
use tidegate_kv::{KvConfig, KvStore, Record, SyncPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Entries stored for the range tests, and the size of each value: 4 MiB
/// in all, far more than the socket buffers and hyper's together.
const ENTRIES: usize = 4000;
const VALUE_BYTES: usize = 1024;

/// A runtime whose blocking pool has `blocking` threads.
fn runtime(blocking: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(blocking)
        .enable_all()
        .build()
        .unwrap()
}

struct Server {
    addr: SocketAddr,
    store: KvStore,
    _dir: tempfile::TempDir,
}

/// One node serving the KV routes with `limits` on 127.0.0.1; each
/// accepted socket gets a small send buffer, so a client that does not
/// read blocks the server's writes quickly.
async fn serve(limits: RangeLimits) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let config = KvConfig {
        data_dir: dir.path().join("kv"),
        sync: SyncPolicy::None,
        ..KvConfig::default()
    };
    let store = KvStore::open(&config, None).unwrap();
    let app = api::router_with(store.clone(), limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = listener.tap_io(|s: &mut TcpStream| set_buffer(s, libc::SO_SNDBUF, 8192));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        addr,
        store,
        _dir: dir,
    }
}

fn set_buffer<S: AsRawFd>(s: &S, option: libc::c_int, bytes: libc::c_int) {
    // SAFETY: a valid socket descriptor and a c_int option value.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt");
}

/// Key `i` of the range tests (`k0000`…) and its value.
fn key(i: usize) -> String {
    format!("k{i:04}")
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("v{i}-").into_bytes();
    v.resize(VALUE_BYTES, b'x');
    v
}

/// Stores [`ENTRIES`] entries straight into the engine.
fn fill(store: &KvStore) {
    let records: Vec<(Bytes, Record)> = (0..ENTRIES)
        .map(|i| {
            (
                Bytes::from(key(i)),
                Record::value(now_ns(), Bytes::from(value(i))),
            )
        })
        .collect();
    store.engine().apply_many(&records).unwrap();
}

/// A response: status, head (lowercase), raw body.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

fn split_head(raw: &[u8]) -> Option<(u16, String, Vec<u8>)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.get(9..12)?.parse().ok()?;
    Some((status, head, raw[end + 4..].to_vec()))
}

/// One request on a fresh connection (`Connection: close`), answered within
/// 10 s.
async fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Answer {
    let go = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: kv\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(body).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        raw
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), go)
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no answer within 10 s"));
    let (status, head, mut body) = split_head(&raw).expect("a response head");
    if head.contains("transfer-encoding: chunked") {
        let (chunks, complete) = chunks(&body);
        assert!(complete, "{method} {path}: chunked body cut off");
        body = chunks.concat();
    }
    Answer { status, head, body }
}

/// The chunks of a chunked body, and whether it ended with the last
/// (zero-size) chunk.
fn chunks(mut rest: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (out, false);
        };
        let Some(size) = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
        else {
            return (out, false);
        };
        rest = &rest[eol + 2..];
        if size == 0 {
            return (out, true);
        }
        let Some(chunk) = rest.get(..size) else {
            return (out, false);
        };
        out.push(chunk.to_vec());
        rest = rest.get(size + 2..).unwrap_or(&[]);
    }
}

/// The complete range `start=k` as chunks; checks each is entry `i`.
async fn full_range(addr: SocketAddr) -> Answer {
    let a = request(addr, "GET", "/v0/entities?start=k", b"").await;
    assert_eq!(a.status, 200);
    a
}

fn assert_entries_prefix(chunks: &[Vec<u8>]) {
    for (i, c) in chunks.iter().enumerate() {
        let mut want = key(i).into_bytes();
        want.push(b'\n');
        want.extend_from_slice(&value(i));
        assert!(c == &want, "chunk {i} is not entry {i}");
    }
}

/// A client that sent `GET /v0/entities?start=k` with a 4 KiB receive
/// buffer, read the response head and stopped reading.
struct Stalled {
    stream: TcpStream,
    /// What it read: the head and the first body bytes.
    read: Vec<u8>,
}

async fn stalled_range(addr: SocketAddr) -> Stalled {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(b"GET /v0/entities?start=k HTTP/1.1\r\nHost: kv\r\n\r\n")
        .await
        .unwrap();
    let mut read = Vec::new();
    let mut buf = [0u8; 512];
    while !read.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("a response head within 10 s")
            .unwrap();
        assert!(n > 0, "closed before the head");
        read.extend_from_slice(&buf[..n]);
    }
    let status = split_head(&read).unwrap().0;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&read));
    Stalled { stream, read }
}

/// Whether the blocking pool runs a new task within 2 s.
async fn blocking_pool_answers() -> bool {
    let probe = tokio::task::spawn_blocking(|| ());
    tokio::time::timeout(Duration::from_secs(2), probe)
        .await
        .is_ok()
}

#[test]
fn stalled_range_readers_hold_no_thread_and_streams_beyond_the_cap_get_503() {
    let rt = runtime(4);
    rt.block_on(async {
        let limits = RangeLimits {
            max_streams: 8,
            send_timeout: Duration::from_secs(120),
        };
        let server = serve(limits).await;
        fill(&server.store);
        // Twice as many stalled streams as blocking threads: a walk that
        // waits for its client on a pool thread would take them all.
        let mut stalled = Vec::new();
        for _ in 0..limits.max_streams {
            stalled.push(stalled_range(server.addr).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            blocking_pool_answers().await,
            "the blocking pool is held by the stalled range streams"
        );
        // Writes go on promptly: concurrent PUTs (some handed to the
        // blocking pool when another worker is in a storage call).
        let started = Instant::now();
        let puts = (0..64).map(|i| {
            let addr = server.addr;
            tokio::spawn(async move {
                request(addr, "PUT", &format!("/v0/entity?id=n{i:02}"), b"new").await
            })
        });
        for put in futures::future::join_all(puts).await {
            assert_eq!(put.unwrap().status, 201);
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "64 PUTs took {:?}",
            started.elapsed()
        );
        let got = request(server.addr, "GET", "/v0/entity?id=n07", b"").await;
        assert_eq!((got.status, &got.body[..]), (200, &b"new"[..]));
        // One range stream more than the cap: 503, with the reason.
        let refused = request(server.addr, "GET", "/v0/entities?start=k", b"").await;
        assert_eq!(refused.status, 503);
        let why = String::from_utf8_lossy(&refused.body);
        assert!(
            why.contains("too many /v0/entities streams open (at most 8)"),
            "{why}"
        );
        // A stalled client that goes away gives its slot back.
        drop(stalled.pop());
        let deadline = Instant::now() + Duration::from_secs(10);
        let full = loop {
            let a = request(server.addr, "GET", "/v0/entities?start=k", b"").await;
            if a.status == 200 {
                break a;
            }
            assert_eq!(a.status, 503);
            assert!(Instant::now() < deadline, "the slot never came back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(full.head.contains("transfer-encoding: chunked"));
        // Sorted, complete: the 4000 entries, then n00…n63.
        let body = full.body;
        let mut want = Vec::new();
        for i in 0..ENTRIES {
            want.extend_from_slice(key(i).as_bytes());
            want.push(b'\n');
            want.extend_from_slice(&value(i));
        }
        for i in 0..64 {
            want.extend_from_slice(format!("n{i:02}\nnew").as_bytes());
        }
        assert!(body == want, "the range after the stall is not complete");
    });
}

#[test]
fn a_range_stream_whose_client_stops_reading_is_cut_off_after_the_send_timeout() {
    // One blocking thread: a walk waiting for its client on it would hold
    // the whole pool.
    let rt = runtime(1);
    rt.block_on(async {
        let limits = RangeLimits {
            max_streams: 1,
            send_timeout: Duration::from_secs(2),
        };
        let server = serve(limits).await;
        fill(&server.store);
        let mut stalled = stalled_range(server.addr).await;
        // While it waits for its client, it holds the only slot, not a
        // thread.
        let busy = request(server.addr, "GET", "/v0/entities?start=k", b"").await;
        assert_eq!(busy.status, 503);
        assert!(
            blocking_pool_answers().await,
            "the stalled walk holds a thread"
        );
        // Past the send timeout the stream is given up: its slot is free
        // again, and a new range is served complete.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let full = full_range(server.addr).await;
        assert_eq!(full.body.len(), ENTRIES * (6 + VALUE_BYTES));
        // The stalled client, reading again, gets a sorted prefix of the
        // listing and then the end of the connection, without the last
        // chunk: a cut listing never looks complete.
        let rest = async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stalled.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => stalled.read.extend_from_slice(&buf[..n]),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), rest)
            .await
            .expect("the cut-off stream is closed");
        let (_, head, body) = split_head(&stalled.read).unwrap();
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        let (got, complete) = chunks(&body);
        assert!(!complete, "the cut-off stream ended like a complete one");
        assert!(got.len() < ENTRIES, "got all {} entries", got.len());
        assert_entries_prefix(&got);
    });
}

#[test]
fn ids_and_range_bounds_that_are_not_utf8_are_refused() {
    let rt = runtime(8);
    rt.block_on(async {
        let server = serve(RangeLimits::default()).await;
        let addr = server.addr;
        // Before: both decoded to U+FFFD and shared one key.
        for id in ["%FF", "%FE", "a%C3", "%C3%28", "%ED%A0%80"] {
            for method in ["GET", "PUT", "DELETE"] {
                let a = request(addr, method, &format!("/v0/entity?id={id}"), b"v").await;
                assert_eq!(a.status, 400, "{method} id={id}");
                assert_eq!(
                    a.body, b"id is not valid UTF-8 once percent-decoded\n",
                    "{method} id={id}"
                );
            }
        }
        let a = request(addr, "GET", "/v0/entities?start=a&end=%FF", b"").await;
        assert_eq!(
            (a.status, &a.body[..]),
            (400, &b"end is not valid UTF-8 once percent-decoded\n"[..])
        );
        let a = request(addr, "GET", "/v0/entities?start=%FE", b"").await;
        assert_eq!(
            (a.status, &a.body[..]),
            (400, &b"start is not valid UTF-8 once percent-decoded\n"[..])
        );
        // What decodes to UTF-8 is a key as before: U+FFFD itself, `+` as a
        // space, a `%` without hex digits as itself, the last of a repeated
        // id.
        assert_eq!(
            request(addr, "PUT", "/v0/entity?id=%EF%BF%BD", b"fffd")
                .await
                .status,
            201
        );
        let a = request(addr, "GET", "/v0/entity?id=%EF%BF%BD", b"").await;
        assert_eq!((a.status, &a.body[..]), (200, &b"fffd"[..]));
        assert_eq!(
            request(addr, "PUT", "/v0/entity?id=a+b", b"space")
                .await
                .status,
            201
        );
        let a = request(addr, "GET", "/v0/entity?id=a%20b", b"").await;
        assert_eq!((a.status, &a.body[..]), (200, &b"space"[..]));
        assert_eq!(
            request(addr, "PUT", "/v0/entity?id=%zz", b"pct")
                .await
                .status,
            201
        );
        let a = request(addr, "GET", "/v0/entity?id=%25zz", b"").await;
        assert_eq!((a.status, &a.body[..]), (200, &b"pct"[..]));
        let a = request(addr, "GET", "/v0/entity?id=%FF&id=a+b", b"").await;
        assert_eq!((a.status, &a.body[..]), (200, &b"space"[..]));
        let a = request(addr, "GET", "/v0/entities?start=%EF%BF%BC", b"").await;
        assert_eq!((a.status, &a.body[..]), (200, &b"\xEF\xBF\xBD\nfffd"[..]));
    });
}

#[test]
fn head_on_entity_is_405_like_every_other_unsupported_method() {
    let rt = runtime(8);
    rt.block_on(async {
        let server = serve(RangeLimits::default()).await;
        let addr = server.addr;
        assert_eq!(
            request(addr, "PUT", "/v0/entity?id=k", b"v").await.status,
            201
        );
        for path in ["/v0/entity?id=k", "/v0/entity?id=absent", "/v0/entity"] {
            let head = request(addr, "HEAD", path, b"").await;
            assert_eq!(head.status, 405, "HEAD {path}");
            assert!(head.body.is_empty());
            assert!(
                head.head.lines().any(|l| l == "allow: get,put,delete"),
                "{}",
                head.head
            );
        }
        let post = request(addr, "POST", "/v0/entity?id=k", b"v").await;
        assert_eq!(post.status, 405);
        assert!(post.body.is_empty());
        assert!(
            post.head.lines().any(|l| l == "allow: get,put,delete"),
            "{}",
            post.head
        );
        for method in ["PATCH", "OPTIONS"] {
            let a = request(addr, method, "/v0/entity?id=k", b"").await;
            assert_eq!(a.status, 405, "{method}");
            assert!(
                a.head.lines().any(|l| l == "allow: get,put,delete"),
                "{}",
                a.head
            );
        }
        let a = request(addr, "GET", "/v0/entity?id=k", b"").await;
        assert_eq!((a.status, &a.body[..]), (200, &b"v"[..]));
    });
}
