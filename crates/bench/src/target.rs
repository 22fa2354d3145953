//! `--target` / spawned server: the options every scenario shares.

use std::net::SocketAddr;

use crate::sampler::{CpuWindow, Marker, ProcessStats};
use crate::server::{ServerAddrs, ServerUnderTest};

/// Options every scenario accepts.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Drive an already running server at this address instead of starting
    /// `tidegate serve` as a child process.
    #[arg(long)]
    pub target: Option<SocketAddr>,
    /// Print one JSON object on stdout instead of the human table.
    #[arg(long)]
    pub json: bool,
}

/// Where the load goes: a spawned child (sampled) or an external target.
#[derive(Debug)]
pub enum Target {
    /// A `tidegate serve` this bench started.
    Spawned(Box<ServerUnderTest>),
    /// An address given with `--target`.
    External(SocketAddr),
}

impl Target {
    /// Uses `--target` if given, else spawns `tidegate serve` with
    /// `extra_toml` and picks the listener with `pick`.
    pub fn resolve(common: &CommonArgs, extra_toml: &str) -> anyhow::Result<Target> {
        Ok(match common.target {
            Some(a) => Target::External(a),
            None => Target::Spawned(Box::new(ServerUnderTest::spawn(extra_toml)?)),
        })
    }

    /// The address to load: `--target`, or the spawned server's listener
    /// chosen by `pick`.
    pub fn addr(&self, pick: impl Fn(&ServerAddrs) -> SocketAddr) -> SocketAddr {
        match self {
            Target::Spawned(s) => pick(&s.addrs()),
            Target::External(a) => *a,
        }
    }

    /// Marks instants on a spawned server's sampler (an external target's
    /// marker marks nothing: it is not sampled).
    pub fn marker(&self) -> Marker {
        match self {
            Target::Spawned(s) => s.marker(),
            Target::External(_) => Marker::default(),
        }
    }

    /// Stops a spawned server and returns its resource figures, its CPU
    /// over the measured `window` (not measured, `samples` 0, for an
    /// external target, which this process cannot see). Fails if the
    /// spawned server exited before it was asked to stop (it died during
    /// the run), naming its exit status.
    pub fn finish(self, window: Option<CpuWindow>) -> anyhow::Result<ProcessStats> {
        match self {
            Target::Spawned(s) => s.stop(window),
            Target::External(_) => Ok(ProcessStats::default()),
        }
    }
}
