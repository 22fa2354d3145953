//! CPU % and RSS of a process, sampled from `/proc/<pid>` once a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

/// What the sampler saw over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ProcessStats {
    /// Average CPU over the run, in % of one core (200 = both cores busy).
    pub cpu_pct_avg: f64,
    /// Highest one-second CPU %.
    pub cpu_pct_max: f64,
    /// Highest resident set size, KiB.
    pub rss_kb_max: u64,
    /// Samples taken.
    pub samples: u64,
}

impl ProcessStats {
    /// Whether anything was sampled: a `--target` server the bench did not
    /// start is not, and its zeros must not be printed as figures.
    pub fn measured(&self) -> bool {
        self.samples > 0
    }
}

/// user + system CPU time of `pid` in clock ticks, from /proc/<pid>/stat.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields resume after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')' field index 0 is "state" (field 3); utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident set size of `pid` in KiB, from /proc/<pid>/status.
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf is a read-only query of a system constant with no
    // pointer arguments; it cannot violate memory safety.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Samples one process on a background thread until stopped.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<ProcessStats>>,
}

impl Sampler {
    /// Starts sampling `pid` every `every`.
    pub fn start(pid: u32, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let hz = ticks_per_second();
            let t0 = Instant::now();
            let c0 = cpu_ticks(pid).unwrap_or(0);
            let (mut last_t, mut last_c) = (t0, c0);
            let mut stats = ProcessStats::default();
            loop {
                std::thread::sleep(every.min(Duration::from_millis(100)));
                // A final sample when stopped, so the average runs to the
                // stop (and a run shorter than `every` gets its one sample).
                let last_chance = flag.load(Ordering::Acquire);
                if last_t.elapsed() < every && !last_chance {
                    continue;
                }
                let (now, c) = (Instant::now(), cpu_ticks(pid));
                let Some(c) = c else { break };
                let dt = now.duration_since(last_t).as_secs_f64();
                // The one-second maximum: a final partial interval is too
                // short to count (clock ticks are 10 ms), unless it is all.
                let full = now.duration_since(last_t) >= every || stats.samples == 0;
                if dt > 0.0 && full {
                    let pct = (c.saturating_sub(last_c)) as f64 / hz / dt * 100.0;
                    stats.cpu_pct_max = stats.cpu_pct_max.max(pct);
                }
                stats.rss_kb_max = stats.rss_kb_max.max(rss_kb(pid).unwrap_or(0));
                stats.samples += 1;
                let total = now.duration_since(t0).as_secs_f64();
                if total > 0.0 {
                    stats.cpu_pct_avg = (c.saturating_sub(c0)) as f64 / hz / total * 100.0;
                }
                (last_t, last_c) = (now, c);
                if last_chance {
                    break;
                }
            }
            stats
        });
        Sampler {
            stop,
            handle: Some(handle),
        }
    }

    /// Starts sampling this process (the load generator's own CPU and RSS).
    pub fn start_self(every: Duration) -> Self {
        Sampler::start(std::process::id(), every)
    }

    /// Stops and returns what was seen.
    pub fn finish(mut self) -> ProcessStats {
        self.stop.store(true, Ordering::Release);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampler_stopped_at_once_still_takes_its_final_sample() {
        let stats = Sampler::start_self(Duration::from_secs(10)).finish();
        assert_eq!(stats.samples, 1, "{stats:?}");
        assert!(stats.rss_kb_max > 0, "{stats:?}");
    }
}
