//! The live dashboard at `/`, in a real browser: `tidegate serve` started
//! here, headless Chromium (Debian `chromium`, driven by npm
//! `playwright-core` from tests/js/dashboard.js) loads the page, which
//! follows `$sys.stats` over the server's own `/ws`; the test sees numbers
//! move (uptime, published/s, push sessions by transport, the `http`
//! listener's row), publishes with `POST /v1/publish` and sees the message
//! arrive in the topic inspector, and cannot publish on `$sys.stats`;
//! and, with a token that does not cover `$sys.stats`, sees the page say so.
//! Peers: scripts/setup/dashboard.sh.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_addr, serve};

/// The whole browser run, at most.
const BROWSER_DEADLINE: Duration = Duration::from_secs(120);

const REFUSED_SECRET: &str = "dashboard-refused-test-secret";

fn js_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/js")
}

fn wait_port(addr: SocketAddr) {
    for _ in 0..200 {
        if TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{addr} never listened");
}

/// One `GET path` over a plain socket: (head, body).
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (head.to_owned(), body.to_owned())
}

fn http_only(http: SocketAddr) -> String {
    format!(
        "[http]\nlisten = \"{http}\"\n[forward]\nenabled = false\n[wire]\nenabled = false\n\
         [sockperf]\nenabled = false\n[s2s]\nenabled = false\n"
    )
}

/// The page and its files as served: from the binary, naming nothing
/// outside, under a CSP that allows only the server itself.
fn check_served_files(http: SocketAddr) {
    let (head, html) = get(http, "/");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head
        .to_ascii_lowercase()
        .contains("content-type: text/html"));
    let csp = head
        .lines()
        .find(|l| {
            l.to_ascii_lowercase()
                .starts_with("content-security-policy:")
        })
        .unwrap_or_else(|| panic!("no CSP: {head}"));
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert!(html.contains("/dashboard/app.js") && html.contains("Topic inspector"));
    for path in ["/dashboard/app.js", "/dashboard/style.css"] {
        let (head, body) = get(http, path);
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        assert!(!body.is_empty());
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{path} names an outside address"
        );
    }
    let (_, js) = get(http, "/dashboard/app.js");
    assert!(js.contains("$sys.stats") && js.contains("new WebSocket"));
}

/// Runs `script` (in tests/js) with `args` under node, within
/// [`BROWSER_DEADLINE`]: (succeeded, stdout, stderr).
fn run_browser(dir: &Path, script: &str, args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new("node")
        .arg(script)
        .args(args)
        .current_dir(dir)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running node");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            let mut err = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.success(), out, err);
        }
        if started.elapsed() > BROWSER_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser run took over {BROWSER_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn browser_peers(dir: &Path) {
    assert!(
        dir.join("node_modules/playwright-core").is_dir()
            && Path::new("/usr/bin/chromium").exists(),
        "chromium or playwright-core missing: run bash scripts/setup/dashboard.sh"
    );
}

#[test]
fn the_dashboard_loads_nothing_from_outside_and_chromium_sees_stats_move_and_a_published_message() {
    let dir = js_dir();
    browser_peers(&dir);
    // One server for both parts: two servers started side by side could
    // race for the same free port.
    let http = free_addr();
    let mut served = serve(&http_only(http));
    wait_port(http);
    assert!(
        served.child.try_wait().unwrap().is_none(),
        "tidegate serve exited: {}",
        served.log()
    );
    check_served_files(http);
    let (ok, out, err) = run_browser(&dir, "dashboard.js", &[&format!("http://{http}")]);
    let last = out.lines().last().unwrap_or_default();
    assert!(
        ok,
        "browser run failed: {out}\n{err}\nserver log:\n{}",
        served.log()
    );
    let v: serde_json::Value = serde_json::from_str(last).expect("the run's JSON line");
    assert_eq!(v["ok"], true, "{v}");
    let up = &v["uptime"];
    assert!(up[1].as_u64() > up[0].as_u64(), "uptime did not move: {v}");
    assert!(
        v["inspected"]
            .as_str()
            .is_some_and(|t| t.contains("dash.test.hello")),
        "{v}"
    );
    assert_ne!(v["forged_status"], 200, "{v}");
    assert!(
        v["sessions"]
            .as_str()
            .is_some_and(|t| t.contains("polling 1")),
        "push sessions by transport: {v}"
    );
}

/// With `[push] auth = "jwt"` and a token that does not cover
/// `$sys.stats` (tests/js/dashboard_refused.js signs it), the page says the
/// topic was refused and why, rather than "live" over tiles that never
/// fill.
#[test]
fn a_token_without_sys_stats_shows_the_refusal_on_the_page() {
    let dir = js_dir();
    browser_peers(&dir);
    let http = free_addr();
    let served = serve(&format!(
        "{}[push]\nauth = \"jwt\"\njwt_secret = \"{REFUSED_SECRET}\"\n",
        http_only(http)
    ));
    wait_port(http);
    let (ok, out, err) = run_browser(
        &dir,
        "dashboard_refused.js",
        &[&format!("http://{http}"), REFUSED_SECRET],
    );
    assert!(
        ok,
        "browser run failed: {out}\n{err}\nserver log:\n{}",
        served.log()
    );
    let v: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("the run's JSON line");
    assert_eq!(v["ok"], true, "{v}");
}
