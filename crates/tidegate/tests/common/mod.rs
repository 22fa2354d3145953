//! Helpers shared by the binary's end-to-end tests: free ports, a
//! `tidegate serve` child process run from a TOML text, and a kill-on-drop
//! guard for other child processes.

#![allow(dead_code)] // each test binary uses its own subset

use std::process::{Child, Command, Output};

/// The `tidegate` binary under test.
pub const EXE: &str = env!("CARGO_BIN_EXE_tidegate");

#[allow(unused_imports)] // each test binary uses its own subset
pub use tidegate_testkit::{free_addr, free_addrs, free_ports};

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
