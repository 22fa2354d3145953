//! Tidegate's load generator. Each scenario reproduces one reference experiment
//! (described in `docs/benchmarks.md`) with the same parameter names and prints the seed's
//! columns. They share:
//!
//! - [`pacer`]: open-model fixed-rate schedules (latency from the *due* time);
//! - [`latency`]: HdrHistogram recording and the percentile summary;
//! - [`report`]: the common `--json` object and table helpers;
//! - [`server`] / [`target`]: spawn `tidegate serve` on free ports or drive
//!   `--target`; [`sampler`]: CPU % and RSS from /proc, the CPU over the
//!   measured window (read at its start and end);
//! - [`progress`]: a once-a-second progress line on a terminal.
//!
//! Every scenario reports `rate` the same way: events delivered per second
//! over its measured window, with the offered rate (events the schedule
//! made due) and the sent rate beside it ([`report::Window`]); a run that
//! measured nothing fails instead of printing zeros.

#![warn(missing_docs)]

pub mod latency;
pub mod pacer;
pub mod progress;
pub mod report;
pub mod sampler;
pub mod scenarios;
pub mod server;
#[cfg(test)]
mod silent_server;
pub mod target;

pub use latency::{LatencyRecorder, LatencySummary};
pub use pacer::Schedule;
pub use progress::Progress;
pub use report::{Report, Window};
pub use sampler::{CpuOver, CpuWindow, Marker, ProcessStats, Sampler, TimedWindow};
pub use scenarios::Scenario;
pub use server::{ServerAddrs, ServerUnderTest};
pub use target::{CommonArgs, Target};
