//! What only `[wire] mode = "low_latency"` has: the busy-polling thread
//! serves the connections, parks when idle (its CPU time, read from /proc,
//! stops growing), spins again on traffic, and is gone after shutdown. The
//! protocol itself is tested in both modes by the other test files.

mod common;

use std::time::Duration;

use common::{eventually, TestServer, PATIENCE};
use tidegate_wire::{WireClient, WireConfig, WireMode};

/// The poller thread's name (`low_latency.rs`).
const POLLER_THREAD: &str = "wire-poller";
/// Clock ticks per second of /proc's CPU times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;
/// Well inside the default `drain_ms` (2 s).
const PROMPT_SHUTDOWN: Duration = Duration::from_millis(1000);
/// How long the server is watched while idle.
const IDLE_WATCH: Duration = Duration::from_secs(2);
/// Most of one core an idle poller may use: 5 %.
const IDLE_CPU_SHARE: f64 = 0.05;

/// The tests of this file count the process's poller threads: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn low_latency(spin_idle_ms: u64) -> WireConfig {
    WireConfig {
        mode: WireMode::LowLatency,
        spin_idle_ms,
        ..WireConfig::default()
    }
}

/// The thread ids of this process's poller threads.
fn poller_threads() -> Vec<String> {
    let mut v = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == POLLER_THREAD {
            v.push(t.file_name().to_string_lossy().into_owned());
        }
    }
    v
}

/// CPU seconds (user + system) the thread `tid` has used, from its stat.
fn thread_cpu_seconds(tid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // Fields after the parenthesised name; utime and stime are the 14th and
    // 15th fields of the line, i.e. the 12th and 13th after the name.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / TICKS_PER_SECOND
}

async fn echo_round_trips(c: &mut WireClient, n: i64) {
    for i in 0..n {
        let e = tokio::time::timeout(PATIENCE, c.echo(i, i, &[0; 64]))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(e.correlation_id, i);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_low_latency_server_parks_and_spins_again_on_traffic() {
    let _one = ONE_AT_A_TIME.lock().await;
    let s = TestServer::start(low_latency(100)).await;
    let mut c = WireClient::connect(s.addr).await.unwrap();
    echo_round_trips(&mut c, 1000).await;
    let threads = poller_threads();
    assert_eq!(threads.len(), 1, "one poller thread: {threads:?}");
    let tid = &threads[0];
    // Past spin_idle_ms, with an open but silent connection.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = thread_cpu_seconds(tid);
    tokio::time::sleep(IDLE_WATCH).await;
    let used = thread_cpu_seconds(tid) - before;
    assert!(
        used < IDLE_CPU_SHARE * IDLE_WATCH.as_secs_f64(),
        "the idle poller used {used:.3} CPU s in {IDLE_WATCH:?}"
    );
    // Woken by the next readable event, it answers as before.
    echo_round_trips(&mut c, 1000).await;
    c.ping().await.unwrap();
}

#[tokio::test]
async fn the_poller_thread_is_gone_after_shutdown() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut s = TestServer::start(low_latency(10)).await;
    let mut c = WireClient::connect(s.addr).await.unwrap();
    echo_round_trips(&mut c, 10).await;
    s.shutdown.cancel();
    let task = s.task.take().unwrap();
    // Promptly: the poller says goodbye as soon as shutdown starts, rather
    // than when the listener core's drain period (2 s) runs out.
    tokio::time::timeout(PROMPT_SHUTDOWN, task)
        .await
        .expect("the server stops before its drain period is over")
        .unwrap()
        .unwrap();
    eventually("the poller thread to end", || poller_threads().is_empty()).await;
}
