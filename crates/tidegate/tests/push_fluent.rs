//! The hub is one hub: a record sent by the stock `fluent-logger` (Python)
//! to `tidegate serve`'s Forward listener reaches a stock `socket.io-client`
//! subscriber on `[http]` as an event named after its topic, and a
//! `POST /v1/publish` reaches it too.
//! Peers: scripts/setup/forward.sh (fluent-logger), scripts/setup/push.sh
//! (socket.io-client).

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{free_ports, serve, KillOnDrop};

fn js_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../push/tests/js")
}

fn wait_port(addr: std::net::SocketAddr) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{addr} never listened");
}

#[test]
fn a_fluent_logger_record_reaches_a_socket_io_client_subscriber() {
    let [http, forward] = free_ports();
    let served = serve(&format!(
        "[http]\nlisten = \"{http}\"\n[forward]\nlisten = \"{forward}\"\nudp_heartbeat = false\n\
         [wire]\nenabled = false\n[sockperf]\nenabled = false\n[s2s]\nenabled = false\n"
    ));
    wait_port(http);
    wait_port(forward);
    assert!(
        js_dir().join("node_modules/socket.io-client").is_dir(),
        "npm peers missing: run bash scripts/setup/push.sh"
    );
    let mut sub = KillOnDrop::new(
        Command::new("node")
            .args([
                "peer.js",
                "subscriber",
                &format!("http://{http}"),
                "logs.app.>",
                "2",
            ])
            .current_dir(js_dir())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node"),
    );
    let (tx, rx) = mpsc::channel();
    let out = sub.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(15)).unwrap_or_default();
    assert_eq!(
        ready,
        "READY",
        "subscriber did not get ready; log:\n{}",
        served.log()
    );

    let py = format!(
        "from fluent import sender\ns = sender.FluentSender('app', host='{}', port={})\n\
         assert s.emit('web', {{'msg': 'hi from fluent'}}), s.last_error\ns.close()\n",
        forward.ip(),
        forward.port()
    );
    let st = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .args(["-c", &py])
        .status()
        .expect("python3 with fluent-logger (scripts/setup/forward.sh)");
    assert!(st.success());
    let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|_| panic!("no event: {line:?}; log:\n{}", served.log()));
    assert_eq!(v["event"], "logs.app.web");
    assert_eq!(v["payload"]["msg"], "hi from fluent", "{v}");

    // And from HTTP, through the same hub.
    let mut s = std::net::TcpStream::connect(http).unwrap();
    use std::io::{Read, Write};
    let body = br#"{"via":"http"}"#;
    write!(
        s,
        "POST /v1/publish?topic=logs.app.http HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (v["event"].as_str(), v["payload"]["via"].as_str()),
        (Some("logs.app.http"), Some("http"))
    );
    let _ = sub.wait();
}
