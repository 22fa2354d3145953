//! Tidegate's load generator. Each scenario reproduces one reference experiment
//! (`../shared/seeds/`) with the same parameter names and prints the seed's
//! columns. They share:
//!
//! - [`pacer`]: open-model fixed-rate schedules (latency from the *due* time);
//! - [`latency`]: HdrHistogram recording and the percentile summary;
//! - [`report`]: the common `--json` object and table helpers;
//! - [`server`] / [`target`]: spawn `tidegate serve` on free ports or drive
//!   `--target`; [`sampler`]: CPU % and RSS from /proc;
//! - [`progress`]: a once-a-second progress line on a terminal.

pub mod latency;
pub mod pacer;
pub mod progress;
pub mod report;
pub mod sampler;
pub mod scenarios;
pub mod server;
pub mod target;

pub use latency::{LatencyRecorder, LatencySummary};
pub use pacer::Schedule;
pub use progress::Progress;
pub use report::{Report, Window};
pub use sampler::{ProcessStats, Sampler};
pub use scenarios::Scenario;
pub use server::{ServerAddrs, ServerUnderTest};
pub use target::{CommonArgs, Target};
