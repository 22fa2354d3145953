//! The server under test: with no `--target`, a scenario starts
//! `tidegate serve` as a child process (this same executable) with every
//! listener on a free loopback port, samples its CPU and RSS, and stops it at
//! the end, reporting its CPU over the measured window the scenario marked.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::sampler::{CpuWindow, Marker, ProcessStats, Sampler};

/// How long a child server may take to open its ports.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The listeners of a spawned server, each on its own free port.
#[derive(Debug, Clone, Copy)]
pub struct ServerAddrs {
    /// `[http]`
    pub http: SocketAddr,
    /// `[wire]`
    pub wire: SocketAddr,
    /// `[sockperf]`
    pub sockperf: SocketAddr,
    /// `[forward]`
    pub forward: SocketAddr,
    /// `[s2s]`
    pub s2s: SocketAddr,
}

/// A `tidegate serve` child process.
#[derive(Debug)]
pub struct ServerUnderTest {
    child: Child,
    addrs: ServerAddrs,
    sampler: Option<Sampler>,
    _dir: TempDir,
}

/// Names the `tidegate` binary a bench spawns as the server under test,
/// when it is not this executable: same-command before/after comparisons
/// run one client against an older build's server.
pub const SERVER_EXE_ENV: &str = "TIDEGATE_BENCH_SERVER";

/// The server binary: `$TIDEGATE_BENCH_SERVER`, else this executable.
pub fn server_exe() -> anyhow::Result<std::path::PathBuf> {
    match std::env::var_os(SERVER_EXE_ENV) {
        Some(p) if !p.is_empty() => Ok(p.into()),
        _ => std::env::current_exe().context("locating the tidegate executable"),
    }
}

impl ServerUnderTest {
    /// Starts `tidegate serve` with every listener on a free port plus
    /// `extra_toml` (routes, sinks, protocol options — sections other than the
    /// listeners' `listen` keys), waits until its listeners accept, and starts
    /// sampling it. Its log level is `RUST_LOG`, else `warn`.
    pub fn spawn(extra_toml: &str) -> anyhow::Result<Self> {
        Self::spawn_with_log(extra_toml, "warn")
    }

    /// Like [`ServerUnderTest::spawn`], logging at `default_log` unless
    /// `RUST_LOG` says otherwise (a scenario that makes the server close
    /// thousands of connections asks for `error`, so stderr stays readable).
    pub fn spawn_with_log(extra_toml: &str, default_log: &str) -> anyhow::Result<Self> {
        // Hold every probe socket until all five ports are chosen: released
        // one at a time, the kernel may hand the same port out twice.
        let probes = (0..5)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<Vec<_>>>()?;
        let ports = probes
            .iter()
            .map(TcpListener::local_addr)
            .collect::<std::io::Result<Vec<_>>>()?;
        drop(probes);
        let addrs = ServerAddrs {
            http: ports[0],
            wire: ports[1],
            sockperf: ports[2],
            forward: ports[3],
            s2s: ports[4],
        };
        let dir = TempDir::new()?;
        let config = format!(
            "{extra_toml}\n\n[http]\nlisten = \"{}\"\n[wire]\nlisten = \"{}\"\n[sockperf]\nlisten = \"{}\"\n[forward]\nlisten = \"{}\"\n[s2s]\nlisten = \"{}\"\n",
            addrs.http,
            addrs.wire,
            addrs.sockperf,
            addrs.forward,
            addrs.s2s,
        );
        let config = merge_sections(&config);
        let path = dir.path.join("tidegate.toml");
        std::fs::File::create(&path)?.write_all(config.as_bytes())?;
        let exe = server_exe()?;
        let child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| default_log.into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting `tidegate serve`")?;
        let mut s = ServerUnderTest {
            child,
            addrs,
            sampler: None,
            _dir: dir,
        };
        s.wait_ready()?;
        s.sampler = Some(Sampler::start(s.child.id(), Duration::from_secs(1)));
        Ok(s)
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("`tidegate serve` exited during start-up with {status}");
            }
            if TcpStream::connect(self.addrs.http).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "`tidegate serve` did not open {} within {STARTUP_TIMEOUT:?}",
                    self.addrs.http
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Where its listeners are.
    pub fn addrs(&self) -> ServerAddrs {
        self.addrs
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Marks instants on its sampler (the measured window's start and end).
    pub fn marker(&self) -> Marker {
        self.sampler
            .as_ref()
            .map(Sampler::marker)
            .unwrap_or_default()
    }

    /// Stops sampling, sends SIGTERM, waits for exit (SIGKILL after 10 s) and
    /// returns the CPU/RSS seen during the run, the CPU over `window` (else
    /// over the whole run, saying so). Fails, naming its exit status, if
    /// the server had already exited before it was asked to stop: whatever
    /// the run measured, it did not measure a live server.
    pub fn stop(mut self, window: Option<CpuWindow>) -> anyhow::Result<ProcessStats> {
        let exited = exited_early(&mut self.child, "`tidegate serve`");
        let stats = self
            .sampler
            .take()
            .map(|s| s.finish_over(window))
            .unwrap_or_default();
        self.terminate();
        exited?;
        Ok(stats)
    }

    fn terminate(&mut self) {
        terminate(&mut self.child, Duration::from_secs(10));
    }
}

impl Drop for ServerUnderTest {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Merges repeated `[section]` headers so that a scenario's extra TOML may
/// add keys to a listener section the spawner also writes (TOML forbids
/// defining a table twice). Array-of-tables headers (`[[x]]`) are left alone.
fn merge_sections(text: &str) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut bodies: std::collections::HashMap<String, Vec<String>> = Default::default();
    let mut current = String::new();
    let mut arrays: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_array = false;
    order.push(String::new());
    bodies.insert(String::new(), Vec::new());
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("[[") {
            in_array = true;
            arrays.push((t.to_owned(), Vec::new()));
            continue;
        }
        if t.starts_with('[') {
            in_array = false;
            current = t.to_owned();
            if !bodies.contains_key(&current) {
                order.push(current.clone());
                bodies.insert(current.clone(), Vec::new());
            }
            continue;
        }
        if in_array {
            arrays
                .last_mut()
                .expect("array header seen")
                .1
                .push(line.to_owned());
        } else {
            bodies
                .get_mut(&current)
                .expect("section seen")
                .push(line.to_owned());
        }
    }
    let mut out = String::new();
    for h in &order {
        if !h.is_empty() {
            out.push_str(h);
            out.push('\n');
        }
        for l in &bodies[h] {
            out.push_str(l);
            out.push('\n');
        }
    }
    for (h, lines) in arrays {
        out.push_str(&h);
        out.push('\n');
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// A temporary directory removed on drop.
#[derive(Debug)]
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> std::io::Result<Self> {
        let path = std::env::temp_dir().join(format!(
            "tidegate-bench-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos() ^ rand_seed()
        ));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }
}

fn rand_seed() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// An error naming `what` and its exit status if the child has already
/// exited (it died during the run: it is only ever asked to stop after).
pub(crate) fn exited_early(child: &mut Child, what: &str) -> anyhow::Result<()> {
    match child.try_wait() {
        Ok(Some(status)) => bail!(
            "{what} (pid {}) exited during the run, before the bench stopped it, with {status}",
            child.id()
        ),
        Ok(None) => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("checking whether {what} is running"))),
    }
}

/// Stops a child process the bench started: SIGTERM, then SIGKILL once
/// `grace` has passed; nothing when it has already exited.
pub fn terminate(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // SAFETY: kill(2) on a child we spawned and have not reaped (try_wait
    // above saw it running), with a valid signal number; no memory is
    // touched.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn under_test(child: Child) -> ServerUnderTest {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        ServerUnderTest {
            sampler: Some(Sampler::start(child.id(), Duration::from_millis(50))),
            child,
            addrs: ServerAddrs {
                http: a,
                wire: a,
                sockperf: a,
                forward: a,
                s2s: a,
            },
            _dir: TempDir::new().unwrap(),
        }
    }

    #[test]
    fn a_server_that_exited_before_stop_fails_the_run_with_its_status() {
        let s = under_test(Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap());
        // Let it exit (unreaped: try_wait in stop() sees it).
        std::thread::sleep(Duration::from_millis(200));
        let e = format!("{:#}", s.stop(None).unwrap_err());
        assert!(e.contains("exited during the run"), "{e}");
        assert!(e.contains("exit status: 3"), "{e}");

        let s = under_test(Command::new("sleep").arg("30").spawn().unwrap());
        let t = Instant::now();
        let stats = s.stop(None).expect("a live server stops cleanly");
        assert!(stats.measured(), "{stats:?}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn repeated_sections_are_merged_and_arrays_kept() {
        let t = "[forward]\nshared_key = \"k\"\n[[routes]]\ntopics = \"a\"\nsink = \"null\"\n[forward]\nlisten = \"x\"\n";
        let m = merge_sections(t);
        let v: toml::Value = toml::from_str(&m).unwrap();
        assert_eq!(v["forward"]["shared_key"].as_str(), Some("k"));
        assert_eq!(v["forward"]["listen"].as_str(), Some("x"));
        assert_eq!(v["routes"][0]["sink"].as_str(), Some("null"));
    }
}
