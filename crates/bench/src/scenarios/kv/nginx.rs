//! `--anchor nginx`: Debian's nginx (`scripts/setup/nginx.sh`) as the
//! same-run anchor — one `location / { return 200; }` on a free loopback
//! port, keep-alive without a request limit, no access log, its own prefix
//! in a temporary directory. The bench sends it the very same requests as
//! Tidegate (PUT bodies are read and discarded by nginx), so the ratio of
//! the two rates is what a KV request costs beyond a trivial HTTP answer.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::sampler::{CpuWindow, Marker, ProcessStats, Sampler};

/// How long nginx may take to open its port.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running nginx.
pub struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
    /// The master and its workers, sampled together.
    sampler: Option<Sampler>,
}

fn nginx_binary() -> anyhow::Result<PathBuf> {
    for p in ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"] {
        if std::path::Path::new(p).exists() {
            return Ok(p.into());
        }
    }
    bail!("nginx not found: run scripts/setup/nginx.sh (installs Debian's nginx)")
}

impl Nginx {
    /// Starts nginx with `workers` worker processes (0: one per core).
    pub fn start(workers: usize) -> anyhow::Result<Nginx> {
        let bin = nginx_binary()?;
        let probe = TcpListener::bind("127.0.0.1:0")?;
        let addr = probe.local_addr()?;
        drop(probe);
        let dir = std::env::temp_dir().join(format!("tidegate-bench-nginx-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let d = dir.display();
        let workers = if workers == 0 {
            "auto".to_owned()
        } else {
            workers.to_string()
        };
        let conf = format!(
            "worker_processes {workers};\ndaemon off;\nerror_log {d}/error.log warn;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             keepalive_requests 100000000;\n  keepalive_timeout 120s;\n  client_max_body_size 64m;\n\
             server {{\n    listen {addr};\n    location / {{ return 200; }}\n  }}\n}}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let child = Command::new(&bin)
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut n = Nginx {
            child,
            addr,
            dir,
            sampler: None,
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = n.child.try_wait()? {
                let log = std::fs::read_to_string(n.dir.join("error.log")).unwrap_or_default();
                bail!("nginx exited during start-up with {status}: {log}");
            }
            if Instant::now() > deadline {
                bail!("nginx did not open {addr} within {STARTUP_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Sample the master and its workers (children of the master, forked
        // right after the port opens).
        std::thread::sleep(Duration::from_millis(200));
        let mut pids = vec![n.child.id()];
        pids.extend(children_of(n.child.id()));
        n.sampler = Some(Sampler::start_many(pids, Duration::from_secs(1)));
        Ok(n)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Marks instants on its processes' sampler (the measured window).
    pub fn marker(&self) -> Marker {
        self.sampler
            .as_ref()
            .map(Sampler::marker)
            .unwrap_or_default()
    }

    /// Stops nginx; returns the summed CPU (over `window`) and RSS of its
    /// processes.
    pub fn stop(mut self, window: Option<CpuWindow>) -> ProcessStats {
        self.shutdown(window)
    }

    fn shutdown(&mut self, window: Option<CpuWindow>) -> ProcessStats {
        let total = self
            .sampler
            .take()
            .map(|s| s.finish_over(window))
            .unwrap_or_default();
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on our own unreaped child with a valid signal
            // (SIGQUIT: nginx's graceful stop); no memory is touched.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGQUIT);
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return total;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        total
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.shutdown(None);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Pids whose parent is `pid` (from /proc/<pid>/task/*/children).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
    }
    out
}
