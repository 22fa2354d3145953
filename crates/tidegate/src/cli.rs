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
    /// Print the effective configuration (defaults merged with `--config`) as TOML.
    Config {
        /// TOML configuration file.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Run a load scenario reproducing a reference experiment. Without
    /// `--target`, a `tidegate serve` child is started on free ports and its
    /// CPU and RSS are sampled.
    Bench {
        /// The scenario.
        #[command(subcommand)]
        scenario: Scenario,
    },
}
