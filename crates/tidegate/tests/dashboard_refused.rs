//! The dashboard at `/` with `[push] auth = "jwt"` and a token that does not
//! cover `$sys.stats`: headless Chromium (tests/js/dashboard_refused.js,
//! as in dashboard.rs) sees the page say the topic was refused and why,
//! rather than "live" over tiles that never fill.
//! Peers: scripts/setup/dashboard.sh.

mod common;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_addr, serve, KillOnDrop};

/// The whole browser run, at most.
const BROWSER_DEADLINE: Duration = Duration::from_secs(120);
const SECRET: &str = "dashboard-refused-test-secret";

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

#[test]
fn a_token_without_sys_stats_shows_the_refusal_on_the_page() {
    let dir = js_dir();
    assert!(
        dir.join("node_modules/playwright-core").is_dir()
            && Path::new("/usr/bin/chromium").exists(),
        "chromium or playwright-core missing: run bash scripts/setup/dashboard.sh"
    );
    let http = free_addr();
    let served = serve(&format!(
        "[http]\nlisten = \"{http}\"\n[forward]\nenabled = false\n[wire]\nenabled = false\n\
         [sockperf]\nenabled = false\n[s2s]\nenabled = false\n\
         [push]\nauth = \"jwt\"\njwt_secret = \"{SECRET}\"\n"
    ));
    wait_port(http);

    let mut child = KillOnDrop::new(
        Command::new("node")
            .arg("dashboard_refused.js")
            .arg(format!("http://{http}"))
            .arg(SECRET)
            .current_dir(&dir)
            .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running node"),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < BROWSER_DEADLINE,
            "the browser run took over {BROWSER_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (mut out, mut err) = (String::new(), String::new());
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
    assert!(
        status.success(),
        "browser run failed: {out}\n{err}\nserver log:\n{}",
        served.log()
    );
    let v: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("the run's JSON line");
    assert_eq!(v["ok"], true, "{v}");
}
