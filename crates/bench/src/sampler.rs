//! CPU % and RSS of a process (or the sum of several), read from
//! `/proc/<pid>` once a second on a background thread, and again at the
//! instants a scenario marks with a [`Marker`]: the start and end of its
//! measured window. The CPU figures then cover exactly the span the
//! scenario's rates do, not the warm-up, prefill, ramp or drain around it
//! (a server's CPU per request is its window CPU over its window rate).

mod span;
mod timed;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use self::span::{cpu_over, Sample};
pub use self::timed::TimedWindow;

/// Which span the CPU figures of a [`ProcessStats`] cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuOver {
    /// The scenario's measured window: CPU time read at its start and end.
    MeasuredWindow,
    /// From the start of sampling to its stop, because no measured window
    /// was marked (the run ended before its window did, or a process
    /// could not be read at a mark).
    WholeRun,
}

/// What the sampler saw over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ProcessStats {
    /// Average CPU over `cpu_over`, in % of one core (200 = both cores
    /// busy); summed over the processes sampled together.
    pub cpu_pct_avg: f64,
    /// Highest CPU % over a stretch of at least a second between two
    /// readings within `cpu_over` (never below the average; the average
    /// when that span is shorter than a second).
    pub cpu_pct_max: f64,
    /// The span the two CPU figures cover (`null` when no CPU was
    /// measured: fewer than two readings, or a measured window of under
    /// ten clock ticks, 100 ms, whose CPU would be noise).
    pub cpu_over: Option<CpuOver>,
    /// Length of that span, seconds.
    pub cpu_span_s: f64,
    /// Highest resident set size, KiB, at any reading from start to stop
    /// (the whole run: memory is a peak, not a rate).
    pub rss_kb_max: u64,
    /// Readings taken.
    pub samples: u64,
}

impl ProcessStats {
    /// Whether anything was sampled: a `--target` server the bench did not
    /// start is not, and its zeros must not be printed as figures.
    pub fn measured(&self) -> bool {
        self.samples > 0
    }

    /// Whether the CPU figures are figures (two readings of one span), not
    /// zeros standing for nothing.
    pub fn cpu_measured(&self) -> bool {
        self.cpu_over.is_some()
    }

    /// The CPU average, if [`ProcessStats::cpu_measured`].
    pub fn cpu_avg(&self) -> Option<f64> {
        self.cpu_measured().then_some(self.cpu_pct_avg)
    }

    /// The CPU average of the measured window only: `None` when the
    /// figures cover something else, so that nothing divides a whole
    /// run's CPU by a window's rate.
    pub fn window_cpu_avg(&self) -> Option<f64> {
        (self.cpu_over == Some(CpuOver::MeasuredWindow)).then_some(self.cpu_pct_avg)
    }
}

/// user + system CPU time of `pid` in clock ticks, from `/proc/<pid>/stat`.
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

/// Resident set size of `pid` in KiB, from `/proc/<pid>/status`.
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

/// Ids of marks, unique in the process: one mark is one reading of every
/// series its [`Marker`] holds, found again by this id.
static NEXT_MARK: AtomicU64 = AtomicU64::new(1);

/// The readings of one set of processes, summed.
#[derive(Debug)]
struct Series {
    pids: Vec<u32>,
    samples: Mutex<Vec<Sample>>,
}

impl Series {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sample>> {
        self.samples.lock().expect("sampler lock not poisoned")
    }

    /// Reads every process now and appends the reading, tagged with
    /// `mark`; false when a process could not be read (it is gone), and
    /// then nothing is appended: a sum missing a process is no reading.
    fn read(&self, mark: Option<u64>) -> bool {
        // Read under the lock, so that readings stay in time order
        // whichever thread takes them.
        let mut samples = self.lock();
        let mut ticks = 0;
        let mut rss = 0;
        for &pid in &self.pids {
            let Some(t) = cpu_ticks(pid) else {
                return false;
            };
            ticks += t;
            rss += rss_kb(pid).unwrap_or(0);
        }
        samples.push(Sample {
            at: Instant::now(),
            ticks,
            rss_kb: rss,
            mark,
        });
        true
    }
}

/// A point marked on every series of a [`Marker`] (a reading taken then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    id: u64,
}

/// A measured window as two [`Mark`]s: the CPU figures a sampler reports
/// over it come from the readings taken at these two marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuWindow {
    /// The window's start.
    pub from: Mark,
    /// The window's end.
    pub to: Mark,
}

/// Takes readings of one or more samplers at instants the scenario
/// chooses. Cheap to clone; an empty marker (an external `--target`,
/// which is not sampled) marks nothing but still hands out marks.
#[derive(Debug, Clone, Default)]
pub struct Marker {
    series: Vec<Arc<Series>>,
}

impl Marker {
    /// A marker that marks the series of both.
    pub fn and(mut self, other: &Marker) -> Marker {
        self.series.extend(other.series.iter().cloned());
        self
    }

    /// Reads every sampled process now (a `/proc` read each, tens of µs).
    pub fn mark(&self) -> Mark {
        let id = NEXT_MARK.fetch_add(1, Ordering::Relaxed);
        for s in &self.series {
            s.read(Some(id));
        }
        Mark { id }
    }
}

/// Samples one process, or the sum of several, on a background thread
/// until stopped.
#[derive(Debug)]
pub struct Sampler {
    series: Arc<Series>,
    every: Duration,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `pid` every `every`.
    pub fn start(pid: u32, every: Duration) -> Self {
        Sampler::start_many(vec![pid], every)
    }

    /// Starts sampling the sum of `pids` every `every`: read together, so
    /// the highest one-second CPU is that of their sum (the nodes of a
    /// cluster, nginx's master and workers), not a sum of maxima.
    pub fn start_many(pids: Vec<u32>, every: Duration) -> Self {
        let series = Arc::new(Series {
            pids,
            samples: Mutex::new(Vec::new()),
        });
        // The first reading now, so that a whole run's span starts here.
        series.read(None);
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, s) = (stop.clone(), series.clone());
        let handle = std::thread::spawn(move || {
            let mut last = Instant::now();
            loop {
                std::thread::sleep(every.min(Duration::from_millis(100)));
                // A final reading when stopped, so the whole run's span
                // runs to the stop.
                let last_chance = flag.load(Ordering::Acquire);
                if last.elapsed() < every && !last_chance {
                    continue;
                }
                if !s.read(None) {
                    break;
                }
                last = Instant::now();
                if last_chance {
                    break;
                }
            }
        });
        Sampler {
            series,
            every,
            stop,
            handle: Some(handle),
        }
    }

    /// Starts sampling this process (the load generator's own CPU and RSS).
    pub fn start_self(every: Duration) -> Self {
        Sampler::start(std::process::id(), every)
    }

    /// A marker that takes readings of this sampler's processes.
    pub fn marker(&self) -> Marker {
        Marker {
            series: vec![self.series.clone()],
        }
    }

    /// Stops and returns what was seen, the CPU over the whole run.
    pub fn finish(self) -> ProcessStats {
        self.finish_over(None)
    }

    /// Stops and returns what was seen, the CPU over `window` when both of
    /// its marks were read from this sampler's processes, else over the
    /// whole run (and `cpu_over` says which).
    pub fn finish_over(mut self, window: Option<CpuWindow>) -> ProcessStats {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let samples = self.series.lock();
        stats_of(&samples, window, self.every, ticks_per_second())
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The figures of a series of readings: CPU over `window`'s two marks if
/// both are there (in order), else over every reading.
fn stats_of(
    samples: &[Sample],
    window: Option<CpuWindow>,
    every: Duration,
    hz: f64,
) -> ProcessStats {
    let find = |m: Mark| samples.iter().position(|s| s.mark == Some(m.id));
    let marked = window.and_then(|w| match (find(w.from), find(w.to)) {
        (Some(a), Some(b)) if a < b => Some(&samples[a..=b]),
        _ => None,
    });
    // A window too short to time (a few clock ticks) has no CPU figures:
    // the whole run's would be figures of another span.
    let (over, span) = match marked {
        Some(s) => (CpuOver::MeasuredWindow, s),
        None => (CpuOver::WholeRun, samples),
    };
    let mut stats = ProcessStats {
        rss_kb_max: samples.iter().map(|s| s.rss_kb).max().unwrap_or(0),
        samples: samples.len() as u64,
        ..Default::default()
    };
    if let Some(cpu) = cpu_over(span, every, hz) {
        stats.cpu_pct_avg = cpu.avg_pct;
        stats.cpu_pct_max = cpu.max_pct;
        stats.cpu_span_s = cpu.seconds;
        stats.cpu_over = Some(over);
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    #[test]
    fn a_sampler_stopped_at_once_still_takes_its_final_sample() {
        let stats = Sampler::start_self(Duration::from_secs(10)).finish();
        // The first reading and the final one.
        assert_eq!(stats.samples, 2, "{stats:?}");
        assert!(stats.rss_kb_max > 0, "{stats:?}");
    }

    #[test]
    fn a_window_whose_marks_are_missing_falls_back_to_the_whole_run_and_says_so() {
        let s = Sampler::start_self(Duration::from_secs(1));
        let other = Sampler::start_self(Duration::from_secs(1));
        // Marks of another sampler only: not this one's window.
        let m = other.marker();
        let from = m.mark();
        std::thread::sleep(Duration::from_millis(150));
        let w = CpuWindow { from, to: m.mark() };
        let stats = s.finish_over(Some(w));
        assert_eq!(stats.cpu_over, Some(CpuOver::WholeRun), "{stats:?}");
        assert_eq!(stats.window_cpu_avg(), None);
        let stats = other.finish_over(Some(w));
        assert_eq!(stats.cpu_over, Some(CpuOver::MeasuredWindow), "{stats:?}");
    }

    /// The old sampler averaged over the whole life of the process: a
    /// server that burned CPU during start-up (or a prefill, or a warm-up)
    /// and idled through the window showed the burn in the window's
    /// figures. Here a child burns CPU, says so, then idles; the window
    /// marked after that must show (nearly) nothing.
    #[test]
    fn cpu_burnt_before_the_window_is_not_in_the_windows_figures() {
        let mut child = Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; echo burnt; exec sleep 30",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let sampler = Sampler::start(child.id(), Duration::from_millis(200));
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "burnt");
        // `exec sleep` keeps the pid and its CPU time so far.
        std::thread::sleep(Duration::from_millis(100));
        let marker = sampler.marker();
        let from = marker.mark();
        std::thread::sleep(Duration::from_millis(1200));
        let to = marker.mark();
        std::thread::sleep(Duration::from_millis(300));
        let burnt_ticks = {
            let s = sampler.series.lock();
            s.last().unwrap().ticks - s.first().unwrap().ticks
        };
        let whole = stats_of(
            &sampler.series.lock(),
            None,
            sampler.every,
            ticks_per_second(),
        );
        let window = sampler.finish_over(Some(CpuWindow { from, to }));
        let _ = child.kill();
        let _ = child.wait();
        // The burn was sampled (tenths of a second of CPU), so the whole
        // run's figures — what used to be reported — show it ...
        assert!(burnt_ticks >= 5, "burnt {burnt_ticks} ticks");
        assert!(whole.cpu_pct_avg > 5.0, "{whole:?}");
        assert!(whole.cpu_pct_max > 20.0, "{whole:?}");
        // ... and the window's do not.
        assert_eq!(window.cpu_over, Some(CpuOver::MeasuredWindow), "{window:?}");
        assert!(window.cpu_pct_avg < 2.0, "{window:?}");
        assert!(window.cpu_pct_max < 5.0, "{window:?}");
        assert!(
            (window.cpu_span_s - 1.2).abs() < 0.2,
            "the span is the window's: {window:?}"
        );
        assert!(window.rss_kb_max > 0, "{window:?}");
    }
}
