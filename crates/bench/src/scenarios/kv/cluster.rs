//! `--nodes N` without `--target`: N `tidegate serve` child processes (this
//! same executable) on free loopback ports, each with only `[http]` and
//! `[kv]` on, one cluster (`nodes` lists all of them), fresh data
//! directories under one temporary directory. The nodes are sampled
//! together from /proc (their summed CPU and RSS); all are stopped
//! (SIGTERM, SIGKILL after 10 s) and the data removed at the end, also when
//! the bench fails half-way.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::sampler::{CpuWindow, Marker, ProcessStats, Sampler};

/// How long a node may take to open its port.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The cluster secret of a bench cluster (loopback only, thrown away after).
const SECRET: &str = "tidegate-bench-kv";

/// How to configure each node.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Number of nodes.
    pub nodes: usize,
    /// `[kv] sync`.
    pub sync: String,
    /// Parent of the temporary data directory (`None`: the system's).
    pub data_parent: Option<PathBuf>,
    /// More `[kv]` lines (`replica_batching = false`, …).
    pub kv_extra: Vec<String>,
}

/// A running local cluster.
pub struct Cluster {
    addrs: Vec<SocketAddr>,
    nodes: Vec<Child>,
    /// Every node, sampled together.
    sampler: Option<Sampler>,
    dir: PathBuf,
}

impl Cluster {
    /// Starts the nodes and waits until each accepts connections.
    pub fn start(spec: &ClusterSpec) -> anyhow::Result<Cluster> {
        anyhow::ensure!(spec.nodes >= 1, "--nodes must be at least 1");
        // Hold every probe until all ports are chosen (no port given twice).
        let probes = (0..spec.nodes)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<Vec<_>>>()?;
        let addrs = probes
            .iter()
            .map(TcpListener::local_addr)
            .collect::<std::io::Result<Vec<_>>>()?;
        drop(probes);
        let parent = spec.data_parent.clone().unwrap_or_else(std::env::temp_dir);
        let dir = parent.join(format!(
            "tidegate-bench-kv-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut cluster = Cluster {
            addrs: addrs.clone(),
            nodes: Vec::new(),
            sampler: None,
            dir,
        };
        let list = addrs
            .iter()
            .map(|a| format!("\"http://{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        // The same binary as every other bench's server under test, so
        // `TIDEGATE_BENCH_SERVER` compares one client against two builds.
        let exe = crate::server::server_exe()?;
        for (i, addr) in addrs.iter().enumerate() {
            let config = node_config(*addr, &list, &cluster.dir.join(format!("data{i}")), spec);
            let path = cluster.dir.join(format!("node{i}.toml"));
            std::fs::File::create(&path)?.write_all(config.as_bytes())?;
            let child = Command::new(&exe)
                .arg("serve")
                .arg("--config")
                .arg(&path)
                .env(
                    "RUST_LOG",
                    std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .context("starting `tidegate serve`")?;
            cluster.nodes.push(child);
        }
        for (i, addr) in addrs.iter().enumerate() {
            cluster.wait_ready(i, *addr)?;
        }
        let pids = cluster.nodes.iter().map(Child::id).collect();
        cluster.sampler = Some(Sampler::start_many(pids, Duration::from_secs(1)));
        Ok(cluster)
    }

    fn wait_ready(&mut self, i: usize, addr: SocketAddr) -> anyhow::Result<()> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.nodes[i].try_wait()? {
                bail!("node {i} (`tidegate serve` on {addr}) exited during start-up with {status}");
            }
            if TcpStream::connect(addr).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("node {i} did not open {addr} within {STARTUP_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The nodes' `[http]` addresses, node 0 first.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Bytes on disk under the nodes' data directories, per node.
    pub fn disk_bytes(&self) -> Vec<u64> {
        (0..self.nodes.len())
            .map(|i| dir_size(&self.dir.join(format!("data{i}"))))
            .collect()
    }

    /// Marks instants on the nodes' sampler (the measured window).
    pub fn marker(&self) -> Marker {
        self.sampler
            .as_ref()
            .map(Sampler::marker)
            .unwrap_or_default()
    }

    /// Stops every node; returns their summed CPU (% of one core) over
    /// `window` and their summed peak RSS. Fails, naming its exit status,
    /// if a node had already exited before it was asked to stop (it died
    /// during the run).
    pub fn stop(mut self, window: Option<CpuWindow>) -> anyhow::Result<ProcessStats> {
        let mut died = Ok(());
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let what = format!("node {i} (`tidegate serve` on {})", self.addrs[i]);
            if let Err(e) = crate::server::exited_early(node, &what) {
                died = died.and(Err(e));
            }
        }
        let stats = self.stop_all(window);
        died?;
        Ok(stats)
    }

    fn stop_all(&mut self, window: Option<CpuWindow>) -> ProcessStats {
        let stats = self
            .sampler
            .take()
            .map(|s| s.finish_over(window))
            .unwrap_or_default();
        for node in &mut self.nodes {
            crate::server::terminate(node, Duration::from_secs(10));
        }
        stats
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all(None);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One node's configuration: only `[http]` and `[kv]` listen.
fn node_config(addr: SocketAddr, list: &str, data: &Path, spec: &ClusterSpec) -> String {
    format!(
        "[http]\nlisten = \"{addr}\"\n[wire]\nenabled = false\n[sockperf]\nenabled = false\n\
         [forward]\nenabled = false\n[s2s]\nenabled = false\n\
         [kv]\ndata_dir = \"{}\"\nself = \"http://{addr}\"\nnodes = [{list}]\n\
         cluster_secret = \"{SECRET}\"\nsync = \"{}\"\n{}\n",
        data.display(),
        spec.sync,
        spec.kv_extra.join("\n")
    )
}

/// Total size of the files under `dir`.
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
