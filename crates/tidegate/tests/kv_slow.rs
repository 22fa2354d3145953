//! Slow clients of the KV API are cut off by the `[http]` server's
//! timeouts: a client trickling its headers is closed after
//! `read_timeout_ms`, one trickling a PUT body gets 408 after
//! `request_timeout_ms`, and the half-sent value is never stored.

#[path = "kv_util.rs"]
mod kv_util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kv_util::*;

fn slow_node() -> Node {
    let mut n = cluster(1, "").pop().unwrap();
    n.http = "read_timeout_ms = 500\nrequest_timeout_ms = 500".into();
    n.start();
    n
}

/// Sends `first`, then `byte` every 200 ms until the server closes or answers;
/// returns what it answered and when.
fn trickle(node: &Node, first: &str, byte: &[u8]) -> (String, Duration) {
    let mut s = TcpStream::connect(node.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let t = Instant::now();
    s.write_all(first.as_bytes()).unwrap();
    let mut got = Vec::new();
    while t.elapsed() < Duration::from_secs(10) {
        let mut buf = [0u8; 1024];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
        if s.write_all(byte).is_err() {
            break;
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), t.elapsed())
}

#[test]
fn a_client_trickling_headers_is_closed_after_the_read_timeout() {
    let n = slow_node();
    let (answer, took) = trickle(&n, "PUT /v0/entity?id=slow HTTP/1.1\r\nHost: x\r\n", b"X");
    assert!(
        took < Duration::from_secs(5),
        "still open after {took:?}: {answer}"
    );
    assert!(!answer.contains(" 201 "), "{answer}");
    assert_eq!(n.req("GET", &entity("slow", ""), b"").0, 404);
}

#[test]
fn a_client_trickling_a_put_body_gets_408_and_nothing_is_stored() {
    let n = slow_node();
    let head = "PUT /v0/entity?id=slowbody HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n";
    let (answer, took) = trickle(&n, head, b"v");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(n.req("GET", &entity("slowbody", ""), b"").0, 404);
    // The node still serves others.
    assert_eq!(n.req("PUT", &entity("fast", ""), b"v").0, 201);
}
