//! The `tidegate` binary as a user meets it: `--version`, `config`, config
//! errors, and `serve` answering `/metrics` and stopping cleanly on SIGTERM.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_ports, EXE};

fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn version_and_help_are_printed() {
    let out = Command::new(EXE).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tidegate "));
    for sub in ["serve", "config", "bench"] {
        let out = Command::new(EXE).args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "{sub} --help");
        assert!(!out.stdout.is_empty());
    }
}

#[test]
fn config_prints_the_design_defaults_as_toml() {
    let out = Command::new(EXE).arg("config").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    assert_eq!(v["http"]["listen"].as_str(), Some("127.0.0.1:8080"));
    assert_eq!(v["forward"]["listen"].as_str(), Some("127.0.0.1:24224"));
    assert_eq!(v["s2s"]["listen"].as_str(), Some("127.0.0.1:10000"));
    assert_eq!(v["wire"]["listen"].as_str(), Some("127.0.0.1:9998"));
    assert_eq!(v["sockperf"]["listen"].as_str(), Some("127.0.0.1:11111"));
}

#[test]
fn a_bad_config_names_file_and_key_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[forward]\nlisten = \"not an address\"\n").unwrap();
    for sub in ["config", "serve"] {
        let out = Command::new(EXE)
            .args([sub, "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{sub}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("bad.toml") && err.contains("forward.listen"),
            "{sub}: {err}"
        );
    }
    let out = Command::new(EXE)
        .args(["config", "--config", "/nonexistent/tidegate.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tidegate.toml"));
}

#[test]
fn serve_answers_metrics_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let [http, wire, sockperf, forward, s2s] = free_ports();
    let path = dir.path().join("t.toml");
    std::fs::write(
        &path,
        format!(
            "[http]\nlisten = \"{http}\"\n[wire]\nlisten = \"{wire}\"\n[sockperf]\nlisten = \"{sockperf}\"\n[forward]\nlisten = \"{forward}\"\n[s2s]\nlisten = \"{s2s}\"\n",
        ),
    )
    .unwrap();
    let mut child = Command::new(EXE)
        .args(["serve", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        if let Ok(b) = http_get(http, "/metrics") {
            break b;
        }
        assert!(Instant::now() < deadline, "serve did not answer on {http}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        "{body}"
    );
    assert!(body.contains("tidegate_hub_published"), "{body}");
    assert!(
        body.contains("tidegate_listener_connections_accepted"),
        "{body}"
    );

    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.toml");
    std::fs::write(
        &path,
        format!("[http]\nlisten = \"{addr}\"\n[wire]\nenabled = false\n[sockperf]\nenabled = false\n[forward]\nenabled = false\n[s2s]\nenabled = false\n"),
    )
    .unwrap();
    let out = Command::new(EXE)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    // A port that cannot be bound is found before anything serves: exit 2.
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[http]") && err.contains(&addr.to_string()),
        "{err}"
    );
}
