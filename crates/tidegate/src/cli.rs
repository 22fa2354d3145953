//! Command-line interface (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use tidegate_bench::Scenario;

/// Tidegate: a message hub for high load — Fluentd Forward, NiFi Site-to-Site
/// and a low-latency TCP wire in; subscribers and Kafka out.
#[derive(Debug, Parser)]
#[command(name = "tidegate", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Log format on stderr (`RUST_LOG` sets the level, default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the hub: every enabled listener, routes and sinks. With no
    /// `--config`, the built-in defaults apply (all listeners on 127.0.0.1).
    Serve {
        /// TOML configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Print the effective configuration (defaults merged with `--config`)
    /// as TOML, secrets redacted; or check it.
    Config {
        /// TOML configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Run every check `serve` runs before serving (Kafka settings, TLS
        /// files, routes, S2S ports, every listener bound and released) and
        /// stop; exit 0 when all pass, 2 naming the first problem.
        #[arg(long)]
        check: bool,
        /// `--check`, then connect to each configured sink (Kafka: a
        /// metadata request) and report what was found; exit 1 when a sink
        /// cannot be reached.
        #[arg(long)]
        probe: bool,
        /// How long `--probe` waits for each sink, milliseconds.
        #[arg(long, default_value_t = 10_000)]
        probe_timeout_ms: u64,
    },
    /// Cluster mode (`[cluster]`): what the Kafka brokers say about it.
    Cluster {
        /// What to show.
        #[command(subcommand)]
        action: ClusterCommand,
    },
    /// Run a load scenario reproducing a reference experiment. Without
    /// `--target`, a `tidegate serve` child is started on free ports and its
    /// CPU and RSS are sampled.
    Bench {
        /// The scenario (boxed: some scenarios carry many arguments).
        #[command(subcommand)]
        scenario: Box<Scenario>,
    },
}

/// `tidegate cluster …`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// The backbone's partitions, the nodes that wrote a heartbeat in the
    /// last minute, and how far behind each node is; exit 1 when the
    /// brokers cannot be reached, 2 when the file has no `[cluster]`.
    Status {
        /// TOML configuration file with the `[cluster]` section.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// How long each request to the brokers may take, milliseconds.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
}
