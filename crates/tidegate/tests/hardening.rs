//! The process as an operator meets it: configuration problems found before
//! any port opens (exit 2, naming file, key and path), `config --check`,
//! `${VAR}` values and redacted secrets, `/healthz` and `/readyz`, and the
//! HTTP server's limits (header-read timeout, body limit, idle timeout).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_addr, free_addrs, free_ports, serve, KillOnDrop, EXE};

/// Every listener on a free port, `extra` appended. The four ports are
/// picked together (picked one by one, two once came out the same) and
/// differ from `http` and from any address named in `extra` (a dead
/// broker picked earlier).
fn config_on_free_ports(http: SocketAddr, extra: &str) -> String {
    let ports: Vec<SocketAddr> = free_addrs(6)
        .into_iter()
        .filter(|a| *a != http && !extra.contains(&a.to_string()))
        .collect();
    format!(
        "[http]\nlisten = \"{http}\"\n[wire]\nlisten = \"{}\"\n[sockperf]\nlisten = \"{}\"\n[forward]\nlisten = \"{}\"\n[s2s]\nlisten = \"{}\"\n{extra}",
        ports[0], ports[1], ports[2], ports[3]
    )
}

fn write_config(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("tidegate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn http_request(addr: SocketAddr, request: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    http_request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
}

fn wait_for_http(addr: SocketAddr, served: &common::Served) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(addr, "/healthz").is_err() {
        assert!(
            Instant::now() < deadline,
            "serve did not answer: {}",
            served.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn missing_tls_files_stop_start_up_before_any_port_opens() {
    let dir = tempfile::tempdir().unwrap();
    let [forward, s2s] = free_ports();
    let text = format!(
        "[http]\nenabled = false\n[wire]\nenabled = false\n[sockperf]\nenabled = false\n[forward]\nlisten = \"{forward}\"\n[s2s]\nlisten = \"{s2s}\"\n[s2s.tls]\ncert = \"/nonexistent/s2s-cert.pem\"\nkey = \"/nonexistent/s2s-key.pem\"\nclient_ca = \"/nonexistent/ca.pem\"\n"
    );
    let path = write_config(&dir, &text);
    let mut child = KillOnDrop::new(
        Command::new(EXE)
            .args(["serve", "--config"])
            .arg(&path)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // While it runs (if it ran at all), the Forward port must never open.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        assert!(
            TcpStream::connect(forward).is_err(),
            "the forward port opened although the config is unusable"
        );
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "serve did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("tidegate.toml") && err.contains("[s2s]") && err.contains("tls.cert"),
        "{err}"
    );
    assert!(err.contains("/nonexistent/s2s-cert.pem"), "{err}");

    // `config --check` finds the same problem without serving.
    let out = Command::new(EXE)
        .args(["config", "--check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/s2s-cert.pem"));
}

#[test]
fn config_check_passes_a_good_file_and_refuses_unknown_keys_and_unset_variables() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("kv");
    let kv = format!("[kv]\ndata_dir = {:?}\nsync = \"always\"\n", data_dir);
    let good = write_config(&dir, &config_on_free_ports(free_addr(), &kv));
    let out = Command::new(EXE)
        .args(["config", "--check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("configuration ok"), "{stdout}");
    let kv_line = format!(
        "[kv] on [http] data_dir = {} sync = always one node",
        data_dir.display()
    );
    assert!(stdout.contains(&kv_line), "{stdout}");

    for (text, expect) in [
        ("[forward]\nmax_conections = 5\n", "forward.max_conections"),
        (
            "[forward]\nshared_key = \"${TIDEGATE_TEST_UNSET_KEY}\"\n",
            "TIDEGATE_TEST_UNSET_KEY",
        ),
        // Publish topics the hub would refuse fail at start, naming the key.
        (
            "[forward]\ntopic_prefix = \"$sys.\"\n",
            "[forward] topic_prefix",
        ),
        (
            "[[s2s.input_ports]]\nname = \"in\"\ntopic = \"$sys.in\"\n",
            "[[s2s.input_ports]]",
        ),
    ] {
        let path = write_config(&dir, text);
        let out = Command::new(EXE)
            .args(["config", "--check", "--config"])
            .arg(&path)
            .env_remove("TIDEGATE_TEST_UNSET_KEY")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(expect) && err.contains("tidegate.toml"),
            "{err}"
        );
    }
}

#[test]
fn config_prints_values_from_the_environment_with_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        &dir,
        "[forward]\nlisten = \"127.0.0.1:${TG_FWD_PORT:-24225}\"\nshared_key = \"${TG_SHARED}\"\n[wire]\ntokens = [\"wire-token-1\"]\n",
    );
    let out = Command::new(EXE)
        .args(["config", "--config"])
        .arg(&path)
        .env("TG_SHARED", "very-secret-key")
        .env_remove("TG_FWD_PORT")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("127.0.0.1:24225"), "{text}");
    assert!(
        !text.contains("very-secret-key") && !text.contains("wire-token-1"),
        "{text}"
    );
    assert!(text.contains("<redacted>"), "{text}");
}

#[test]
fn health_is_live_and_ready_names_what_is_not_ready() {
    // A Kafka sink whose broker does not exist: live, but not ready.
    let [http, dead_broker] = free_ports();
    let served = serve(&config_on_free_ports(
        http,
        &format!("[sinks.kafka]\nbrokers = \"{dead_broker}\"\n"),
    ));
    wait_for_http(http, &served);
    let live = get(http, "/healthz").unwrap();
    assert!(live.starts_with("HTTP/1.1 200"), "{live}");
    // No [kv] section: the KV API answers 404 saying so, not a bare 404
    // that reads like a missing key.
    let kv = get(http, "/v0/entity?id=k").unwrap();
    assert!(kv.starts_with("HTTP/1.1 404"), "{kv}");
    assert!(kv.contains("[kv] section"), "{kv}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let r = get(http, "/readyz").unwrap();
        if r.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(
        ready.contains("kafka") && ready.contains("\"ready\":false"),
        "{ready}"
    );

    // A cluster backbone whose broker does not exist: not ready either
    // (it would take publishes and deliver nothing of them).
    let [http3, dead_broker] = free_ports();
    let served3 = serve(&config_on_free_ports(
        http3,
        &format!("[cluster]\nbrokers = \"{dead_broker}\"\nnode = \"n1\"\n"),
    ));
    wait_for_http(http3, &served3);
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let r = get(http3, "/readyz").unwrap();
        if r.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        ready.starts_with("HTTP/1.1 503") && ready.contains("cluster: backbone"),
        "{ready}"
    );

    // Without sinks, everything accepting: ready.
    let http2 = free_addr();
    let served2 = serve(&config_on_free_ports(http2, ""));
    wait_for_http(http2, &served2);
    let ready = get(http2, "/readyz").unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(ready.contains("\"ready\":true"), "{ready}");
}

#[test]
fn the_http_server_closes_slow_headers_refuses_big_bodies_and_drops_idle_connections() {
    let http = free_addr();
    let served = serve(&config_on_free_ports(
        http,
        "",
    ).replacen(
        &format!("[http]\nlisten = \"{http}\"\n"),
        &format!("[http]\nlisten = \"{http}\"\nread_timeout_ms = 2000\nidle_timeout_ms = 1000\nmax_body_bytes = 1000\n"),
        1,
    ));
    wait_for_http(http, &served);

    // A request line trickled a byte every 300 ms (never idle for the
    // 1 s idle timeout): closed by the 2 s header-read timeout.
    let mut slow = TcpStream::connect(http).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let started = Instant::now();
    let mut closed = false;
    for b in b"GET /metrics?aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
        if slow.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        let mut some = [0u8; 64];
        match slow.read(&mut some) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(
        closed && started.elapsed() < Duration::from_secs(8),
        "a trickled request line was held {:?}",
        started.elapsed()
    );
    let trickle_closed_after = started.elapsed();

    // A body announced larger than max_body_bytes: 413 naming the limit.
    let r = http_request(
        http,
        "POST /nifi-api/data-transfer/input-ports/x/transactions/y/flow-files HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert!(r.starts_with("HTTP/1.1 413"), "{r}");
    assert!(r.contains("max_body_bytes"), "{r}");

    // A keep-alive connection left idle is closed.
    let mut idle = TcpStream::connect(http).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut all = Vec::new();
    let _ = idle.read_to_end(&mut all);
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "an idle keep-alive connection was held {:?}",
        started.elapsed()
    );
    let metrics = get(http, "/metrics").unwrap();
    assert!(
        metrics.contains("kind=\"read_timeout\"") && metrics.contains("kind=\"idle_timeout\""),
        "timeouts not counted (trickle closed after {trickle_closed_after:?}): {metrics}\n{}",
        served.log()
    );
}

#[test]
fn upgraded_websockets_keep_their_place_under_max_connections() {
    let http = free_addr();
    let served = serve(&config_on_free_ports(http, "").replacen(
        &format!("[http]\nlisten = \"{http}\"\n"),
        &format!("[http]\nlisten = \"{http}\"\nmax_connections = 2\n"),
        1,
    ));
    wait_for_http(http, &served);
    let upgrade = |addr| -> TcpStream {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 101", "{}", String::from_utf8_lossy(&head));
        s
    };
    // wait_for_http's connections are closed; let the server see that.
    std::thread::sleep(Duration::from_millis(300));
    let _a = upgrade(http);
    let _b = upgrade(http);
    std::thread::sleep(Duration::from_millis(200));
    // Both websockets still hold their slots: a third connection is refused.
    let mut third = TcpStream::connect(http).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = third.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut out = Vec::new();
    let _ = third.read_to_end(&mut out);
    assert!(
        out.is_empty(),
        "a third connection was served past max_connections = 2: {}",
        String::from_utf8_lossy(&out)
    );
    drop((_a, _b));
    std::thread::sleep(Duration::from_millis(300));
    assert!(get(http, "/healthz").unwrap().starts_with("HTTP/1.1 200"));
}

#[test]
fn a_quiet_keep_alive_connection_lives_until_the_idle_timeout_not_the_header_timeout() {
    let http = free_addr();
    let served = serve(&config_on_free_ports(http, "").replacen(
        &format!("[http]\nlisten = \"{http}\"\n"),
        &format!("[http]\nlisten = \"{http}\"\nread_timeout_ms = 800\nidle_timeout_ms = 3000\n"),
        1,
    ));
    wait_for_http(http, &served);
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let ask = |s: &mut TcpStream| -> String {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        // The answer is short: read until its body "ok\n".
        while !got.ends_with(b"ok\n") {
            if s.read(&mut byte).unwrap_or(0) == 0 {
                break;
            }
            got.push(byte[0]);
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    // A connection opened ahead of its first request, quiet for longer
    // than the header timeout: idle, not slow, so still served.
    let mut fresh = TcpStream::connect(http).unwrap();
    fresh
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_800));
    assert!(
        ask(&mut fresh).starts_with("HTTP/1.1 200"),
        "a fresh connection closed before the idle timeout"
    );
    assert!(ask(&mut s).starts_with("HTTP/1.1 200"));
    // Quiet for longer than the header timeout: still served.
    std::thread::sleep(Duration::from_millis(1_800));
    assert!(
        ask(&mut s).starts_with("HTTP/1.1 200"),
        "closed before the idle timeout"
    );
    // Quiet for longer than the idle timeout: closed.
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        started.elapsed() >= Duration::from_millis(2_000)
            && started.elapsed() < Duration::from_secs(8),
        "closed after {:?}",
        started.elapsed()
    );
}

/// The hub's in-flight bytes, read from `/metrics`.
fn inflight_bytes(http: SocketAddr) -> u64 {
    get(http, "/metrics")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("tidegate_hub_inflight_bytes "))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::test]
async fn s2s_http_flowfiles_hold_budget_bytes_until_the_client_commits() {
    use tidegate_s2s::client::HttpS2sClient;
    use tidegate_s2s::codec::DataPacket;
    const PORT_ID: &str = "3f2c6a52-0000-4000-8000-000000000001";
    const CONTENT: usize = 4 << 20;
    let http = free_addr();
    let served = serve(&config_on_free_ports(
        http,
        &format!(
            "[[s2s.input_ports]]\nname = \"input\"\nid = \"{PORT_ID}\"\ntopic = \"s2s.held\"\n"
        ),
    ));
    wait_for_http(http, &served);
    let before = inflight_bytes(http);
    let mut client = HttpS2sClient::connect(http, PORT_ID, false, Duration::from_secs(10))
        .await
        .unwrap();
    client.create().await.unwrap();
    client.send(&DataPacket {
        attributes: vec![("filename".into(), "big".into())],
        content: bytes::Bytes::from(vec![7u8; CONTENT]),
    });
    // POSTed and checksummed, not yet committed: the FlowFile's bytes
    // stay drawn from the budget while the transaction waits.
    client.confirm().await.unwrap();
    let waiting = inflight_bytes(http);
    assert!(
        waiting >= before + CONTENT as u64,
        "an uncommitted transaction holds {waiting} in-flight bytes (before: {before})"
    );
    assert!(!client.complete().await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let after = inflight_bytes(http);
        if after < before + CONTENT as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the committed transaction's {after} in-flight bytes were never given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes one masked client text frame (RFC 6455 §5.2).
fn ws_send_text(s: &mut TcpStream, payload: &[u8]) {
    let mut frame = vec![0x81u8];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n <= 0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mask = [0x12u8, 0x34, 0x56, 0x78];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    s.write_all(&frame).unwrap();
}

/// Reads one unmasked server frame's payload.
fn ws_read(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head)?;
    let len = match head[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l)?;
            u16::from_be_bytes(l) as usize
        }
        127 => {
            let mut l = [0u8; 8];
            s.read_exact(&mut l)?;
            u64::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)?;
    Ok(payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_reads_stop_while_the_budget_is_spent_and_resume_when_it_is_given_back() {
    use tidegate_s2s::client::HttpS2sClient;
    use tidegate_s2s::codec::DataPacket;
    const PORT_ID: &str = "3f2c6a52-0000-4000-8000-000000000002";
    const BUDGET: usize = 4 << 20;
    let http = free_addr();
    let served = serve(&config_on_free_ports(
        http,
        &format!(
            "[hub]\nmax_inflight_bytes = {BUDGET}\n[push]\nconformance = true\n\
             [[s2s.input_ports]]\nname = \"input\"\nid = \"{PORT_ID}\"\ntopic = \"s2s.held\"\n"
        ),
    ));
    wait_for_http(http, &served);
    // An Engine.IO websocket in conformance mode echoes every message.
    let mut ws = TcpStream::connect(http).unwrap();
    ws.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    ws.write_all(
        b"GET /engine.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
          Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
          Sec-WebSocket-Version: 13\r\n\r\n",
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        ws.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let open = ws_read(&mut ws).unwrap();
    assert_eq!(open.first(), Some(&b'0'), "open packet: {open:?}");
    let message = |fill: u8| {
        let mut m = vec![b'4'];
        m.extend(std::iter::repeat_n(fill, 60_000));
        m
    };
    ws_send_text(&mut ws, &message(b'a'));
    assert_eq!(
        ws_read(&mut ws).unwrap(),
        message(b'a'),
        "echo before the budget is spent"
    );

    // An uncommitted S2S transaction takes all but a little of the budget.
    let mut client = HttpS2sClient::connect(http, PORT_ID, false, Duration::from_secs(10))
        .await
        .unwrap();
    client.create().await.unwrap();
    client.send(&DataPacket {
        attributes: vec![],
        content: bytes::Bytes::from(vec![7u8; BUDGET - 4096]),
    });
    client.confirm().await.unwrap();
    // The websocket's next message cannot be read in full: no echo.
    ws_send_text(&mut ws, &message(b'b'));
    ws.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let early = ws_read(&mut ws);
    assert!(
        early.is_err(),
        "a 60 KB websocket message was read with 4 KiB of budget left"
    );
    // Giving the budget back lets the reader go on.
    assert!(!client.complete().await.unwrap());
    ws.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(
        ws_read(&mut ws).unwrap(),
        message(b'b'),
        "echo once the budget is back"
    );
}
