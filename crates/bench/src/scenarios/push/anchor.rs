//! The npm `socket.io` server the push scenario runs beside Tidegate
//! (`--anchor socketio`): `node anchors/socketio/server.js`, installed by
//! `scripts/setup/push-bench.sh`, sampled from /proc like the spawned
//! `tidegate serve`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::sampler::{CpuWindow, Marker, ProcessStats, Sampler};

/// Where the anchor script lives in the source tree.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("anchors/socketio")
}

/// A running anchor server.
#[derive(Debug)]
pub struct SocketIoAnchor {
    child: Child,
    addr: SocketAddr,
    sampler: Option<Sampler>,
}

impl SocketIoAnchor {
    /// Starts `node server.js 0 127.0.0.1` in `dir` and waits for its port.
    pub fn spawn(dir: &Path) -> anyhow::Result<Self> {
        if !dir.join("node_modules/socket.io").is_dir() {
            bail!(
                "the socket.io anchor is not installed in {} (run `bash scripts/setup/push-bench.sh`)",
                dir.display()
            );
        }
        let mut child = Command::new("node")
            .arg("server.js")
            .arg("0")
            .arg("127.0.0.1")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting `node server.js` (the socket.io anchor)")?;
        let stdout = child.stdout.take().context("anchor stdout")?;
        // The first line says where it listens; read it on a thread so a
        // silent child cannot hang the bench.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the socket.io anchor did not start within 20 s");
            }
        };
        let port: u16 = match line.trim().strip_prefix("listening ").map(str::parse) {
            Some(Ok(p)) => p,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the socket.io anchor said {line:?} instead of its port");
            }
        };
        let pid = child.id();
        Ok(SocketIoAnchor {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            sampler: Some(Sampler::start(pid, Duration::from_secs(1))),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Marks instants on its sampler (the measured window).
    pub fn marker(&self) -> Marker {
        self.sampler
            .as_ref()
            .map(Sampler::marker)
            .unwrap_or_default()
    }

    /// Stops it and returns what the sampler saw, the CPU over `window`.
    pub fn stop(mut self, window: Option<CpuWindow>) -> ProcessStats {
        let stats = self
            .sampler
            .take()
            .map(|s| s.finish_over(window))
            .unwrap_or_default();
        self.terminate();
        stats
    }

    fn terminate(&mut self) {
        crate::server::terminate(&mut self.child, Duration::from_secs(5));
    }
}

impl Drop for SocketIoAnchor {
    fn drop(&mut self) {
        self.terminate();
    }
}
