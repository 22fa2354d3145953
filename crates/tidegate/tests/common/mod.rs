//! Helpers shared by the binary's end-to-end tests: free ports, a
//! `tidegate serve` child process run from a TOML text, and a kill-on-drop
//! guard for other child processes.

#![allow(dead_code)] // each test binary uses its own subset

use std::net::SocketAddr;
use std::process::{Child, Command, Output};

/// The `tidegate` binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_tidegate");

/// Where test ports are picked: below Linux's ephemeral range (32768 and
/// up), where the kernel takes the source ports of outgoing connections.
/// A port picked with `bind(0)` and released lies in that range, and while
/// the test was starting a server on it, any connection of a test running
/// beside it could take it as its source port: the server's bind then
/// failed with "Address already in use" (seen in CI). Also clear of the
/// defaults (8080, 9998, 10000, 11111, 24224).
const TEST_PORTS: std::ops::Range<u16> = 12_000..24_000;

/// Every port this test process handed out: never one twice, whatever
/// each test does with its ports meanwhile.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A free loopback address (bound, then released; see [`free_addrs`]).
pub fn free_addr() -> SocketAddr {
    free_addrs(1)[0]
}

/// `n` distinct free loopback addresses from [`TEST_PORTS`], each bound to
/// check it is free and held until every port is picked, and never handed
/// out twice by this process (with one `bind(0)` per port, the OS sometimes
/// gave one port twice, and a cluster test got a node list naming one
/// address twice).
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    use std::hash::{BuildHasher, Hasher};
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut held: Vec<std::net::TcpListener> = Vec::with_capacity(n);
    let span = u64::from(TEST_PORTS.end - TEST_PORTS.start);
    let mut tries = 0u32;
    while held.len() < n {
        tries += 1;
        assert!(tries < 100_000, "no free test port left in {TEST_PORTS:?}");
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(tries);
        let port = TEST_PORTS.start + (h.finish() % span) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            handed_out.insert(port);
            held.push(l);
        }
    }
    held.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// [`free_addrs`] as an array, for `let [http, wire] = free_ports();`.
pub fn free_ports<const N: usize>() -> [SocketAddr; N] {
    free_addrs(N)
        .try_into()
        .expect("free_addrs returns N addresses")
}

/// A `tidegate serve` child, killed with SIGKILL when dropped; its config and
/// log (`serve.log`) live in `dir`.
pub struct Served {
    /// The process.
    pub child: Child,
    /// Holds `tidegate.toml` and `serve.log`.
    pub dir: tempfile::TempDir,
}

impl Served {
    /// What the server logged so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process (a peer client, a `tidegate serve` run by hand) killed
/// with SIGKILL and reaped when dropped, so a test that panics before
/// waiting for it does not leave it running. Derefs to the [`Child`].
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Guards `child`.
    pub fn new(child: Child) -> Self {
        KillOnDrop(Some(child))
    }

    /// Gives the child back unguarded, for a helper that waits for it (and
    /// cleans up) itself.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("the child is present until dropped")
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;

    fn deref(&self) -> &Child {
        self.0.as_ref().expect("the child is present until dropped")
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child is present until dropped")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `tidegate serve --config` on `config_toml`.
pub fn serve(config_toml: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tidegate.toml");
    std::fs::write(&config, config_toml).unwrap();
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let child = Command::new(EXE)
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("run tidegate serve");
    Served { child, dir }
}

/// Runs `tidegate bench <args> --json`.
pub fn bench_output(args: &[&str]) -> Output {
    Command::new(EXE)
        .arg("bench")
        .args(args)
        .arg("--json")
        .output()
        .expect("run tidegate bench")
}

/// Runs `tidegate bench <args> --json`, which must succeed, and returns
/// the last JSON object it printed.
pub fn bench_json(args: &[&str]) -> serde_json::Value {
    let out = bench_output(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench {args:?} failed: {stderr}\n{stdout}"
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON object on stdout: {stdout}\n{stderr}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON {line}: {e}"))
}
