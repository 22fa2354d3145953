//! The stock `sockperf` client (Debian package, installed by
//! `scripts/setup/wire.sh`) against the `[sockperf]` listener, in ping-pong
//! and under-load modes over TCP: it must report observations and zero
//! dropped, duplicated or out-of-order messages.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tidegate_hub::Hub;
use tidegate_wire::{SockperfConfig, SockperfServer, WireMode};
use tokio_util::sync::CancellationToken;

/// A child process killed when dropped (a failing test leaves nothing behind).
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the stock sockperf client with `args` against `addr`; returns stdout
/// and stderr together.
fn run_sockperf(addr: SocketAddr, args: &[&str]) -> String {
    let child = Command::new("sockperf")
        .args(args)
        .args([
            "--tcp",
            "-i",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the stock `sockperf` binary must be installed: run scripts/setup/wire.sh");
    let mut guard = KillOnDrop(Some(child));
    let out = guard
        .0
        .take()
        .unwrap()
        .wait_with_output()
        .expect("sockperf ran");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "sockperf failed ({}):\n{text}",
        out.status
    );
    text
}

/// The number after `key` (e.g. `# dropped messages = `) in sockperf's output.
fn number_after(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"));
    text[at + key.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key:?} in:\n{text}"))
}

/// The number just before `key` (e.g. ` observations`).
fn number_before(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"));
    let digits: String = text[..at]
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .chars()
        .rev()
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number before {key:?} in:\n{text}"))
}

fn check_clean_run(text: &str) {
    let observations = number_before(text, " observations");
    assert!(observations > 0, "no observations:\n{text}");
    assert_eq!(number_after(text, "# dropped messages = "), 0, "{text}");
    assert_eq!(number_after(text, "# duplicated messages = "), 0, "{text}");
    assert_eq!(
        number_after(text, "# out-of-order messages = "),
        0,
        "{text}"
    );
}

async fn start() -> (
    SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    start_in(WireMode::Default).await
}

async fn start_in(
    mode: WireMode,
) -> (
    SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let mut config = SockperfConfig {
        mode,
        ..SockperfConfig::default()
    };
    config.listener.listen = "127.0.0.1:0".parse().unwrap();
    let server = SockperfServer::bind(config).unwrap();
    let addr = server.local_addr();
    let stop = CancellationToken::new();
    let task = tokio::spawn(server.run(Hub::default(), stop.clone()));
    (addr, stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_sockperf_ping_pong_gets_clean_observations() {
    let (addr, stop, task) = start().await;
    let text = tokio::task::spawn_blocking(move || {
        run_sockperf(addr, &["ping-pong", "-m", "64", "-t", "3"])
    })
    .await
    .unwrap();
    check_clean_run(&text);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_sockperf_ping_pong_against_the_low_latency_listener_gets_clean_observations() {
    let (addr, stop, task) = start_in(WireMode::LowLatency).await;
    let text = tokio::task::spawn_blocking(move || {
        run_sockperf(addr, &["ping-pong", "-m", "64", "-t", "3"])
    })
    .await
    .unwrap();
    check_clean_run(&text);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_sockperf_under_load_gets_clean_observations() {
    let (addr, stop, task) = start().await;
    let text = tokio::task::spawn_blocking(move || {
        run_sockperf(
            addr,
            &[
                "under-load",
                "-m",
                "78",
                "-t",
                "3",
                "--mps",
                "50000",
                "--reply-every",
                "100",
            ],
        )
    })
    .await
    .unwrap();
    check_clean_run(&text);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
